"""A second process that parses a big file while the ingest process hashes, compresses and stores its
bytes, so an ingest uses both cores.

Threads could not do this: the parsers are Python, and a parse thread and a store thread take turns on
one interpreter lock (measured: a threaded overlap was no faster end to end). The worker runs the same
``artifact_rows`` as the ingest process on a copy of the run's clocks and sends its rows back in order,
pickled in frames over a pipe; the ingest process writes them only once the store has said the bytes are
new, and takes the worker's clocks after the file, so the bundle is the same with or without it.

One worker serves the whole run (``ingest`` starts it before sniffing when the inputs reach 4 MiB). If it
cannot start, or dies before it sent any row of a file, that file is parsed in process; if it dies later,
the file ends with a counted skip (as a parser error would). Either way the run parses the rest in process.
"""

from __future__ import annotations

import collections
import contextlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from collectors.base import Row
from workbench.ingest.artifact_rows import HostClocks, ParseRequest, ParseSummary, artifact_rows
from workbench.store.row_columns import prepared

if TYPE_CHECKING:
    from workbench.store.row_writer import RowWriter

FRAME = struct.Struct("<Q")
ROWS_PER_FRAME = 2000
AHEAD_BYTES = 64 << 20
"""Frames received and not yet written, at most, kept as the pickled bytes that came (~250 bytes a kernel
event): the worker parses ahead of the store by this much, whatever the number of files sent ahead, then
waits. The rows of a file can only be written once its store has said the bytes are new, so a budget of a
few frames (~8,000 rows) made the worker wait for most of a 1 GiB log (275 -> 202 MB/s); 64 MiB holds the
rows of ~8 GiB of kernel log and keeps memory flat beyond."""
LAST = frozenset(b"df")
"""the first byte of a frame that ends its job: ``done`` or ``failed`` (``rows`` frames start with r)"""


def _write_frame(out: BinaryIO, message: tuple) -> None:
    """An answer, tagged with the first letter of its kind so the ingest process can route it unread."""
    data = message[0][:1].encode() + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(FRAME.pack(len(data)))
    out.write(data)


def _read_frame(inp: BinaryIO) -> bytes | None:
    head = inp.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    data = inp.read(size)
    return data if len(data) == size else None


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer jobs until the input ends: each job is a pickled (request, path, clocks); the answer is
    tagged frames of ``("rows", tables, skips)`` (workbench/store/row_columns.py ``prepared``) and one
    ``("done", summary, clocks)`` or ``("failed", reason)``."""
    while (job := _read_frame(inp)) is not None:
        request, path, clocks = pickle.loads(job)
        summary = ParseSummary()
        batch: list[Row] = []
        try:
            for row in artifact_rows(request, lambda p=path: open(p, "rb"), clocks, summary):
                batch.append(row)
                if len(batch) >= ROWS_PER_FRAME:
                    _write_frame(out, ("rows", *prepared(batch)))
                    batch = []
        except OSError as exc:
            _write_frame(out, ("rows", *prepared(batch)))
            _write_frame(out, ("failed", f"cannot read: {exc.strerror or exc}"))
        else:
            _write_frame(out, ("rows", *prepared(batch)))
            _write_frame(out, ("done", summary, clocks))
        out.flush()


class WorkerParse:
    """One file sent to the worker: its rows, in order, as they arrive."""

    def __init__(self, worker: ParseWorker, request: ParseRequest, path: Path, clocks: HostClocks) -> None:
        self.worker = worker
        self.request = request
        self.path = path
        self.sent_clocks = HostClocks(dict(clocks.boot_times), dict(clocks.uptimes), dict(clocks.reference_times))
        """the clocks it is parsed with: rows for other clocks would be other rows"""
        self.messages: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.clocks: HostClocks | None = None
        """the run's clocks after this file, as the worker learned them (None: learned here)"""
        self.ended = False
        """its last message has been read"""

    def write(self, writer: RowWriter, summary: ParseSummary, fallback: Callable[[], Iterator[Row]]) -> None:
        """Hand the rows to ``writer``; ``summary`` and ``clocks`` are filled when they end. A worker that
        died before its first row hands the file to ``fallback`` (the parse in process); one that died
        later, or could not read the file, ends the rows with a counted skip."""
        began = False
        while True:
            message = self._next()
            if message is None:
                self.worker.available = False
                if not began:
                    writer.add_all(fallback())
                    return
                summary.error = "the parse worker ended unexpectedly"
                writer.skip(f"parser error: {summary.error}")
                return
            if message[0] == "rows":
                _, tables, skips = message
                began = began or bool(tables or skips)
                writer.add_prepared(tables, skips)
            elif message[0] == "done":
                _, done, self.clocks = message
                summary.lines, summary.error = done.lines, done.error
                return
            else:
                summary.error = message[1]
                writer.skip(f"parser error: {message[1]}"[:200])
                return

    def discard(self) -> None:
        """Read the rest and drop it (the bytes were a duplicate, the store failed, or the clocks it was
        sent with have changed since)."""
        while (message := self._next()) is not None and message[0] == "rows":
            pass
        if message is None:
            self.worker.available = False

    def _next(self) -> tuple | None:
        frame = self.messages.get()
        if frame is None:
            self.ended = True
            return None
        self.worker.release(len(frame))
        self.ended = frame[0] in LAST
        return pickle.loads(memoryview(frame)[1:])


