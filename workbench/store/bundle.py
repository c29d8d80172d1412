"""The incident bundle: one DuckDB file holding raw evidence, normalized rows and seals.

DuckDB allows one writer or many readers per file. Capture and ingest open the bundle for
writing and close it when done; everyone else opens it read-only. A bundle someone else holds
open for writing gets a one-line ``BundleBusy`` message instead of a lock traceback.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import zstandard

from collectors.base import Row, Skipped
from workbench.errors import GpuwbError, signals_deferred
from workbench.store import schema
from workbench.store.row_columns import TABLE_OF, Columns, columns_of, utc_naive

CHUNK_BYTES = 32 << 10
"""Raw bytes are stored in chunks so that a multi-GB log is streamed, never held whole. Small enough
that ROW_GROUP_ROWS of them (64 MiB) fill a row group within one artifact: DuckDB writes a full row
group of an open transaction to disk at once (optimistic writing), so storing a file of any size
holds about one row group in memory (64 KiB chunks: 2 GiB of random bytes peaked at 350 MB, 32 KiB:
250 MB). Bundles written with 4 MiB chunks read the same."""
ROW_GROUP_ROWS = 2048
"""Rows per DuckDB row group in a bundle opened for writing, the smallest DuckDB allows (the default
122,880 rows of raw chunks would never fill, and the whole transaction would stay in memory)."""
STORED_CHUNK_BYTES = 32 << 10
"""What a compressed chunk should hold at least: DuckDB 2.0 keeps BLOBs under ~16 KiB of an open
transaction in memory even once their row group is written, so a log that zstd shrinks 9x is cut into
chunks of a few hundred KiB (raw) instead. Incompressible bytes stay at CHUNK_BYTES. Not more: a
row group needs ROW_GROUP_ROWS chunks to be written (a 64 KiB target: 1 GiB of log, 610 MB RSS)."""
VACUUM_TASKS = 0
"""Row groups a checkpoint may merge: none. Each ingest commit that holds fewer than ROW_GROUP_ROWS chunks
(a folder of small rank logs) leaves a partial row group, and DuckDB's checkpoint vacuum merges runs of
them by reading their BLOBs back into memory, more as the table grows: 512 rank logs of 1 GiB in all
peaked at 380 MB (one checkpoint rewrote most of the chunk table, the one at close again), 2 GiB at 563 MB;
without, the ingest process stays at 200-220 MB from 128 MiB to 2 GiB. A bundle only deletes the few rows
a re-derivation or a duplicate drops: nothing worth reclaiming."""
MAX_CHUNK_BYTES = 1 << 20
STORE_BATCH_BYTES = 4 << 20
"""Raw bytes read and inserted per statement, not a query per chunk."""
STORE_BATCH_CHUNKS = 64
"""Chunks read back per query."""
PENDING_BYTES = 4 << 20
"""Inside a batch, the chunks of small files wait until this many stored bytes (or PENDING_CHUNKS rows)
and go in with their artifact rows in one INSERT each: two statements per file cost ~1.7 ms, more than
hashing and zstd together for a 100 KB rank log."""
PENDING_CHUNKS = 512
VERIFY_SMALL_BYTES = 4 << 20
"""verify reads artifacts up to this size together with others (see VERIFY_GROUP_BYTES)."""
VERIFY_GROUP_BYTES = 64 << 20
"""verify reads the chunks of small artifacts this many bytes at a time, one query for many instead of
two per artifact: a 1,000-node merge holds thousands of small files."""


DIGEST_VERSION = 3
"""How ``seal`` computes the root digest. 1: each artifact's sha256, size, collector, kind, host and source,
the aliases without captured_at, three metadata keys. 2: also captured_at and info, whole alias rows, the
capture log and the capture metadata, with one digest per item kept in the seal row. 3: items per alias row,
per capture's coverage rows of a collector, per metadata key and per merged bundle, and the digest of the
seal before: a chain that a later seal cannot rewrite without the link showing."""

SEALED_META = ("incident_id", "title", "created_at", "captured_on", "capture_started", "since", "complete",
               "merged_from")
"""Metadata keys that say where the evidence came from; ``schema_version`` changes with every migration."""


class BundleError(GpuwbError):
    """A problem with a bundle file that the user can act on; printed as one line."""


class BundleBusy(BundleError):
    """Another process has the bundle open for writing."""


class BundleDamaged(BundleError):
    """The bundle's storage cannot be read as a bundle (a flipped byte, a missing table, a nonsense schema
    version): told in one line that sends the user to ``gpuwb verify``, never as an internal error."""

    def __init__(self, path: Path | str, detail: str) -> None:
        super().__init__(f"bundle {path} is damaged: {detail}; `gpuwb verify {path}` tells what is still intact")


class BundleWriteError(BundleError):
    """The bundle could not be written (a full disk, a file system gone read-only): what was committed before
    is kept, and the message says where. ``reason``: what the file system said."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


def storage_failure(exc: BaseException) -> str | None:
    """``'write'`` when a DuckDB error means the file could not be written, ``'damaged'`` when its stored bytes
    cannot be read back (a block whose checksum fails, a database DuckDB invalidated), else None (a bug)."""
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc)
    lowered = text.lower()
    if isinstance(exc, (duckdb.IOException, duckdb.TransactionException, duckdb.FatalException)) and any(
            word in lowered for word in _WRITE_WORDS):
        return "write"
    if any(word in lowered for word in _DAMAGE_WORDS) or isinstance(
            exc, (duckdb.InternalException, duckdb.FatalException, duckdb.SerializationException)):
        return "damaged"
    return None


