"""The time stamps of a drill's native lines, read and rewritten: what the harder drill levels need to
shift one host's clock (every line that host wrote, in its own shape) and to merge several ranks'
logs into one ``srun -l`` file in the order the lines were printed.

Each :class:`Shape` is one stamp shape of :mod:`workbench.prevention.drill.lines` (or of a generator's
own lines), with how to read it and how to write a time back in the same shape, so a shifted line
differs from the original only in its stamp. Shapes without a year (glog, vLLM, journald, ``%b %d``)
take it from the drill. A line whose stamp matches no shape is left as it is: a skewed host's line
that cannot be shifted is a drill that is a little easier, never a wrong one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

UTC = timezone.utc


@dataclass(frozen=True)
class Shape:
    """One stamp shape: where it is in a line, how to read it, how to write a time back."""

    name: str
    pattern: re.Pattern[str]
    read: Callable[[re.Match[str], int], datetime]
    write: Callable[[re.Match[str], datetime], str]


def _iso_read(m: re.Match[str], year: int) -> datetime:
    frac = m.group("frac") or ""
    return (datetime.strptime(m.group("t"), f"%Y{m.group('d1')}%m{m.group('d1')}%d{m.group('sep')}%H:%M:%S")
            .replace(tzinfo=UTC, microsecond=int(frac.ljust(6, "0")) if frac else 0))


def _iso_write(m: re.Match[str], when: datetime) -> str:
    d1, frac = m.group("d1"), m.group("frac") or ""
    text = f"{when:%Y}{d1}{when:%m}{d1}{when:%d}{m.group('sep')}{when:%H:%M:%S}"
    if frac:
        text += m.group("dot") + f"{when.microsecond:06d}"[:len(frac)]
    return text


def _glog_read(m: re.Match[str], year: int) -> datetime:
    md = m.group("md")
    when = datetime.strptime(f"{year} {md[:-2]} {md[-2:]} {m.group('hms')}", "%Y %m %d %H:%M:%S")
    return when.replace(tzinfo=UTC, microsecond=int(m.group("us")))


def _glog_write(m: re.Match[str], when: datetime) -> str:
    md = f"{when.month:02d}{when.day:02d}" if len(m.group("md")) == 4 else f"{when.month}{when.day:02d}"
    return f"{m.group('lvl')}{md} {when:%H:%M:%S}.{when.microsecond:06d}{m.group('salt') or ''}"


def _vllm_read(m: re.Match[str], year: int) -> datetime:
    return datetime.strptime(f"{year}-{m.group('t')}", "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


def _ctime_read(m: re.Match[str], year: int) -> datetime:
    return datetime.strptime(" ".join(m.group("t").split()), "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)


def _ctime_write(m: re.Match[str], when: datetime) -> str:
    return f"{when:%a %b} {when.day:2d} {when:%H:%M:%S %Y}"


def _syslog_read(m: re.Match[str], year: int) -> datetime:
    return datetime.strptime(f"{year} {m.group('t')}", "%Y %b %d %H:%M:%S").replace(tzinfo=UTC)


def _sel_read(m: re.Match[str], year: int) -> datetime:
    return datetime.strptime(f"{m.group('date')} {m.group('hms')}", "%m/%d/%Y %H:%M:%S").replace(tzinfo=UTC)


SHAPES: tuple[Shape, ...] = (
    Shape("iso", re.compile(r"(?P<t>\d{4}(?P<d1>[-/])\d{2}(?P=d1)\d{2}(?P<sep>[ T])\d{2}:\d{2}:\d{2})"
                            r"(?:(?P<dot>[.,])(?P<frac>\d{1,6}))?"), _iso_read, _iso_write),
    Shape("glog", re.compile(r"(?P<lvl>[IWEF])(?P<md>\d{3,4}) (?P<hms>\d{2}:\d{2}:\d{2})\.(?P<us>\d{6})"
                             r"(?P<salt>\d{3})?\b"),
          _glog_read, _glog_write),
    Shape("vllm", re.compile(r"^(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<t>\d{2}-\d{2} \d{2}:\d{2}:\d{2})"),
          _vllm_read, lambda m, when: f"{m.group('lvl')} {when:%m-%d %H:%M:%S}"),
    Shape("ctime", re.compile(r"(?P<t>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})"),
          _ctime_read, _ctime_write),
    Shape("syslog", re.compile(r"^(?P<t>[A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2})(?= )"), _syslog_read,
          lambda m, when: f"{when:%b %d %H:%M:%S}"),
    Shape("ipmi_sel", re.compile(r"(?P<date>\d{2}/\d{2}/\d{4}) \| (?P<hms>\d{2}:\d{2}:\d{2})"), _sel_read,
          lambda m, when: f"{when:%m/%d/%Y} | {when:%H:%M:%S}"),
)
"""The stamp shapes a drill writes, earliest in the line wins (``[rank3]:[E626 …`` is glog even though
the iso shape might match later text)."""

DMESG = re.compile(r"^\[\s*(\d+)\.(\d{6})\]")
"""dmesg without -T: seconds since boot, which a skewed clock does not change (its boot time does)."""


def find(line: str) -> tuple[Shape, re.Match[str]] | None:
    """The line's first stamp (the one nearest its start) and its shape, or None."""
    best: tuple[Shape, re.Match[str]] | None = None
    for shape in SHAPES:
        m = shape.pattern.search(line)
        if m and (best is None or m.start() < best[1].start()):
            best = (shape, m)
    return best


def stamp(line: str, year: int) -> datetime | None:
    """The time a line is stamped with (UTC), or None where it carries no stamp of a known shape."""
    found = find(line)
    if found is None:
        return None
    shape, m = found
    try:
        return shape.read(m, year)
    except ValueError:
        return None


def shift(line: str, by: timedelta, year: int) -> str:
    """The line with its leading stamps moved by ``by``, each in its shape; unchanged without one. A
    journal line carries two (``Mar 02 10:15:42 node kubelet[2211]: I0302 10:15:42.118421 …``): both
    are the host's clock."""
    head, head_is_journal = "", False
    for _ in range(2):
        found = find(line)
        if found is None:
            break
        shape, m = found
        if head and (not head_is_journal or shape.name != "glog" or m.start() > 40):
            break  # past a journal header only the klog header is the host's stamp; later ones are text
        head_is_journal = shape.name == "syslog"
        try:
            when = shape.read(m, year) + by
        except ValueError:
            break
        head += line[:m.start()] + shape.write(m, when)
        line = line[m.end():]
    return head + line


def timeline(lines: list[str], year: int, start: datetime) -> list[datetime]:
    """Each line's time, a line without a stamp (a traceback's body) taking its predecessor's, the
    first ones ``start``: the key that orders merged logs as their lines were printed."""
    out, last = [], start
    for line in lines:
        last = stamp(line, year) or last
        out.append(last)
    return out


def merge(streams: list[tuple[str, list[str]]], year: int, start: datetime) -> list[str]:
    """Several streams' lines in time order, each line under its stream's label; stable (ties keep the
    streams' order, and each stream's own order is never changed since its times never go back)."""
    keyed = []
    for n, (label, lines) in enumerate(streams):
        latest: datetime | None = None
        for i, (when, line) in enumerate(zip(timeline(lines, year, start), lines)):
            latest = when if latest is None else max(latest, when)
            keyed.append(((latest, n, i), f"{label}{line}"))
    return [line for _, line in sorted(keyed, key=lambda item: item[0])]
