"""Line prefixes and timestamps: what launchers (torchrun, mpirun, srun) and loggers (glog, Python logging,
NCCL_DEBUG_TIMESTAMP_FORMAT, syslog) put before a line, and the time an undated line takes from its
neighbours."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from collectors.base import Event, ParseContext, Row, infer_year, to_utc
from collectors.framework.lazy_re import lazy_regex
from collectors.nccl.state import ReaderState

_TIME_CORE = lazy_regex(rb":[0-5]\d:[0-5]\d")
"""Every supported timestamp has HH:MM:SS; ':' makes this a literal-led, C-speed search."""

_ISO = r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_PREFIX = lazy_regex(rf"""\s*(?:
    (?P<iso>{_ISO})(?:\s*[:|]\s+|\s+-\s+|\s+|$)
  | \[(?P<biso>{_ISO})\](?::\s*|\s*)
  | \[(?P<hflvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\|(?P<hffile>[^\]\s]+)\]\s+(?P<hfiso>{_ISO})\s*(?:>>\s*)?
  | \[(?P<bglog>[EWIFD]\d{{3,4}}\ \d\d:\d\d:\d\d(?:\.\d{{1,9}})?)(?:\s+\d+)?\s+(?P<bfile>[^\]\s]+)\]\s*
  | (?P<glog>[EWIFD]\d{{4}}\ \d\d:\d\d:\d\d(?:\.\d{{1,9}})?)\s+\d+\s+(?P<gfile>[^\]\s]+)\]\s*
  | \[(?P<llvl>[EWIF])\ (?P<lfile>[\w.\-/]+:\d+)\]\s*
  | \[rank(?P<rank>\d+)\]:\s?
  | \[[A-Za-z][\w.\-]{{0,30}}\]\s+(?=\d{{4}}-\d\d-\d\d[T\ _]\d\d:)
  | \[(?P<role>[A-Za-z_][A-Za-z_\-]*?)(?P<lrank>\d+)\]:\s?
  | \[(?P<mjob>\d+),(?P<mrank>\d+)\]<(?:stdout|stderr)>:\s?
  | (?P<vlvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\ (?P<vdate>\d\d-\d\d\ \d\d:\d\d:\d\d)(?:\.\d+)?\s+
        (?:\[?[\w.\-]+:\d+\]\s*)?
  | (?P<plvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]+):
  | (?P<syslog>[A-Z][a-z]{{2}}\ [\ \d]\d\ \d\d:\d\d:\d\d)\ (?P<shost>[\w.\-]+)\ (?P<sproc>[^\s:\[]+)(?:\[\d+\])?:\s
  | (?P<srun>\d{{1,5}}):\ (?=\S)
)""", re.X)
_GLOG_PARTS = lazy_regex(r"[EWIFD](\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
_VDATE_PARTS = lazy_regex(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)()")
_SYSLOG_PARTS = lazy_regex(r"([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)()")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}


@dataclass
class Stamp:
    ts: datetime
    origin: str
    raw: str
    approx: bool = False


@dataclass
class Prefix:
    rest: str
    stamp: Stamp | None = None
    rank: int | None = None
    local_rank: int | None = None
    mpi_rank: int | None = None
    task: int | None = None
    src: str | None = None
    host: str | None = None
    from_launcher: bool = False
    """``rank`` is the launcher's task number (srun -l's label, mpirun's rank), no rank the line states."""


_ISO_PARTS = lazy_regex(r"(\d{4}-\d\d-\d\d)[T _](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$")


def iso_stamp(text: str) -> Stamp | None:
    """ISO-8601-like text (``,`` or ``.`` fraction, nanoseconds, ``_`` as torchelastic writes it) as UTC."""
    m = _ISO_PARTS.match(text.strip())
    if not m:
        return None
    day, clock, frac, zone = m.groups()
    iso = f"{day}T{clock}" + (f".{(frac + '000000')[:6]}" if frac else "")
    if zone and zone != "Z":
        iso += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return Stamp(to_utc(when), "iso", text.strip())