_WRITE_WORDS = ("could not write", "no space left", "disk quota", "read-only file system", "failed to commit",
                "checkpoint failed", "could not truncate", "could not fsync", "could not create")
_DAMAGE_WORDS = ("corrupt", "checksum", "could not read", "invalidated", "failed to deserialize",
                 "not enough data")


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def now_utc() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    try:
        if read_only:
            return duckdb.connect(str(path), read_only=True)
        return _connect_writable(path)
    except duckdb.IOException as exc:
        text = str(exc)
        if "lock" in text.lower():
            holder = ""
            if "PID" in text:
                holder = " (" + text[text.index("PID"):].split(")")[0].rstrip(".") + ")"
            raise BundleBusy(f"bundle {path} is busy: another gpuwb process has it open for writing{holder}; "
                             "try again when it finishes") from None
        if "not a valid DuckDB database file" in text:
            raise BundleError(f"{path} is not a gpuwb bundle (not a DuckDB database file)") from None
        failure = storage_failure(exc)
        if failure == "write":
            raise BundleWriteError(f"cannot open bundle {path} for writing: {first_line(exc)}",
                                   reason=first_line(exc)) from None
        if failure == "damaged":
            raise BundleDamaged(path, first_line(exc)) from None
        raise BundleError(f"cannot open bundle {path}: {first_line(exc)}") from None
    except duckdb.Error as exc:
        if storage_failure(exc) == "damaged":
            raise BundleDamaged(path, first_line(exc)) from None
        raise BundleError(f"{path} is not a gpuwb bundle: {first_line(exc)}") from None


def _checked_version(path: Path, con: duckdb.DuckDBPyConnection) -> int:
    """The bundle's schema version once it is known to be one this gpuwb can open, with every table there."""
    try:
        version = schema.current_version(con)
    except ValueError:
        raise BundleError(f"{path} is not a gpuwb bundle (its schema_version is not a number)") from None
    except duckdb.CatalogException as exc:
        raise BundleError(f"{path} is not a gpuwb bundle: {first_line(exc)}") from None
    if version == 0:
        raise BundleError(f"{path} is not a gpuwb bundle (no meta table)")
    if version < 0:
        raise BundleDamaged(path, f"its schema_version is {version} (a bundle's is 1 to {schema.SCHEMA_VERSION})")
    if version > schema.SCHEMA_VERSION:
        raise BundleError(f"{path} was written by a newer gpuwb (bundle schema {version}, this gpuwb reads up "
                          f"to {schema.SCHEMA_VERSION}); upgrade gpuwb to open it")
    missing = schema.missing_tables(con, version)
    if missing:
        raise BundleDamaged(path, f"{'table' if len(missing) == 1 else 'tables'} {', '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} missing")
    return version


def _checkpoint(path: Path, con: duckdb.DuckDBPyConnection) -> None:
    """Write every commit into the bundle file itself; a failure is a one-line error saying what is kept."""
    try:
        con.execute("CHECKPOINT")
    except duckdb.Error as exc:
        if storage_failure(exc) is None:
            raise
        raise BundleWriteError(
            f"bundle {path} could not be written ({first_line(exc)}): what it held before is kept, and what was "
            f"committed since is only in {path}.wal; keep that file beside the bundle (the next gpuwb command "
            f"replays it) and free space before writing to it again", reason=first_line(exc)) from None


def remove_files(path: Path) -> None:
    """A bundle and its write-ahead log, gone (one this run created and could not finish)."""
    path.unlink(missing_ok=True)
    Path(f"{path}.wal").unlink(missing_ok=True)


