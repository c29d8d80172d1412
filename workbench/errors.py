"""The failures gpuwb expects: each is told to the user as one line and exit status 2.

Everything raised from the command line that is not a :class:`GpuwbError` (nor the file system's
or DuckDB's own refusal) is a bug, reported as an internal error with its traceback kept in a file.
"""

from __future__ import annotations

import signal
import sys


class GpuwbError(Exception):
    """An expected failure: bad usage, unreadable input, a bundle that cannot be used."""


class UsageError(GpuwbError):
    """A mistake in how gpuwb was called (an option that contradicts the file system, an unknown name)."""


class InputError(GpuwbError, ValueError):
    """A value the user gave that cannot be read (a time, a journal field). Also a ValueError, so that
    callers parsing values with ``except ValueError`` keep working."""


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the process happens to be, like Ctrl-C's KeyboardInterrupt.

    Slurm, Kubernetes and systemd stop a job with SIGTERM (a closed terminal sends SIGHUP); Python's default
    for both is to die at once, leaving a capture unwritten and an ingest's committed artifacts unsealed.
    Being a KeyboardInterrupt, it takes every path Ctrl-C already takes (roll back the open group, seal what
    was committed as incomplete); the command line then exits 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_received: list[int] = []
"""The signals raised as interrupts in this process, newest last (see :func:`as_interrupt`)."""
_deferring = [0]


def on_signal(signum: int, frame: object = None) -> None:
    """The command line's handler for SIGINT, SIGTERM and SIGHUP: raise the interrupt the signal means, where the
    main thread is (none inside :class:`signals_deferred`)."""
    _received.append(signum)
    if _deferring[0]:
        return
    raise interrupt_for(signum)


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """Ctrl-C's KeyboardInterrupt for SIGINT, :class:`Terminated` for SIGTERM and SIGHUP."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def as_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """``exc`` as the interrupt it stands for, else None. A signal that arrives while DuckDB runs a statement
    has its handler's exception swallowed by DuckDB, which stops the statement and raises ``RuntimeError('Query
    interrupted')`` instead: without this, a SIGTERM during a commit would be an internal error and skip the
    clean-up (roll back the open group, seal what was committed) that Ctrl-C's KeyboardInterrupt gets."""
    if isinstance(exc, KeyboardInterrupt):
        return exc
    duckdb = sys.modules.get("duckdb")  # looked up, not imported: commands without a bundle never load DuckDB
    interrupted = (isinstance(exc, RuntimeError) and str(exc).startswith("Query interrupted")) or (
        duckdb is not None and isinstance(exc, duckdb.InterruptException))
    if interrupted and _received:
        return interrupt_for(_received[-1])
    return None


class signals_deferred:  # noqa: N801 - used as a context manager, like contextlib's
    """Hold SIGINT, SIGTERM and SIGHUP back while an interrupted command seals what it has and re-raises its
    interrupt: a second signal (a scheduler's follow-up SIGTERM, a second Ctrl-C) must not cut the seal short.
    The command is ending on the first signal, so the ones held back are dropped."""

    def __enter__(self) -> signals_deferred:
        _deferring[0] += 1
        return self

    def __exit__(self, *exc: object) -> None:
        _deferring[0] -= 1

