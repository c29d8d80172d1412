"""Raw bytes stored as small chunks in small row groups (flat memory) round-trip byte for byte, and
bundles written with the former 4 MiB chunks still read, verify and seal to the same digest."""

from __future__ import annotations

import io
import os
from datetime import datetime, timezone

import duckdb

from workbench import bundle as bundle_module
from workbench.bundle import CHUNK_BYTES, ROW_GROUP_ROWS, Bundle


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
    monkeypatch.setattr(bundle_module, "CHUNK_BYTES", 4 << 20)
    monkeypatch.setattr(bundle_module, "STORE_BATCH_CHUNKS", 1)
    old_shas, old_digest = _store(tmp_path / "old.duckdb", blobs)
    monkeypatch.undo()
    assert old_shas == new_shas and old_digest == new_digest
    with Bundle.open(tmp_path / "old.duckdb") as bundle:
        aid = bundle.find_artifact(old_shas[0])
        assert bundle.artifact_chunk_count(aid) == -(-len(blobs[0]) // (4 << 20))
        assert b"".join(bundle.artifact_bytes(old_shas[0])) == blobs[0]
        assert bundle.verify() == []