def _connect_writable(path: Path) -> duckdb.DuckDBPyConnection:
    """The bundle attached with small row groups (ROW_GROUP_ROWS) that are flushed one at a time: the
    only way to give ATTACH's ROW_GROUP_SIZE, which is not a connect option. Memory then stays flat
    however big the artifact (see CHUNK_BYTES)."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH ? AS bundle (ROW_GROUP_SIZE {ROW_GROUP_ROWS})", [str(path)])
        con.execute("USE bundle")
        con.execute("SET write_buffer_row_group_count = 1")
        con.execute(f"SET max_vacuum_tasks = {VACUUM_TASKS}")
    except BaseException:
        con.close()
        raise
    return con


OPEN_MARKER = "ingest_open"
"""meta key an ingest writes with its first commit and clears with its seal (see :meth:`Bundle.mark_open`)."""


class Bundle:
    """A handle on one bundle file. Use as a context manager so the lock is released."""

    def __init__(self, path: Path, con: duckdb.DuckDBPyConnection, writable: bool) -> None:
        self.path = path
        self.con = con
        self.writable = writable
        self._next_event_id: int | None = None
        self._next_artifact_id: int | None = None
        """known only inside a batch, which no other writer shares: one query fewer per stored file"""
        self._artifact_ids: dict[str, int] | None = None
        """sha256 -> id of the stored artifacts, inside a batch: the duplicate check without a query per file"""
        self._in_batch = False
        self._pending_chunks: list[Any] = []
        """chunk rows (flattened INSERT parameters) of small artifacts not inserted yet, inside a batch"""
        self._pending_artifacts: list[Any] = []
        """their artifact rows, likewise"""
        self._pending_bytes = 0
        self._in_transaction = False
        self._checked = False
        """:meth:`take_over` has run on this handle, or it made the bundle: what it holds since is this process' own
        (the write lock keeps other writers out), so there is nothing more to check"""
        self._open_marker: str | None = None
        """the "ingest open" marker to write with the first batch (see :meth:`mark_open`)"""

    # -- opening ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike[str], *, title: str = "", incident_id: str | None = None,
               meta: dict[str, str] | None = None) -> Bundle:
        path = Path(path)
        if path.exists():
            raise BundleError(f"{path} already exists")
        if not path.parent.is_dir():
            raise BundleError(f"cannot create bundle {path}: folder {path.parent} does not exist")
        try:
            con = _connect(path, read_only=False)
        except BundleWriteError:
            remove_files(path)
            raise
        try:
            schema.migrate(con)
            values = {"incident_id": incident_id or uuid.uuid4().hex[:12], "title": title,
                      "created_at": now_utc().isoformat(timespec="seconds"), "tool": "gpuwb " + _version()}
            values.update(meta or {})
            for key, value in values.items():
                con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
        except duckdb.Error as exc:  # a full disk: no half-made bundle is left behind
            con.close()
            remove_files(path)
            if storage_failure(exc) == "write":
                raise BundleWriteError(f"cannot create bundle {path}: {first_line(exc)}",
                                       reason=first_line(exc)) from None
            raise
        bundle = cls(path, con, writable=True)
        bundle._checked = True
        return bundle

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, write: bool = False) -> Bundle:
        path = Path(path)
        if not path.exists():
            raise BundleError(f"no such bundle: {path}")
        con = _connect(path, read_only=not write)
        try:
            version = _checked_version(path, con)
            if version < schema.SCHEMA_VERSION:
                if not write:
                    con.close()
                    con = _connect(path, read_only=False)
                    schema.migrate(con)
                    _checkpoint(path, con)
                    con.close()
                    con = _connect(path, read_only=True)
                else:
                    schema.migrate(con)
        except duckdb.Error as exc:
            con.close()
            if storage_failure(exc) == "damaged":
                raise BundleDamaged(path, first_line(exc)) from None
            raise
        except BaseException:
            con.close()
            raise
        return cls(path, con, writable=write)

    @classmethod
    def open_or_create(cls, path: str | os.PathLike[str], **kwargs: Any) -> Bundle:
        if Path(path).exists():
            return cls.open(path, write=True)
        return cls.create(path, **kwargs)

    def close(self) -> None:
        """Release the file. A writable bundle is checkpointed first, and a checkpoint that fails (a full disk)
        is an error, not a silent close: DuckDB would leave the last commits in ``BUNDLE.wal`` alone, so a copy
        of the bundle file would lack them and still verify. What was committed stays in the ``.wal`` file,
        which the next open replays."""
        if self.con is None:
            return
        con, self.con = self.con, None  # type: ignore[assignment]
        try:
            if self.writable:
                self._drop_pending()
                if self._in_batch:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                with signals_deferred():  # what was committed goes into the file whole, whatever signal comes
                    _checkpoint(self.path, con)
        finally:
            con.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if isinstance(exc, BundleWriteError):  # already told; the checkpoint would fail the same way
            with contextlib.suppress(BundleError):
                self.close()
            return
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction around the block, rolled back when it raises; inside another one, part of that."""
        if self._in_transaction:
            yield
            return
        self._in_transaction = True  # before BEGIN: an interrupt between the two still rolls back
        try:
            self.con.execute("BEGIN")
            yield
            self.con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # none open when BEGIN or COMMIT itself failed
                self.con.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False

    # -- metadata --------------------------------------------------------------------------
    def meta(self) -> dict[str, str]:
        return dict(self.con.execute("SELECT key, value FROM meta").fetchall())

    def set_meta(self, key: str, value: str) -> None:
        """Incident metadata (title, window, status); not evidence, but part of the root digest."""
        self.con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])

    # -- artifacts -------------------------------------------------------------------------
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
        step = CHUNK_BYTES
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
        params, _, _ = _chunk_params(aid, 0, block, CHUNK_BYTES)
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
        params, seq, step = _chunk_params(artifact_id, first_seq, block, step)
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
                yield _unpack(data, codec, raw_size)

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
        return _unpack(data, codec, raw_size)

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

    # -- rows ------------------------------------------------------------------------------
    def writer(self, artifact_sha: str | None) -> RowWriter:
        return RowWriter(self, artifact_sha)

    def next_event_id(self, count: int) -> int:
        if self._next_event_id is None:
            self._next_event_id = self.con.execute("SELECT coalesce(max(id), 0) + 1 FROM event").fetchall()[0][0]
        first = self._next_event_id
        self._next_event_id += count
        return first

    def record_capture(self, collector: str, *, host: str | None, status: str, reason: str = "",
                       started_at: datetime | None = None, duration_s: float = 0.0, artifacts: int = 0,
                       detail: dict[str, Any] | None = None) -> None:
        self.con.execute("INSERT INTO capture_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         [collector, host, status, reason, utc_naive(started_at), duration_s, artifacts,
                          json.dumps(detail or {}, default=str)])

    def coverage(self) -> list[dict[str, Any]]:
        cur = self.con.execute("SELECT collector, host, status, reason, duration_s, artifacts "
                               "FROM capture_log ORDER BY started_at, collector")
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    # -- responder journal (append-only) ---------------------------------------------------
    def append_journal(self, *, author: str, kind: str, target: str, body: dict[str, Any],
                       at: datetime | None = None) -> int:
        """``at`` (default now) lets imports and tests record when the work was really done."""
        jid = self.con.execute("SELECT coalesce(max(id), 0) + 1 FROM journal").fetchall()[0][0]
        self.con.execute("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)",
                         [jid, utc_naive(at) or now_utc(), author, kind, target, json.dumps(body, default=str)])
        return jid

    # -- sealing and verification ----------------------------------------------------------
    def root_digest(self, version: int | None = None) -> str:
        """sha256 over the incident metadata and every artifact's hash, size and provenance, computed the
        way digest ``version`` does (default: the way the last seal was, or the current way). From version 3
        on it covers the seal before too, as the last seal did: an unchanged bundle's digest is its last seal's."""
        self._flush_pending()
        seal = self.last_seal()
        if version is None:
            version = seal["digest_version"] if seal else DIGEST_VERSION
        if version == 1:
            return self._root_digest_v1()
        items = self.provenance_items(version)
        if version == 2:
            return _digest(items)
        return _chained(items, seal["previous"] if seal else None)

    def _root_digest_v1(self) -> str:
        """The first seal's digest: artifacts without captured_at and info, aliases without captured_at,
        no capture log. Kept so that bundles sealed with it still verify as intact."""
        meta = {k: v for k, v in self.meta().items() if k in ("incident_id", "title", "created_at")}
        rows = self.con.execute(
            "SELECT sha256, size, collector, kind, host, source FROM artifact ORDER BY sha256").fetchall()
        aliases = self.con.execute(
            "SELECT sha256, collector, kind, host, source FROM artifact_alias "
            "ORDER BY sha256, host NULLS FIRST, source").fetchall()
        doc = {"meta": meta, "artifacts": [list(r) for r in rows]}
        if aliases:
            doc["aliases"] = [list(r) for r in aliases]
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def provenance_items(self, version: int = DIGEST_VERSION) -> dict[str, str]:
        """One digest per sealed item, keyed so that a change can be named: ``artifact:SHA`` (hash, size,
        collector, kind, host, source, captured_at, info), ``alias:SHA@HOST`` (that host's alias row),
        ``capture_log:COLLECTOR@HOST@STARTED`` (one capture's coverage rows of that collector), ``meta:KEY``
        (each provenance key) and ``merged_from:N`` (each bundle a merge took in). Version 3 keys each row that
        a later run may add on its own, so that an append-only bundle keeps every item of one seal unchanged in
        the next; version 2 grouped a sha256's aliases, a collector's coverage rows and the metadata."""
        self._flush_pending()
        items: dict[str, str] = {}
        for row in self.con.execute("SELECT sha256, size, collector, kind, host, source, captured_at, info "
                                    "FROM artifact").fetchall():
            items[f"artifact:{row[0]}"] = _digest(list(row))
        grouped: dict[str, list[str]] = {}
        for row in self.con.execute("SELECT sha256, collector, kind, host, source, captured_at, info "
                                    "FROM artifact_alias").fetchall():
            key = f"alias:{row[0]}" if version <= 2 else f"alias:{row[0]}@{row[3] or '-'}"
            grouped.setdefault(key, []).append(_canonical(list(row)))
        for row in self.con.execute("SELECT collector, host, status, reason, started_at, duration_s, artifacts, "
                                    "detail FROM capture_log").fetchall():
            key = f"capture_log:{row[0]}@{row[1] or '-'}" + ("" if version <= 2 else f"@{row[4] or '-'}")
            grouped.setdefault(key, []).append(_canonical(list(row)))
        items.update({key: _digest(sorted(rows)) for key, rows in grouped.items()})
        meta = {k: v for k, v in self.meta().items() if k in SEALED_META}
        if version <= 2:
            items["meta"] = _digest(meta)
        else:
            items.update(_meta_items(meta))
        return items

    def seal(self, *, complete: bool = True, note: dict[str, Any] | None = None) -> str:
        """Append a seal over the bundle as it is now, chained to the seal before, and clear the "ingest open"
        marker (the run that wrote it is sealed). ``note`` says why a seal was made (see schema version 3)."""
        self._flush_pending()
        items = self.provenance_items()
        last = self.last_seal()
        previous = last["root_digest"] if last else None
        digest = _chained(items, previous)
        count = self.con.execute("SELECT count(*) FROM artifact").fetchall()[0][0]
        self.con.execute(
            "INSERT INTO seal (seq, sealed_at, root_digest, artifacts, complete, digest_version, items, previous, "
            "note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(last["seq"] if last else 0) + 1, now_utc(), digest, count, complete, DIGEST_VERSION,
             json.dumps(items, sort_keys=True), previous, json.dumps(note, default=str) if note else None])
        self.con.execute("DELETE FROM meta WHERE key = ?", [OPEN_MARKER])  # after the seal: a kill between leaves
        return digest  # a marker with nothing unsealed, which verify and the next ingest ignore

    def last_seal(self) -> dict[str, Any] | None:
        rows = self.con.execute(f"SELECT {', '.join(_SEAL_COLUMNS)} FROM seal ORDER BY seq DESC LIMIT 1").fetchall()
        return dict(zip(_SEAL_COLUMNS, rows[0])) if rows else None

    def seals(self) -> list[dict[str, Any]]:
        """Every seal, oldest first, with its items (a dict; None for version 1, which kept none)."""
        cur = self.con.execute(f"SELECT {', '.join(_SEAL_COLUMNS)}, items FROM seal ORDER BY seq")
        out = []
        for row in cur.fetchall():
            seal = dict(zip((*_SEAL_COLUMNS, "items"), row))
            seal["items"] = _loaded_items(seal["items"])
            out.append(seal)
        return out

    def seal_state(self) -> SealState:
        """How the bundle now compares with its last seal, cheaply (no bytes re-read): what an ingest checks
        before it adds anything, so that its seal never absorbs a change made after the last one."""
        self._flush_pending()
        seal = self.last_seal()
        marker = self.open_marker()
        state = SealState(seal=seal, marker=marker)
        if seal is None:  # nothing sealed to compare with; what is there is an interrupted ingest's if marked
            if marker is not None:
                state.unsealed = [k for k in self.provenance_items() if k.startswith("artifact:")]
            return state
        if seal["digest_version"] == 1:
            if self._root_digest_v1() != seal["root_digest"]:
                state.changed = ["*"]
            return state
        stored = self.con.execute("SELECT items FROM seal WHERE seq = ?", [seal["seq"]]).fetchall()[0][0]
        sealed = _loaded_items(stored) or {}
        current = self.provenance_items(seal["digest_version"])
        for key in sorted(set(sealed) | set(current)):
            if key not in current:
                state.removed.append(key)
            elif key not in sealed:
                (state.unsealed if marker is not None else state.added).append(key)
            elif sealed[key] != current[key]:
                state.changed.append(key)
        return state

    def _artifacts_with_bytes(self, arts: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Iterator[bytes]]]:
        """Each artifact, in order, with its bytes chunk by chunk: runs of small ones (a single chunk)
        are read VERIFY_GROUP_BYTES at a time in one query, bigger ones chunk by chunk."""
        for group in _verify_groups(arts):
            yield from self._group_bytes(group)

    def _group_bytes(self, group: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Iterator[bytes]]]:
        if len(group) == 1 and (group[0]["size"] or 0) > VERIFY_SMALL_BYTES:
            yield group[0], self.artifact_bytes(group[0]["id"])
        else:
            yield from self._small_artifacts_with_bytes(group)

    def _small_artifacts_with_bytes(self, arts: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any],
                                                                                     Iterator[bytes]]]:
        if not arts:
            return
        stored: dict[int, list[tuple[bytes, str | None, int]]] = {}
        for aid, data, codec, raw_size in self.con.execute(
                "SELECT artifact_id, data, codec, raw_size FROM artifact_chunk "
                "WHERE artifact_id IN (SELECT unnest(?::BIGINT[])) ORDER BY artifact_id, seq",
                [[a["id"] for a in arts]]).fetchall():
            stored.setdefault(aid, []).append((data, codec, raw_size))
        for art in arts:
            yield art, (_unpack(data, codec, raw_size) for data, codec, raw_size in stored.get(art["id"], []))

    def verify(self) -> list[str]:
        """Re-hash every artifact, check every seal and the root digest. Returns one line per problem; empty
        when intact (an interrupted ingest's unsealed artifacts are no problem: see :meth:`verification`)."""
        return self.verification().problems

    def verification(self) -> Verification:
        """Everything verify checks: every table read in full (a damaged block is named, not hit later by
        another command), every artifact re-hashed, every seal's digest and its link to the one before
        (evidence is append-only: what one seal covered, the next covers unchanged), and the bundle now
        against its last seal. Artifacts an ingest stored after the last seal, while its "ingest open"
        marker is still there, are an interrupted ingest's, told apart from tampering."""
        result = Verification()
        scan = _StorageScan(self.con)
        scan.start()
        try:
            arts = self.artifacts()
            result.artifacts = len(arts)
            self._rehash(arts, result)
            seals = self.seals()
            result.seal = seals[-1] if seals else None
            result.altered += _chain_problems(seals, {a["sha256"]: a for a in arts})
            self._last_seal_problems(result, arts)
        except duckdb.Error as exc:
            if storage_failure(exc) is None:
                raise
            result.damaged.append(f"storage damaged: {first_line(exc)}")
        finally:
            result.damaged[:0] = scan.join()
        return result

    def _rehash(self, arts: list[dict[str, Any]], result: Verification) -> None:
        """Each artifact's bytes against its sha256 and size, many small ones per query; when a query hits a
        damaged block, its artifacts are read again one by one to name those whose bytes cannot be read."""
        for group in _verify_groups(arts):
            done = 0
            try:
                for art, blocks in self._group_bytes(group):
                    _rehashed(art, blocks, result)
                    done += 1
            except duckdb.Error as exc:
                if storage_failure(exc) is None:
                    raise
                for art in group[done:]:
                    try:
                        _rehashed(art, self.artifact_bytes(art["id"]), result)
                    except duckdb.Error as one:
                        if storage_failure(one) is None:
                            raise
                        result.damaged.append(f"storage damaged: the bytes of artifact {_named(art)} cannot be "
                                              f"read ({first_line(one)})")

    def _last_seal_problems(self, result: Verification, arts: list[dict[str, Any]]) -> None:
        state = self.seal_state()
        if state.marker is not None and state.unsealed:
            result.interrupted = _interrupted_line(state)
        seal = state.seal
        if seal is None:
            result.never_sealed = True
            return
        lines = self.changes_since_seal(state, arts)
        if lines or state.changed == ["*"]:
            result.altered += lines
            now = self.root_digest(seal["digest_version"])
            result.altered.append(f"root digest mismatch: sealed {seal['root_digest']}, now {now} "
                                  "(artifacts or incident metadata changed after sealing)")

    def changes_since_seal(self, state: SealState, arts: list[dict[str, Any]] | None = None) -> list[str]:
        """One line per item that differs from the last seal (an interrupted ingest's additions excepted)."""
        if state.changed == ["*"]:  # a version-1 seal: one digest, nothing to name
            return []
        named = {a["sha256"]: a for a in (self.artifacts() if arts is None else arts)}
        return [_item_line(key, change, named, "after sealing") for keys, change in (
            (state.changed, "changed"), (state.removed, "removed"), (state.added, "added")) for key in keys]

    def take_over(self, notice: Callable[[str], None], derive: Callable[[Bundle], object]) -> None:
        """What a writer (ingest, merge --into) does before it adds anything. A bundle that differs from its
        last seal is refused: sealing now would vouch for a change nobody here made. Artifacts an ingest that
        did not finish left unsealed (its marker is there: kill -9, a power cut, a full disk) are sealed first,
        by a seal of their own marked incomplete and naming that ingest, after ``derive`` (the ingest stage's
        derivations: the store does not know them) completed their rows; ``notice`` says so in one line."""
        if self._checked:
            return
        state = self.seal_state()
        if state.altered:
            lines = self.changes_since_seal(state) or ["artifacts or incident metadata changed after sealing"]
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            raise BundleError(f"bundle {self.path} differs from its last seal: {lines[0]}{more}; refusing to seal "
                              f"over a change this run did not make (`gpuwb verify {self.path}` names each)")
        self._checked = True
        if state.marker is None:
            return
        if not state.unsealed:
            self.clear_open_marker()
            return
        count = state.unsealed_artifacts()
        marker = state.marker
        notice(f"gpuwb: sealing {count} artifact{'s' if count != 1 else ''} that an interrupted ingest (pid "
               f"{marker.get('pid', '?')}, started at {marker.get('started_at', '?')}) stored "
               + ("after the last seal" if state.seal else "and never sealed")
               + "; the seal is marked incomplete and names that ingest")
        with self.transaction():
            derive(self)
            self.seal(complete=False, note={"sealed_for": "interrupted ingest", "ingest": marker,
                                            "artifacts": count})

