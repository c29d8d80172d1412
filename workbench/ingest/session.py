"""Evidence handed over as files, folders or archives, stored verbatim and parsed.

Each file's kind is sniffed from its content through the collector registry (``--kind``
forces one). Files nobody recognises are still stored, as kind ``unknown``: nothing handed
over is lost. Parsing is isolated per file: a parser that fails leaves the raw artifact and a
counted skip, never a traceback. What cannot be taken (a pipe or device that would never end, a
link out of the folder handed over, a damaged archive member) is reported per entry while the
rest lands; an interrupted run keeps and seals what it had committed.
"""

from __future__ import annotations

import collections
import contextlib
import gzip
import lzma
import os
import stat
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any, BinaryIO

from collectors.base import HostFact
from collectors.framework import registry
from workbench.errors import GpuwbError, as_interrupt, signals_deferred
from workbench.ingest import zip_recovery
from workbench.ingest.artifact_rows import HostClocks, ParseRequest, ParseSummary, artifact_rows
from workbench.ingest.derive import run_derivations
from workbench.ingest.parse_worker import ParseWorker, WorkerParse
from workbench.store.bundle import Bundle, BundleWriteError, first_line, storage_failure

SNIFF_BYTES = 64 << 10
QUICK_SNIFF_BYTES = (4 << 10, 16 << 10)
"""Heads tried before the whole SNIFF_BYTES: a confident verdict on the first 4 KiB spares the longer passes."""
CONFIDENT = 80
BATCH_BYTES = 64 << 20
WORKER_BYTES = 4 << 20
"""A file from this size on is parsed in the worker process while this one stores it (``capture``)."""
SEND_AHEAD = 4
"""``ingest`` offers every file to the worker this many files ahead, the one being stored included (0: none,
everything is parsed in process)."""
WORKER_BACKLOG = 2
"""A file offered while the worker still has this many to answer is parsed in process instead."""
BATCH_FILE_COST = 256 << 10
"""Commit after about 64 MiB of evidence, counting each file as at least 256 KiB of work."""
MAX_ARCHIVE_BYTES = 32 << 30
MAX_RATIO = 1000
SHARED_DIRS = {"logs", "log", "slurm", "k8s", "kubernetes", "metrics", "prometheus", "nccl", "changes",
               "scheduler", "network", "storage", "common", "shared", "cluster", "events", "latency",
               "serving", "deploys", "configs", "misc", "evidence", "incident"}


class IngestError(GpuwbError):
    """An input that cannot be read at all (missing path, broken or hostile archive)."""


@dataclass
class FileResult:
    """What happened to one input file: shown as the per-file summary."""

    path: str
    kind: str
    host: str | None
    size: int = 0
    lines: int = 0
    events: int = 0
    rows: int = 0
    skipped: int = 0
    status: str = "new"
    sha256: str = ""
    error: str = ""
    skip_reasons: dict[str, int] = field(default_factory=dict)


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


ARCHIVE_DAMAGE = (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, zlib.error, lzma.LZMAError)
"""What a truncated or corrupt archive raises while it is read."""


