"""Small files stored inside a batch wait and go in together (one INSERT per many files): the bundle
holds the same rows, ids, chunks and seal as when each is stored on its own, reads in the middle of
the batch see them, and a rollback drops them."""

from __future__ import annotations

import io
import os
from datetime import datetime, timezone

from workbench.store import artifacts
from workbench.store.artifacts import STORE_BATCH_BYTES
from workbench.store.bundle import Bundle
from workbench.store.chunks import CHUNK_BYTES

WHEN = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _blobs() -> list[bytes]:
    """Rank-log sized text, a duplicate, an empty file, incompressible bytes over several chunks, one
    big file in the middle that takes the streamed path."""
    ranks = [f"rank {i} NCCL INFO ring {i}\n".encode() * (3000 + i) for i in range(6)]
    return [*ranks[:3], ranks[1], b"", os.urandom(CHUNK_BYTES * 3 + 5), b"big\n" * (STORE_BATCH_BYTES // 3),
            *ranks[3:], b"x" * 100]


def _store(path, blobs: list[bytes], batch: bool) -> tuple[list[tuple[str, int, bool]], str]:
    with Bundle.create(path, title="t", incident_id="inc-1", meta={"created_at": "2026-01-01T00:00:00"}) as bundle:
        if batch:
            bundle.begin_batch()
        out = [bundle.add_artifact(io.BytesIO(b), kind="unknown", source=f"f{i}", host=f"h{i % 2}",
                                   captured_at=WHEN, info={"n": i}) for i, b in enumerate(blobs)]
        bundle.commit_batch()
        return out, bundle.seal()


def _chunks(path) -> list[tuple]:
    with Bundle.open(path) as bundle:
        return bundle.con.execute("SELECT * FROM artifact_chunk ORDER BY artifact_id, seq").fetchall()


def test_batched_small_files_store_what_single_stores_do(tmp_path):
    blobs = _blobs()
    alone, alone_seal = _store(tmp_path / "a.duckdb", blobs, batch=False)
    batched, batched_seal = _store(tmp_path / "b.duckdb", blobs, batch=True)
    assert batched == alone
    assert [is_new for _, _, is_new in batched].count(False) == 1
    assert batched_seal == alone_seal
    assert _chunks(tmp_path / "b.duckdb") == _chunks(tmp_path / "a.duckdb")
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        assert not bundle.verify()
        for sha, _, _ in batched:
            assert b"".join(bundle.artifact_bytes(sha)) == blobs[[s for s, _, _ in batched].index(sha)]


def test_reads_inside_a_batch_see_the_waiting_files(tmp_path):
    with Bundle.create(tmp_path / "b.duckdb", title="t") as bundle:
        bundle.begin_batch()
        sha, aid, is_new = bundle.add_artifact(io.BytesIO(b"one line\n" * 50), kind="unknown", source="f",
                                               host="node-1")
        assert is_new
        assert bundle.artifact_host(aid) == "node-1"
        assert bundle.find_artifact(sha) == aid
        assert b"".join(bundle.artifact_bytes(aid)) == b"one line\n" * 50
        bundle.set_parse_stats_many([(aid, 50, 0, 0, 0, {})])
        assert [a["lines"] for a in bundle.artifacts()] == [50]
        bundle.commit_batch()


def test_rollback_drops_the_waiting_files(tmp_path):
    with Bundle.create(tmp_path / "b.duckdb", title="t") as bundle:
        kept = bundle.add_artifact(io.BytesIO(b"kept\n"), kind="unknown", source="k")
        bundle.begin_batch()
        dropped = bundle.add_artifact(io.BytesIO(b"dropped\n"), kind="unknown", source="d")
        bundle.rollback_batch()
        assert [a["sha256"] for a in bundle.artifacts()] == [kept[0]]
        again = bundle.add_artifact(io.BytesIO(b"dropped\n"), kind="unknown", source="d")
        assert again == dropped


def test_small_files_flushed_every_few_chunks_store_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "PENDING_CHUNKS", 4)
    blobs = [f"file {i}\n".encode() * 700 for i in range(25)]
    alone, _ = _store(tmp_path / "a.duckdb", blobs, batch=False)
    batched, _ = _store(tmp_path / "b.duckdb", blobs, batch=True)
    assert batched == alone
    assert _chunks(tmp_path / "b.duckdb") == _chunks(tmp_path / "a.duckdb")


class _ShortReads(io.BytesIO):
    """A stream that returns at most 1,000 bytes a read, as a pipe may."""

    def read(self, size: int | None = -1) -> bytes:
        return super().read(1000 if size is None or size < 0 else min(size, 1000))


def test_a_short_read_is_not_taken_for_the_end(tmp_path):
    blob = b"".join(f"line {i}\n".encode() for i in range(2000))
    with Bundle.create(tmp_path / "b.duckdb", title="t") as bundle:
        bundle.begin_batch()
        sha, aid, _ = bundle.add_artifact(_ShortReads(blob), kind="unknown", source="pipe")
        bundle.commit_batch()
        assert b"".join(bundle.artifact_bytes(aid)) == blob
        assert [a["size"] for a in bundle.artifacts()] == [len(blob)]
        bundle.seal()
        assert not bundle.verify()
