"""A new bundle starts as a copy of an empty one, made once per schema and DuckDB version.

Creating the schema (every table, index and view of workbench/store/schema.py) took ~0.1 s of each
``gpuwb ingest`` into a new bundle, most of a small file's ingest after the imports (issue 23 item 7).
The empty bundle is written once into the user's cache (``$XDG_CACHE_HOME/gpuwb``, else
``~/.cache/gpuwb``), named by a hash of the migrations and the DuckDB version, so a changed schema or
another DuckDB makes a new one; a new bundle is then a byte copy and an open. Where no cache can be
written (a read-only home), bundles are made from the migrations as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from functools import cache
from pathlib import Path

import duckdb

from workbench.store import schema


def copy_empty(path: Path) -> bool:
    """Writes an empty bundle of this schema at ``path``, which must not exist (the copy is exclusive);
    False when no empty bundle could be made. An error writing ``path`` itself (a full disk) is raised."""
    empty = _empty_bundle(_key())
    if empty is None:
        return False
    try:
        src = empty.open("rb")
    except OSError:  # removed from the cache since: made again by the next run
        _empty_bundle.cache_clear()
        return False
    with src, path.open("xb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return True


def cache_dir() -> Path:
    """Where the empty bundle is kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpuwb"


def _key() -> str:
    return hashlib.sha256(repr((schema.SCHEMA_VERSION, sorted(schema.MIGRATIONS.items()),
                                duckdb.__version__)).encode()).hexdigest()[:16]


@cache
def _empty_bundle(key: str) -> Path | None:
    folder = cache_dir()
    empty = folder / f"empty-bundle-{key}.duckdb"
    if empty.is_file():
        return empty
    tmp = folder / f".empty-bundle-{os.getpid()}-{uuid.uuid4().hex[:8]}.duckdb"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(tmp))
        try:
            schema.migrate(con)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, empty)  # whole or not at all, whoever else makes it at the same moment
    except (OSError, duckdb.Error):
        return None
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            with contextlib.suppress(OSError):
                leftover.unlink()
    return empty
