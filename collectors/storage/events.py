"""What the storage readers share: an event of a snapshot (dated by the output, else the capture or the file),
and when a disk's await is a stall (against the same device's baseline, never %util)."""

from __future__ import annotations

from datetime import datetime

from collectors.base import Event, ParseContext

AWAIT_FLOOR_MS = 20.0
"""Below this no await is a stall, however many times its baseline it is."""
AWAIT_FACTOR = 5.0
SINGLE_REPORT_AWAIT_MS = 200.0
"""With one report and nothing to compare against, only an extreme average is flagged."""


def snapshot_event(ctx: ParseContext, kind: str, message: str, severity: str, attrs: dict, line: int | None,
                   ts: datetime | None = None, origin: str | None = None) -> Event:
    if ts is None:
        ts, origin = ctx.snapshot_time()
    origin = origin or "iso"
    return Event(kind=kind, message=message, ts=ts, ts_origin=origin if ts else "none",
                 ts_approx=origin in ("mtime", "local_as_utc"), severity=severity, attrs=attrs, line=line)


def await_outlier(value: float, baseline: float | None) -> bool:
    if value < AWAIT_FLOOR_MS:
        return False
    if baseline is None:
        return value >= SINGLE_REPORT_AWAIT_MS
    return value >= AWAIT_FACTOR * max(baseline, 0.1)
