"""A full disk during ingest: one line, exit 2, and the bundle keeps what it held before (or the committed part,
said so). Never exit 0 with the new evidence only in ``BUNDLE.wal``, where a copy of the bundle file lacks it.

The disk is a real one: a small tmpfs (``small_fs``). A sealed bundle is made on an ordinary disk and copied
onto it, then ingest adds random bytes (stored as they are, so their size on disk is known in advance)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.reliability.conftest import gpuwb
from workbench.ingest import session as ingest
from workbench.store.bundle import Bundle


def _sealed_bundle(folder: Path) -> tuple[Path, str]:
    """A sealed bundle of one artifact, checkpointed (no .wal); returns it and its root digest."""
    (folder / "first.log").write_text("Mar 14 10:00:01 node01 kernel: hello\n")
    path = folder / "b.duckdb"
    code, _, err = run_cli("ingest", path, folder / "first.log")
    assert code == 0, err
    assert not Path(f"{path}.wal").exists()
    with Bundle.open(path) as bundle:
        return path, bundle.last_seal()["root_digest"]


def _random_files(folder: Path, count: int, size: int) -> Path:
    folder.mkdir()
    for n in range(count):
        (folder / f"blob{n:03d}.bin").write_bytes(os.urandom(size))
    return folder


def _on_small_disk(small_fs, tmp_path: Path, free: int) -> tuple[Path, str]:
    """The sealed bundle copied onto a tmpfs that has about ``free`` bytes left beside it."""
    made, digest = _sealed_bundle(tmp_path)
    disk = small_fs(made.stat().st_size + free)
    path = disk / "b.duckdb"
    shutil.copyfile(made, path)
    return path, digest


def _verified(path: Path) -> tuple[int, str]:
    code, out, err = run_cli("verify", path)
    assert not err, err
    return code, out


def test_a_checkpoint_the_disk_cannot_take_fails_the_ingest_and_the_bundle_file_is_as_before(small_fs, tmp_path):
    """The probe's case: every commit fits in the write-ahead log, the checkpoint at close does not."""
    path, digest = _on_small_disk(small_fs, tmp_path, 1600 << 10)
    blobs = _random_files(tmp_path / "in", 4, 250 << 10)  # 1 MB: fits the .wal, not the .wal and the file both

    done = gpuwb("ingest", str(path), str(blobs))

    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"gpuwb: error: bundle {path} could not be written (") and "No space left" in line
    assert f"{path}.wal" in line and "what it held before is kept" in line
    assert "Traceback" not in done.stdout + done.stderr
    alone = tmp_path / "copy.duckdb"  # the bundle file alone, as a user copies it: what it held before
    shutil.copyfile(path, alone)
    code, out = _verified(alone)
    assert code == 0 and out.splitlines()[-1].startswith(f"OK: 1 artifacts intact, root digest {digest}"), out
    code, out = _verified(path)  # with its .wal beside it: the ingest's commits too, sealed, nothing altered
    assert code == 0 and out.startswith("OK: 5 artifacts intact"), out


def test_a_commit_the_disk_cannot_take_stops_the_ingest_keeping_what_was_committed(small_fs, tmp_path, monkeypatch):
    path, digest = _on_small_disk(small_fs, tmp_path, 1200 << 10)
    blobs = _random_files(tmp_path / "in", 12, 200 << 10)  # 2.4 MB, one commit per file: the disk fills midway
    monkeypatch.setattr(ingest, "BATCH_BYTES", 1)

    code, out, err = run_cli("ingest", path, blobs)

    assert code == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"gpuwb: error: bundle {path} could not be written (") and "ingest stopped" in line
    committed = int(line.split("; the ")[1].split(" artifact")[0])
    assert 0 < committed < 12
    assert f"kept, not sealed, in {path}.wal" in line
    alone = tmp_path / "copy.duckdb"
    shutil.copyfile(path, alone)
    code, out = _verified(alone)
    assert code == 0 and out.splitlines()[-1].startswith(f"OK: 1 artifacts intact, root digest {digest}"), out
    code, out = _verified(path)  # the committed part, replayed from the .wal: unsealed, an interrupted ingest's
    assert code == 0 and "ALTERED" not in out, out
    assert out.splitlines()[0].startswith(f"ingest interrupted: {committed} artifacts stored after the last seal"), out
    assert out.splitlines()[-1].startswith(f"OK: 1 artifacts intact, root digest {digest}"), out


def test_a_new_bundle_the_disk_cannot_take_is_not_left_behind(small_fs, tmp_path):
    disk = small_fs(1 << 20)
    blobs = _random_files(tmp_path / "in", 2, 300 << 10)

    done = gpuwb("ingest", str(disk / "new.duckdb"), str(blobs))

    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("gpuwb: error: ") and "could not be written" in line and "no bundle was written" in line
    assert sorted(os.listdir(disk)) == []


@pytest.mark.parametrize("free", [300 << 10])
def test_the_next_ingest_once_there_is_space_seals_what_the_full_disk_left(small_fs, tmp_path, monkeypatch, free):
    path, _ = _on_small_disk(small_fs, tmp_path, free)
    blobs = _random_files(tmp_path / "in", 6, 100 << 10)
    monkeypatch.setattr(ingest, "BATCH_BYTES", 1)
    code, _, err = run_cli("ingest", path, blobs)
    assert code == 2, err
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    moved = roomy / "b.duckdb"
    shutil.copyfile(path, moved)
    shutil.copyfile(f"{path}.wal", f"{moved}.wal")

    code, out, err = run_cli("ingest", moved, blobs)

    assert code == 0, err
    (notice,) = [line for line in err.splitlines() if line]
    assert notice.startswith("gpuwb: sealing ") and "interrupted ingest" in notice and "marked incomplete" in notice
    code, out = _verified(moved)
    assert code == 0 and out.startswith("OK: 7 artifacts intact"), out
