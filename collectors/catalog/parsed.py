"""The catalogs' YAML, parsed once and kept beside them like Python keeps bytecode.

Every ingest reads the signature catalog and the CUDA code table (~300 KB of YAML): parsing it was
about a fifth of a small file's ingest (issue 23 item 7). The parsed documents are pickled into the
catalog folder's ``__pycache__`` under a key of each file's name, size and modification time, the
same rule as a ``.pyc``: an edited file is parsed again, and where the folder is read-only (an
installed package owned by root) every run simply parses. Only data of our own files is unpickled:
the cache file lives beside them, written by this process or an earlier one of the same checkout.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

_FORMAT = 1
"""bumped when what is cached changes shape"""


def parsed_yaml(paths: list[Path], check: Callable[[list[Any]], object]) -> list[Any]:
    """The YAML documents of ``paths`` in that order, from the cache when every file is unchanged.
    ``check`` runs on freshly parsed documents and raises on bad ones: only documents it passed are
    kept, so a reader of the cache may skip the checks that cost (compiling every regex)."""
    if not paths:
        return []
    stamp = [(p.name, *_size_mtime(p)) for p in paths]
    which = hashlib.sha256(repr([p.name for p in paths]).encode()).hexdigest()[:8]
    key = hashlib.sha256(repr((_FORMAT, sys.version_info[:2], stamp)).encode()).hexdigest()[:16]
    cache = paths[0].parent / "__pycache__" / f"catalog-{which}-{key}.pickle"
    try:
        with cache.open("rb") as handle:
            docs = pickle.load(handle)
        if isinstance(docs, list) and len(docs) == len(paths):
            return docs
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ValueError):
        pass
    docs = [_load(p) for p in paths]
    check(docs)
    _store(cache, docs)
    return docs


def _size_mtime(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def _load(path: Path) -> Any:
    import yaml  # deferred: a cache hit needs no YAML parser

    return yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _store(cache: Path, docs: list[Any]) -> None:
    """Writes the cache atomically (a reader never sees half a file); any failure only costs the next
    run a parse."""
    tmp = None
    try:
        cache.parent.mkdir(exist_ok=True)
        which = cache.name.rsplit("-", 1)[0]
        for old in cache.parent.glob(f"{which}-*.pickle"):  # the same files' older versions
            if old != cache:
                old.unlink(missing_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache.parent, prefix=".catalog-", suffix=".tmp")
        with os.fdopen(fd, "wb") as handle:
            pickle.dump(docs, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, cache)
        tmp = None
    except (OSError, pickle.PicklingError):
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
