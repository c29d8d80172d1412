"""The failures gpuwb expects: each is told to the user as one line and exit status 2.

Everything raised from the command line that is not a :class:`GpuwbError` (nor the file system's
or DuckDB's own refusal) is a bug, reported as an internal error with its traceback kept in a file.
"""

from __future__ import annotations


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
