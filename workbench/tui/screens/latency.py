"""Latency: the serving curves (p99 latency, TTFT, queue, KV cache, errors, traffic) as terminal charts.

A picker on the left chooses the curves (Enter toggles one) and the server (all of them, or one
host/pod); on the right each chosen curve is a block chart over time. "All hosts" draws the worst
replica at each moment, which is what an SLO feels. The incident window is shaded and bracketed
``[ ]`` on the axis, each anomaly onset found by the ``series_anomaly`` derivation is a ``▲`` under
its column and a line under the chart (marks, not only colours). Curves are read in a worker thread:
a histogram's quantiles are computed from its buckets, which should not hold up a key press.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.widgets.option_list import Option

from workbench.analysis.findings import Analysis
from workbench.query import samples
from workbench.query.samples import Anomaly, Curve
from workbench.tui.screens.base import STORAGE_ERRORS, CockpitScreen, Spec, one_line
from workbench.tui.text import BLOCKS, clip, plain
from workbench.tui.widgets import PlainOptionList, PlainStatic

ALL_HOSTS = "*"
Y_LABEL = 9
DEFAULT_CHARTS = 4
WINDOW_SHADE = {True: "on grey27", False: "on grey85"}
"""The incident window's background in a dark and in a light theme."""
MAX_SPAN = timedelta(hours=6)
MAX_POINTS = 600
"""Points kept per curve: more than a chart has columns on any terminal."""


@dataclass(frozen=True)
class Family:
    """A metric as the picker lists it: its most telling statistic and where it was seen."""

    metric: str
    title: str
    unit: str
    hosts: tuple[str, ...]
    anomalous: bool


def families(by_metric: dict[str, list[Curve]], found: list[Anomaly]) -> list[Family]:
    """One entry per metric, in the reading order of :data:`workbench.query.samples.SERVING_ORDER`."""
    anomalous = {a.metric for a in found}
    return [Family(metric, curves[0].title, curves[0].unit, tuple(sorted({c.host for c in curves if c.host})),
                   metric in anomalous) for metric, curves in by_metric.items() if curves]


def tail(name: str, width: int) -> str:
    """The end of a long name (pods differ in their last characters): ``…6c9d7f5b8-2xkqp``."""
    return name if len(name) <= width else "…" + name[-(width - 1):]


def fmt_value(value: float | None, unit: str, metric: str = "") -> str:
    """A value as a responder reads it: 851 ms, 77.0 s, 99.5 %, 12.1/s."""
    if value is None or not math.isfinite(value):
        return "-"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if abs(value) < 1 else f"{value:.1f} s"
    if metric in ("kv_cache_usage", "error_rate", "cpu_cache_usage", "prefix_cache_hit_rate") and abs(value) <= 1.5:
        return f"{value * 100:.1f} %"
    if unit == "1/s":
        return f"{value:.3g}/s"
    return f"{value:.4g}"


def _columns(curves: list[Curve], start: datetime, end: datetime, width: int,
             lowest: bool = False) -> list[float | None]:
    """Each column's worst value over every curve, the highest or with ``lowest`` the lowest (a step line
    between scrapes; blank outside a curve)."""
    pick = min if lowest else max
    span = max((end - start).total_seconds(), 1e-9)
    out: list[float | None] = [None] * width
    for c in curves:
        own: list[float | None] = [None] * width
        for ts, v in c.points:
            col = int((ts - start).total_seconds() / span * (width - 1))
            if 0 <= col < width:
                own[col] = v if own[col] is None else pick(own[col], v)
        held: float | None = None
        first = next((i for i, v in enumerate(own) if v is not None), width)
        last = max((i for i, v in enumerate(own) if v is not None), default=-1)
        for i in range(first, last + 1):
            held = own[i] if own[i] is not None else held
            if held is not None:
                out[i] = held if out[i] is None else pick(out[i], held)
    return out


def _col(ts: datetime, start: datetime, end: datetime, width: int) -> int | None:
    span = (end - start).total_seconds()
    if span <= 0 or ts < start or ts > end:
        return None
    return int((ts - start).total_seconds() / span * (width - 1))


