"""An ingest stopped part way, as schedulers and people stop it: SIGTERM (once, or again and again while it
cleans up) seals what it had committed as incomplete, like Ctrl-C; after SIGKILL, which nothing can catch,
verify and the report say "interrupted" (never ALTERED: nothing sealed was touched) and the next ingest says,
in one line, that it seals the unfinished run's artifacts.

Each test runs a real ``gpuwb ingest`` of many small files into a sealed bundle and stops it once its first
group is committed: the bundle was checkpointed before, so its ``.wal`` file appears with that commit."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.reliability.conftest import ROOT
from workbench.store.bundle import Bundle

FILES = 1500
"""Enough that the run is far from done when its first group (about 256 files) is committed."""


def _inputs(folder: Path) -> Path:
    folder.mkdir()
    for n in range(FILES):
        (folder / f"dmesg{n:04d}.log").write_text(
            f"[{n}.000001] NVRM: Xid (PCI:0000:{n % 256:02x}:00): 79, pid={n}, GPU has fallen off the bus.\n")
    return folder


def _sealed_bundle(tmp_path: Path) -> Path:
    (tmp_path / "first.log").write_text("Mar 14 10:00:01 node01 kernel: hello\n")
    path = tmp_path / "b.duckdb"
    code, _, err = run_cli("ingest", path, tmp_path / "first.log")
    assert code == 0, err
    assert not Path(f"{path}.wal").exists()
    return path


def _started(path: Path, inputs: Path) -> subprocess.Popen[str]:
    """``gpuwb ingest`` in a child process, returned once its first group is committed (the next commit is
    about 256 files later)."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "ingest", "-q", str(path), str(inputs)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    wal = Path(f"{path}.wal")
    deadline = time.monotonic() + 240
    while not (wal.exists() and wal.stat().st_size > 0):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the ingest ended or stalled before its first commit: {proc.communicate()}")
        time.sleep(0.005)
    size = -1
    while size != wal.stat().st_size:  # the commit is written out: the log has stopped growing
        size = wal.stat().st_size
        time.sleep(0.3)
    assert proc.poll() is None, "the ingest finished before it could be stopped: give it more files"
    return proc


def _verify(path: Path) -> tuple[int, list[str]]:
    code, out, err = run_cli("verify", path)
    assert not err, err
    return code, out.splitlines()


def _artifacts(path: Path) -> int:
    with Bundle.open(path) as bundle:
        return len(bundle.artifacts())


@pytest.mark.parametrize("again", [False, True], ids=["once", "again-and-again"])
def test_sigterm_seals_what_was_committed_as_incomplete(tmp_path: Path, again: bool) -> None:
    path = _sealed_bundle(tmp_path)
    proc = _started(path, _inputs(tmp_path / "in"))
    proc.send_signal(signal.SIGTERM)
    while again and proc.poll() is None:  # a scheduler that keeps signalling while the ingest cleans up
        time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)

    # 143; or killed by a signal that came after gpuwb was done and had put the default handler back, which a
    # shell reports as 143 too
    assert proc.returncode in (143, -signal.SIGTERM), err
    assert err.splitlines() == ["gpuwb: terminated by SIGTERM"]
    code, lines = _verify(path)
    assert code == 0, lines
    assert lines[-1].endswith("(capture or ingest was interrupted: bundle marked incomplete)"), lines
    assert not any("interrupted:" in line or "ALTERED" in line for line in lines[:-1]), lines
    stored = _artifacts(path)
    assert 1 < stored < FILES + 1  # the committed groups are kept, the rest is not
    assert lines[-1].startswith(f"OK: {stored} artifacts intact")
    code, _, err = run_cli("ingest", path, tmp_path / "in")  # a rerun adds the rest, saying nothing of the stop
    assert code == 0 and err == "", err
    assert _artifacts(path) == FILES + 1


def test_sigkill_leaves_an_interrupted_ingest_that_verify_report_and_the_next_ingest_name(tmp_path: Path) -> None:
    path = _sealed_bundle(tmp_path)
    with Bundle.open(path) as bundle:
        digest = bundle.last_seal()["root_digest"]
    proc = _started(path, _inputs(tmp_path / "in"))
    proc.kill()
    proc.communicate(timeout=60)
    stored = _artifacts(path) - 1
    assert 0 < stored < FILES

    code, lines = _verify(path)  # not a tamper: nothing sealed changed, and the ingest's marker is there
    assert code == 0, lines
    assert not any("ALTERED" in line or "altered" in line for line in lines), lines
    (told,) = [line for line in lines if "interrupted" in line and not line.startswith("OK")]
    assert told.startswith(f"ingest interrupted: {stored} artifacts stored after the last seal by an ingest that "
                           f"did not finish (pid {proc.pid} on "), told
    assert lines[-1].startswith(f"OK: 1 artifacts intact, root digest {digest}"), lines

    code, out, err = run_cli("report", path, "-f", "json")
    assert code == 0, err
    evidence = json.loads(out)["evidence"]
    assert evidence["verify_ok"] and evidence["interrupted"] == told and told in evidence["problems"]
    code, out, err = run_cli("report", path)
    assert code == 0 and told in out and "**FAIL**" not in out, err

    (tmp_path / "late.log").write_text("Mar 14 11:00:01 node01 kernel: later\n")
    code, out, err = run_cli("ingest", path, tmp_path / "late.log")
    assert code == 0, err
    assert err.splitlines() == [
        f"gpuwb: sealing {stored} artifacts that an interrupted ingest (pid {proc.pid}, started at "
        + err.split("started at ")[1].split(")")[0] + ") stored after the last seal; the seal is marked incomplete "
        "and names that ingest"]
    code, lines = _verify(path)
    assert code == 0 and lines == [lines[-1]] and lines[-1].startswith(f"OK: {stored + 2} artifacts intact"), lines
    with Bundle.open(path) as bundle:
        seals = bundle.seals()
    adopted = seals[-2]
    assert adopted["complete"] is False and adopted["artifacts"] == stored + 1
    assert json.loads(adopted["note"])["ingest"]["pid"] == proc.pid
    assert seals[-1]["complete"] is True and seals[-1]["previous"] == adopted["root_digest"]
