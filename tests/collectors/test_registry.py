"""The registry's guarantees that adding a collector cannot silently take another's evidence or commands.

Every evidence file of tests/corpus and tests/collectors/fixtures is sniffed by every collector: exactly
one collector may claim it (a positive score), unless the overlap is declared in OVERLAPS with the
collector that must win and why. So a new collector whose sniffer also scores another's files (an
``nvlink.py`` scoring 95 on files ``nvidia_smi`` reads at 90) fails here instead of quietly re-routing
them. Likewise no two collectors' live captures run the same command, or the bundle gets it twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from collectors.framework import registry
from collectors.framework.signatures import STRUCTURED_KINDS
from tests.conftest import CORPUS, ROOT, run_cli

FIXTURES = ROOT / "tests" / "collectors" / "fixtures"
NOT_EVIDENCE = {"INDEX.tsv", "SOURCES.md"}
"""The corpus's index and the fixtures' source list describe evidence; they are not evidence."""
OVERLAPS = {
    "nvml/dcgm_263_recovery_action_csv_dmon_xid120_health_json.txt": (
        "nvidia_smi", "a paste of --query-gpu CSV, then dmon and health JSON: both collectors read it through the "
                      "one dispatcher, so the CSV's collector wins and the DCGM blocks are still read"),
}
"""Files more than one collector claims: relative path -> (the collector that must win, why that is fine)."""


def _evidence() -> list[Path]:
    return sorted(p for root in (CORPUS, FIXTURES) for p in root.rglob("*")
                  if p.is_file() and p.name not in NOT_EVIDENCE)


def _claims(path: Path) -> dict[str, int]:
    """Each collector's best score for the file's head, as the ingest sniffs it."""
    head = path.read_bytes()[:65536].decode("utf-8", "replace")
    claims: dict[str, int] = {}
    for module in registry.all_collectors():
        sniffer = getattr(module, "sniff", None)
        scores = [s for s in (sniffer(path.name, head) or {}).values() if s > 0] if sniffer else []
        if scores:
            claims[module.NAME] = max(scores)
    return claims


def _key(path: Path) -> str:
    root = CORPUS if path.is_relative_to(CORPUS) else FIXTURES
    return path.relative_to(root).as_posix()


@pytest.mark.parametrize("path", _evidence(), ids=_key)
def test_every_evidence_file_is_claimed_by_exactly_one_collector(path: Path) -> None:
    claims = _claims(path)
    assert claims, f"{_key(path)}: no collector recognises it"
    if _key(path) in OVERLAPS:
        winner, _why = OVERLAPS[_key(path)]
        assert len(claims) > 1, f"{_key(path)} is no longer claimed twice: drop it from OVERLAPS"
        top = max(claims.values())
        assert [n for n, s in claims.items() if s == top] == [winner], claims
        assert registry.sniff_scored(path.name, path.read_bytes()[:65536].decode("utf-8", "replace"))[2].NAME \
            == winner
    else:
        assert len(claims) == 1, f"{_key(path)} is claimed by {claims}: make the sniffers disjoint or declare it"


def test_declared_overlaps_name_files_that_exist() -> None:
    keys = {_key(p) for p in _evidence()}
    assert set(OVERLAPS) <= keys


def test_no_two_collectors_run_the_same_command() -> None:
    steps = [s for m in registry.all_collectors() for s in registry.capture_plan(m).steps]
    owners: dict[str, set[str]] = {}
    for step in steps:
        owners.setdefault(step.what, set()).add(step.collector)
    shared = {what: names for what, names in owners.items() if len(names) > 1}
    assert not shared, f"commands run by more than one collector: {shared}"
    within = [what for what, n in Counter((s.collector, s.what) for s in steps).items() if n > 1]
    assert not within, f"a collector lists a command twice: {within}"


def test_no_two_collectors_parse_the_same_kind() -> None:
    kinds = Counter(k for m in registry.all_collectors() for k in getattr(m, "KINDS", ()))
    assert [k for k, n in kinds.items() if n > 1] == []


def test_a_collector_that_touches_the_gpu_is_never_dry_run() -> None:
    for module in registry.all_collectors():
        plan = registry.capture_plan(module)
        if plan.touches_gpu and hasattr(module, "capture"):
            assert plan.how in ("declared", "in-process"), module.NAME


def test_declared_commands_store_kinds_their_collector_parses() -> None:
    for module in registry.all_collectors():
        for step in registry.capture_plan(module).steps:
            if registry.capture_plan(module).how == "declared":
                assert step.kind in module.KINDS, (module.NAME, step)


def test_every_declared_structured_kind_is_skipped_by_the_signature_matcher() -> None:
    declared = registry.structured_kinds()
    assert {"nvidia_smi_xml", "nvidia_smi_csv", "dcgm_dmon"} <= declared
    assert declared <= STRUCTURED_KINDS, declared - STRUCTURED_KINDS
    for module in registry.all_collectors():
        assert set(getattr(module, "STRUCTURED_KINDS", ())) <= set(module.KINDS), module.NAME


def test_capture_list_prints_each_collector_command_and_kind() -> None:
    code, out, err = run_cli("capture", "--list")
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()]
    assert ["nvidia_smi", "yes", "nvidia-smi", "nvlink", "-e", "nvidia_smi_nvlink"] in rows
    assert ["dcgm", "yes", "dcgmi", "health", "-c", "-j", "dcgm_health"] in rows
    assert any(r[:2] == ["nvml", "yes"] and "(in-process)" in r for r in rows)


def test_capture_list_json_is_one_object_per_collector() -> None:
    code, out, err = run_cli("capture", "--list", "--json")
    assert code == 0, err
    plans = {d["collector"]: d for d in map(json.loads, out.splitlines())}
    assert set(plans) == {m.NAME for m in registry.all_collectors()}
    smi = plans["nvidia_smi"]
    assert smi["touches_gpu"] and smi["how"] == "declared"
    assert {"what": "nvidia-smi topo -m", "kind": "nvidia_smi_topo"} in smi["steps"]
    assert set(smi["structured_kinds"]) == {"nvidia_smi_xml", "nvidia_smi_csv"}
    assert "dcgm_diag" in plans["dcgm"]["kinds"] and "dcgm_diag" not in smi["kinds"]


def test_json_without_list_is_a_usage_error() -> None:
    code, _out, err = run_cli("capture", "--json")
    assert code != 0 and "--list" in err
