"""One file per cause (rules/causes/<cause_id>.yaml): a new cause is that file alone, and every stage
that reads a cause (the catalog, the alert rules, the isolation rules) finds what the file holds."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import rules
from workbench.analysis import causes
from workbench.analysis.causes import CatalogError, cause_sections, causes_document, load_causes, validate_causes
from workbench.prevention import alert_rules, isolation

NEW = {
    "layer": "gpu", "title": "A trial cause", "scope": "gpu", "description": "A GPU that says so.",
    "symptoms": ["job_failed"], "remediation": ["Nothing."],
    "action_items": {"monitoring": ["x"], "change_control": ["x"], "isolation": ["x"], "drills": ["x"]},
    "leads_to": [], "absorbs": [],
    "alerts": [{"alert": "TrialCauseSeen", "expr": "increase({series}[10m]) > {threshold}",
                "series": ["gpuwb_log_events_total"], "match": 'kind="cuda_error"', "threshold": {"value": 0},
                "for": "0m", "severity": "warning", "summary": "A trial."}],
    "isolation": {"remedy": "placement", "why": "A trial.", "slurm": ["drain"]},
}


def _clear() -> None:
    for loader in (causes._load, alert_rules._load, isolation._load):
        loader.cache_clear()


@pytest.fixture
def rules_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The rules package copied to tmp_path and read from there."""
    copy = tmp_path / "rules"
    shutil.copytree(Path(next(iter(rules.__path__))), copy)
    monkeypatch.setattr(rules, "__path__", [str(copy)])
    _clear()
    yield copy
    monkeypatch.undo()
    _clear()


def test_a_new_cause_is_one_file_every_stage_reads(rules_copy: Path) -> None:
    (rules_copy / "causes" / "trial_cause.yaml").write_text(yaml.safe_dump(NEW, sort_keys=False))
    assert load_causes()["trial_cause"]["title"] == "A trial cause"
    assert "alerts" not in load_causes()["trial_cause"], "the sections are for the stages that read them"
    assert [t.alert for t in alert_rules.load_templates()["trial_cause"]] == ["TrialCauseSeen"]
    assert isolation.load_isolation()["causes"]["trial_cause"]["slurm"] == ["drain"]
    gpu = [cid for cid, entry in load_causes().items() if entry["layer"] == "gpu"]
    assert gpu == sorted(gpu), "a layer's causes are listed by id"


def test_a_cause_with_alerts_and_unmeasured_is_refused_by_its_file(rules_copy: Path) -> None:
    (rules_copy / "causes" / "trial_cause.yaml").write_text(yaml.safe_dump({**NEW, "unmeasured": "no"}))
    with pytest.raises(CatalogError, match=r"rules/causes/trial_cause\.yaml: has alerts and is unmeasured"):
        alert_rules.load_templates()


def test_isolation_yaml_may_not_choose_templates_for_a_cause(rules_copy: Path) -> None:
    path = rules_copy / "isolation.yaml"
    path.write_text(path.read_text() + "\ncauses:\n  gpu_hang: {remedy: none, why: x}\n")
    with pytest.raises(isolation.IsolationError, match="the isolation: of its own"):
        isolation.load_isolation()


def test_a_file_name_that_is_no_cause_id_is_refused() -> None:
    doc = {"Trial-Cause": {k: v for k, v in NEW.items() if k not in ("alerts", "isolation")}, **causes_document()}
    with pytest.raises(CatalogError, match=r"rules/causes/Trial-Cause\.yaml: a cause id"):
        validate_causes(doc)


def test_every_cause_has_alerts_or_a_reason_and_the_sections_stay_out_of_the_entry() -> None:
    ids = set(load_causes())
    measured, unmeasured = set(cause_sections("alerts")), set(cause_sections("unmeasured"))
    assert measured | unmeasured == ids and not measured & unmeasured
    assert set(cause_sections("isolation")) == ids
    with pytest.raises(ValueError, match="not a section"):
        cause_sections("remediation")