class Session:
    """Shared state of one ingest or capture run: clocks learned from earlier files, and the parse worker
    that takes big files to the second core. ``close`` once the run is over."""

    def __init__(self, bundle: Bundle, *, boot_time: datetime | None = None,
                 reference_time: datetime | None = None) -> None:
        self.bundle = bundle
        self.clocks = HostClocks()
        self.default_boot = boot_time
        self.reference_time = reference_time
        self.writer = bundle.writer(None)
        self.worker = ParseWorker()
        self._ahead: collections.deque[WorkerParse] = collections.deque()
        """files sent to the worker ahead of their store, oldest first"""
        self._batched = 0
        self._stats: list[tuple[int, int, int, int, int, dict[str, int]]] = []
        """parse statistics of the artifacts stored since the last commit, written with it in one UPDATE"""
        self.committed = 0
        """new artifacts committed so far (what a run that fails later has kept)"""
        for host, key, value in bundle.con.execute(
                "SELECT host, key, value FROM host_inventory WHERE key IN ('boot_time', 'date', 'uptime_s')"
        ).fetchall():
            self.clocks.learn(HostFact(key, value, host=host))

    def request(self, *, name: str, kind: str, module: ModuleType | None, host: str | None,
                captured_at: datetime | None = None, mtime: datetime | None = None,
                unwrap: bool = False) -> ParseRequest:
        """How a file is parsed: its parser (None: the signature catalog alone) and the rows' defaults."""
        parsing = module is not None and hasattr(module, "parse")
        return ParseRequest(module=module.__name__ if parsing else None, kind=kind,
                            host=text(host) if host is not None else None, source_name=text(name),
                            default_boot=self.default_boot, reference_time=self.reference_time, mtime=mtime,
                            captured_at=captured_at, unwrap=unwrap)

    def send_ahead(self, request: ParseRequest, path: Path | None, module: ModuleType | None) -> None:
        """Have the worker parse ``path`` while earlier files are still being stored; ``store_and_parse``
        must then come for it, in the order sent. Not when the worker is behind (WORKER_BACKLOG): then
        the file is parsed here, so both cores stay busy whichever of parse and store is the slower."""
        if self.worker.backlog() >= WORKER_BACKLOG:
            return
        job = self._to_worker(request, path, module)
        if job is not None:
            self._ahead.append(job)

    def _to_worker(self, request: ParseRequest, path: Path | None, module: ModuleType | None) -> WorkerParse | None:
        """Only a file on disk, and only for a parser the worker can import by name (a parser made up at
        run time, as tests do, stays here)."""
        if path is None or (module is not None and getattr(module, "__spec__", None) is None):
            return None
        return self.worker.parse(request, path, self.clocks)

    def store_and_parse(self, stream_factory: Callable[[], BinaryIO], *, name: str, kind: str,
                        module: ModuleType | None, host: str | None, source: str,
                        captured_at: datetime | None = None, mtime: datetime | None = None,
                        info: dict[str, Any] | None = None, unwrap: bool = False,
                        path: Path | None = None) -> FileResult:
        """Store the bytes (deduplicated), then parse them into rows (with ``unwrap``, the lines with their
        wrappers peeled, see collectors/framework/framing/). A file sent ahead, or one at ``path`` of WORKER_BYTES
        or more, is parsed by the worker while its bytes are stored here. Never raises for bad content."""
        request = self.request(name=name, kind=kind, module=module, host=host, captured_at=captured_at,
                               mtime=mtime, unwrap=unwrap)
        job = self._ahead.popleft() if self._ahead and self._ahead[0].path == path else None
        if job is not None and (job.request != request or job.sent_clocks != self.clocks):
            job.discard()  # an earlier file taught the clocks something since: parse it again, here
            job = None
        if job is None and not self._ahead and path is not None and _is_big(path):
            job = self._to_worker(request, path, module)
        try:
            return self._store_and_parse(stream_factory, request, job, module, source, info)
        finally:
            if job is not None and not job.ended:
                job.discard()

    def _store_and_parse(self, stream_factory: Callable[[], BinaryIO], request: ParseRequest,
                         job: WorkerParse | None, module: ModuleType | None, source: str,
                         info: dict[str, Any] | None) -> FileResult:
        name, host, kind = request.source_name, request.host, request.kind
        source = text(source)
        captured_at, mtime = request.captured_at, request.mtime
        self.bundle.begin_batch()
        result = FileResult(path=name, kind=kind, host=host)
        collector = module.NAME if module else None
        with stream_factory() as stream:
            counted = _Counted(stream)
            sha, aid, is_new = self.bundle.add_artifact(counted, kind=kind, source=source, collector=collector,
                                                        host=host, captured_at=captured_at or mtime, info=info)
        result.sha256 = sha
        result.size = counted.size  # the same bytes when they were stored before
        if not is_new:
            stored_host = self.bundle.artifact_host(aid)
            if host == stored_host or not self.bundle.add_alias(
                    sha, kind=kind, source=source, collector=collector, host=host,
                    captured_at=captured_at or mtime, info=info):
                result.status = "duplicate"
                return result
            result.status = "same bytes as another host's"
        writer = self.writer
        writer.start(sha)
        summary = ParseSummary()
        in_process = lambda: artifact_rows(request, stream_factory, self.clocks, summary, module)  # noqa: E731
        if job is not None:
            job.write(writer, summary, in_process)
        else:
            writer.add_all(in_process())
        if job is not None and job.clocks is not None:
            self.clocks = job.clocks
        result.events = writer.counts.get("event", 0)
        result.error = summary.error
        if request.module is not None:
            result.lines = summary.lines
            result.rows = sum(writer.counts.values())
            result.skipped = writer.skipped
            result.skip_reasons = writer.skip_reasons
        if is_new:
            rows = result.rows if request.module is not None else result.events
            self._stats.append((aid, result.lines, result.events, rows, writer.skipped, writer.skip_reasons))
        self._maybe_commit(result.size)
        return result

    def finish(self) -> None:
        """Write the rows still buffered and commit; call once after the last artifact."""
        self.writer.flush()
        self.bundle.set_parse_stats_many(self._stats)
        stored = len(self._stats)
        self._stats = []
        self.bundle.commit_batch()
        self.committed += stored
        self._batched = 0

    def abandon(self) -> None:
        """Drop what is not committed yet (an interrupted run): the buffered rows and the open group."""
        self.writer.discard()
        self._stats = []
        self.bundle.rollback_batch()
        self._batched = 0

    def close(self) -> None:
        """Stop the parse worker; the session's files are all stored."""
        self.worker.close()

    def _maybe_commit(self, size: int) -> None:
        self._batched += size + BATCH_FILE_COST
        if self._batched >= BATCH_BYTES:
            self.finish()


