"""Capture on a full disk: nothing captured is lost and no broken bundle takes the output's name.

DuckDB keeps committed rows in ``BUNDLE.wal`` until a checkpoint, and a checkpoint that fails at close is
not reported: before, capture renamed the near-empty database file onto the output and deleted the log
that held the evidence. Two ways a disk fills: the log itself cannot be written (a commit fails), or the
log fits and the checkpoint that folds it into the bundle does not."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.reliability.test_capture_processes import _capture
from workbench.store.bundle import Bundle

DISK = 4 << 20
CASES = {"checkpoint_fails": 5 << 19, "commit_fails": 6 << 20}
"""Incompressible bytes captured: 2.5 MiB fit the 4 MiB disk once (in the log), not twice (log and bundle)."""


@pytest.mark.parametrize("case", sorted(CASES))
def test_capture_on_a_full_disk(tmp_path: Path, small_fs, case: str) -> None:
    disk = small_fs(DISK)
    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(CASES[case]))
    output = disk / "b.duckdb"
    proc = _capture(tmp_path, "--only", "quick", "--only", "bulky", output=output, GPUWB_TEST_BLOB=str(blob),
                    GPUWB_TEST_BYTES=str(CASES[case]))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err
    errors = [line for line in err.splitlines() if line.startswith("gpuwb:")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    line = errors[0]
    assert line.startswith(f"gpuwb: error: capture not saved: {output} could not be written"), line
    assert not output.exists()  # no empty or broken bundle under the output's name

    spool = Path(re.search(r"the raw evidence is in (\S+) ", line).group(1))
    kept = {p.read_bytes() for p in spool.rglob("*.bin")}
    assert blob.read_bytes() in kept and b"captured before the stop\n" in kept

    partial = Path(re.search(r"the partial bundle is (\S+)", line).group(1))
    assert partial.exists() and partial.parent == disk
    if case == "checkpoint_fails":  # the log holds it all: copied to a disk with room, the copy opens whole
        wal = Path(re.search(r"and its log (\S+)", line).group(1))
        rescue = tmp_path / "rescue.duckdb"
        shutil.copyfile(partial, rescue)
        shutil.copyfile(wal, f"{rescue}.wal")
        with Bundle.open(rescue) as bundle:
            stored = {a["source"]: b"".join(bundle.artifact_bytes(a["sha256"])) for a in bundle.artifacts()}
            assert bundle.last_seal()["complete"] is True
        assert stored == {"quick": b"captured before the stop\n", "bulky": blob.read_bytes()}
