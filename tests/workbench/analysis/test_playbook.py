"""Playbooks and the cause catalog are data with a schema: they load, every id they use exists,
every check's SQL runs on an empty bundle and on a full one, and broken files are refused."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import playbooks
from collectors.catalog import package_text
from tests.conftest import run_cli
from workbench.analysis.causes import (
    DESIGN_CAUSES,
    SYMPTOM_KINDS,
    CatalogError,
    causes_document,
    load_causes,
    validate_causes,
)
from workbench.analysis.playbook import (
    WORKLOADS,
    PlaybookError,
    Presence,
    checks_document,
    evaluate_check,
    evaluate_step,
    load_library,
    load_playbook,
    parse_library,
    parse_playbook,
    prepare,
    run_rows,
)
from workbench.store.bundle import Bundle

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def test_catalog_has_every_design_cause_with_action_items() -> None:
    causes = load_causes()
    for layer, ids in DESIGN_CAUSES.items():
        for cid in ids:
            entry = causes[cid]
            assert entry["layer"] == layer
            assert entry["remediation"] and entry["description"]
            assert set(entry["action_items"]) == {"monitoring", "change_control", "isolation", "drills"}
            assert set(entry["symptoms"]) <= set(SYMPTOM_KINDS)
    assert not set(SYMPTOM_KINDS) & set(causes), "a symptom kind must never be a cause id"


@pytest.mark.parametrize("workload", [*WORKLOADS, "mixed", "unknown"])
def test_playbooks_load_in_layer_order(workload: str) -> None:
    playbook = load_playbook(workload)
    assert [p.layer for p in playbook.layers] == ["business", "scheduling", "gpu", "network_storage", "hardware"]
    causes = load_causes()
    for check in playbook.checks():
        assert check.layer in [p.layer for p in playbook.layers]
        assert all(c in causes for c in check.causes)
        assert check.title and check.question and check.why
    assert playbook.stage0 and playbook.recover


def test_training_and_inference_differ_in_emphasis_and_thresholds() -> None:
    training, inference = load_playbook("training"), load_playbook("inference")
    assert training.params["horizon_s"] > inference.params["horizon_s"]
    first = {p.layer: p.checks[0].id for p in training.layers}, {p.layer: p.checks[0].id for p in inference.layers}
    assert first[0]["network_storage"] == "ib_link" and first[1]["network_storage"] == "disk_full"
    assert first[0]["gpu"] == "silent_rank" and first[1]["gpu"] == "kv_cache_full"
    t_thermal = next(c for c in training.checks() if c.id == "thermal")
    i_thermal = next(c for c in inference.checks() if c.id == "thermal")
    assert t_thermal.params != i_thermal.params
    assert {s.id for s in training.stage0} != {s.id for s in inference.stage0}
    assert "last_checkpoint" in {s.id for s in training.stage0}
    assert "kv_cache_full" not in {c.id for c in training.checks()}


def _library_doc() -> dict:
    return checks_document()


def _playbook_doc() -> dict:
    return yaml.safe_load(package_text(playbooks, "training.yaml"))


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["checks"]["gpu_off_bus"].update(causes=["gpu_exploded"]), "unknown cause id"),
    (lambda d: d["checks"]["gpu_off_bus"].pop("why"), "missing why"),
    (lambda d: d["checks"]["gpu_off_bus"].update(layer="firmware"), "layer"),
    (lambda d: d["checks"]["thermal"].update(params={}), "without a default"),
    (lambda d: d["checks"]["gpu_off_bus"].update(needs=["file:dmesg"]), "needs entries"),
    (lambda d: d["checks"]["gpu_off_bus"].update(verdict={"fault": 0.2, "suspect": 0.5}), "suspect <= fault"),
    (lambda d: d["checks"]["gpu_off_bus"].update(role="oracle"), "role"),
    (lambda d: d["checks"]["gpu_off_bus"].update(runs_in={"batch": {"order": 10}}), "workload must be"),
    (lambda d: d["checks"]["gpu_off_bus"].update(runs_in={"training": {"order": "first"}}), "whole number"),
    (lambda d: d["checks"]["gpu_off_bus"].update(runs_in={"training": {}}), "missing order"),
    (lambda d: d["checks"]["thermal"]["runs_in"]["training"].update(params={"not_a_param": 1}), "has no parameter"),
    (lambda d: d["checks"]["thermal"]["runs_in"]["training"].update(weight=3), "weight must be"),
    (lambda d: d["checks"]["thermal"]["runs_in"]["training"].update(rank=1), "unknown field"),
])
def test_library_schema_refuses(mutate, message: str) -> None:
    doc = _library_doc()
    mutate(doc)
    with pytest.raises(PlaybookError, match=message):
        parse_library(doc)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["layers"].reverse(), "five layers in order"),
    (lambda d: d["layers"][4].update(checks=[{"check": "gpu_off_bus"}]), "unknown field"),
    (lambda d: d.update(workload="batch"), "workload must be"),
    (lambda d: d["stage0"][0].pop("action"), "missing action"),
    (lambda d: d.update(params={"horizon": 3}), "unknown engine parameter"),
])
def test_playbook_schema_refuses(mutate, message: str) -> None:
    library, symptoms = load_library()
    doc = _playbook_doc()
    mutate(doc)
    with pytest.raises(PlaybookError, match=message):
        parse_playbook(doc, library, symptoms, "training.yaml")


def _library_with(mutate) -> tuple[dict, str]:
    doc = copy.deepcopy(_library_doc())
    mutate(doc["checks"])
    return parse_library(doc)


def _clash(checks: dict) -> None:
    checks["thermal"]["runs_in"]["training"]["order"] = checks["power"]["runs_in"]["training"]["order"]


def _off(checks: dict) -> None:
    for entry in checks.values():
        if entry["layer"] == "hardware":
            entry.get("runs_in", {}).pop("training", None)


@pytest.mark.parametrize(("mutate", "message"), [
    (_clash, "both have runs_in.training.order"),
    (_off, "no check of the layer runs in training"),
])
def test_playbook_refuses_what_the_checks_runs_in_leave_unclear(mutate, message: str) -> None:
    library, symptoms = _library_with(mutate)
    with pytest.raises(PlaybookError, match=message):
        parse_playbook(_playbook_doc(), library, symptoms, "training.yaml")


def test_a_check_joins_a_playbook_by_its_own_runs_in() -> None:
    """A new check is one entry in one file: its runs_in places it in the playbook's layer, between
    the checks whose order it falls between, with its own overrides; the other playbook leaves it out."""
    def add(checks: dict) -> None:
        new = copy.deepcopy(checks["nvlink"])
        new["params"] = {"floor": 1}
        new["sql"] = new["sql"].rstrip() + "\nLIMIT $floor"
        after = checks["gpu_off_bus"]["runs_in"]["training"]["order"]
        new["runs_in"] = {"training": {"order": after + 1, "params": {"floor": 3}, "weight": 1.2}}
        checks["my_check"] = new

    library, symptoms = _library_with(add)
    training = parse_playbook(_playbook_doc(), library, symptoms, "training.yaml")
    hardware = [c.id for c in next(p for p in training.layers if p.layer == "hardware").checks]
    assert hardware[:2] == ["gpu_off_bus", "my_check"]
    mine = next(c for c in training.checks() if c.id == "my_check")
    assert (mine.params, mine.weight) == ({"floor": 3}, 1.2)
    inference = parse_playbook(yaml.safe_load(package_text(playbooks, "inference.yaml")), library, symptoms,
                               "inference.yaml")
    assert "my_check" not in {c.id for c in inference.checks()}


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.pop("preemption"), "DESIGN cause preemption is missing"),
    (lambda d: d["gpu_oom"].update(layer="hardware"), "must be in layer gpu"),
    (lambda d: d["gpu_oom"].update(leads_to=["meteor"]), "unknown cause"),
    (lambda d: d["gpu_oom"].update(symptoms=["sadness"]), "unknown symptom kind"),
    (lambda d: d["gpu_oom"]["action_items"].pop("drills"), "action_items"),
    (lambda d: d["app_gpu_fault"].update(absorbs=["gpu_hang"]), "absorb each other"),
])
def test_cause_catalog_refuses(mutate, message: str) -> None:
    doc = causes_document()
    mutate(doc)
    with pytest.raises(CatalogError, match=message):
        validate_causes(doc)


def _run_all(bundle: Bundle) -> list[str]:
    """Every check, stage-0 step and the symptoms query of every playbook; returns the failures."""
    prepare(bundle.con)
    presence = Presence.of(bundle.con)
    errors = []
    playbook = load_playbook("mixed")
    for check in playbook.checks():
        result = evaluate_check(bundle.con, check, presence)
        if result.error:
            errors.append(f"{check.id}: {result.error}")
    for step in playbook.stage0:
        out = evaluate_step(bundle.con, step)
        if "error" in out:
            errors.append(f"stage0 {step.id}: {out['error']}")
    run_rows(bundle.con, playbook.symptoms_sql, {}, group_by=("kind", "host", "gpu", "rank"))
    return errors


def test_every_check_runs_on_an_empty_bundle(tmp_path: Path) -> None:
    Bundle.create(tmp_path / "empty.duckdb").close()
    with Bundle.open(tmp_path / "empty.duckdb") as bundle:
        assert _run_all(bundle) == []


def test_every_check_runs_on_a_full_bundle(tmp_path: Path) -> None:
    """All scenario folders ingested into one bundle: every table and most event kinds are present."""
    folders = sorted(p for p in SCENARIOS.iterdir() if (p / "expected.yaml").exists())
    assert len(folders) >= 10
    path = tmp_path / "full.duckdb"
    code, _, err = run_cli("ingest", path, *folders)
    assert code == 0, err
    with Bundle.open(path) as bundle:
        assert _run_all(bundle) == []
        counts = {t: bundle.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                  for t in ("event", "gpu_sample", "topology", "series", "host_inventory")}
        playbook = load_playbook("mixed")
        hits = [c.id for c in playbook.checks()
                if evaluate_check(bundle.con, c, Presence.of(bundle.con)).total > 0]
    assert all(counts.values()), counts
    assert len(hits) >= 15, hits