_SEAL_COLUMNS = ("seq", "sealed_at", "root_digest", "artifacts", "complete", "digest_version", "previous", "note")


@dataclass
class SealState:
    """The bundle against its last seal: item keys changed, removed, added by someone, and added by an ingest
    that has not sealed yet (its "ingest open" marker is there). ``changed == ['*']``: a version-1 seal, whose
    single digest differs."""

    seal: dict[str, Any] | None
    marker: dict[str, Any] | None
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    unsealed: list[str] = field(default_factory=list)

    @property
    def altered(self) -> bool:
        return bool(self.changed or self.removed or self.added)

    def unsealed_artifacts(self) -> int:
        return sum(key.startswith("artifact:") for key in self.unsealed)


@dataclass
class Verification:
    """What verify found. ``problems`` fail it; an interrupted ingest's unsealed artifacts (``interrupted``,
    one line) do not, since nothing sealed was touched."""

    damaged: list[str] = field(default_factory=list)
    altered: list[str] = field(default_factory=list)
    interrupted: str | None = None
    never_sealed: bool = False
    seal: dict[str, Any] | None = None
    artifacts: int = 0

    @property
    def problems(self) -> list[str]:
        return self.damaged + self.altered + (["bundle was never sealed"] if self.never_sealed else [])


class _StorageScan(threading.Thread):
    """Reads every column of every table (the artifact bytes excepted: the re-hash reads those) on its own
    cursor, while verify re-hashes: DuckDB checks each block's checksum as it loads it, so a damaged block is
    found and its table named, at little cost in time (both run at once)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__(name="gpuwb-verify-scan", daemon=True)
        self.database = con.execute("SELECT current_database()").fetchall()[0][0]
        self.cursor = con.cursor()
        self.problems: list[str] = []

    def run(self) -> None:
        try:
            self.cursor.execute(f"USE {_quoted(self.database)}")  # a writable bundle is attached, not the default
            columns: dict[str, list[str]] = {}
            for table, column in self.cursor.execute(
                    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main' "
                    "AND table_catalog = current_database() ORDER BY table_name, ordinal_position").fetchall():
                if (table, column) != ("artifact_chunk", "data"):
                    columns.setdefault(table, []).append(column)
            for table, names in columns.items():
                try:  # count(column) loads each of its blocks: a checksum that fails raises here
                    self.cursor.execute(f"SELECT count(*), {', '.join(f'count({_quoted(c)})' for c in names)} "
                                        f"FROM {_quoted(table)}").fetchall()
                except duckdb.Error as exc:
                    if storage_failure(exc) is None:
                        raise
                    self.problems.append(f"storage damaged: table {table} cannot be read in full ({first_line(exc)})")
        except duckdb.Error as exc:
            if storage_failure(exc) is None:
                raise
            self.problems.append(f"storage damaged: {first_line(exc)}")
        finally:
            self.cursor.close()

    def join(self, timeout: float | None = None) -> list[str]:  # type: ignore[override]
        super().join(timeout)
        return self.problems


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _verify_groups(arts: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of small artifacts up to VERIFY_GROUP_BYTES, read in one query; a big one alone, chunk by chunk."""
    group: list[dict[str, Any]] = []
    size = 0
    for art in arts:
        if (art["size"] or 0) > VERIFY_SMALL_BYTES:
            if group:
                yield group
                group, size = [], 0
            yield [art]
            continue
        group.append(art)
        size += art["size"] or 0
        if size >= VERIFY_GROUP_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _rehashed(art: dict[str, Any], blocks: Iterator[bytes], result: Verification) -> None:
    digest = hashlib.sha256()
    size = 0
    try:
        for block in blocks:
            digest.update(block)
            size += len(block)
    except (OSError, ValueError, BundleError) as exc:
        result.altered.append(f"artifact altered: {_named(art)}: stored chunk no longer expands ({exc})")
        return
    if digest.hexdigest() != art["sha256"] or size != art["size"]:
        result.altered.append(f"artifact altered: {_named(art)}: now sha256 {digest.hexdigest()}, {size} bytes")