def line_prefix(text: str, ctx: ParseContext) -> Prefix:
    """Strip launcher prefixes and timestamps off the front of a line, remembering what they said."""
    out = Prefix(rest=text)
    first = text.lstrip()[:1]
    if not (first.isdigit() or first == "[" or "A" <= first <= "Z"):
        return out  # every prefix starts with a digit, '[' or a capital (an NCCL line with its host does not)
    pos = 0
    for _ in range(8):
        m = _PREFIX.match(text, pos)
        if not m or m.end() == pos:
            break
        pos = m.end()
        g = m.groupdict()
        if g["rank"] is not None:
            out.rank = int(g["rank"])
        elif g["lrank"] is not None:
            out.local_rank = int(g["lrank"])
        elif g["mrank"] is not None:
            out.mpi_rank = int(g["mrank"])
        elif g["srun"] is not None:
            out.task = int(g["srun"])
        elif g["shost"]:
            out.host = g["shost"]
        src = g["bfile"] or g["gfile"] or g["lfile"] or g["hffile"]
        if src:
            out.src = src
        if out.stamp is None:
            out.stamp = _stamp_from(g, out.host, ctx)
    out.rest = text[pos:]
    if out.rank is None and out.local_rank is None:
        # srun's task / mpirun's rank is the global rank only when the launcher started the ranks
        # itself; over torchrun ('0: [default3]:') it numbers the node's agent, not a rank
        out.rank = out.mpi_rank if out.mpi_rank is not None else out.task
        out.from_launcher = out.rank is not None
    return out


def _stamp_from(g: dict[str, str | None], host: str | None, ctx: ParseContext) -> Stamp | None:
    if text := g["iso"] or g["biso"] or g["hfiso"]:
        return iso_stamp(text)
    if text := g["bglog"] or g["glog"]:
        m = _GLOG_PARTS.match(text)
        if not m:
            return None
        mmdd = m.group(1)
        return _yearless(int(mmdd[:-2]), int(mmdd[-2:]), m, 2, "glog_noyear", text, host, ctx)
    if text := g["vdate"]:
        m = _VDATE_PARTS.match(text)
        return _yearless(int(m.group(1)), int(m.group(2)), m, 3, "mmdd_noyear", text, host, ctx) if m else None
    if text := g["syslog"]:
        m = _SYSLOG_PARTS.match(text)
        if m and m.group(1) in _MONTHS:
            return _yearless(_MONTHS[m.group(1)], int(m.group(2)), m, 3, "syslog_noyear", text, host, ctx)
    return None


def _yearless(month: int, day: int, m: re.Match[str], first: int, origin: str, raw: str, host: str | None,
              ctx: ParseContext) -> Stamp | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    year, approx = infer_year(month, day, ctx.reference_for(host or ctx.host))
    hour, minute, sec = (int(m.group(first + k)) for k in range(3))
    frac = m.group(first + 3) or ""
    try:
        when = datetime(year, month, day, hour, minute, sec, int((frac + "000000")[:6]), tzinfo=timezone.utc)
    except ValueError:
        return None
    return Stamp(when, origin, raw, approx)


class TimeLines(ReaderState):
    """Dates the undated: the lines between the selected ones still carry time."""

    def _date_gap(self, data: bytes, start: int, end: int) -> Iterator[Row]:
        """Lines skipped without reading still carry time for their undated neighbours."""
        if self.waiting:
            for m in _TIME_CORE.finditer(data, start, end):
                stamp = self._stamp_at(data, m.start(), start)
                if stamp is not None:
                    yield from self._dated(stamp)
                    break
            else:
                return
        hi, window = end, 4096
        while hi > start:
            lo = max(start, hi - window)
            for m in reversed(list(_TIME_CORE.finditer(data, lo, hi))):
                stamp = self._stamp_at(data, m.start(), start)
                if stamp is not None:
                    self.last = stamp
                    return
            if lo == start:
                return
            hi, window = lo + 16, window * 8

    def _stamp_at(self, data: bytes, pos: int, floor: int) -> Stamp | None:
        begin = max(floor, data.rfind(b"\n", floor, pos) + 1)
        if pos - begin > 100:
            return None
        head = data[begin:begin + 200]
        return line_prefix(head.decode("utf-8", "replace"), self.ctx).stamp

    def _dated(self, stamp: Stamp) -> Iterator[Row]:
        self.last = stamp
        if self.waiting:
            for event in self.waiting:
                self._neighbour(event, stamp)
            yield from self.waiting
            self.waiting = []

    @staticmethod
    def _neighbour(event: Event, stamp: Stamp) -> None:
        event.ts, event.ts_approx, event.ts_origin = stamp.ts, True, "neighbour"
