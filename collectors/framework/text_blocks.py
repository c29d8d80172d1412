"""Several tools' text pasted into one file, read line by line: the dispatcher nvidia-smi, DCGM and the
nvidia-bug-report share.

Responders paste ``nvidia-smi -q``, the default table, ``dcgmi diag`` and ``dmon`` one after another into
one file. Each tool's format is a :data:`Opener`: given a line no block has taken, it starts the block the
line opens (or reads the one-line fact it is) and returns its rows, or returns None when the line is not
its own. :class:`TextParser` offers each line to the open block first, then to the openers in order; a
line nobody takes is one counted skip. A collector's module lists its openers (``OPENERS``) in the order
they must be tried, so a new format is a block class and one opener, in the module of its tool.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from collectors.base import ParseContext, Row, Skipped
from collectors.framework.lazy_re import lazy_regex

if TYPE_CHECKING:
    from collectors.nvml.health import HealthTracker

_BORDER = lazy_regex(r"[+|][-=+| ]*[+|]?")
_NUMBER = lazy_regex(r"\s*(-?\d+(?:\.\d+)?)")
_HEX = lazy_regex(r"0x[0-9a-fA-F]+")
_LOCAL = lazy_regex(r"(\d{4})[/-](\d\d)[/-](\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s*$")


@dataclass
class Clock:
    """Where a block's readings got their time."""

    ts: datetime | None = None
    origin: str = "none"
    approx: bool = False
    raw: str | None = None


class Block(abc.ABC):
    """A run of lines in one format. ``feed`` returns (rows, whether the line belonged here)."""

    def __init__(self, parser: TextParser) -> None:
        self.p = parser

    @abc.abstractmethod
    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        """Rows for this line, and False when the line starts something else."""

    def close(self) -> list[Row]:
        return []


Opener = Callable[["TextParser", int, str, str], "Iterable[Row] | None"]
"""``opener(parser, n, line, stripped)``: the rows of the block or fact this line starts, None if not its line."""


class TextParser:
    """Feeds each line to the block that is open, or to the first opener that takes it."""

    def __init__(self, ctx: ParseContext, openers: Sequence[Opener], tracker: HealthTracker, *, host: str | None = None,
                 snapshot: tuple[datetime, str] | None = None, unknown: str = "not a known tool's output") -> None:
        """``snapshot``: the time and origin for outputs without a clock, when the caller knows better
        than the file's capture time or mtime (the bug report's ``date`` line). ``unknown``: the skip
        reason of a line no opener takes. ``tracker``: the health tracker every block's samples go through,
        so a counter that grows between two pasted outputs is one event."""
        self.ctx = ctx
        self.host = host
        self.openers = tuple(openers)
        self.unknown = unknown
        self.tracker = tracker
        self.block: Block | None = None
        self.pending_date: tuple[datetime, str] | None = None
        """A date line seen on its own, for the next block that prints no clock (``date; nvidia-smi``)."""
        self.dcgm_host: str | None = None
        self.dcgm_pod: str | None = None
        """The host and pod DCGM's ``Executing in Pod P on Host H`` names, for the DCGM blocks after it."""
        self.snapshot = snapshot or ctx.snapshot_time()

    def clock(self, ts: datetime | None = None, raw: str | None = None) -> Clock:
        if ts is not None:
            return Clock(ts, "localtime", True, raw)
        when, origin = self.snapshot
        return Clock(when, origin, when is not None and origin != "captured", None) if when else Clock()

    def feed(self, n: int, line: str) -> Iterator[Row]:
        if "\x00" in line:
            line = line.replace("\x00", "")
        if self.block is not None:
            rows, taken = self.block.feed(n, line)
            yield from rows
            if taken:
                return
            yield from self.block.close()
            self.block = None
        stripped = line.strip()
        if not stripped or _BORDER.fullmatch(stripped):
            return
        for opener in self.openers:
            rows = opener(self, n, line, stripped)
            if rows is not None:
                yield from rows
                return
        yield Skipped(n, self.unknown)

    def close(self) -> Iterator[Row]:
        if self.block is not None:
            yield from self.block.close()
            self.block = None

    def open(self, block: Block, n: int, line: str) -> list[Row]:
        """Make ``block`` the open one and give it its first line."""
        self.block = block
        rows, _ = block.feed(n, line)
        return rows


def number(text: str | None) -> float | None:
    """The leading number of ``445.38 W``, ``97 %``, ``16x``; None for N/A and words."""
    if text is None:
        return None
    m = _NUMBER.match(text)
    return float(m.group(1)) if m else None


def integer(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if _HEX.fullmatch(text):
        return int(text, 16)
    n = number(text)
    return int(n) if n is not None else None


def parse_local(text: str) -> datetime | None:
    """``2024/07/08 08:11:21.123`` (--query-gpu timestamp) or ``2026-01-16 09:50:03.010`` (DCGM logs)."""
    m = _LOCAL.match(text.strip())
    if not m:
        return None
    frac = m.group(7) or "0"
    try:
        return datetime(*(int(g) for g in m.groups()[:6]), int(frac.ljust(6, "0")), tzinfo=timezone.utc)
    except ValueError:
        return None
