"""Capture leaves no process behind: not the commands a collector ran, not what they started in sessions of
their own or daemonized, whether the collector ends, is cut off at its deadline, or the capture is stopped
by Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.reliability._capture_fakes import alive, install_spawner, kill, read_pids
from tests.reliability.conftest import ROOT
from workbench.store.bundle import Bundle

SPAWNED = 4
"""The spawner itself, two children in sessions of their own, one daemon."""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return dict(os.environ, PYTHONPATH=str(ROOT), TMPDIR=str(tmp_path / "tmp"),
                GPUWB_TEST_PIDS=str(tmp_path / "pids"), **install_spawner(tmp_path / "bin"), **extra)


def _capture(tmp_path: Path, *args: str, output: Path | None = None, **extra: str) -> subprocess.Popen[str]:
    """``gpuwb capture -o OUTPUT ARGS`` with the fake collectors, its spool in tmp_path/tmp."""
    return subprocess.Popen([sys.executable, "-m", "tests.reliability._capture_fakes", "-o",
                             str(output or tmp_path / "b.duckdb"), *args], env=_env(tmp_path, **extra),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("collector", ["starts", "leaves"])
def test_nothing_survives_a_collector(tmp_path: Path, collector: str) -> None:
    """``starts`` is cut off at its deadline while the processes it started run; ``leaves`` ran a command
    that exited and left its daemons behind."""
    proc = _capture(tmp_path, "--only", collector, "--only", "quick")
    try:
        out, err = proc.communicate(timeout=60)
        pids = read_pids(tmp_path / "pids", SPAWNED, wait_s=0)
        assert len(pids) == SPAWNED, err
        assert alive(pids) == [], f"left running after capture: {alive(pids)}"
        assert proc.returncode == 0, err
        with Bundle.open(tmp_path / "b.duckdb") as bundle:
            coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
        assert coverage == {"quick": "ok", collector: "timeout" if collector == "starts" else "ok"}
    finally:
        proc.kill()
        kill(read_pids(tmp_path / "pids", 0, wait_s=0))


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_nothing_survives_a_stopped_capture(tmp_path: Path, signum: int, status: int) -> None:
    proc = _capture(tmp_path, "--only", "spawns", "--only", "starts", "--only", "quick", GPUWB_TEST_TIMEOUT="60")
    try:
        pids = read_pids(tmp_path / "pids", 2 * SPAWNED)
        assert len(pids) == 2 * SPAWNED, "the spawners did not start"
        os.kill(proc.pid, signum)
        began = time.monotonic()
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - began < 20  # never hangs on the way out
        assert alive(pids) == [], f"left running after {signal.Signals(signum).name}: {alive(pids)}"
        assert proc.returncode == status, err
        with Bundle.open(tmp_path / "b.duckdb") as bundle:
            assert bundle.meta()["complete"] == "false"
    finally:
        proc.kill()
        kill(read_pids(tmp_path / "pids", 0, wait_s=0))


def test_a_collector_child_does_not_run_the_parents_signal_handlers(tmp_path: Path) -> None:
    """A SIGTERM sent to a collector child itself ends that child (its default action), not a Python handler
    inherited from the CLI raising Terminated inside the collector; the capture goes on and finishes."""
    proc = _capture(tmp_path, "--only", "starts", "--only", "quick", GPUWB_TEST_TIMEOUT="60")
    try:
        pids = read_pids(tmp_path / "pids", SPAWNED)
        assert len(pids) == SPAWNED, "the spawner did not start"
        spawner = pids[0]
        with open(f"/proc/{spawner}/stat", "rb") as f:
            child = int(f.read().rpartition(b")")[2].split()[1])  # the collector child started it
        os.kill(child, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "Terminated" not in err and "Traceback" not in err
        assert alive(pids) == []
    finally:
        proc.kill()
        kill(read_pids(tmp_path / "pids", 0, wait_s=0))


def test_nothing_survives_the_recorders_capture_cut_off_at_its_timeout(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpuwb record`` runs the one-shot capture with a time limit; before, at the limit it killed the
    capture's process group, which neither the collectors (sessions of their own) nor their commands are in."""
    from workbench.capture.recorder.config import RecorderConfig
    from workbench.capture.recorder.freeze import run_capture

    for key, value in _env(tmp_path, GPUWB_TEST_ONLY="spawns").items():
        monkeypatch.setenv(key, value)
    python = tmp_path / "python"  # `python -m workbench.cli capture ARGS` -> the capture with the fake collectors
    python.write_text(f'#!/bin/sh\nshift 3\nexec {sys.executable} -m tests.reliability._capture_fakes "$@"\n')
    python.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(python))
    done: list[tuple[Path | None, str]] = []
    worker = threading.Thread(target=lambda: done.append(run_capture(
        RecorderConfig(out=str(tmp_path), capture_timeout_s=8), {"trigger": {"reason": "xid 79"}}, time.time() - 60,
        tmp_path)), daemon=True)
    try:
        worker.start()
        worker.join(timeout=30)  # 8 s, then the capture's own clean-up: not the collector's 60 s
        pids = read_pids(tmp_path / "pids", SPAWNED, wait_s=0)
        assert done, "run_capture did not return: what the capture started was still running"
        assert done[0][0] is None and done[0][1] == "timeout: gpuwb capture did not finish within 8 s"
        assert len(pids) == SPAWNED
        assert alive(pids) == [], f"left running: {alive(pids)}"
    finally:
        kill(read_pids(tmp_path / "pids", 0, wait_s=0))
