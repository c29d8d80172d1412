"""What can go wrong with a bundle file, as one-line errors the user can act on, and how a DuckDB error is
told apart: the file could not be written, its stored bytes cannot be read back, or neither (a bug)."""

from __future__ import annotations

from pathlib import Path

import duckdb

from workbench.errors import GpuwbError


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
