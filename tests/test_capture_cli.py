"""The on-call path: `gpuwb capture` finishes and says what it got or missed, with or without a GPU."""

from __future__ import annotations

import subprocess
import sys
import time

from collectors.nvml.adapter import NvmlAdapter, load_nvml
from tests.conftest import ROOT
from workbench.store.bundle import Bundle


def _nvml_here() -> str | None:
    """None when NVML starts on this machine (a GPU host), else the coverage reason capture must give."""
    try:
        adapter = NvmlAdapter(load_nvml())
    except ImportError:
        return "unavailable: pynvml (nvidia-ml-py) is not installed"
    reason = adapter.init()
    if reason is None:
        adapter.shutdown()
    return reason


def test_capture_on_this_host_with_or_without_gpu(tmp_path):
    out = tmp_path / "x.duckdb"
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "capture", "-o", str(out), "--since", "2h"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - began
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert elapsed < 30
    assert "Coverage" in proc.stdout
    coverage_rows = {line.split()[0]: line for line in proc.stdout.splitlines()
                     if line.split() and line.split()[0] in ("nvml", "kernel", "host")}
    nvml_reason = _nvml_here()
    with Bundle.open(out) as bundle:
        kinds = {a["collector"]: a["kind"] for a in bundle.artifacts()}
        nvml_row = next(row for row in bundle.coverage() if row["collector"] == "nvml")
        if nvml_reason is None:
            assert nvml_row["status"] in ("ok", "partial") and kinds.get("nvml") == "nvml_json", nvml_row
            assert bundle.con.execute("SELECT count(*) FROM gpu_inventory").fetchall()[0][0] > 0
        else:
            assert (nvml_row["status"], nvml_row["reason"]) == (nvml_reason.split(":")[0], nvml_reason)
            assert nvml_reason in coverage_rows["nvml"] and "nvml" not in kinds
        assert "kernel" in kinds, kinds
        kernel_bytes = bundle.con.execute(
            "SELECT sum(size) FROM artifact WHERE collector = 'kernel'").fetchall()[0][0]
        assert kernel_bytes > 0
        assert bundle.verify() == []
        coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
        assert coverage["host"] == "ok"
