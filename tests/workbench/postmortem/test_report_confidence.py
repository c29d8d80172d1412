"""The report says how sure the engine is under the root cause: the calibrated confidence when it is
above the floor; below it "not sure", the runner-up, and what would tell the two apart."""

from __future__ import annotations

import pytest

from tests.workbench.postmortem.report_scenario import CAUSES, GENERATED_AT, build_bundle
from workbench.analysis import confidence as conf
from workbench.analysis.confidence import confidence, load_calibration, write_calibration
from workbench.postmortem import render, report
from workbench.store.bundle import Bundle


def _calibrate(monkeypatch: pytest.MonkeyPatch, tmp_path, right_share: float) -> None:
    """A calibration where a 0.9 score (the scenario's top is 0.93) was right ``right_share`` of the time."""
    path = tmp_path / "calibration.yaml"
    pairs = [(0.93, i < right_share * 100) for i in range(100)]
    write_calibration(path, pairs, "test", margins=[(0.72, i < right_share * 100) for i in range(100)])
    loaded = load_calibration.__wrapped__(path)
    monkeypatch.setattr(conf, "load_calibration", lambda: loaded)


def _outputs(bundle_path, analysis: dict) -> dict[str, str]:
    with Bundle.open(bundle_path) as bundle:
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT)
    return {fmt: render.render(model, fmt) for fmt in ("md", "html")}


def _root_section(text: str) -> str:
    return text.split("Root cause and trigger", 2)[-1].split("Immediate remediation", 1)[0]


def test_below_the_floor_the_report_says_not_sure_and_names_the_runner_up(bundle_path, tmp_path, monkeypatch):
    _calibrate(monkeypatch, tmp_path, 0.3)
    analysis = build_bundle(bundle_path)
    analysis["hypotheses"][1]["host"] = "node<b>01</b>"  # a host name is evidence: shown, never markup
    analysis["confidence"] = confidence(analysis["hypotheses"])
    assert analysis["confidence"]["level"] == "not sure"
    out = _outputs(bundle_path, analysis)
    for fmt, text in out.items():
        section = _root_section(text)
        assert "Not sure" in section, fmt
        assert "network_fabric_errors" in section and "runner-up" in section, fmt
        assert "To tell them apart" in section, fmt
        assert "dmesg of the host" in section and "ib_link" in section, fmt  # what confirms the runner-up
        assert "gpu_off_bus" in section, fmt  # and what confirms the first hypothesis
        assert "Confidence:" not in section, fmt
    assert "node<b>01</b>" not in out["html"] and "node&lt;b&gt;01&lt;/b&gt;" in out["html"]


def test_above_the_floor_the_report_says_the_confidence(bundle_path, tmp_path, monkeypatch):
    _calibrate(monkeypatch, tmp_path, 0.97)
    analysis = build_bundle(bundle_path)
    analysis["confidence"] = confidence(analysis["hypotheses"])
    level, value = analysis["confidence"]["level"], analysis["confidence"]["calibrated"]
    assert level in ("sure", "likely")
    for fmt, text in _outputs(bundle_path, analysis).items():
        section = _root_section(text)
        assert f"Confidence: **{level} {value:.2f}**" in section if fmt == "md" else \
            f"Confidence: <strong>{level} {value:.2f}</strong>" in section
        assert "Not sure" not in section and "runner-up" not in section, fmt


def test_an_analysis_without_confidence_says_nothing_of_it(bundle_path):
    analysis = build_bundle(bundle_path)
    for text in _outputs(bundle_path, analysis).values():
        assert "Confidence:" not in text and "Not sure" not in text
