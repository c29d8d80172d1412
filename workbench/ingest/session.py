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
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any, BinaryIO

from collectors.base import HostFact
from collectors.framework import registry
from workbench.errors import as_interrupt, signals_deferred
from workbench.ingest.artifact_rows import HostClocks, ParseRequest, ParseSummary, artifact_rows
from workbench.ingest.derive import run_derivations
from workbench.ingest.inputs import IngestError, Item, Refusal, bundle_files, expand, host_from_parts
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