def render_chart(curves: list[Curve], *, metric: str, unit: str, start: datetime, end: datetime, width: int,
                 height: int, window: tuple[datetime | None, datetime | None], onsets: list[Anomaly],
                 shade: str = WINDOW_SHADE[True]) -> Text:
    """A block chart of the worst value per column, the window shaded and bracketed, onsets marked ▲."""
    plot = max(8, width - Y_LABEL - 1)
    values = _columns(curves, start, end, plot, lowest=metric in samples.LOWER_IS_WORSE)
    present = [v for v in values if v is not None]
    out = Text()
    if not present:
        out.append("no points in this range\n", "italic")
        return out
    lo = min(0.0, min(present))
    hi = max(present)
    if metric == "kv_cache_usage" and hi <= 1.0:
        hi = 1.0
    hi = hi if hi > lo else lo + 1.0
    w0 = _col(window[0], start, end, plot) if window[0] else None
    w1 = _col(window[1], start, end, plot) if window[1] else None
    if window[0] and window[0] < start:
        w0 = 0
    if window[1] and window[1] > end:
        w1 = plot - 1
    in_window = [w0 is not None and w1 is not None and w0 <= i <= w1 for i in range(plot)]
    eighths = [None if v is None else (v - lo) / (hi - lo) * height * 8 for v in values]
    for row in range(height - 1, -1, -1):
        label = fmt_value(hi, unit, metric) if row == height - 1 else fmt_value(lo, unit, metric) if row == 0 else ""
        out.append(f"{clip(label, Y_LABEL - 1):>{Y_LABEL - 1}} │", "dim")
        for i, level in enumerate(eighths):
            fill = 0 if level is None else max(0, min(8, int(round(level - row * 8))))
            if level is not None and row == 0 and fill == 0:
                fill = 1  # a value at the floor still shows that there was a sample
            out.append(BLOCKS[fill - 1] if fill else " ", shade if in_window[i] else "")
        out.append("\n")
    axis = ["─"] * plot
    if w0 is not None:
        axis[w0] = "["
    if w1 is not None:
        axis[w1] = "]"
    marks = sorted({c for c in (_col(a.onset, start, end, plot) for a in onsets if a.onset) if c is not None})
    for c in marks:
        axis[c] = "▲"
    out.append(" " * (Y_LABEL - 1) + " └", "dim")
    for _i, ch in enumerate(axis):
        out.append(ch, "bold red" if ch == "▲" else "bold" if ch in "[]" else "dim")
    out.append("\n")
    left, right = start.strftime("%H:%M"), end.strftime("%H:%M")
    times = f"{' ' * (Y_LABEL + 1)}{left}{right:>{plot - len(left)}}"
    out.append(times + "\n", "dim")
    return out


