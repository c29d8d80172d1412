"""ISO-8601 in and out: the one pattern of an ISO time, its reading as UTC, and the collectors' one spelling of
a time they write. Every wrapper rule of wrappers.py and every collector that reads an ISO stamp uses these."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from collectors.base import MONTHS, infer_year, to_utc
from collectors.framework.lazy_re import lazy_regex

ISO = (r"(?P<date>\d{4}-\d\d-\d\d)[T _](?P<clock>\d\d:\d\d:\d\d)(?:(?P<sep>[.,])(?P<frac>\d{1,9}))?"
       r"(?P<tz>Z|[+-]\d\d(?::?\d\d)?)?")
"""The one ISO-8601 timestamp pattern (``T``, space or torchelastic's ``_``; ``.`` or ``,`` fraction up to
nanoseconds; ``Z`` or an offset); :func:`iso_time` turns its match into UTC."""
ISO_RE = lazy_regex(ISO)


def iso_time(m: re.Match[str]) -> datetime | None:
    """UTC time of an :data:`ISO` match; no zone means UTC (how every collector here reads it)."""
    frac = (m.group("frac") or "")[:6].ljust(6, "0")
    tz = m.group("tz") or "+00:00"
    if tz == "Z":
        tz = "+00:00"
    elif ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:] or '00'}"
    try:
        when = datetime.fromisoformat(f"{m.group('date')}T{m.group('clock')}.{frac}{tz}")
    except ValueError:
        return None
    return when.astimezone(timezone.utc)


def parse_iso(text: str) -> datetime | None:
    """ISO-8601-like text as UTC, or None when it is not one. The collectors' one ISO reader: a capture
    header's time and a log line's time are read the same way."""
    m = ISO_RE.fullmatch(text.strip())
    return iso_time(m) if m else None


def format_iso(when: datetime, timespec: str = "microseconds") -> str:
    """``when`` as UTC ISO-8601 with ``Z`` (naive is UTC already): the collectors' one spelling of a time
    they write into an artifact (a scrape's ``time=`` mark), which :func:`parse_iso` reads back."""
    return to_utc(when).isoformat(timespec=timespec).replace("+00:00", "Z")


def syslog_time(month_name: str, day: str, clock: str, reference: datetime | None) -> datetime | None:
    """A syslog stamp without a year (``Mar  4 10:11:12``) in UTC, its year the one that puts it at or before
    ``reference`` (:func:`collectors.base.infer_year`); None for a month or clock that cannot be."""
    month = MONTHS.get(month_name.lower())
    if not month:
        return None
    year, _ = infer_year(month, int(day), reference)
    try:
        return datetime.strptime(f"{year} {month} {day} {clock}", "%Y %m %d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
