"""One bundle, several responders: every read and every write is a short connection.

DuckDB lets one process write a file, or many processes read it, never both. Two responders in two
SSH sessions on one jump host therefore cannot each hold the bundle open: the cockpit opens it for
the length of one query (read-only) or one journal entry (for writing) and closes it again. A
connection refused because the other responder is in the middle of one is retried for a few
seconds; only after that does the responder see a one-line "busy" message, never a lock traceback.
Responder work stays inside the bundle (the ``journal`` table), so the bundle remains one file.

Within one process DuckDB also refuses a read-only and a writable connection to the same file at
the same time ("different configuration"): the cockpit's background readers (analysis, report
model, a check's rows) and its journal writes therefore take turns on a per-file lock, readers
together, a writer alone. One wait covers both: the turn and the file's lock share one deadline.

A process that holds the bundle for writing much longer (an ingest, a merge) outlasts any retry.
The cockpit's journal writes therefore keep trying in a thread of their own
(``workbench/tui/saving.py``), and :func:`busy_reason` names who holds the bundle meanwhile.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from workbench.store.bundle import Bundle, BundleBusy

T = TypeVar("T")

RETRY_S = 5.0
"""How long a read or a write waits for the other responder's connection to close."""


class _TakeTurns:
    """A readers-writer lock for one bundle file in this process; waits until ``deadline`` (monotonic)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def hold(self, *, write: bool, deadline: float, path: Path) -> Iterator[None]:
        with self._cond:
            while self._writer or (write and self._readers):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BundleBusy(f"bundle {path} is busy in this cockpit; try again in a moment")
                self._cond.wait(left)
            if write:
                self._writer = True
            else:
                self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                if write:
                    self._writer = False
                else:
                    self._readers -= 1
                self._cond.notify_all()


_TURNS: dict[Path, _TakeTurns] = {}
_TURNS_GUARD = threading.Lock()


def _turns(path: Path) -> _TakeTurns:
    with _TURNS_GUARD:
        return _TURNS.setdefault(path.resolve(), _TakeTurns())


class SharedBundle:
    """A bundle path plus the author of this responder's writes."""

    def __init__(self, path: str | os.PathLike[str], author: str, *, retry_s: float = RETRY_S) -> None:
        self.path = Path(path)
        self.author = author
        self.retry_s = retry_s
        with self.read():  # fail now, in one line, if it is not a bundle at all
            pass

    @contextmanager
    def read(self, *, wait: float | None = None) -> Iterator[Bundle]:
        """A read-only connection for one query or a few related ones; waits at most ``wait``
        seconds (default ``retry_s``) for a writer to finish."""
        deadline = time.monotonic() + (self.retry_s if wait is None else wait)
        with _turns(self.path).hold(write=False, deadline=deadline, path=self.path):
            bundle = self._open(write=False, deadline=deadline)
            try:
                yield bundle
            finally:
                bundle.close()

    @contextmanager
    def write(self, *, wait: float | None = None) -> Iterator[Bundle]:
        """A writable connection for one journal entry, closed at once so others can read again;
        waits at most ``wait`` seconds (default ``retry_s``) for the others to finish."""
        deadline = time.monotonic() + (self.retry_s if wait is None else wait)
        with _turns(self.path).hold(write=True, deadline=deadline, path=self.path):
            bundle = self._open(write=True, deadline=deadline)
            try:
                yield bundle
            finally:
                bundle.close()

    def query(self, fn: Callable[[Bundle], T]) -> T:
        """``fn(bundle)`` over a short read-only connection."""
        with self.read() as bundle:
            return fn(bundle)

    def _open(self, *, write: bool, deadline: float) -> Bundle:
        delay = 0.01
        while True:
            try:
                return Bundle.open(self.path, write=write)
            except BundleBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, 0.2)


_PID = re.compile(r"\bPID (\d+)")


def busy_reason(exc: BaseException) -> str:
    """Who keeps the bundle busy, in a few words for the cockpit's saving line: ``gpuwb ingest in
    progress, PID 4242``; ``PID 4242 (python3) is writing it``; ``this cockpit is reading it``."""
    text = str(exc)
    if "in this cockpit" in text:
        return "this cockpit is reading it"
    found = _PID.search(text)
    if found is None:
        return "another process is writing it"
    pid = int(found.group(1))
    command = _command_of(pid)
    if command is None:
        return f"PID {pid} is writing it"
    if command.startswith("gpuwb"):
        return f"{command} in progress, PID {pid}"
    return f"PID {pid} ({command}) is writing it"


def _command_of(pid: int) -> str | None:
    """``gpuwb SUBCOMMAND`` for a gpuwb process, else the program's name; None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    for n, arg in enumerate(argv):
        if arg == "workbench.cli" or os.path.basename(arg) == "gpuwb":
            sub = next((a for a in argv[n + 1:] if not a.startswith("-")), None)
            return f"gpuwb {sub}" if sub else "gpuwb"
    return os.path.basename(argv[0])
