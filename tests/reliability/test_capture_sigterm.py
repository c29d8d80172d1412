"""SIGTERM (Slurm, Kubernetes, systemd stopping the job) and SIGHUP (a closed terminal) stop a capture as
Ctrl-C does: the bundle is written with what was captured, sealed and marked incomplete, the exit status
names the signal, the spool is removed and no process is left."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.reliability._capture_fakes import alive, kill, read_pids
from tests.reliability.test_capture_processes import SPAWNED, _capture
from workbench.store.bundle import Bundle

SIGNALS = [(signal.SIGTERM, 143), (signal.SIGHUP, 129)]


def _left_over(tmp_path: Path) -> list[str]:
    """What the capture left beside its bundle: spools in its temp folder, partial files beside the bundle."""
    return sorted([p.name for p in (tmp_path / "tmp").iterdir()]
                  + [p.name for p in tmp_path.iterdir() if "partial" in p.name or p.name.endswith(".wal")])


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_stopped_while_collecting(tmp_path: Path, signum: int, status: int) -> None:
    proc = _capture(tmp_path, "--only", "quick", "--only", "spawns")
    try:
        pids = read_pids(tmp_path / "pids", SPAWNED)
        assert len(pids) == SPAWNED, "the spawner did not start"
        time.sleep(0.3)  # the quick collector is done by now
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        name = signal.Signals(signum).name
        assert proc.returncode == status, err
        assert err.strip().splitlines()[-1] == f"bundle {tmp_path / 'b.duckdb'} is INCOMPLETE ({name})"
        with Bundle.open(tmp_path / "b.duckdb") as bundle:
            assert bundle.meta()["complete"] == "false"
            assert bundle.last_seal()["complete"] is False
            assert bundle.verify() == []
            coverage = {row["collector"]: (row["status"], row["reason"]) for row in bundle.coverage()}
            kept = {a["source"]: b"".join(bundle.artifact_bytes(a["sha256"])) for a in bundle.artifacts()}
        assert coverage["quick"] == ("ok", "")
        assert coverage["spawns"][0] == "timeout" and coverage["spawns"][1].startswith(f"terminated by {name}")
        assert kept["quick"] == b"captured before the stop\n"
        # the command the collector was running when it was stopped: what it had printed is kept
        assert kept["gpuwb-test-spawner " + str(tmp_path / "pids") + " hang"] == b"spawned 4 processes\n"
        assert _left_over(tmp_path) == []
        assert alive(pids) == []
    finally:
        proc.kill()
        kill(read_pids(tmp_path / "pids", 0, wait_s=0))


@pytest.mark.parametrize(("signum", "status"), SIGNALS)
def test_stopped_while_storing(tmp_path: Path, signum: int, status: int) -> None:
    """The signal comes while the spool is being stored: what is stored is sealed, the rest is said."""
    mark = tmp_path / "storing"
    proc = _capture(tmp_path, "--only", "quick", "--only", "slow", GPUWB_TEST_MARK=str(mark))
    try:
        give_up = time.monotonic() + 30
        while not mark.exists() and time.monotonic() < give_up and proc.poll() is None:
            time.sleep(0.05)
        assert mark.exists(), "storing never started"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        name = signal.Signals(signum).name
        assert proc.returncode == status, err
        with Bundle.open(tmp_path / "b.duckdb") as bundle:
            assert bundle.meta()["complete"] == "false"
            assert bundle.last_seal()["complete"] is False
            assert bundle.verify() == []
            coverage = {row["collector"]: (row["status"], row["reason"]) for row in bundle.coverage()}
            sources = {a["source"] for a in bundle.artifacts()}
        assert coverage == {"quick": ("ok", ""), "slow": ("error", f"not stored: capture terminated by {name}")}
        assert sources == {"quick"}
        assert _left_over(tmp_path) == []
    finally:
        proc.kill()