def ingest_paths(bundle: Bundle, paths: list[str], *, kind: str | None = None, host: str | None = None,
                 boot_time: datetime | None = None,
                 progress: Callable[[FileResult], None] | None = None,
                 notice: Callable[[str], None] | None = None) -> list[FileResult]:
    """Ingest files, folders (recursively) and archives into ``bundle``; returns one result per file.

    A bundle that differs from its last seal is refused before anything is added, and what an earlier ingest
    that did not finish left unsealed is sealed first, told through ``notice`` (default: stderr); see
    :meth:`Bundle.take_over`. The run marks the bundle "ingest open" with its first commit and clears the mark
    with its seal. Interrupted (Ctrl-C, SIGTERM, SIGHUP), it seals what it had committed as incomplete; when
    the bundle cannot be written (a full disk), it stops with a one-line :class:`BundleWriteError`."""
    forced = check_inputs(paths, kind)
    bundle.take_over(notice or _to_stderr, run_derivations)
    session = Session(bundle, boot_time=boot_time)
    bundle.mark_open()
    planned: list[tuple[int, int, Item, str, ModuleType | None, str | None]] = []
    results: list[FileResult] = []
    given = {"boot_time": boot_time} if boot_time else {}  # kept with each file: `verify --deep` re-parses with it
    try:
        with tempfile.TemporaryDirectory(prefix="gpuwb-ingest-") as tmp:
            found = [item for path in paths for item in list(expand(path, Path(tmp), bundle_files(bundle)))]
            ahead = SEND_AHEAD if _bytes_on_disk(found) >= WORKER_BYTES else 0  # a few small files: no worker
            if ahead:
                session.worker.start()  # its imports overlap the sniffing below
            for item in found:
                item.name = text(item.name)
                if isinstance(item, Refusal):
                    item.reason = text(item.reason)
                    results.append(FileResult(path=item.name, kind="-", host=host, status=item.status,
                                              error=item.reason))
                    continue
                item.rel_parts = tuple(text(p) for p in item.rel_parts)
                item_host = host or host_from_parts(item.rel_parts)
                try:
                    item_kind, module = _classify(item, kind, forced)
                except OSError as exc:
                    results.append(FileResult(path=item.name, kind="-", host=item_host, status="error",
                                              error=f"cannot read: {exc.strerror or exc}"))
                    continue
                prio = getattr(module, "PRIORITY", 50) if module else 99
                planned.append((prio, len(planned), item, item_kind, module, item_host))
            planned.sort(key=lambda p: (p[0], p[1]))
            sent = 0
            for at, (_, _, item, item_kind, module, item_host) in enumerate(planned):
                for _, _, next_item, next_kind, next_module, next_host in planned[max(sent, at):at + ahead]:
                    session.send_ahead(session.request(name=next_item.name, kind=next_kind, module=next_module,
                                                       host=next_host, mtime=next_item.mtime,
                                                       unwrap=next_item.unwrap), next_item.path, next_module)
                sent = max(sent, at + ahead)
                try:
                    result = session.store_and_parse(item.open, name=item.name, kind=item_kind, module=module,
                                                     host=item_host, source=item.name, mtime=item.mtime,
                                                     info={"mtime": item.mtime, **given}, unwrap=item.unwrap,
                                                     path=item.path)
                except OSError as exc:
                    result = FileResult(path=item.name, kind=item_kind, host=item_host, status="error",
                                        error=f"cannot read: {exc.strerror or exc}")
                if item.cleanup:
                    item.cleanup()
                results.append(result)
                if progress:
                    progress(result)
        session.finish()
        if any(r.status in STORED for r in results) or bundle.last_seal() is None:
            with bundle.transaction():  # derived events and the seal land together, or neither
                run_derivations(bundle)
                bundle.seal()
        else:
            bundle.clear_open_marker()
    except BaseException as exc:
        with signals_deferred():  # a second signal (a scheduler's follow-up SIGTERM) must not cut this short
            stop = as_interrupt(exc)
            if stop is not None:
                # Ctrl-C, SIGTERM, SIGHUP: the group in flight is rolled back whole; the groups committed before
                # it stay and are sealed (marked incomplete), so the bundle still verifies and a rerun adds the rest.
                session.abandon()
                _seal_interrupted(bundle)
        if stop is not None:
            if stop is exc:
                raise
            raise stop from None
        if storage_failure(exc) == "write":
            raise _write_failed(bundle, session.committed, exc) from None
        raise
    finally:
        session.close()
    return results


