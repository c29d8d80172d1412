"""``/proc/diskstats``: two samples (each after a ``# diskstats sample N at ISO`` line) give each device's
await over the interval, judged against its since-boot average; a device whose I/O stopped is a stall."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework.framing import parse_iso
from collectors.framework.lazy_re import lazy_regex
from collectors.storage.events import await_outlier, snapshot_event

_DISKSTATS_HEAD = lazy_regex(r"^#\s*diskstats sample (\d+) at (\S+)")


def parse_diskstats(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    # Fields after the name: reads, reads merged, sectors read, ms reading, writes, writes merged,
    # sectors written, ms writing, I/Os in flight, ms doing I/O, weighted ms (Documentation/iostats).
    snapshot, snap_origin = ctx.snapshot_time()
    previous: tuple[datetime | None, dict[str, tuple[list[int], int]]] | None = None
    current: tuple[datetime | None, dict[str, tuple[list[int], int]]] | None = None
    for n, line in ctx.lines(stream):
        if m := _DISKSTATS_HEAD.match(line):
            if previous is not None and current is not None:
                yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)
            previous, current = current, (parse_iso(m.group(2)), {})
            continue
        parts = line.split()
        if not parts or line.startswith("#"):
            continue
        if len(parts) < 14 or not all(p.isdigit() for p in parts[:2] + parts[3:14]):
            yield Skipped(n, "not a /proc/diskstats line")
            continue
        device = parts[2]
        if device.startswith(("loop", "ram", "zram")):
            continue
        if current is None or device in current[1]:
            if previous is not None and current is not None:
                yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)
            previous, current = current, (None, {})
        current[1][device] = ([int(p) for p in parts[3:14]], n)
    if previous is not None and current is not None:
        yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)


def _diskstats_interval(ctx: ParseContext, earlier: tuple[datetime | None, dict[str, tuple[list[int], int]]],
                        later: tuple[datetime | None, dict[str, tuple[list[int], int]]], snapshot: datetime | None,
                        snap_origin: str) -> Iterator[Row]:
    (t0, first), (t1, second) = earlier, later
    seconds = (t1 - t0).total_seconds() if t0 and t1 else None
    for device, (after, n) in second.items():
        if device not in first:
            continue
        before = first[device][0]
        d = [a - b for a, b in zip(after, before)]
        if any(x < 0 for x in d[:8]):
            continue
        ios = d[0] + d[4]
        busy_ms = d[3] + d[7]
        total_ios = before[0] + before[4]
        baseline = (before[3] + before[7]) / total_ios if total_ios else None
        when = t1 or snapshot
        inflight = after[8]
        if when is not None:
            labels = {"device": device}
            if ios:
                yield SeriesPoint(ts=when, name="disk.await_ms", value=busy_ms / ios, labels=labels)
            if seconds:
                yield SeriesPoint(ts=when, name="disk.util_pct", value=min(100.0, d[9] / (seconds * 10)),
                                  labels=labels)
            yield SeriesPoint(ts=when, name="disk.inflight", value=float(inflight), labels=labels)
        origin = "iso" if t1 else snap_origin
        if ios and await_outlier(busy_ms / ios, baseline):
            yield snapshot_event(ctx, "disk_await_high",
                                 f"{device}: await {busy_ms / ios:.1f} ms over the interval "
                                 f"(since-boot average {baseline or 0:.2f} ms)", "warning",
                                 {"device": device, "column": "await", "await_ms": busy_ms / ios,
                                   "baseline_ms": baseline, "ios": ios, "seconds": seconds}, n, when, origin)
        elif not ios and inflight > 0 and d[9] > 0:
            yield snapshot_event(ctx, "disk_stall",
                                 f"{device}: {inflight} request(s) in flight, none completed"
                                 + (f" in {seconds:.1f} s" if seconds else " between samples"), "error",
                                 {"device": device, "inflight": inflight, "seconds": seconds}, n, when, origin)