class ParseWorker:
    """The run's parse worker process, started on first use. Files may be sent ahead of the one being
    stored (``parse`` never blocks); each must then be read or discarded, in the order sent."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.available = os.environ.get("GPUWB_PARSE_WORKER", "1") != "0"
        """False when switched off ($GPUWB_PARSE_WORKER=0), or once it could not start or has died"""
        self._jobs: collections.deque[WorkerParse] = collections.deque()
        """sent and not yet answered in full, oldest first"""
        self._outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._room = threading.Condition()
        self._held = 0
        """bytes of frames received and not yet read, over all jobs (at most AHEAD_BYTES)"""

    def parse(self, request: ParseRequest, path: Path, clocks: HostClocks) -> WorkerParse | None:
        """Send ``path`` to the worker; None when there is no worker (then parse in process)."""
        with self._lock:
            if not self.available or (self.proc is None and not self._start_locked()):
                return None
            job = WorkerParse(self, request, path, clocks)
            self._jobs.append(job)
        self._outbox.put(pickle.dumps((request, str(path), job.sent_clocks), protocol=pickle.HIGHEST_PROTOCOL))
        return job

    def start(self) -> None:
        """Start the process now, so that its imports overlap the caller's own work (sniffing the inputs)."""
        with self._lock:
            if self.proc is None and self.available:
                self._start_locked()

    def backlog(self) -> int:
        """Files sent and not yet answered in full."""
        return len(self._jobs)

    def _start_locked(self) -> bool:
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", "workbench.ingest.parse_worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_worker_env())
        except OSError:
            self.available = False
            return False
        for target, name in ((self._send, "gpuwb-parse-send"), (self._receive, "gpuwb-parse-receive")):
            threading.Thread(target=target, args=(self.proc,), name=name, daemon=True).start()
        return True

    def _send(self, proc: subprocess.Popen[bytes]) -> None:
        """Jobs go out from a thread: the main one must never wait on a pipe the worker is not reading."""
        with contextlib.suppress(OSError, ValueError):
            while (data := self._outbox.get()) is not None:
                proc.stdin.write(FRAME.pack(len(data)))
                proc.stdin.write(data)
                proc.stdin.flush()

    def _receive(self, proc: subprocess.Popen[bytes]) -> None:
        """Answers go to the oldest job's queue, unread; past AHEAD_BYTES waiting, the worker is held back."""
        while True:
            try:
                frame = _read_frame(proc.stdout)
            except (OSError, ValueError):
                frame = None
            if frame is None:
                break
            self._deliver(self._jobs[0], frame)
            if frame[0] in LAST:
                with self._lock:
                    self._jobs.popleft()
        with self._lock:  # the worker is gone: whoever waits on a job hears it, and no job is sent again
            self.available = False
            orphans = list(self._jobs)
            self._jobs.clear()
        for job in orphans:
            self._deliver(job, None)

    def _deliver(self, job: WorkerParse, frame: bytes | None) -> None:
        if frame is not None:
            with self._room:
                while self._held and self._held + len(frame) > AHEAD_BYTES:
                    if self._closed.is_set():
                        return
                    self._room.wait(0.1)
                self._held += len(frame)
        job.messages.put(frame)

    def release(self, size: int) -> None:
        """A frame of ``size`` bytes has been read: room for the worker to go on."""
        with self._room:
            self._held -= size
            self._room.notify_all()

    def close(self) -> None:
        """Stop the worker (after the run, or when it is interrupted)."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        self._closed.set()
        self._outbox.put(None)
        proc.kill()  # it holds nothing worth a graceful exit (~0.1 s of interpreter teardown)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()


def _worker_env() -> dict[str, str]:
    """The worker imports this package from where the ingest process did, installed or not."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _preload() -> None:
    """Import the parsers of big files and load the catalogs before the first job: the ingest process is
    still sniffing its inputs then, so this costs no wall time (every parser would cost ~15 MB more).
    Here, and only here, the kernel parser may map the files it reads (collectors/kernel/blocks.py MAP_FILES)."""
    from collectors import kernel, nccl  # noqa: F401  (the parsers of big files; the others on demand)
    from collectors.framework.signatures import catalog
    from collectors.kernel import blocks

    catalog()
    blocks.MAP_FILES = True


def main() -> None:
    _preload()
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print() in a parser must not land in the frames
    try:
        serve(sys.stdin.buffer, out)
    except (KeyboardInterrupt, BrokenPipeError):
        os._exit(1)  # the ingest process was interrupted or has gone: nothing to say, nobody to say it to


if __name__ == "__main__":
    main()
