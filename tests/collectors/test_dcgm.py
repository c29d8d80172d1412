"""DCGM as its own collector (collectors/dcgm.py): it owns the dcgmi kinds, sniffs only DCGM's outputs,
reads them through the dispatcher nvidia-smi uses (so a mixed paste is read whole whichever collector it
was sniffed as), and its live capture runs the commands it declares and nothing when dcgmi is absent."""

from __future__ import annotations

import io
import os
from pathlib import Path

from collectors import dcgm, nvidia_smi
from collectors.base import Event, GpuSample, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import corpus_files
from workbench.store.bundle import Bundle

DMON = "#Entity    XIDER        \nID                      \nGPU 0      0            \nGPU 1      120          \n"
HEALTH = ('{\n "body" : {"Overall Health" : {"value" : "Warning"},\n'
          '  "GPU ID: 0" : {"value" : "Warning", "children" : {"PCIe system" : {"value" : "Warning",\n'
          '   "children" : {"0" : {"value" : "Detected more than 8 PCIe replays per minute for GPU 0 : 13"}}}}}},\n'
          ' "header" : ["Health Monitor Report"]\n}\n')


def _parse(module, kind: str, text: str) -> list:
    return list(module.parse(kind, io.BytesIO(text.encode()), ParseContext(host="h")))


def test_dcgm_owns_the_dcgmi_kinds() -> None:
    assert set(dcgm.KINDS) == {"dcgm_diag", "dcgm_dmon", "dcgm_health", "dcgm_log"}
    assert not set(dcgm.KINDS) & set(nvidia_smi.KINDS)
    assert registry.collector_for_kind("dcgm_diag") is dcgm


def test_corpus_dcgm_files_are_dcgm_and_read_alike_by_both() -> None:
    for path in corpus_files("nvml"):
        head = path.read_text(errors="replace")
        kinds = dcgm.sniff(path.name, head)
        if not kinds or registry.sniff(path.name, head)[1] is not dcgm:
            continue
        (kind,) = kinds
        assert _parse(dcgm, kind, path.read_text()) == _parse(nvidia_smi, kind, path.read_text()), path.name


def test_dmon_last_xid_is_an_xid_event_of_that_gpu() -> None:
    assert dcgm.sniff("dmon.txt", DMON) == {"dcgm_dmon": 85}
    rows = _parse(dcgm, "dcgm_dmon", DMON)
    (xid,) = [r for r in rows if isinstance(r, Event)]
    assert (xid.kind, xid.attrs["xid"], xid.attrs["gpu_index"]) == ("xid", 120, 1)
    assert [r.gpu for r in rows if isinstance(r, GpuSample)] == ["index:0", "index:1"]


def test_health_json_incident_names_the_gpu() -> None:
    (event,) = _parse(dcgm, "dcgm_health", HEALTH)
    assert event.kind == "dcgm_health" and event.severity == "warning"
    assert event.attrs["incidents"][0]["gpu"] == "0" and "PCIe replays" in event.attrs["incidents"][0]["message"]


def test_a_dcgm_file_with_nvidia_smi_after_it_is_read_whole() -> None:
    text = DMON + "\nFailed to initialize NVML: Driver/library version mismatch\n"
    assert registry.sniff("paste.txt", text)[1] is dcgm
    kinds = [r.kind for r in _parse(dcgm, "dcgm_dmon", text) if isinstance(r, Event)]
    assert kinds == ["xid", "nvidia_smi_error"]


def test_hostengine_info_lines_are_not_events_nor_skips() -> None:
    text = ("2024-02-01 14:12:01.205 INFO  [9596:9598] Loaded module 1 [/src/DcgmHostEngineHandler.cpp:1831]\n"
            "2024-02-01 14:12:01.207 ERROR [9596:9598] Failed to load module 9 [/src/DcgmHostEngineHandler.cpp:1831] "
            "[DcgmHostEngineHandler::LoadModule]\n")
    assert registry.sniff("nv-hostengine.log", text) == ("dcgm_log", dcgm)
    rows = _parse(dcgm, "dcgm_log", text)
    assert not [r for r in rows if isinstance(r, Skipped)]
    (event,) = rows
    assert event.attrs["level"] == "ERROR" and event.attrs["function"] == "DcgmHostEngineHandler::LoadModule"


def _fake_dcgmi(folder: Path) -> None:
    script = folder / "dcgmi"
    dmon = folder / "dmon.txt"
    health = folder / "health.json"
    dmon.write_text(DMON)
    health.write_text(HEALTH)
    lines = ["#!/bin/sh", 'case "$1" in', f'  dmon) cat "{dmon}" ;;', f'  health) cat "{health}" ;;', "  *) exit 2 ;;",
             "esac", ""]
    script.write_text("\n".join(lines))
    script.chmod(0o755)


def test_live_capture_runs_the_declared_commands(tmp_path, monkeypatch) -> None:
    from workbench.capture.live import capture

    _fake_dcgmi(tmp_path)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    path, outcomes, _ = capture(tmp_path / "b.duckdb", only=["dcgm"])
    (outcome,) = outcomes
    assert outcome.status == "ok", outcome.reason
    with Bundle.open(path) as b:
        artifacts = [(a["source"], a["kind"]) for a in b.artifacts()]
        xids = b.con.execute("SELECT gpu, attrs FROM event WHERE kind = 'xid'").fetchall()
        health = b.con.execute("SELECT severity FROM event WHERE kind = 'dcgm_health'").fetchall()
    assert artifacts == list(dcgm.COMMANDS)
    assert len(xids) == 1 and '"xid": 120' in xids[0][1]
    assert health == [("warning",)]