def _chain_problems(seals: list[dict[str, Any]], arts: dict[str, dict[str, Any]]) -> list[str]:
    """Each seal's own digest, and each link: what seal k covered, seal k+1 must cover unchanged (only additions
    are legitimate: evidence is append-only, a merge's ``merged_from`` grows by new entries). Links into or out of
    a version-2 seal compare the artifacts only, whose items kept their form; version-1 seals kept no items."""
    lines: list[str] = []
    before: dict[str, Any] | None = None
    for seal in seals:
        items = seal["items"]
        version = seal["digest_version"] or 1
        label = f"seal {seal['seq']} (sealed at {seal['sealed_at']})"
        if version >= 3:
            expected = before["root_digest"] if before else None
            if seal["previous"] != expected:
                lines.append(f"seal chain broken: {label} does not follow "
                             + (f"seal {before['seq']}" if before else "from nothing")
                             + " (a seal was removed, added or rewritten)")
            if items is None or _chained(items, seal["previous"]) != seal["root_digest"]:
                lines.append(f"seal altered: {label}: its items no longer hash to its root digest")
        elif version == 2 and (items is None or _digest(items) != seal["root_digest"]):
            lines.append(f"seal altered: {label}: its items no longer hash to its root digest")
        if before is not None and before["items"] is not None and items is not None:
            whole = (before["digest_version"] or 1) >= 3 and version >= 3
            when = f"between seal {before['seq']} and seal {seal['seq']}, which absorbed the change"
            for key, digest in sorted(before["items"].items()):
                if not whole and not key.startswith("artifact:"):
                    continue
                if key not in items:
                    lines.append(_item_line(key, "removed", arts, when))
                elif items[key] != digest:
                    lines.append(_item_line(key, "changed", arts, when))
        before = seal
    return lines


