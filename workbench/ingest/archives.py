"""Archives and compressed files unpacked into a temporary folder with their safety checks: no member
climbs out of it (absolute paths, ``..``), no decompression bomb is expanded (MAX_ARCHIVE_BYTES,
MAX_RATIO), archives inside archives only MAX_NESTING deep, and a truncated or damaged one keeps
what it held before the damage and says where it was cut."""

from __future__ import annotations

import gzip
import lzma
import os
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from workbench.ingest import zip_recovery
from workbench.ingest.inputs import IngestError, Item, Refusal

MAX_ARCHIVE_BYTES = 32 << 30
MAX_RATIO = 1000
ARCHIVE_DAMAGE = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error, lzma.LZMAError)
"""What a truncated or corrupt archive raises while it is read."""


def spool(tmp: Path, opener: Callable[[], BinaryIO], compressed: int, label: str) -> tuple[Path, str] | None:
    """Decompress to a temp file, refusing bombs: (file, damage), damage empty when the stream ended
    cleanly. A truncated or corrupt stream keeps what came out before the damage (a copy cut short
    still holds hours of log); None when the data is not compressed at all."""
    fd, name = tempfile.mkstemp(dir=tmp)
    out = Path(name)
    total = 0
    try:
        with os.fdopen(fd, "wb") as dst, opener() as src:
            while True:
                block = src.read(64 << 10)  # small reads: a damaged stream loses at most this much
                if not block:
                    break
                total += len(block)
                check_bomb(total, compressed, label)
                dst.write(block)
    except (*ARCHIVE_DAMAGE, gzip.BadGzipFile) as exc:
        if total:
            return out, f"truncated or damaged compressed file: kept the {total} bytes before the damage ({exc})"
        out.unlink(missing_ok=True)
        return None
    except IngestError:
        out.unlink(missing_ok=True)
        raise
    return out, ""


def check_bomb(total: int, compressed: int, label: str) -> None:
    if total > MAX_ARCHIVE_BYTES or (total > (256 << 20) and total > MAX_RATIO * max(compressed, 1)):
        raise IngestError(f"{label}: refusing to decompress more than {total >> 20} MiB "
                          f"from {compressed} bytes (decompression bomb?)")


def _safe_member(name: str) -> tuple[str, ...] | None:
    """A member's path parts, or None when the name would climb out (absolute, ``..``, a drive)."""
    pure = PurePosixPath(name)
    parts = tuple(p for p in pure.parts if p not in ("", "."))
    if (not parts or pure.is_absolute() or ".." in pure.parts or name.startswith(("/", "\\"))
            or ":" in parts[0]):
        return None
    return parts


UNSAFE = "refusing archive member with unsafe path"


def _strip_common_top(members: list[tuple[str, ...]]) -> int:
    """A single wrapper folder (``incident-42/node03/...``) is not a host: strip it, but only when
    everything sits at least two folders down, so ``node04/dmesg.txt`` keeps its host folder."""
    tops = {m[0] for m in members}
    if len(tops) == 1 and all(len(m) > 2 for m in members):
        return 1
    return 0


TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.xz", ".txz", ".tar.bz2", ".tbz2")
MAX_NESTING = 2
"""Archives inside archives (a zip of per-node tarballs) are unpacked this many levels down; their
bomb checks count against the outermost archive's size on disk."""