def test_live_capture_without_dcgmi_says_so(tmp_path, monkeypatch) -> None:
    from workbench.capture.live import capture

    monkeypatch.setenv("PATH", str(tmp_path))
    _path, outcomes, _ = capture(tmp_path / "b.duckdb", only=["dcgm"])
    (outcome,) = outcomes
    assert (outcome.status, outcome.reason) == ("unavailable", "unavailable: command not found")


def test_safe_capture_skips_dcgm() -> None:
    """``gpuwb capture --safe`` skips every TOUCHES_GPU collector; dcgmi reaches the GPUs through nv-hostengine."""
    assert "dcgm" in {m.NAME for m in registry.all_collectors() if getattr(m, "TOUCHES_GPU", False)}
    assert registry.capture_plan(dcgm).how == "declared", "a collector touching the GPU is never dry-run"


def test_corpus_has_the_dcgm_files_this_collector_claims() -> None:
    claimed = [p.name for p in corpus_files("nvml")
               if registry.sniff(p.name, p.read_text(errors="replace"))[1] is dcgm]
    assert sorted(claimed) == ["dcgm_253_diag_4.2.3_header_4xL40S.txt",
                               "dcgm_272_nvvs_log_retired_pages_blank_values.log"]


DIAG3_JSON = """Successfully ran diagnostic for group.
{
\t"DCGM GPU Diagnostic" :
\t{
\t\t"test_categories" :
\t\t[
\t\t\t{
\t\t\t\t"category" : "Deployment",
\t\t\t\t"tests" :
\t\t\t\t[
\t\t\t\t\t{"name" : "Denylist", "results" : [{"gpu_ids" : "0,1", "status" : "Pass"}]}
\t\t\t\t]
\t\t\t},
\t\t\t{
\t\t\t\t"category" : "Hardware",
\t\t\t\t"tests" :
\t\t\t\t[
\t\t\t\t\t{
\t\t\t\t\t\t"name" : "GPU Memory",
\t\t\t\t\t\t"results" :
\t\t\t\t\t\t[
\t\t\t\t\t\t\t{"gpu_id" : "0", "status" : "Pass"},
\t\t\t\t\t\t\t{"gpu_id" : "1", "status" : "Fail",
\t\t\t\t\t\t\t "warnings" : [{"warning" : "GPU 1 Error using CUDA API cudaMalloc", "error_id" : 43}]}
\t\t\t\t\t\t]
\t\t\t\t\t}
\t\t\t\t]
\t\t\t}
\t\t],
\t\t"version" : "3.3.5",
\t\t"driver_version_detected" : "550.54.15"
\t}
}
"""
"""The nvvs JSON layout its source documents (NVIDIA/DCGM nvvs JsonOutput.cpp), filled with one failing GPU."""


def test_diag_json_of_dcgm3_is_read_like_the_table() -> None:
    assert registry.sniff("diag.json", DIAG3_JSON) == ("dcgm_diag", dcgm)
    rows = _parse(dcgm, "dcgm_diag", DIAG3_JSON)
    assert not [r for r in rows if isinstance(r, Skipped)]
    events = [r for r in rows if isinstance(r, Event)]
    (run,) = [e for e in events if e.kind == "dcgm_diag_run"]
    assert (run.attrs["dcgm_version"], run.attrs["driver"]) == ("3.3.5", "550.54.15")
    results = {(e.attrs["test"], e.attrs["result"]): e for e in events if e.kind == "dcgm_diag"}
    assert set(results) == {("Denylist", "pass"), ("GPU Memory", "pass"), ("GPU Memory", "fail")}
    fail = results[("GPU Memory", "fail")]
    assert fail.attrs["gpus"] == [1] and fail.severity == "error" and fail.layer == "hardware"
    assert "cudaMalloc" in fail.message
    assert results[("Denylist", "pass")].attrs["gpus"] == [0, 1] and results[("Denylist", "pass")].layer == "gpu"


def test_diag_json_lines_of_dcgm4_one_document_per_line() -> None:
    text = ('{"version": "4.2.3", "driver_version": "580.82.09", "tests": [{"name": "software", "results": '
            '[{"entity_group": "GPU", "entity_id": 0, "status": "pass"}]}, {"name": "memory", "results": '
            '[{"entity_group": "GPU", "entity_id": 0, "status": "fail", "warnings": [{"message": "DBE"}]}, '
            '{"entity_group": "CPU", "entity_id": 0, "status": "fail"}]}]}\n') * 2
    rows = _parse(dcgm, "dcgm_diag", text)
    fails = [r for r in rows if isinstance(r, Event) and r.kind == "dcgm_diag" and r.attrs["result"] == "fail"]
    assert [(e.line, e.attrs["gpus"]) for e in fails] == [(1, [0]), (2, [0])], "one document per line; no CPU"
    assert {e.layer for e in rows if isinstance(e, Event) and e.attrs.get("test") == "software"} == {"gpu"}
