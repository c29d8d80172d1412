"""Opening a bundle's DuckDB file: one writer or many readers, a lock held elsewhere as ``BundleBusy``, a
file that is no bundle (or one from a newer gpuwb) as a one-line error, and the checkpoint that writes every
commit into the file itself."""

from __future__ import annotations

from pathlib import Path

import duckdb

from workbench.store import schema
from workbench.store.errors import BundleBusy, BundleDamaged, BundleError, BundleWriteError, first_line, storage_failure

ROW_GROUP_ROWS = 2048
"""Rows per DuckDB row group in a bundle opened for writing, the smallest DuckDB allows (the default
122,880 rows of raw chunks would never fill, and the whole transaction would stay in memory)."""
VACUUM_TASKS = 0
"""Row groups a checkpoint may merge: none. Each ingest commit that holds fewer than ROW_GROUP_ROWS chunks
(a folder of small rank logs) leaves a partial row group, and DuckDB's checkpoint vacuum merges runs of
them by reading their BLOBs back into memory, more as the table grows: 512 rank logs of 1 GiB in all
peaked at 380 MB (one checkpoint rewrote most of the chunk table, the one at close again), 2 GiB at 563 MB;
without, the ingest process stays at 200-220 MB from 128 MiB to 2 GiB. A bundle only deletes the few rows
a re-derivation or a duplicate drops: nothing worth reclaiming."""


def connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
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


def checked_version(path: Path, con: duckdb.DuckDBPyConnection) -> int:
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


def checkpoint(path: Path, con: duckdb.DuckDBPyConnection) -> None:
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
