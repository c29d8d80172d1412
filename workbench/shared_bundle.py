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
together, a writer alone.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from workbench.bundle import Bundle, BundleBusy

T = TypeVar("T")

RETRY_S = 5.0
"""How long a read or a write waits for the other responder's connection to close."""


class _TakeTurns:
    """A readers-writer lock for one bundle file in this process; waits at most ``timeout`` seconds."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def hold(self, *, write: bool, timeout: float, path: Path) -> Iterator[None]:
        deadline = time.monotonic() + timeout
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
    def read(self) -> Iterator[Bundle]:
        """A read-only connection for one query or a few related ones."""
        with _turns(self.path).hold(write=False, timeout=self.retry_s, path=self.path):
            bundle = self._open(write=False)
            try:
                yield bundle
            finally:
                bundle.close()

    @contextmanager
    def write(self) -> Iterator[Bundle]:
        """A writable connection for one journal entry; closed at once so others can read again."""
        with _turns(self.path).hold(write=True, timeout=self.retry_s, path=self.path):
            bundle = self._open(write=True)
            try:
                yield bundle
            finally:
                bundle.close()

    def query(self, fn: Callable[[Bundle], T]) -> T:
        """``fn(bundle)`` over a short read-only connection."""
        with self.read() as bundle:
            return fn(bundle)

    def _open(self, *, write: bool) -> Bundle:
        deadline = time.monotonic() + self.retry_s
        delay = 0.01
        while True:
            try:
                return Bundle.open(self.path, write=write)
            except BundleBusy:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
