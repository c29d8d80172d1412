"""Journal writes that wait for a busy bundle: in order, off the event loop, never dropped unsaid.

An ingest (or a merge, or a capture into the bundle) holds it for writing for minutes; DuckDB lets no
other process in meanwhile. A note written then must neither freeze the cockpit nor be lost: each
write is queued with the moment the responder made it (``at``) and one thread lands them one after
another, in the order they were made, retrying while the bundle is busy. Until they land the
cockpit says so ("saving 2 journal entries… (bundle busy: gpuwb ingest in progress, PID 4242)").
A write that cannot land within :data:`WRITE_BOUND_S`, that the bundle refuses, or that the
responder abandons by quitting comes back to the cockpit as not saved, with what it held, so the
form can be shown again with the text still in it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from workbench.store.bundle import Bundle, BundleBusy
from workbench.store.row_columns import now_utc
from workbench.store.shared_bundle import SharedBundle, busy_reason
from workbench.tui.screens.base import STORAGE_ERRORS, one_line

WRITE_BOUND_S = 600.0
"""How long one entry keeps trying before it is handed back as not saved: a generous ten minutes,
longer than an ingest of a day's logs; the responder sees it waiting the whole time."""
ATTEMPT_S = 0.5
"""One attempt's wait for the bundle; between attempts the writer says why it waits."""
PAUSE_S = 0.5


@dataclass
class Pending:
    """One journal write: ``write(bundle, at)`` puts it in; ``what`` names it in a message
    (``note "GPU reseated"``); ``done`` is said when it landed; ``reopen(problem)``, if given, shows
    its form again, filled in as it was, with ``problem`` on the form's error line."""

    what: str
    write: Callable[[Bundle, datetime], object]
    done: str
    at: datetime = field(default_factory=now_utc)
    reopen: Callable[[str], None] | None = None
    deadline: float = 0.0


class JournalWriter:
    """The queue and its thread. ``on_status(text)`` (empty when nothing waits), ``on_landed(item)``
    and ``on_failed(item, reason)`` are called from the writer's thread."""

    def __init__(self, store: SharedBundle, *, on_status: Callable[[str], None],
                 on_landed: Callable[[Pending], None], on_failed: Callable[[Pending, str], None],
                 bound_s: float = WRITE_BOUND_S) -> None:
        self.store = store
        self.bound_s = bound_s
        self._on_status, self._on_landed, self._on_failed = on_status, on_landed, on_failed
        self._queue: deque[Pending] = deque()
        self._cond = threading.Condition()
        self._attempting = False
        self._thread: threading.Thread | None = None
        self._said = ""
        self.busy = ""
        """Who held the bundle at the last attempt that found it busy (``busy_reason``); "" if none did."""

    @property
    def pending(self) -> int:
        """Entries not landed yet."""
        with self._cond:
            return len(self._queue)

    def submit(self, item: Pending) -> None:
        """Queue ``item`` behind the others; the thread starts if it is not running."""
        item.deadline = time.monotonic() + self.bound_s
        with self._cond:
            self._queue.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpuwb-journal-writer", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def abandon(self) -> list[Pending]:
        """Stop trying: the entries not landed, in order. An attempt under way finishes first (it
        lasts at most ATTEMPT_S), so an entry is either in the journal or in this list, never both.
        The caller clears what it shows of the saving line."""
        with self._cond:
            while self._attempting:
                self._cond.wait()
            left = list(self._queue)
            self._queue.clear()
            self._said = ""
            self._cond.notify_all()
        return left

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._thread = None
                    return
                item = self._queue[0]
                self._attempting = True
            try:
                kind, reason = self._attempt(item)
            except BaseException:  # not an error of the write (_attempt says those): let abandon() go on
                with self._cond:
                    self._attempting, self._thread = False, None
                    self._cond.notify_all()
                raise
            with self._cond:
                self._attempting = False
                self._cond.notify_all()
                retry = kind == "busy" and time.monotonic() < item.deadline
                if not retry:
                    self._queue.popleft()  # still the head: abandon() waited for this attempt
                left = len(self._queue)
            self.busy = reason if kind == "busy" else ""
            if retry:
                self._status(f"saving {left} journal entr{'y' if left == 1 else 'ies'}… (bundle busy: {reason})")
                with self._cond:
                    self._cond.wait(PAUSE_S)  # abandon() wakes it
                continue
            if kind == "landed":
                self._on_landed(item)
            elif kind == "busy":
                bound = f"{self.bound_s / 60:g} min" if self.bound_s >= 120 else f"{self.bound_s:g} s"
                self._on_failed(item, f"the bundle stayed busy for {bound} ({reason})")
            else:
                self._on_failed(item, reason)
            if not left:
                self._status("")

    def _attempt(self, item: Pending) -> tuple[str, str]:
        """("landed", ""), ("busy", who holds it) or ("failed", why)."""
        try:
            with self.store.write(wait=ATTEMPT_S) as bundle:
                item.write(bundle, item.at)
        except BundleBusy as exc:
            return "busy", busy_reason(exc)
        except STORAGE_ERRORS as exc:  # refused for good (a damaged bundle, a value the journal rejects)
            return "failed", one_line(exc)
        except Exception as exc:  # a bug: said, not lost with the thread
            return "failed", f"{type(exc).__name__}: {one_line(exc)}"
        return "landed", ""

    def _status(self, text: str) -> None:
        with self._cond:
            if text == self._said:
                return
            self._said = text
        self._on_status(text)
