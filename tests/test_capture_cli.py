"""The on-call path on a machine without a GPU: `gpuwb capture` finishes, says what it missed."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.conftest import ROOT
from workbench.bundle import Bundle


def test_capture_on_a_host_without_gpu(tmp_path):
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
    assert "unavailable" in coverage_rows["nvml"] and "NVML library not found" in coverage_rows["nvml"]
    with Bundle.open(out) as bundle:
        kinds = {a["collector"]: a["kind"] for a in bundle.artifacts()}
        assert "kernel" in kinds, kinds
        kernel_bytes = bundle.con.execute(
            "SELECT sum(size) FROM artifact WHERE collector = 'kernel'").fetchall()[0][0]
        assert kernel_bytes > 0
        assert bundle.verify() == []
        coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
        assert coverage["host"] == "ok"