def _seal_interrupted(bundle: Bundle) -> None:
    """Seal what an interrupted run committed. A bundle that cannot take even the seal (a full disk, DuckDB
    invalidated it) keeps the run's "ingest open" marker instead: verify and the next ingest then call its
    artifacts an interrupted ingest's, not a tamper."""
    try:
        bundle.seal(complete=False)
    except Exception as exc:
        if storage_failure(exc) is None:
            raise


def _write_failed(bundle: Bundle, committed: int, exc: BaseException) -> BundleWriteError:
    kept = (f"the {committed} artifact{'s' if committed != 1 else ''} it committed before are kept, not sealed, "
            f"in {bundle.path}.wal (keep it beside the bundle; the next ingest seals them), and the bundle file "
            "holds what it held before" if committed else "nothing of it was kept; the bundle holds what it held "
            "before")
    return BundleWriteError(f"bundle {bundle.path} could not be written ({first_line(exc)}): ingest stopped; "
                            f"{kept}; free space and run the ingest again", reason=first_line(exc))


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def text(value: str) -> str:
    """A file name as valid UTF-8 text for the bundle and the terminal: bytes that do not decode (a
    Latin-1 name, a hostile archive member) become ``\\xNN``."""
    try:
        raw = value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = value.encode("utf-8", "surrogatepass")
    return raw.decode("utf-8", "backslashreplace")