def _item_line(key: str, change: str, arts: dict[str, dict[str, Any]], when: str) -> str:
    """One sealed item that differs, as a line naming it."""
    what, _, name = key.partition(":")
    change = f"{change} {when}"
    if what == "artifact":
        return (f"artifact provenance altered: {_named(arts[name]) if name in arts else name}: "
                f"collector, kind, host, source, captured_at or info {change}")
    if what == "alias":
        sha, _, host = name.partition("@")
        rows = f"its other-host (alias) row for host {host}" if host else "its other-host (alias) rows"
        return f"artifact provenance altered: {_named(arts[sha]) if sha in arts else sha}: {rows} {change}"
    if what == "capture_log":
        collector, _, rest = name.partition("@")
        host, _, started = rest.partition("@")
        return (f"capture log altered: coverage rows of {collector}@{host}"
                + (f" (capture of {started})" if started else "") + f" {change}")
    if what == "meta":
        return f"incident metadata altered: {name} {change}"
    if what == "merged_from":
        return f"incident metadata altered: merged_from entry {name} (a bundle the merge took in) {change}"
    return f"incident metadata altered: {', '.join(SEALED_META)} {change}"


def _interrupted_line(state: SealState) -> str:
    marker = state.marker or {}
    count = state.unsealed_artifacts()
    others = len(state.unsealed) - count
    where = "after the last seal" if state.seal else "before the bundle was first sealed"
    return (f"ingest interrupted: {count} artifact{'s' if count != 1 else ''}"
            + (f" and {others} other provenance row{'s' if others != 1 else ''}" if others else "")
            + f" stored {where} by an ingest that did not finish (pid {marker.get('pid', '?')}"
            + (f" on {marker['host']}" if marker.get("host") else "")
            + f", started at {marker.get('started_at', '?')}); not sealed yet: the next `gpuwb ingest` seals them")