def tar_items(full: Path, prefix: tuple[str, ...], tmp: Path, *, label: str = "", compressed: int = 0,
               depth: int = 0) -> Iterator[Item | Refusal]:
    """Members are staged before any is yielded, so a bomb refuses the archive whole; a truncated
    archive keeps the members read before the damage, and what came of the one it is cut in (as a
    cut .gz keeps its first bytes), and says where it stopped."""
    label = label or str(full)
    try:
        tar = tarfile.open(full, "r:*")
    except ARCHIVE_DAMAGE as exc:  # EOFError: compressed, and cut before its first member's header ends
        raise IngestError(f"{label}: not a readable tar archive ({exc})") from None
    compressed = compressed or full.stat().st_size
    total = 0
    staged: list[tuple[tuple[str, ...], Path, datetime | None]] = []
    refused: list[Refusal] = []
    links = 0
    with tar:
        current: tuple[tuple[str, ...], Path, datetime | None, str] | None = None
        try:
            for member in tar:
                if not member.isfile():
                    links += not member.isdir()
                    continue
                parts = _safe_member(member.name)
                if parts is None:
                    refused.append(Refusal(f"{label}!{member.name}", "error", f"{UNSAFE} {member.name!r}"))
                    continue
                total += member.size
                check_bomb(total, compressed, label)
                src = tar.extractfile(member)
                if src is None:
                    continue
                fd, name = tempfile.mkstemp(dir=tmp)
                current = (parts, Path(name), _member_time(member.mtime), member.name)
                with os.fdopen(fd, "wb") as dst, src:
                    while block := src.read(64 << 10):  # small reads: a cut member keeps all but this much
                        dst.write(block)
                staged.append(current[:3])
                current = None
        except ARCHIVE_DAMAGE as exc:
            refused.append(Refusal(label, "error", _keep_cut_member(len(staged), current, staged, exc)))
    if links:
        refused.append(Refusal(label, "skipped", f"{links} link(s) or special file(s) in the archive: not followed"))
    yield from _staged_items(staged, prefix, label, tmp, compressed, depth)
    yield from refused


def _keep_cut_member(complete: int, current: tuple[tuple[str, ...], Path, datetime | None, str] | None,
                     staged: list[tuple[tuple[str, ...], Path, datetime | None]], exc: BaseException) -> str:
    """Stages the first bytes of the member a truncated or damaged archive is cut in (its temp file is
    removed when it has none) and says what the archive kept: the refusal line of the ingest result."""
    note = f"truncated or damaged archive: kept the {complete} file(s) before the damage ({exc})"
    if current is None:
        return note
    parts, path, mtime, name = current
    size = path.stat().st_size if path.exists() else 0
    if not size:
        path.unlink(missing_ok=True)
        return f"{note}; cut in member {complete + 1} ({name})"
    staged.append((parts, path, mtime))
    return f"{note}; cut in member {complete + 1} ({name}): kept its first {size} bytes"


def zip_items(full: Path, prefix: tuple[str, ...], tmp: Path, *, label: str = "", compressed: int = 0,
               depth: int = 0) -> Iterator[Item | Refusal]:
    """A zip's members through its central directory; a zip without one that reads (cut short) is read
    from its members' own headers instead (_salvaged_zip)."""
    label = label or str(full)
    compressed = compressed or full.stat().st_size
    try:
        zf = zipfile.ZipFile(full)
    except (zipfile.BadZipFile, OSError) as exc:
        if not zip_recovery.starts_as_zip(full):
            raise IngestError(f"{label}: not a readable zip archive ({exc})") from None
        yield from _salvaged_zip(full, prefix, tmp, label, compressed, depth, exc)
        return
    staged: list[tuple[tuple[str, ...], Path, datetime | None]] = []
    with zf:
        declared = sum(i.file_size for i in zf.infolist())
        check_bomb(declared, compressed, label)
        total = 0
        refused: list[Refusal] = []
        for info in zf.infolist():
            if info.is_dir():
                continue
            member = f"{label}!{info.filename}"
            parts = _safe_member(info.filename)
            if parts is None:
                refused.append(Refusal(member, "error", f"{UNSAFE} {info.filename!r}"))
                continue
            fd, name = tempfile.mkstemp(dir=tmp)
            try:
                with os.fdopen(fd, "wb") as dst, zf.open(info) as src:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        total += len(block)
                        check_bomb(total, compressed, label)
                        dst.write(block)
            except (*ARCHIVE_DAMAGE, NotImplementedError, RuntimeError) as exc:  # RuntimeError: encrypted
                Path(name).unlink(missing_ok=True)
                refused.append(Refusal(member, "error", f"damaged or unsupported archive member ({exc})"))
                continue
            except IngestError:
                Path(name).unlink(missing_ok=True)
                raise
            staged.append((parts, Path(name), _member_time(info.date_time)))
    yield from _staged_items(staged, prefix, label, tmp, compressed, depth)
    yield from refused


