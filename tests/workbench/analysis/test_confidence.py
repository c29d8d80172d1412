"""The calibrated confidence: a monotone fit of what was observed, a floor below which the engine says
"not sure" with the runner-up and what would tell the two apart, and data files that hold together
(every cause has evidence sources, every check they name exists, the shipped fit is valid)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from workbench.analysis import confidence as conf
from workbench.analysis.causes import load_causes
from workbench.analysis.confidence import (
    CalibrationError,
    confidence,
    isotonic,
    load_calibration,
    load_evidence_sources,
    runner_up,
    write_calibration,
)
from workbench.analysis.findings import Confidence
from workbench.analysis.playbook import checks_document


def _hyp(cause: str, score: float, host: str | None = "node01") -> dict:
    return {"cause": cause, "score": score, "host": host}


def test_the_fit_is_monotone_even_when_the_observations_are_not() -> None:
    fitted = isotonic([(10, 9), (10, 3), (0, 0), (10, 10)])
    assert fitted == sorted(fitted)
    assert fitted[0] == fitted[1] < fitted[3]  # the violating pair is pooled
    assert fitted[2] == fitted[1]  # an empty bin takes its lower neighbour's value
    assert isotonic([(0, 0), (0, 0)]) == [None, None]
    assert isotonic([(0, 0), (50, 50)])[0] == 0.5  # below every observation: nothing vouches for it


def test_few_samples_never_read_as_certainty() -> None:
    assert isotonic([(2, 2)]) == [0.75]
    assert isotonic([(200, 200)])[0] > 0.99


def test_write_calibration_bins_the_pairs_and_keeps_the_policy(tmp_path: Path) -> None:
    path = tmp_path / "calibration.yaml"
    pairs = [(0.05, False)] * 4 + [(0.15, True), (0.15, False)] + [(0.95, True)] * 20
    write_calibration(path, pairs, "a test set", margins=[(0.9, True)] * 20)
    doc = yaml.safe_load(path.read_text())
    assert doc["source"] == "a test set" and doc["samples"] == 26 and doc["right"] == 21
    bins = doc["score_bins"]
    assert [b["n"] for b in bins] == [4, 2, 0, 0, 0, 0, 0, 0, 0, 20]
    assert bins[9]["calibrated"] > bins[1]["calibrated"] > bins[0]["calibrated"]
    assert "--write-calibration" in path.read_text()  # the header says how it is refitted
    doc["floor"], doc["sure"] = 0.7, 0.8
    path.write_text(yaml.safe_dump(doc))
    write_calibration(path, pairs, "again")
    again = yaml.safe_load(path.read_text())
    assert (again["floor"], again["sure"], again["source"]) == (0.7, 0.8, "again")
    assert load_calibration.__wrapped__(path)["floor"] == 0.7


def test_a_calibration_that_falls_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "calibration.yaml"
    write_calibration(path, [(0.05, False), (0.95, True)], "t")
    doc = yaml.safe_load(path.read_text())
    doc["score_bins"][0]["calibrated"] = 0.99
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(CalibrationError, match="rise"):
        load_calibration.__wrapped__(path)


@pytest.fixture
def fitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A calibration where low scores are right a quarter of the time, high ones nearly always."""
    path = tmp_path / "calibration.yaml"
    pairs = [(0.25, i % 4 == 0) for i in range(40)] + [(0.85, i % 50 != 0) for i in range(100)]
    margins = [(0.05, i % 3 == 0) for i in range(30)] + [(0.6, True)] * 100
    write_calibration(path, pairs, "fixture", margins=margins)
    loaded = load_calibration.__wrapped__(path)
    monkeypatch.setattr(conf, "load_calibration", lambda: loaded)


def test_a_strong_clear_answer_is_sure(fitted) -> None:
    out = confidence([_hyp("gpu_fell_off_bus", 0.85), _hyp("node_drained", 0.2)])
    assert out["level"] == "sure" and out["calibrated"] >= 0.9
    assert out["floor"] == conf.NEW_FLOOR
    assert "runner_up" not in out and "tell_apart" not in out


def test_below_the_floor_it_is_not_sure_and_names_the_runner_up_and_what_tells_them_apart(fitted) -> None:
    out = confidence([_hyp("gpu_oom", 0.25), _hyp("gpu_contention", 0.2, "node02")])
    assert out["level"] == "not sure" and out["calibrated"] < out["floor"]
    assert out["runner_up"] == {"cause": "gpu_contention", "host": "node02", "score": 0.2}
    apart = {t["cause"]: t for t in out["tell_apart"]}
    assert set(apart) == {"gpu_oom", "gpu_contention"}
    assert apart["gpu_contention"]["host"] == "node02"
    assert "gpu_shared" in apart["gpu_contention"]["checks"] and apart["gpu_oom"]["collect"]
    typed = Confidence.from_json(out)
    assert not typed.sure_enough and typed.rival() == "gpu_contention on node02"
    assert typed.tell_apart[0].line.startswith("gpu_oom on node01: ")


def test_a_close_rival_makes_a_high_score_unsure(fitted) -> None:
    """The margin reading caps the score's: 0.85 with a rival at 0.82 is not the 0.85 of a lone answer."""
    alone = confidence([_hyp("thermal_throttling", 0.85)])
    close = confidence([_hyp("thermal_throttling", 0.85), _hyp("power_throttling", 0.82)])
    assert close["calibrated"] < alone["calibrated"]
    assert close["level"] == "not sure" and close["runner_up"]["cause"] == "power_throttling"


def test_the_same_cause_at_the_same_host_is_not_a_runner_up() -> None:
    hyps = [_hyp("ecc_uncorrectable", 0.5), {**_hyp("ecc_uncorrectable", 0.4), "gpu": "x"},
            _hyp("ecc_uncorrectable", 0.3, "node09")]
    assert runner_up(hyps)["host"] == "node09"
    assert runner_up(hyps[:2]) is None and runner_up([]) is None
    assert confidence([]) is None


def test_the_shipped_calibration_is_valid_and_says_what_it_was_fitted_on() -> None:
    cal = load_calibration()
    assert "drills" in cal["source"] and cal["samples"] > 100
    assert 0 < cal["floor"] <= cal["sure"] <= 1
    assert sum(b["n"] for b in cal["score_bins"]) == cal["samples"]
    assert "--write-calibration" in conf.CALIBRATION.read_text()


def test_every_cause_has_evidence_sources_and_every_check_named_exists() -> None:
    sources = load_evidence_sources()
    assert set(sources) == set(load_causes())
    checks = set(checks_document()["checks"])
    named = {c for entries in sources.values() for e in entries for c in e.get("checks", [])}
    assert named and named - checks == set()
    assert all(e["collect"].strip() for entries in sources.values() for e in entries)
