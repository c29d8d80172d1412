"""The incident bundle: one DuckDB file holding raw evidence, normalized rows and seals.

DuckDB allows one writer or many readers per file. Capture and ingest open the bundle for
writing and close it when done; everyone else opens it read-only. A bundle someone else holds
open for writing gets a one-line ``BundleBusy`` message instead of a lock traceback.

:class:`Bundle` is the handle everyone uses. Its parts live beside it, one idea each: opening the file
(connection.py), its errors (errors.py), raw evidence and the ingest batch (artifacts.py, chunks.py for how
bytes are cut and packed), sealing (seal.py), verifying (verify.py) and writing parsed rows (row_writer.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import signals_deferred
from workbench.store import schema
from workbench.store.connection import checked_version, checkpoint, connect, remove_files
from workbench.store.errors import BundleBusy, BundleDamaged, BundleError, BundleWriteError, first_line, storage_failure
from workbench.store.row_columns import now_utc, utc_naive
from workbench.store.row_writer import RowWriter
from workbench.store.verify import Verifying

__all__ = ["Bundle", "BundleBusy", "BundleDamaged", "BundleError", "BundleWriteError", "first_line", "storage_failure"]
"""The handle and what its callers catch; workbench/cli.py looks storage_failure and BundleDamaged up here."""


class Bundle(Verifying):
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
            con = connect(path, read_only=False)
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
        con = connect(path, read_only=not write)
        try:
            version = checked_version(path, con)
            if version < schema.SCHEMA_VERSION:
                if not write:
                    con.close()
                    con = connect(path, read_only=False)
                    schema.migrate(con)
                    checkpoint(path, con)
                    con.close()
                    con = connect(path, read_only=True)
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
                    checkpoint(self.path, con)
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


def _version() -> str:
    from workbench import __version__

    return __version__
