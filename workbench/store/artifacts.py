"""A bundle's raw evidence: artifacts stored verbatim in chunks and named by their sha256, stored once
(another host's copy is an alias), read back chunk by chunk; the ingest batch that groups many files into one
transaction, with the "ingest open" marker that tells an interrupted ingest from tampering."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import duckdb

from workbench.store import chunks
from workbench.store.chunks import chunk_params, unpack
from workbench.store.errors import BundleError
from workbench.store.row_columns import now_utc, utc_naive

STORE_BATCH_BYTES = 4 << 20
"""Raw bytes read and inserted per statement, not a query per chunk."""
STORE_BATCH_CHUNKS = 64
"""Chunks read back per query."""
PENDING_BYTES = 4 << 20
"""Inside a batch, the chunks of small files wait until this many stored bytes (or PENDING_CHUNKS rows)
and go in with their artifact rows in one INSERT each: two statements per file cost ~1.7 ms, more than
hashing and zstd together for a 100 KB rank log."""
PENDING_CHUNKS = 512

OPEN_MARKER = "ingest_open"
"""meta key an ingest writes with its first commit and clears with its seal (see :meth:`Bundle.mark_open`)."""



class ArtifactStore:
    """The artifact half of :class:`workbench.store.bundle.Bundle`, which sets the state declared here."""

    path: Path
    con: duckdb.DuckDBPyConnection
    _next_event_id: int | None
    _next_artifact_id: int | None
    _artifact_ids: dict[str, int] | None
    _in_batch: bool
    _pending_chunks: list[Any]
    _pending_artifacts: list[Any]
    _pending_bytes: int
    _open_marker: str | None

    def find_artifact(self, sha256: str) -> int | None:
        self._flush_pending()
        rows = self.con.execute("SELECT id FROM artifact WHERE sha256 = ?", [sha256]).fetchall()
        return rows[0][0] if rows else None

    def add_artifact(self, stream: BinaryIO, *, kind: str, source: str, collector: str | None = None,
                     host: str | None = None, captured_at: datetime | None = None,
                     info: dict[str, Any] | None = None) -> tuple[str, int, bool]:
        """Store raw bytes verbatim, streamed in chunks. Returns (sha256, id, is_new): the same
        bytes stored twice are kept once."""
        aid = self._next_artifact_id
        if aid is None:
            aid = self.con.execute("SELECT coalesce(max(id), 0) + 1 FROM artifact").fetchall()[0][0]
        fields = [collector, kind, host, source, utc_naive(captured_at or datetime.now(timezone.utc)),
                  json.dumps(info or {}, default=str)]
        read = [stream.read(STORE_BATCH_BYTES)]
        if self._in_batch and len(read[0]) < STORE_BATCH_BYTES:
            read.append(stream.read(STORE_BATCH_BYTES))  # a short read need not be the end (a pipe)
            if not read[1]:
                return self._add_small(aid, read[0], fields)
        self._flush_pending()
        digest = hashlib.sha256()
        size = 0
        seq = 0
        step = chunks.CHUNK_BYTES
        own = not self._in_batch
        if own:
            self.con.execute("BEGIN")
        try:
            while True:
                block = read.pop(0) if read else stream.read(STORE_BATCH_BYTES)
                if not block:
                    break
                digest.update(block)
                size += len(block)
                seq, step = self._insert_chunks(aid, seq, block, step)
            sha = digest.hexdigest()
            existing = self._stored_id(sha)
            if existing is not None:
                self._drop_chunks(aid, own)
                return sha, existing, False
            self.con.execute(
                "INSERT INTO artifact (id, sha256, collector, kind, host, source, captured_at, size, info) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", _artifact_params(aid, sha, size, fields))
            if own:
                self.con.execute("COMMIT")
            else:
                self._next_artifact_id = aid + 1
                if self._artifact_ids is not None:
                    self._artifact_ids[sha] = aid
        except BaseException:
            self._drop_chunks(aid, own)
            raise
        return sha, aid, True

    def _add_small(self, aid: int, block: bytes, fields: list[Any]) -> tuple[str, int, bool]:
        """A file read whole, inside a batch: hashed before anything is inserted (a duplicate costs no
        statement), its rows kept for one INSERT with other small files' (see PENDING_BYTES)."""
        sha = hashlib.sha256(block).hexdigest()
        existing = self._stored_id(sha)
        if existing is not None:
            return sha, existing, False
        params, _, _ = chunk_params(aid, 0, block, chunks.CHUNK_BYTES)
        self._pending_chunks += params
        self._pending_artifacts += _artifact_params(aid, sha, len(block), fields)
        self._pending_bytes += sum(len(data) for data in params[2::5])
        self._next_artifact_id = aid + 1
        if self._artifact_ids is not None:
            self._artifact_ids[sha] = aid
        if self._pending_bytes >= PENDING_BYTES or len(self._pending_chunks) >= PENDING_CHUNKS * 5:
            self._flush_pending()
        return sha, aid, True

    def _flush_pending(self) -> None:
        """Insert the rows of the small artifacts kept back: before any statement that reads or changes
        artifacts, and before the batch commits."""
        if not self._pending_artifacts:
            return
        chunks, artifacts = self._pending_chunks, self._pending_artifacts
        self._pending_chunks, self._pending_artifacts, self._pending_bytes = [], [], 0
        if chunks:
            self.con.execute("INSERT INTO artifact_chunk VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * (len(chunks) // 5)),
                             chunks)
        self.con.execute("INSERT INTO artifact (id, sha256, collector, kind, host, source, captured_at, size, info) "
                         "VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?)"] * (len(artifacts) // 9)), artifacts)

    def _drop_pending(self) -> None:
        self._pending_chunks, self._pending_artifacts, self._pending_bytes = [], [], 0

    def _insert_chunks(self, artifact_id: int, first_seq: int, block: bytes, step: int) -> tuple[int, int]:
        """``block`` as chunks from seq ``first_seq`` on, in one multi-row INSERT (an Arrow batch would
        import pandas, ~90 MB). Returns the next seq and the next chunk's size."""
        params, seq, step = chunk_params(artifact_id, first_seq, block, step)
        self.con.execute("INSERT INTO artifact_chunk VALUES " + ", ".join(["(?, ?, ?, ?, ?)"] * (seq - first_seq)),
                         params)
        return seq, step

    def _stored_id(self, sha256: str) -> int | None:
        if not self._in_batch:
            return self.find_artifact(sha256)
        if self._artifact_ids is None:
            self._artifact_ids = dict(self.con.execute("SELECT sha256, id FROM artifact").fetchall())
        return self._artifact_ids.get(sha256)

    def _drop_chunks(self, artifact_id: int, own: bool) -> None:
        """Undo the chunks of an artifact that is not kept (a duplicate, or a read that failed)."""
        if own:
            self.con.execute("ROLLBACK")
        else:
            self.con.execute("DELETE FROM artifact_chunk WHERE artifact_id = ?", [artifact_id])

    def begin_batch(self) -> None:
        """Group many artifacts and their rows into one transaction: one commit (and fsync) for a
        folder of small files instead of one per file, and an interrupted ingest loses only the
        uncommitted group, never half an artifact. The first batch after :meth:`mark_open` carries the marker."""
        if not self._in_batch:
            self._in_batch = True  # before BEGIN: an interrupt between the two still rolls back
            self.con.execute("BEGIN")
            self._next_artifact_id = self._artifact_ids = None
            if self._open_marker is not None:
                self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [OPEN_MARKER, self._open_marker])
                self._open_marker = None

    def mark_open(self) -> None:
        """Say, with the first artifacts this run commits, that an ingest is under way: if it never seals (kill
        -9, a power cut, a full disk), verify and the next ingest can tell its unsealed artifacts from ones
        slipped in after sealing. :meth:`seal` clears the marker; so does :meth:`clear_open_marker`."""
        self._open_marker = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                        "started_at": now_utc().isoformat(timespec="seconds")})

    def clear_open_marker(self) -> None:
        """The run is over without a seal of its own (it stored nothing new)."""
        self._open_marker = None
        self.con.execute("DELETE FROM meta WHERE key = ?", [OPEN_MARKER])

    def open_marker(self) -> dict[str, Any] | None:
        """The marker an ingest that did not finish left behind: pid, host, started_at."""
        rows = self.con.execute("SELECT value FROM meta WHERE key = ?", [OPEN_MARKER]).fetchall()
        if not rows:
            return None
        try:
            marker = json.loads(rows[0][0])
        except ValueError:
            marker = None
        return marker if isinstance(marker, dict) else {"pid": "?", "started_at": "?"}

    def commit_batch(self) -> None:
        if self._in_batch:
            self._flush_pending()
            self.con.execute("COMMIT")
            self._in_batch = False
            self._next_artifact_id = self._artifact_ids = None

    def rollback_batch(self) -> None:
        """Undo the open group (an interrupted ingest): its artifacts and rows go, earlier groups stay."""
        if self._in_batch:
            self._drop_pending()
            with contextlib.suppress(duckdb.TransactionException):  # an interrupted COMMIT may have ended it
                self.con.execute("ROLLBACK")
            self._in_batch = False
            self._next_event_id = None
            self._next_artifact_id = self._artifact_ids = None

    def add_alias(self, sha256: str, *, kind: str, source: str, collector: str | None = None,
                  host: str | None = None, captured_at: datetime | None = None,
                  info: dict[str, Any] | None = None) -> bool:
        """Record that bytes already stored also came from another host (the same dpkg.log on two
        nodes of one image): the bytes stay stored once, the second provenance is kept so that
        host's rows can be parsed too. False when that host already has these bytes."""
        self._flush_pending()
        known = self.con.execute(
            "SELECT count(*) FROM (SELECT host FROM artifact WHERE sha256 = ? "
            "UNION ALL SELECT host FROM artifact_alias WHERE sha256 = ?) WHERE host IS NOT DISTINCT FROM ?",
            [sha256, sha256, host]).fetchall()[0][0]
        if known:
            return False
        self.con.execute("INSERT INTO artifact_alias VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [sha256, collector, kind, host, source,
                          utc_naive(captured_at or datetime.now(timezone.utc)), json.dumps(info or {}, default=str)])
        return True

    def set_parse_stats(self, artifact_id: int, *, lines: int, events: int, rows: int, skipped: int,
                        skip_reasons: dict[str, int], kind: str | None = None) -> None:
        """Parse statistics are filled once, right after the artifact is stored, before sealing."""
        self._flush_pending()
        self.con.execute(
            "UPDATE artifact SET lines = ?, events = ?, rows = ?, skipped = ?, skip_reasons = ?, "
            "kind = coalesce(?, kind) WHERE id = ?",
            [lines, events, rows, skipped, json.dumps(skip_reasons), kind, artifact_id])

    def set_parse_stats_many(self, stats: list[tuple[int, int, int, int, int, dict[str, int]]]) -> None:
        """set_parse_stats for many artifacts, each (id, lines, events, rows, skipped, skip_reasons), in one
        UPDATE: a folder of 512 rank logs costs one statement instead of 512."""
        if not stats:
            return
        self._flush_pending()
        ids, lines, events, rows, skipped, reasons = (list(column) for column in zip(*stats, strict=True))
        self.con.execute(
            "UPDATE artifact SET lines = s.lines, events = s.events, rows = s.rows, skipped = s.skipped, "
            "skip_reasons = s.reasons FROM (SELECT unnest(?::BIGINT[]) AS id, unnest(?::BIGINT[]) AS lines, "
            "unnest(?::BIGINT[]) AS events, unnest(?::BIGINT[]) AS rows, unnest(?::BIGINT[]) AS skipped, "
            "unnest(?::VARCHAR[]) AS reasons) AS s WHERE artifact.id = s.id",
            [ids, lines, events, rows, skipped, [json.dumps(r) for r in reasons]])

    def artifact_bytes(self, artifact: str | int) -> Iterator[bytes]:
        """The raw bytes of an artifact (by sha256 or id), chunk by chunk."""
        self._flush_pending()
        aid = artifact if isinstance(artifact, int) else self.find_artifact(artifact)
        if aid is None:
            raise BundleError(f"no artifact {artifact}")
        seqs = [seq for (seq,) in self.con.execute(
            "SELECT seq FROM artifact_chunk WHERE artifact_id = ? ORDER BY seq", [aid]).fetchall()]
        for at in range(0, len(seqs), STORE_BATCH_CHUNKS):
            for data, codec, raw_size in self.con.execute(
                    "SELECT data, codec, raw_size FROM artifact_chunk WHERE artifact_id = ? "
                    "AND seq IN (SELECT unnest(?::INTEGER[])) ORDER BY seq",
                    [aid, seqs[at:at + STORE_BATCH_CHUNKS]]).fetchall():
                yield unpack(data, codec, raw_size)

    def artifact_chunk_count(self, artifact_id: int) -> int:
        self._flush_pending()
        return self.con.execute("SELECT count(*) FROM artifact_chunk WHERE artifact_id = ?",
                                [artifact_id]).fetchall()[0][0]

    def artifact_chunk(self, artifact_id: int, seq: int) -> bytes:
        """One stored chunk, expanded: a viewer reads a huge artifact a chunk at a time."""
        self._flush_pending()
        rows = self.con.execute("SELECT data, codec, raw_size FROM artifact_chunk WHERE artifact_id = ? AND seq = ?",
                                [artifact_id, seq]).fetchall()
        if not rows:
            raise BundleError(f"artifact {artifact_id} has no chunk {seq}")
        data, codec, raw_size = rows[0]
        return unpack(data, codec, raw_size)

    def artifact_lines(self, artifact: str, start: int, count: int = 1) -> list[str]:
        """Lines ``start``.. (1-based) of an artifact's raw text, to show evidence in context."""
        out: list[str] = []
        lineno = 0
        carry = b""
        for block in self.artifact_bytes(artifact):
            parts = (carry + block).split(b"\n")
            carry = parts.pop()
            for part in parts:
                lineno += 1
                if lineno >= start:
                    out.append(part.decode("utf-8", "replace"))
                    if len(out) >= count:
                        return out
        if carry and lineno + 1 >= start:
            out.append(carry.decode("utf-8", "replace"))
        return out[:count]

    def artifact_host(self, artifact_id: int) -> str | None:
        self._flush_pending()
        return self.con.execute("SELECT host FROM artifact WHERE id = ?", [artifact_id]).fetchall()[0][0]

    def artifacts(self) -> list[dict[str, Any]]:
        self._flush_pending()
        cur = self.con.execute(
            "SELECT id, sha256, collector, kind, host, source, captured_at, size, lines, events, rows, "
            "skipped, info FROM artifact ORDER BY id")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]


def _artifact_params(aid: int, sha: str, size: int, fields: list[Any]) -> list[Any]:
    """An artifact row's INSERT parameters in column order (id, sha256, collector, kind, host, source,
    captured_at, size, info); ``fields`` are collector..captured_at, info."""
    return [aid, sha, *fields[:5], size, fields[5]]
