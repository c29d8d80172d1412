"""Inline SVG charts for the HTML postmortem: a swim-lane timeline and a latency chart.

Hand-written SVG rather than a plotting library: the report must be one self-contained file
with no script and no external requests, render the same everywhere (printed too), and stay
byte-for-byte deterministic for golden tests. Every label is XML-escaped here, because hosts,
series names and event text come from evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from markupsafe import Markup, escape

SEVERITY_COLOURS = {"critical": "#b2182b", "error": "#d6604d", "warning": "#f4a582", "info": "#92c5de",
                    "debug": "#d1e5f0"}
MARK_COLOURS = {"start": "#b2182b", "detection": "#2166ac", "mitigation": "#5aae61", "recovery": "#1b7837"}


@dataclass
class Lane:
    """One row of the swim-lane chart: a host and layer, with event counts per time bucket."""

    label: str
    cells: list[tuple[datetime, int, str]] = field(default_factory=list)
    """(bucket start, event count, worst severity in the bucket)"""


@dataclass
class Mark:
    """A vertical line across a chart: first anomaly, detection, mitigation, recovery, an onset."""

    ts: datetime
    label: str
    kind: str


def _x(ts: datetime, start: datetime, end: datetime, left: float, width: float) -> float:
    span = (end - start).total_seconds() or 1.0
    frac = min(max((ts - start).total_seconds() / span, 0.0), 1.0)
    return round(left + frac * width, 1)


def _ticks(start: datetime, end: datetime, count: int = 6) -> list[datetime]:
    span = (end - start).total_seconds()
    if span <= 0:
        return [start]
    steps = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
    step = next((s for s in steps if span / s <= count), 86400 * max(1, int(span / 86400 / count) + 1))
    first = start.replace(second=0, microsecond=0)
    first += timedelta(seconds=(-first.timestamp()) % step)
    out = []
    tick = first
    while tick <= end:
        if tick >= start:
            out.append(tick)
        tick += timedelta(seconds=step)
    return out


def _tick_label(ts: datetime, start: datetime, end: datetime) -> str:
    return ts.strftime("%H:%M" if start.date() == end.date() else "%m-%d %H:%M")


def _axis(start: datetime, end: datetime, left: float, width: float, top: float, bottom: float) -> list[str]:
    parts = [f'<line x1="{left}" y1="{bottom}" x2="{left + width}" y2="{bottom}" class="axis"/>']
    for tick in _ticks(start, end):
        x = _x(tick, start, end, left, width)
        parts.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{bottom}" class="grid"/>')
        parts.append(f'<text x="{x}" y="{bottom + 14}" text-anchor="middle" class="tick">'
                     f'{escape(_tick_label(tick, start, end))}</text>')
    return parts


CHAR_W = 5.6
"""Approximate width of one character of the 10 px mark labels, for layout."""
LANE_CHAR_W = 6.4
"""The same for the 11 px lane labels."""


def _mark_rows(marks: Sequence[Mark], start: datetime, end: datetime, left: float,
               width: float) -> list[tuple[float, str, str, int]]:
    """Place each mark's label on the first text row where it does not overlap the previous label;
    marks at the same x share one label. Returns (x, label, kind, row)."""
    grouped: list[tuple[float, list[str], str]] = []
    for mark in sorted(marks, key=lambda m: (m.ts, m.kind)):
        if not start <= mark.ts <= end:
            continue
        x = _x(mark.ts, start, end, left, width)
        if grouped and x - grouped[-1][0] < 3:
            grouped[-1][1].append(mark.label)
        else:
            grouped.append((x, [mark.label], mark.kind))
    placed: list[tuple[float, str, str, int]] = []
    row_end: list[float] = []
    right = left + width
    for x, labels, kind in grouped:
        label = ", ".join(dict.fromkeys(labels))
        extent = len(label) * CHAR_W
        anchor = x + 3 if x + 3 + extent <= right else x - 3 - extent
        row = next((i for i, last in enumerate(row_end) if anchor > last + 6), len(row_end))
        if row == len(row_end):
            row_end.append(0.0)
        row_end[row] = anchor + extent
        placed.append((x, label, kind, row))
    return placed


def _marks(placed: list[tuple[float, str, str, int]], top: float, bottom: float, right: float) -> list[str]:
    parts = []
    for x, label, kind, row in placed:
        colour = MARK_COLOURS.get(kind, "#762a83")
        y = top + 10 + 11 * row
        anchor = "start" if x + 3 + len(label) * CHAR_W <= right else "end"
        tx = x + 3 if anchor == "start" else x - 3
        parts.append(f'<line x1="{x}" y1="{y - 9}" x2="{x}" y2="{bottom}" stroke="{colour}" stroke-width="1.5" '
                     f'stroke-dasharray="4 3"/>')
        parts.append(f'<text x="{tx}" y="{y}" text-anchor="{anchor}" class="mark" fill="{colour}">'
                     f'{escape(label)}</text>')
    return parts


def _label_rows(placed: list[tuple[float, str, str, int]]) -> int:
    return max((row for *_, row in placed), default=-1) + 1


def _frame(width: int, height: int, title: str, body: list[str]) -> Markup:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" class="chart"><title>{escape(title)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def swimlane(lanes: Sequence[Lane], start: datetime, end: datetime, bucket: timedelta, marks: Sequence[Mark],
             *, width: int = 960, title: str = "Timeline by host and layer (UTC)") -> Markup:
    """Event density per host/layer lane, coloured by worst severity, with the incident's marks."""
    labels = [_shorten(lane.label, 44) for lane in lanes]
    label_w = int(min(max((len(x) for x in labels), default=10) * LANE_CHAR_W + 16, 300))
    lane_h = 18
    plot_w = width - label_w - 20
    placed = _mark_rows(marks, start, end, label_w, plot_w)
    top = 24 + 11 * max(_label_rows(placed), 1)
    bottom = top + lane_h * max(len(lanes), 1)
    height = bottom + 30
    body = [f'<text x="4" y="14" class="title">{escape(title)}</text>']
    body += _axis(start, end, label_w, plot_w, top, bottom)
    cell_w = max(plot_w * bucket.total_seconds() / max((end - start).total_seconds(), 1.0), 1.5)
    for i, (lane, label) in enumerate(zip(lanes, labels)):
        y = top + i * lane_h
        if i % 2:
            body.append(f'<rect x="{label_w}" y="{y}" width="{plot_w}" height="{lane_h}" class="band"/>')
        body.append(f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" class="lane">{escape(label)}</text>')
        for when, count, severity in lane.cells:
            x = _x(when, start, end, label_w, plot_w)
            colour = SEVERITY_COLOURS.get(severity, SEVERITY_COLOURS["info"])
            body.append(f'<rect x="{x}" y="{y + 3}" width="{round(cell_w, 1)}" height="{lane_h - 6}" '
                        f'fill="{colour}"><title>{escape(f"{count} {severity} event(s)")}</title></rect>')
    body += _marks(placed, 20, bottom, label_w + plot_w)
    return _frame(width, height, title, body)


def _shorten(text: str, limit: int) -> str:
    """Cut the middle of a long label (pod names share their prefix and differ at the end)."""
    if len(text) <= limit:
        return text
    keep = limit - 1
    return text[: keep // 2] + "…" + text[len(text) - (keep - keep // 2):]


def line_chart(points: Sequence[tuple[datetime, float]], start: datetime, end: datetime, marks: Sequence[Mark],
               *, title: str, unit: str, threshold: float | None = None, width: int = 960,
               height: int = 240) -> Markup:
    """A metric over time (latency p99, usually) with anomaly onsets and the SLO line."""
    left, right = 70, width - 20
    placed = _mark_rows(marks, start, end, left, right - left)
    top = 24 + 11 * max(_label_rows(placed), 1)
    bottom = top + height - 70
    height = bottom + 30
    plot_w, plot_h = right - left, bottom - top
    peak = max([v for _, v in points] + [threshold or 0.0, 1e-9])
    scale = plot_h / (peak * 1.1)
    body = [f'<text x="4" y="14" class="title">{escape(title)}</text>']
    body += _axis(start, end, left, plot_w, top, bottom)
    for frac in (0.0, 0.5, 1.0):
        value = peak * 1.1 * frac
        y = round(bottom - value * scale, 1)
        body.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end" class="tick">'
                    f'{escape(_fmt_value(value, unit))}</text>')
    if threshold is not None:
        y = round(bottom - threshold * scale, 1)
        body.append(f'<line x1="{left}" y1="{y}" x2="{right}" y2="{y}" class="slo"/>')
        body.append(f'<text x="{right - 4}" y="{y - 4}" text-anchor="end" class="mark">'
                    f'{escape("SLO " + _fmt_value(threshold, unit))}</text>')
    coords = " ".join(f"{_x(ts, start, end, left, plot_w)},{round(bottom - v * scale, 1)}" for ts, v in points)
    if coords:
        body.append(f'<polyline points="{coords}" class="series"/>')
    body += _marks(placed, 20, bottom, right)
    return _frame(width, height, title, body)


def _fmt_value(value: float, unit: str) -> str:
    if unit == "ms" and value >= 1000:
        return f"{value / 1000:.1f} s"
    return f"{value:.0f} {unit}" if value >= 10 else f"{value:.2g} {unit}"