def _loaded_items(stored: str | None) -> dict[str, str] | None:
    if not stored:
        return None
    try:
        items = json.loads(stored)
    except ValueError:
        return {}
    return items if isinstance(items, dict) else {}


def _meta_items(meta: dict[str, str]) -> dict[str, str]:
    """The provenance keys one item each; ``merged_from`` one item per bundle taken in, so that ``merge --into``
    adding bundles is an addition, not a change."""
    items = {f"meta:{key}": _digest(value) for key, value in meta.items() if key != "merged_from"}
    if "merged_from" in meta:
        try:
            sources = json.loads(meta["merged_from"])
        except ValueError:
            sources = None
        if isinstance(sources, list):
            items.update({f"merged_from:{n}": _digest(source) for n, source in enumerate(sources)})
        else:
            items["meta:merged_from"] = _digest(meta["merged_from"])
    return items


def _chained(items: dict[str, str], previous: str | None) -> str:
    """A version-3 root digest: the items and the digest of the seal before (None for the first)."""
    return _digest({"items": items, "previous": previous})




def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def _named(art: dict[str, Any]) -> str:
    return f"{art['sha256']} ({art['kind']} {art['source']}, host {art['host'] or '-'})"


def _artifact_params(aid: int, sha: str, size: int, fields: list[Any]) -> list[Any]:
    """An artifact row's INSERT parameters in column order (id, sha256, collector, kind, host, source,
    captured_at, size, info); ``fields`` are collector..captured_at, info."""
    return [aid, sha, *fields[:5], size, fields[5]]


def _chunk_params(artifact_id: int, first_seq: int, block: bytes, step: int) -> tuple[list[Any], int, int]:
    """``block`` as chunk rows from seq ``first_seq`` on: the first chunk holds ``step`` raw bytes, and how
    well each compressed sizes the next (see STORED_CHUNK_BYTES). Returns the flattened rows, the next seq
    and the next chunk's size."""
    params: list[Any] = []
    seq = first_seq
    at = 0
    while at < len(block):
        part = block[at:at + step]
        stored, codec = _pack(part)
        params += [artifact_id, seq, stored, codec, len(part)]
        seq += 1
        at += len(part)
        step = _next_chunk_bytes(len(part), len(stored))
    return params, seq, step


