"""Times, durations, latencies and sizes as the postmortem's reader reads them, and a model value read back as
a time: the summary's sentences and both templates word them the same way."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from workbench.store.row_columns import utc_naive
from workbench.times import parse_iso


def as_time(value: Any) -> datetime | None:
    """A model value (a datetime, an ISO string, nothing) as a naive UTC time; None when it is none."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return utc_naive(value)
    try:
        return parse_iso(str(value))
    except ValueError:
        return None


def fmt_ts(value: Any, approx: bool = False) -> str:
    """``2026-01-01 10:02:03``, with ``~`` when approximate; a dash for none."""
    ts = as_time(value)
    if ts is None:
        return "—"
    return ("~" if approx else "") + ts.strftime("%Y-%m-%d %H:%M:%S")


def fmt_duration(value: timedelta | None) -> str:
    """``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``; a dash for none."""
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def fmt_ms(value: float | None) -> str:
    """Milliseconds as ``850 ms``, ten seconds and more as ``12.5 s``; a dash for none."""
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def fmt_size(size: int | None) -> str:
    """Bytes in the largest binary unit up to GiB; a dash for none."""
    if size is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)
