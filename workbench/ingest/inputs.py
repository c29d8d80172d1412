"""What an ingest is handed, made into files to store: plain files, folders walked, archives and
compressed files unpacked (workbench/ingest/archives.py), and what is refused instead of read (pipes,
devices, links out of the folder, the bundle itself), each as one line of the result. Which host a
file belongs to comes from its path here too."""

from __future__ import annotations

import gzip
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from workbench.errors import GpuwbError

if TYPE_CHECKING:
    from workbench.store.bundle import Bundle

SHARED_DIRS = {"logs", "log", "slurm", "k8s", "kubernetes", "metrics", "prometheus", "nccl", "changes",
               "scheduler", "network", "storage", "common", "shared", "cluster", "events", "latency",
               "serving", "deploys", "configs", "misc", "evidence", "incident"}


class IngestError(GpuwbError):
    """An input that cannot be read at all (missing path, broken or hostile archive)."""


@dataclass
class Item:
    """One file to ingest, wherever it came from (plain file, archive member, decompressed .gz)."""

    name: str
    rel_parts: tuple[str, ...]
    open: Callable[[], BinaryIO]
    mtime: datetime | None
    cleanup: Callable[[], None] | None = None
    path: Path | None = None
    """where its bytes are on disk (the worker process reads them from there)"""
    unwrap: bool = False
    """its lines are a known format inside wrappers no parser reads: parse them unwrapped"""


@dataclass
class Refusal:
    """An entry found while expanding the inputs that is reported instead of ingested."""

    name: str
    status: str
    """``skipped`` (deliberately not read: a pipe, a link out of the folder) or ``error`` (unreadable)"""
    reason: str


def host_from_parts(parts: tuple[str, ...]) -> str | None:
    """``node07/dmesg.txt`` belongs to node07; ``slurm/sacct.txt`` to no host in particular."""
    for part in parts[:-1]:
        if part.lower() not in SHARED_DIRS and not part.startswith("."):
            return part
    return None


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)


def bundle_files(bundle: Bundle) -> frozenset[Path]:
    """The bundle and its write-ahead log: never evidence of themselves (``gpuwb ingest b.duckdb .``)."""
    path = bundle.path.resolve()
    return frozenset({path, path.with_name(path.name + ".wal")})


def expand(path: str, tmp: Path, exclude: frozenset[Path] = frozenset()) -> Iterator[Item | Refusal]:
    """Every regular file under ``path``, archives unpacked into ``tmp`` with traversal and bomb checks.

    Inside a folder, links are followed only to files inside that folder, and pipes, sockets and
    devices are never opened (reading one would block or never end); each such entry comes back as a
    :class:`Refusal`, as does an archive that cannot be read, so the rest still lands."""
    root = Path(path)
    if not root.is_dir():
        refused = _refusal(root, None, exclude)
        if refused:
            yield refused
        else:
            yield from _items_or_refusal(root, (root.name,), tmp)
        return
    inside = root.resolve()
    failed: list[OSError] = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=failed.append):
        dirnames.sort()
        for dname in dirnames:
            if (Path(dirpath) / dname).is_symlink():
                yield Refusal(str(Path(dirpath) / dname), "skipped", "link to a folder: not followed")
        for fname in sorted(filenames):
            full = Path(dirpath) / fname
            refused = _refusal(full, inside, exclude)
            if refused:
                yield refused
            else:
                yield from _items_or_refusal(full, full.relative_to(root).parts, tmp)
        while failed:
            exc = failed.pop()
            yield Refusal(str(exc.filename), "error", f"cannot read folder: {exc.strerror or exc}")


_FILE_TYPES = ((stat.S_ISFIFO, "named pipe"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
               (stat.S_ISBLK, "block device"), (stat.S_ISDIR, "folder"))


def _refusal(path: Path, inside: Path | None, exclude: frozenset[Path]) -> Refusal | None:
    """Why ``path`` is not read (None when it is a regular file). With ``inside``, a link must lead
    to a file within that folder: evidence handed over as a folder never pulls in /etc/shadow."""
    if inside is not None and path.is_symlink():
        try:
            target = path.resolve(strict=True)
        except (OSError, RuntimeError):  # RuntimeError: a link loop on Python < 3.13
            return Refusal(str(path), "skipped", "broken or looping link: not followed")
        if not target.is_relative_to(inside):
            return Refusal(str(path), "skipped", f"link to {target}, outside the folder: not followed")
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return Refusal(str(path), "error", f"cannot read: {exc.strerror or exc}")
    if stat.S_ISREG(mode):
        if path.resolve() in exclude:
            return Refusal(str(path), "skipped", "the bundle being written: not read")
        return None
    what = next((name for test, name in _FILE_TYPES if test(mode)), "special file")
    return Refusal(str(path), "skipped", f"not a regular file ({what}): not read")


def _items_or_refusal(full: Path, rel: tuple[str, ...], tmp: Path) -> Iterator[Item | Refusal]:
    """A file's items, or one refusal when it is an archive that cannot be read at all (so one bad
    archive in a folder does not stop the rest of the folder)."""
    try:
        items = list(_file_items(full, rel, tmp))
    except IngestError as exc:
        yield Refusal(str(full), "error", str(exc))
        return
    yield from items


def _file_items(full: Path, rel: tuple[str, ...], tmp: Path) -> Iterator[Item | Refusal]:
    from workbench.ingest import archives  # deferred: tarfile, zipfile and lzma only for an archive

    name = full.name.lower()
    if name.endswith(archives.TAR_SUFFIXES):
        yield from archives.tar_items(full, rel[:-1], tmp)
    elif name.endswith(".zip"):
        yield from archives.zip_items(full, rel[:-1], tmp)
    elif name.endswith(".gz"):
        spooled = archives.spool(tmp, lambda: gzip.open(full, "rb"), full.stat().st_size, str(full))
        if spooled is None:
            yield _plain_item(full, rel)
        else:
            out, damage = spooled
            inner = rel[:-1] + (rel[-1][:-3],)
            yield Item(str(full)[:-3], inner, lambda p=out: open(p, "rb"), _mtime(full),
                       cleanup=lambda p=out: p.unlink(missing_ok=True), path=out)
            if damage:
                yield Refusal(str(full), "error", damage)
    else:
        yield _plain_item(full, rel)


def _plain_item(full: Path, rel: tuple[str, ...]) -> Item:
    return Item(str(full), rel, lambda: open(full, "rb"), _mtime(full), path=full)