class LatencyScreen(CockpitScreen):
    """Serving curves per metric, host selectable, anomalies and the incident window marked."""

    BINDINGS = [
        Binding("s", "focus_series", "series"),
        Binding("h", "focus_hosts", "hosts"),
        Binding("space", "toggle", "toggle curve", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._families: list[Family] = []
        self._anomalies: list[Anomaly] = []
        self._hosts: list[str] = []
        self.selected: list[str] = []
        self.host: str = ALL_HOSTS
        self._curves: dict[str, list[Curve]] = {}
        """Every metric's curves on every server, read once; choosing curves or a server only redraws."""

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="lat-head")
        with Horizontal(id="lat-body"):
            with Vertical(id="lat-left"):
                yield PlainOptionList(id="lat-series", classes="panel")
                yield PlainOptionList(id="lat-hosts", classes="panel")
            yield VerticalScroll(id="lat-charts", classes="panel")
        yield from self.bottom()

    def on_mount(self) -> None:
        self.query_one("#lat-series", PlainOptionList).border_title = "Series (enter: show/hide)"
        self.query_one("#lat-hosts", PlainOptionList).border_title = "Server"
        self.query_one("#lat-charts").border_title = "Charts"
        self.query_one("#lat-head", PlainStatic).update(Text("Serving series · reading…", "dim"))
        super().on_mount()
        self.load()

    @work(thread=True, exclusive=True, group="latency-load")
    def load(self) -> None:
        try:
            with self.store.read() as bundle:
                by_metric = samples.curves(bundle, max_points=MAX_POINTS)
                found = samples.anomalies(bundle)
        except STORAGE_ERRORS as exc:
            self.cockpit.from_thread(self._not_read, one_line(exc))
            return
        self.cockpit.from_thread(self._loaded, by_metric, found)

    def _not_read(self, why: str) -> None:
        self.query_one("#lat-head", PlainStatic).update(plain(f"Serving series not read: {why}", style="bold red"))

    def _loaded(self, by_metric: dict[str, list[Curve]], found: list[Anomaly]) -> None:
        self._curves = by_metric
        self._anomalies = found
        self._families = families(by_metric, found)
        self._hosts = sorted({c.host for curves in by_metric.values() for c in curves if c.host})
        if not self._families:
            self.query_one("#lat-body").display = False
            self.query_one("#lat-head", PlainStatic).update(Text(
                "No serving series in this bundle (training incidents have none): GPUs (g) and Timeline (t) "
                "hold the GPU side.", "italic"))
            return
        flagged = [f.metric for f in self._families if f.anomalous]
        self.selected = (flagged or [f.metric for f in self._families])[:DEFAULT_CHARTS]
        self._paint_picker()
        hosts = self.query_one("#lat-hosts", PlainOptionList)
        hosts.add_option(Option(plain(f"all: worst of {len(self._hosts)}"), id=ALL_HOSTS))
        room = 20 if self.size.width < 120 else 30
        hosts.add_options(Option(plain(tail(h, room)), id=h) for h in self._hosts)
        hosts.highlighted = 0
        self._paint_head()
        self.query_one("#lat-series", PlainOptionList).focus()
        self.repaint()

    def analysis_changed(self, analysis: Analysis | None) -> None:
        if self._families:
            self._paint_head()
            self.repaint()

    # -- picker --------------------------------------------------------------------------------------
    def _prompt(self, fam: Family) -> Text:
        chosen = fam.metric in self.selected
        text = Text("✓ " if chosen else "  ", "bold" if chosen else "")
        text.append(fam.title, "bold" if chosen else "")
        if fam.anomalous:
            text.append(" ▲", "bold red")
        return text

    def _paint_picker(self) -> None:
        series = self.query_one("#lat-series", PlainOptionList)
        highlighted = series.highlighted
        series.clear_options()
        series.add_options(Option(self._prompt(f), id=f.metric) for f in self._families)
        series.highlighted = highlighted if highlighted is not None else 0

    def on_option_list_option_selected(self, event: PlainOptionList.OptionSelected) -> None:
        if event.option_list.id == "lat-series":
            self._toggle(event.option.id)
        elif event.option_list.id == "lat-hosts" and event.option.id:
            self.host = event.option.id
            self._paint_head()
            self.repaint()

    def action_toggle(self) -> None:
        series = self.query_one("#lat-series", PlainOptionList)
        if self.focused is series and series.highlighted is not None:
            self._toggle(series.get_option_at_index(series.highlighted).id)

    def _toggle(self, metric: str | None) -> None:
        if metric is None:
            return
        if metric in self.selected:
            self.selected.remove(metric)
        else:
            order = [f.metric for f in self._families]
            self.selected = sorted([*self.selected, metric], key=order.index)
        self._paint_picker()
        self.repaint()

    def action_focus_series(self) -> None:
        self.query_one("#lat-series", PlainOptionList).focus()

    def action_focus_hosts(self) -> None:
        self.query_one("#lat-hosts", PlainOptionList).focus()

    # -- charts --------------------------------------------------------------------------------------
    def _width(self) -> int:
        charts = self.query_one("#lat-charts")
        return max(20, (charts.size.width or self.size.width - 30) - 2)

    def on_resize(self, _event: Resize) -> None:
        if self._curves:
            self.repaint()

    def repaint(self) -> None:
        """Redraw the charts; a newer redraw replaces one still in progress."""
        self.run_worker(self._paint_charts(), exclusive=True, group="latency-paint")

    def window(self) -> tuple[datetime | None, datetime | None]:
        """The incident window: the analysis' window, opened no later than the first anomaly."""
        analysis = self.analysis
        if analysis is None:
            return None, None
        start, end = analysis.window
        first = analysis.first_anomaly.ts if analysis.first_anomaly else None
        if first is not None and (start is None or first < start):
            start = first
        return start, end

    def _range(self) -> tuple[datetime, datetime] | None:
        times = [ts for metric in self.selected for c in self.shown(metric) for ts in (c.first, c.last) if ts]
        if not times:
            return None
        start, end = min(times), max(times)
        w0, w1 = self.window()
        if end - start > MAX_SPAN and w0 is not None:
            start = max(start, w0 - timedelta(hours=1))
            end = min(end, (w1 or w0) + timedelta(minutes=30))
        return start, end

    def shown(self, metric: str) -> list[Curve]:
        """The metric's curves on the chosen server (all of them for "all")."""
        return [c for c in self._curves.get(metric, []) if self.host == ALL_HOSTS or c.host == self.host]

    def onsets(self, metric: str) -> list[Anomaly]:
        return [a for a in self._anomalies if a.metric == metric and (self.host == ALL_HOSTS or a.host == self.host)]

    def _paint_head(self) -> None:
        w0, w1 = self.window()
        who = f"worst of {len(self._hosts)} servers" if self.host == ALL_HOSTS else self.host
        head = Text.assemble(("Serving · ", "bold"), who, f" · {len(self._anomalies)} anomalies ▲")
        if w0 is not None:
            head.append(f" · incident [{w0:%H:%M:%S} → {w1:%H:%M:%S}]" if w1 else f" · incident from {w0:%H:%M:%S}")
        self.query_one("#lat-head", PlainStatic).update(head)

    async def _paint_charts(self) -> None:
        box = self.query_one("#lat-charts", VerticalScroll)
        await box.remove_children()
        span = self._range()
        if not self.selected:
            await box.mount(PlainStatic(Text("no series chosen: enter on a series at the left shows it", "italic")))
            return
        if span is None:
            await box.mount(PlainStatic(Text("no points for these series on this server", "italic")))
            return
        width = self._width()
        room = max(self.size.height - 6, 8)
        height = max(3, min(10, room // max(1, len(self.selected)) - 5))
        by_metric = {f.metric: f for f in self._families}
        charts = []
        for metric in self.selected:
            fam = by_metric.get(metric)
            curves = self.shown(metric)
            onsets = self.onsets(metric)
            chart = _title(fam, curves, self.host)
            chart.append_text(render_chart(curves, metric=metric, unit=fam.unit if fam else "", start=span[0],
                                           end=span[1], width=width, height=height, window=self.window(),
                                           onsets=onsets, shade=WINDOW_SHADE[self.app.current_theme.dark]))
            chart.append_text(_onset_lines(onsets, fam.unit if fam else "", metric, width))
            chart.rstrip()
            charts.append(PlainStatic(chart, classes="lat-chart", id=f"lat-chart-{metric}"))
        await box.mount_all(charts)


def _title(fam: Family | None, curves: list[Curve], host: str) -> Text:
    metric = fam.metric if fam else "?"
    title = Text((curves[0].title if curves else fam.title if fam else metric), "bold")
    unit = fam.unit if fam else ""
    points = [(ts, v) for c in curves for ts, v in c.points]
    if not points:
        title.append("  no points\n", "dim")
        return title
    last_ts = max(ts for ts, _ in points)
    last = max(v for ts, v in points if ts == last_ts)
    lowest = metric in samples.LOWER_IS_WORSE
    peak_ts, peak = (min if lowest else max)(points, key=lambda p: p[1])
    scope = f"worst of {len(curves)}" if host == ALL_HOSTS and len(curves) > 1 else (curves[0].host or "")
    title.append(f"  {scope} · last {fmt_value(last, unit, metric)} · {'lowest' if lowest else 'peak'} "
                 f"{fmt_value(peak, unit, metric)} at {peak_ts:%H:%M:%S}\n", "")
    return title


def _onset_lines(onsets: list[Anomaly], unit: str, metric: str, width: int) -> Text:
    """One line per onset time and kind (hosts counted), earliest first."""
    out = Text()
    grouped: dict[tuple[datetime | None, str], list[Anomaly]] = {}
    for a in onsets:
        grouped.setdefault((a.onset, a.kind), []).append(a)
    for (onset, kind), group in sorted(grouped.items(), key=lambda kv: (kv[0][0] or datetime.max, kv[0][1])):
        a = group[0]
        where = a.host if len(group) == 1 else f"{len(group)} servers"
        when = f"{onset:%H:%M:%S}" if onset else "?"
        line = (f"▲ onset {when} {kind} on {where}: {fmt_value(a.baseline, unit, metric)} → "
                f"{fmt_value(max((g.peak for g in group if g.peak is not None), default=None), unit, metric)}")
        out.append(clip(line, width) + "\n", "red")
    return out


SCREEN = Spec(name="latency", key="l", title="Latency", order=50, factory=LatencyScreen)