def _salvaged_zip(full: Path, prefix: tuple[str, ...], tmp: Path, label: str, compressed: int, depth: int,
                  error: Exception) -> Iterator[Item | Refusal]:
    """The members of a zip whose central directory does not read, from their local headers
    (workbench/ingest/zip_recovery.py), with one refusal that says where the archive was cut; nothing at all
    read from it is a refusal of the whole archive, as before."""
    staged: list[tuple[tuple[str, ...], Path, datetime | None]] = []
    refused: list[Refusal] = []
    end = zip_recovery.End(0, "")
    for found in zip_recovery.members(full, tmp, lambda total: check_bomb(total, compressed, label)):
        if isinstance(found, zip_recovery.End):
            end = found
        elif isinstance(found, zip_recovery.Problem):
            refused.append(Refusal(f"{label}!{found.name}", "error", found.reason))
        elif (parts := _safe_member(found.name)) is None:
            found.path.unlink(missing_ok=True)
            refused.append(Refusal(f"{label}!{found.name}", "error", f"{UNSAFE} {found.name!r}"))
        else:
            staged.append((parts, found.path, _member_time(found.date_time)))
    if not staged and not refused:
        raise IngestError(f"{label}: not a readable zip archive ({error})")
    where = f"; {end.reason}" if end.reason else ": every member's header and data read"
    refused.insert(0, Refusal(label, "error", f"truncated or damaged zip ({error}): read from its members' headers, "
                                              f"kept the {end.members} complete file(s){where}"))
    yield from _staged_items(staged, prefix, label, tmp, compressed, depth)
    yield from refused


def _member_time(stamp: float | tuple[int, ...]) -> datetime | None:
    """An archive member's time (tar: epoch seconds, zip: a date tuple); None when the archive holds an
    impossible one (month 0, a year past 9999)."""
    try:
        if isinstance(stamp, tuple):
            return datetime(*stamp, tzinfo=timezone.utc)
        return datetime.fromtimestamp(stamp, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None


def _staged_items(staged: list[tuple[tuple[str, ...], Path, datetime | None]], prefix: tuple[str, ...],
                  label: str, tmp: Path, compressed: int, depth: int) -> Iterator[Item | Refusal]:
    cut = _strip_common_top([s[0] for s in staged])
    for parts, path, mtime in staged:
        rel = prefix + parts[cut:]
        name = f"{label}!{'/'.join(parts)}"
        nested = _nested_reader(parts[-1].lower(), path) if depth < MAX_NESTING else None
        if nested is not None:
            try:
                inner = list(nested(path, rel[:-1], tmp, label=name, compressed=compressed, depth=depth + 1))
            except IngestError as exc:  # a bomb inside: that inner archive is refused whole
                inner = [Refusal(name, "error", str(exc))]
            path.unlink(missing_ok=True)
            yield from inner
            continue
        damage = ""
        if parts[-1].lower().endswith(".gz") and not parts[-1].lower().endswith(".tar.gz"):
            spooled = spool(tmp, lambda p=path: gzip.open(p, "rb"), path.stat().st_size, name)
            if spooled is not None:
                path.unlink(missing_ok=True)
                (path, damage), gz_name, name, rel = spooled, name, name[:-3], rel[:-1] + (rel[-1][:-3],)
        yield Item(name, rel, lambda p=path: open(p, "rb"), mtime, cleanup=lambda p=path: p.unlink(missing_ok=True),
                   path=path)
        if damage:
            yield Refusal(gz_name, "error", damage)


def _nested_reader(name: str, path: Path) -> Callable[..., Iterator[Item | Refusal]] | None:
    """The reader for an archive found inside an archive; None (kept as a plain file) when it only
    looks like one. A cut one still counts as one (its readers keep what it holds)."""
    if name.endswith(TAR_SUFFIXES):
        try:
            if tarfile.is_tarfile(path):
                return tar_items
        except ARCHIVE_DAMAGE:  # compressed and cut inside its first header: is_tarfile raises, not answers
            return None
    if name.endswith(".zip") and (zipfile.is_zipfile(path) or zip_recovery.starts_as_zip(path)):
        return zip_items
    return None