def _next_chunk_bytes(raw: int, stored: int) -> int:
    """Raw bytes for the next chunk so that it stores about STORED_CHUNK_BYTES, in CHUNK_BYTES steps;
    CHUNK_BYTES after one that was kept as it was."""
    if stored >= raw:
        return CHUNK_BYTES
    wanted = raw * STORED_CHUNK_BYTES // max(stored, 1)
    steps = -(-wanted // CHUNK_BYTES)
    return min(MAX_CHUNK_BYTES, max(CHUNK_BYTES, steps * CHUNK_BYTES))


def _pack(block: bytes) -> tuple[bytes, str | None]:
    """zstd at ~800 MB/s shrinks logs ~9x, so a 1 GB log costs DuckDB a ninth of the memory and
    time; blocks that do not shrink are kept as they are. Level 1, as pyarrow's zstd wrote before:
    the frames are the same format either way, and the python-zstandard module costs ~3 MB of RSS
    where importing pyarrow cost ~40."""
    if len(block) < 512:
        return block, None
    packed = _zstd()[0].compress(block)
    return (packed, "zstd") if len(packed) < len(block) else (block, None)


def _unpack(data: bytes, codec: str | None, raw_size: int) -> bytes:
    if codec is None:
        return data
    if codec != "zstd":
        raise BundleError(f"unknown chunk codec {codec!r} (a damaged bundle?)")
    try:
        out = _zstd()[1].decompress(data, max_output_size=raw_size)
    except zstandard.ZstdError as exc:
        raise BundleError(f"a stored chunk does not expand: {exc} (a damaged bundle?)") from exc
    if len(out) != raw_size:
        raise BundleError("a stored chunk expands to the wrong size (a damaged bundle?)")
    return out


@functools.cache
def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    return zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()


class RowWriter:
    """Buffers parsed rows per table and appends them as DuckDB list parameters (bounded memory).

    One writer can serve many artifacts (``start`` names the current one): a folder of 512 small
    rank logs then costs a few batched inserts instead of three per file. No Arrow here: pyarrow's
    first ``pa.array`` imports pandas (~90 MB of RSS, ~0.5 s), and list parameters in slices insert
    a 200 MB metrics CSV (5 million points) as fast as Arrow batches did, at 371 MB peak RSS instead of 1,360."""

    BATCH = 10_000
    """Rows buffered before they go in, so what the writer holds does not grow with the input."""
    LIST_SLICE = 4096
    """List parameters go in this many rows per statement: DuckDB converts each parameter value to its own
    object first, ~3 KB a row, so 35,000 kernel events in one statement cost 100 MB of RSS at once. (numpy
    object arrays registered as a table insert ~9x faster, but DuckDB keeps every Python string of the open
    transaction alive: a 50 MB metrics CSV peaked at 428 MB instead of 179.)"""

    def __init__(self, bundle: Bundle, artifact_sha: str | None) -> None:
        self.bundle = bundle
        self.pending: dict[str, list[_Segment]] = {}
        """per table, in order: runs of rows added one by one, and columns prepared by the parse worker"""
        self._buffered = 0
        self.start(artifact_sha)

    def start(self, artifact_sha: str | None) -> None:
        """Rows added from now on come from this artifact; the per-artifact counts restart."""
        self.artifact = artifact_sha
        self.counts: dict[str, int] = {}
        self.skipped = 0
        self.skip_reasons: dict[str, int] = {}

    def add(self, row: Row) -> None:
        if isinstance(row, Skipped):
            self.skip(row.reason)
            return
        table = TABLE_OF[type(row)]
        segments = self.pending.setdefault(table, [])
        if not segments or segments[-1][0] is not None:
            segments.append((None, [], []))
        segments[-1][1].append(row)
        segments[-1][2].append(self.artifact)
        self._count(table, 1)

    def add_all(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.add(row)

    def add_prepared(self, tables: list[tuple[str, Columns, int]], skips: list[str]) -> None:
        """Rows already in columns (workbench/store/row_columns.py ``prepared``), as if added one by one."""
        for reason in skips:
            self.skip(reason)
        for table, columns, count in tables:
            self.pending.setdefault(table, []).append((columns, [], [self.artifact] * count))
            self._count(table, count)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + 1

    def _count(self, table: str, count: int) -> None:
        self.counts[table] = self.counts.get(table, 0) + count
        self._buffered += count
        if self._buffered >= self.BATCH:
            self.flush()

    def discard(self) -> None:
        """Forget the rows not written yet (their group is being rolled back)."""
        self.pending = {}
        self._buffered = 0

    def flush(self) -> None:
        for table, segments in self.pending.items():
            columns: Columns = {}
            artifacts: list[str | None] = []
            for prepared_columns, rows, shas in segments:
                for name, values in (prepared_columns or columns_of(rows)).items():
                    columns.setdefault(name, []).extend(values)
                artifacts += shas
            if artifacts:
                self._insert(table, columns, artifacts)
        self.pending = {}
        self._buffered = 0

    def _insert(self, table: str, columns: Columns, artifacts: list[str | None]) -> None:
        if table == "event":
            first = self.bundle.next_event_id(len(artifacts))
            columns["id"] = list(range(first, first + len(artifacts)))
        columns["artifact"] = artifacts
        cols = ", ".join(f'"{c}"' for c in columns)
        unnested = ", ".join(f'unnest(?) AS "{c}"' for c in columns)
        for at in range(0, len(artifacts), self.LIST_SLICE):
            self.bundle.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM (SELECT {unnested})",
                                    [values[at:at + self.LIST_SLICE] for values in columns.values()])


_Segment = tuple["Columns | None", list[Row], list["str | None"]]


def _version() -> str:
    from workbench import __version__

    return __version__