def check_inputs(paths: list[str], kind: str | None) -> ModuleType | None:
    """Refuse a request that cannot work (a path that does not exist, an unknown ``--kind``) before
    anything is written; returns the collector a forced kind belongs to."""
    forced = None
    if kind is not None:
        forced = registry.collector_for_kind(kind)
        if forced is None and kind != "unknown":
            raise IngestError(f"unknown kind {kind!r}; known kinds: {', '.join(registry.known_kinds())}")
    for path in paths:
        if not os.path.lexists(path):
            raise IngestError(f"no such file or folder: {path}")
    return forced


STORED = ("new", "same bytes as another host's")
"""Statuses of a file that added something to the bundle."""


def _classify(item: Item, kind: str | None, forced: ModuleType | None) -> tuple[str, ModuleType | None]:
    if kind is not None:
        return kind, forced
    with item.open() as stream:
        head = stream.read(SNIFF_BYTES)
    # Every sniffer scans the head with its own patterns; a confident verdict on the first 4 or 16 KiB
    # spares the longer passes (512 rank logs sniffed 4x faster per step). Weak or no verdicts look further.
    found = None
    for quick in QUICK_SNIFF_BYTES:
        if found is None and len(head) > quick:
            found = registry.sniff(item.name, head[:quick].decode("utf-8", "replace"), min_score=CONFIDENT)
    if found is None:
        text_head = head.decode("utf-8", "replace")
        scored = registry.sniff_scored(item.name, text_head)
        found = (scored[1], scored[2]) if scored else None
        if scored is None or scored[0] < CONFIDENT:
            # A weak verdict or none: the lines may be a known format in wrappers no sniffer reads (a dmesg
            # -H pasted in a Markdown fence, an NCCL log through CRI); a surer verdict unwrapped wins.
            unwrapped = registry.sniff_unwrapped(item.name, text_head)
            item.unwrap = unwrapped is not None and (scored is None or unwrapped[0] > scored[0])
            if item.unwrap:
                found = unwrapped[1], unwrapped[2]
    if found is None:
        return "unknown", None
    return found


def _bytes_on_disk(found: list[Item | Refusal]) -> int:
    total = 0
    for item in found:
        if isinstance(item, Item) and item.path is not None:
            with contextlib.suppress(OSError):
                total += item.path.stat().st_size
    return total


def _is_big(path: Path) -> bool:
    try:
        return path.stat().st_size >= WORKER_BYTES
    except OSError:
        return False


class _Counted:
    """A stream that counts the bytes read through it (the artifact's size, without asking the bundle)."""

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.size += len(data)
        return data


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
    name = full.name.lower()
    if name.endswith(TAR_SUFFIXES):
        yield from _tar_items(full, rel[:-1], tmp)
    elif name.endswith(".zip"):
        yield from _zip_items(full, rel[:-1], tmp)
    elif name.endswith(".gz"):
        spooled = _spool(tmp, lambda: gzip.open(full, "rb"), full.stat().st_size, str(full))
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


def _spool(tmp: Path, opener: Callable[[], BinaryIO], compressed: int, label: str) -> tuple[Path, str] | None:
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
                _check_bomb(total, compressed, label)
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


def _check_bomb(total: int, compressed: int, label: str) -> None:
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


def _tar_items(full: Path, prefix: tuple[str, ...], tmp: Path, *, label: str = "", compressed: int = 0,
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
                _check_bomb(total, compressed, label)
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


def _zip_items(full: Path, prefix: tuple[str, ...], tmp: Path, *, label: str = "", compressed: int = 0,
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
        _check_bomb(declared, compressed, label)
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
                        _check_bomb(total, compressed, label)
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
    for found in zip_recovery.members(full, tmp, lambda total: _check_bomb(total, compressed, label)):
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
            spooled = _spool(tmp, lambda p=path: gzip.open(p, "rb"), path.stat().st_size, name)
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
                return _tar_items
        except ARCHIVE_DAMAGE:  # compressed and cut inside its first header: is_tarfile raises, not answers
            return None
    if name.endswith(".zip") and (zipfile.is_zipfile(path) or zip_recovery.starts_as_zip(path)):
        return _zip_items
    return None
