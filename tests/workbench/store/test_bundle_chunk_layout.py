"""Raw bytes stored as small chunks in small row groups (flat memory) round-trip byte for byte, and
bundles written with the former 4 MiB chunks still read, verify and seal to the same digest."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from datetime import datetime, timezone

import duckdb

from workbench.store import artifacts, chunks
from workbench.store.bundle import Bundle
from workbench.store.chunks import CHUNK_BYTES
from workbench.store.connection import ROW_GROUP_ROWS


def _store(path, blobs: list[bytes]) -> tuple[list[str], str]:
    with Bundle.create(path, title="t", incident_id="inc-1", meta={"created_at": "2026-01-01T00:00:00"}) as bundle:
        shas = [bundle.add_artifact(io.BytesIO(b), kind="unknown", source=f"f{i}", host="h",
                                    captured_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                                    info={"n": i})[0] for i, b in enumerate(blobs)]
        return shas, bundle.seal()


def _blobs() -> list[bytes]:
    """Incompressible bytes over more than one row group of chunks, a log that compresses, odd sizes."""
    return [os.urandom(CHUNK_BYTES * (ROW_GROUP_ROWS + 3) + 17), b"kernel: line\n" * 200_000, b"x" * 511, b""]


def test_artifacts_over_several_row_groups_round_trip_and_verify(tmp_path):
    blobs = _blobs()
    path = tmp_path / "b.duckdb"
    shas, _ = _store(path, blobs)
    with Bundle.open(path) as bundle:
        for sha, blob in zip(shas, blobs, strict=True):
            assert b"".join(bundle.artifact_bytes(sha)) == blob
        aid = bundle.find_artifact(shas[0])
        assert bundle.artifact_chunk_count(aid) == ROW_GROUP_ROWS + 4
        assert bundle.artifact_chunk(aid, ROW_GROUP_ROWS + 3) == blobs[0][-17:]
        assert bundle.verify() == []


def test_the_bundle_is_written_in_small_row_groups(tmp_path):
    path = tmp_path / "b.duckdb"
    _store(path, _blobs()[:1])
    con = duckdb.connect(str(path), read_only=True)
    groups = con.execute("SELECT DISTINCT row_group_id FROM pragma_storage_info('artifact_chunk')").fetchall()
    con.close()
    assert len(groups) >= 2


def test_former_4_mib_chunks_read_verify_and_seal_the_same(tmp_path, monkeypatch):
    blobs = _blobs()
    new_shas, new_digest = _store(tmp_path / "new.duckdb", blobs)
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 4 << 20)
    monkeypatch.setattr(artifacts, "STORE_BATCH_CHUNKS", 1)
    old_shas, old_digest = _store(tmp_path / "old.duckdb", blobs)
    monkeypatch.undo()
    assert old_shas == new_shas and old_digest == new_digest
    with Bundle.open(tmp_path / "old.duckdb") as bundle:
        aid = bundle.find_artifact(old_shas[0])
        assert bundle.artifact_chunk_count(aid) == -(-len(blobs[0]) // (4 << 20))
        assert b"".join(bundle.artifact_bytes(old_shas[0])) == blobs[0]
        assert bundle.verify() == []


CRASH_MID_STORE = """
import io, os, sys
from workbench.store import chunks
from workbench.store.bundle import Bundle
chunks.CHUNK_BYTES = chunks.MAX_CHUNK_BYTES = 4096  # 2048-row groups of 8 MiB: several written before the crash
with Bundle.open(sys.argv[1], write=True) as bundle:
    execute = bundle.con.execute
    def crash_before_the_artifact_row(sql, *args):
        if sql.startswith("INSERT INTO artifact "):
            assert bundle.con.execute("SELECT count(*) FROM artifact_chunk").fetchall()[0][0] > 3 * 2048
            os._exit(9)
        return execute(sql, *args)
    bundle.con = type("Con", (), {"execute": staticmethod(crash_before_the_artifact_row),
                                  "__getattr__": lambda self, name: getattr(execute.__self__, name)})()
    bundle.add_artifact(io.BytesIO(os.urandom(40 << 20)), kind="unknown", source="big")
"""


def test_a_crash_after_row_groups_went_to_disk_leaves_the_sealed_bundle_intact(tmp_path):
    """Full row groups of the open transaction are written to the file before the commit; a process
    killed then must leave the sealed evidence as it was and the bundle writable."""
    path = tmp_path / "b.duckdb"
    shas, digest = _store(path, [b"kernel: before\n"])
    crashed = subprocess.run([sys.executable, "-c", CRASH_MID_STORE, str(path)], capture_output=True, text=True)
    assert crashed.returncode == 9, crashed.stderr[-500:]
    with Bundle.open(path, write=True) as bundle:
        assert bundle.verify() == [] and bundle.root_digest() == digest and bundle.artifacts()[0]["sha256"] == shas[0]
        assert bundle.con.execute("SELECT count(*) FROM artifact_chunk").fetchall()[0][0] == 1
        sha, _, is_new = bundle.add_artifact(io.BytesIO(b"kernel: after\n" * 10_000), kind="unknown", source="a")
        assert is_new and b"".join(bundle.artifact_bytes(sha)) == b"kernel: after\n" * 10_000


def test_chunks_compressed_by_pyarrow_as_bundles_stored_them_before_still_expand():
    import pyarrow as pa

    from workbench.store.chunks import unpack

    block = b"".join(b"[ %d.000000] NVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus.\n" % i
                     for i in range(5000))
    stored = pa.compress(block, codec="zstd", asbytes=True)
    assert len(stored) < len(block) // 5
    assert unpack(stored, "zstd", len(block)) == block


def test_verify_names_a_compressed_chunk_that_no_longer_expands(tmp_path):
    import io

    from workbench.store.bundle import Bundle

    text = b"".join(b"[ %d.000000] NVRM: Xid (PCI:0000:5d:00): 79, GPU has fallen off the bus.\n" % i
                    for i in range(20000))
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        bundle.add_artifact(io.BytesIO(text), kind="dmesg", source="dmesg.txt")
        bundle.seal()
    with Bundle.open(tmp_path / "b.duckdb", write=True) as bundle:
        seq, data = bundle.con.execute("SELECT seq, data FROM artifact_chunk WHERE codec = 'zstd' "
                                       "ORDER BY seq LIMIT 1").fetchall()[0]
        bundle.con.execute("UPDATE artifact_chunk SET data = ? WHERE seq = ?", [data[:8] + b"garbage" + data[15:], seq])
        problems = bundle.verify()
    assert any("stored chunk no longer expands" in p and "dmesg.txt" in p for p in problems), problems
