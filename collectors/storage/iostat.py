"""``iostat -x``: old and new sysstat layouts, with or without ``-t``, several reports (also pasted together
with ``---``): the series kept, and the onset of each run of outlying awaits."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework.lazy_re import lazy_regex
from collectors.storage.events import await_outlier, snapshot_event

_IOSTAT_HOST = lazy_regex(r"^Linux \S+ \((\S+)\)\s+(\S+)")
_IOSTAT_TIME = [
    (re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)([+-]\d{4}|Z)?\s*$"), "iso"),
    (re.compile(r"^(\d\d/\d\d/\d{4}) (\d\d:\d\d:\d\d)(?: ([AP]M))?\s*$"), "us"),
    (re.compile(r"^(\d\d/\d\d/\d\d) (\d\d:\d\d:\d\d)(?: ([AP]M))?\s*$"), "us2"),
]
_AWAIT_COLUMNS = ("await", "r_await", "w_await")
IOSTAT_SERIES = frozenset({"r_s", "w_s", "rkB_s", "wkB_s", "rsec_s", "wsec_s", "r_await", "w_await", "await",
                           "f_await", "aqu_sz", "avgqu_sz", "util_pct", "tps"})
"""iostat columns kept as series: rates, latencies, queue and %util (merges and sizes are derivable noise)."""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "."))
    except ValueError:
        return None


def _column_name(col: str) -> str:
    name = col.rstrip(":")
    if name.startswith("%"):
        name = name[1:] + "_pct"
    return name.replace("/s", "_s").replace("-", "_").replace("/", "_")


def _iostat_time(line: str) -> tuple[datetime | None, str | None]:
    for pattern, style in _IOSTAT_TIME:
        m = pattern.match(line.strip())
        if not m:
            continue
        try:
            if style == "iso":
                when = datetime.fromisoformat(m.group(1))
                zone = m.group(2)
                if zone and zone != "Z":
                    sign = 1 if zone[0] == "+" else -1
                    when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5]))
                    return when.replace(tzinfo=timezone.utc), "iso"
                return when.replace(tzinfo=timezone.utc), "iso" if zone else "local_as_utc"
            fmt = "%m/%d/%Y %H:%M:%S" if style == "us" else "%m/%d/%y %H:%M:%S"
            when = datetime.strptime(f"{m.group(1)} {m.group(2)}", fmt)
            if m.group(3):
                hour = when.hour % 12 + (12 if m.group(3) == "PM" else 0)
                when = when.replace(hour=hour)
            return when.replace(tzinfo=timezone.utc), "local_as_utc"
        except ValueError:
            return None, None
    return None, None


class _AwaitWatch:
    """Per device and await column: the calmest value seen so far is the baseline (the first
    report of ``iostat -x`` is the since-boot average, a natural one); an event marks the onset of
    each run of outlying reports, not every report of a long stall."""

    def __init__(self) -> None:
        self.baseline: dict[tuple[str, str], float] = {}
        self.high: set[str] = set()

    def check(self, device: str, values: dict[str, float]) -> tuple[str, float, float | None] | None:
        found = None
        for col in _AWAIT_COLUMNS:
            if col not in values:
                continue
            baseline = self.baseline.get((device, col))
            if found is None and await_outlier(values[col], baseline):
                found = (col, values[col], baseline)
            self.baseline[(device, col)] = values[col] if baseline is None else min(baseline, values[col])
        onset = found is not None and device not in self.high
        if found is None:
            self.high.discard(device)
        else:
            self.high.add(device)
        return found if onset else None


def parse_iostat(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    host: str | None = None
    report = 0
    report_ts: datetime | None = None
    report_origin: str | None = None
    columns: list[str] | None = None
    cpu_header: list[str] | None = None
    seen_in_report: set[str] = set()
    watch = _AwaitWatch()
    snapshot, _ = ctx.snapshot_time()
    for n, line in ctx.lines(stream):
        stripped = line.strip()
        if not stripped:
            columns = None
            cpu_header = None
            continue
        if stripped == "---":
            report += 1
            seen_in_report = set()
            columns = None
            continue
        if m := _IOSTAT_HOST.match(stripped):
            host = m.group(1)
            continue
        when, origin = _iostat_time(stripped)
        if when is not None:
            report_ts, report_origin = when, origin
            report += 1
            seen_in_report = set()
            continue
        if stripped.startswith("avg-cpu:"):
            cpu_header = stripped.split()[1:]
            continue
        if cpu_header is not None:
            values = stripped.split()
            if len(values) == len(cpu_header) and (ts := report_ts or snapshot):
                for col, val in zip(cpu_header, values):
                    if col == "%iowait" and (num := _number(val)) is not None:
                        yield SeriesPoint(ts=ts, name="cpu.iowait_pct", value=num, host=host)
            cpu_header = None
            continue
        if re.match(r"^Device:?\s", stripped):
            columns = [_column_name(c) for c in stripped.split()[1:]]
            continue
        if columns is None:
            yield Skipped(n, "not an iostat line")
            continue
        parts = stripped.split()
        if len(parts) != len(columns) + 1:
            yield Skipped(n, "iostat row with an unexpected number of columns")
            continue
        device = parts[0]
        if device in seen_in_report or report == 0:
            report += 1
            seen_in_report = set()
        seen_in_report.add(device)
        values = {c: v for c, raw in zip(columns, parts[1:]) if (v := _number(raw)) is not None}
        when = report_ts or snapshot
        if when is not None:
            labels = {"device": device, "report": str(report)}
            for col, value in values.items():
                if col in IOSTAT_SERIES:
                    yield SeriesPoint(ts=when, name=f"iostat.{col}", value=value, host=host, labels=labels)
        found = watch.check(device, values)
        if found is None:
            continue
        col, value, baseline = found
        attrs = {"device": device, "column": col, "await_ms": value, "baseline_ms": baseline,
                 "util_pct": values.get("util_pct"), "aqu_sz": values.get("aqu_sz", values.get("avgqu_sz")),
                 "report": report}
        base_text = f"baseline {baseline:.2f} ms" if baseline is not None else "no earlier report"
        util = f", %util {values['util_pct']:.0f}" if "util_pct" in values else ""
        event = snapshot_event(ctx, "disk_await_high", f"{device}: {col} {value:.1f} ms ({base_text}{util})",
                               "warning", attrs, n, report_ts, report_origin)
        event.host = host
        yield event
