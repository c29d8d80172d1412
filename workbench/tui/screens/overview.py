"""Overview: what broke, where, which layer, and what we don't know — without a key pressed.

The order of the panels is the order of a responder's questions: is it still burning (title,
status, impact), what broke where (ranked causes with host, GPU, rank), which layer (the strip),
where to look next (evidence of the selected cause, the playbook's next step), and what the bundle
cannot tell (capture gaps).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS, VERDICT_MARKS
from workbench.analysis.findings import Analysis, Hypothesis
from workbench.query import events as query
from workbench.tui.screens.base import CockpitScreen, Spec, guarded
from workbench.tui.text import clip, plain, short_time, sparkline, verdict_style
from workbench.tui.widgets import PlainStatic, PlainTable

ACTIVITY_COLUMNS = 48
ACTIVITY_LANES = 12
"""Hosts the activity panel draws; past it, the culprit first and the others counted on one line."""
ACTIVITY_QUERY_LANES = 64
"""Busiest host/layer lanes read for the panel (worst severity first, so the culprit is among them)."""
GAPS_LISTED = 8
"""Coverage gaps named one by one in 'What we don't know'; past it, grouped with a host count."""
SHORT_LAYER = {"business": "biz", "scheduling": "sched", "gpu": "gpu", "network_storage": "net", "hardware": "hw"}


class OverviewScreen(CockpitScreen):
    """The incident at a glance."""

    BINDINGS = [
        Binding("enter", "open_evidence", "open raw line", show=False),
        Binding("1", "layer('business')", "layer 1", show=False),
        Binding("2", "layer('scheduling')", "layer 2", show=False),
        Binding("3", "layer('gpu')", "layer 3", show=False),
        Binding("4", "layer('network_storage')", "layer 4", show=False),
        Binding("5", "layer('hardware')", "layer 5", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="head")
        yield PlainStatic(id="layers", classes="panel")
        with Horizontal(id="middle"):
            yield PlainTable(id="hypotheses", classes="panel", cursor_type="row", zebra_stripes=False)
            yield PlainStatic(id="activity", classes="panel")
        yield PlainTable(id="evidence", classes="panel", cursor_type="row")
        with Horizontal(id="bottom"):
            yield PlainStatic(id="next", classes="panel")
            yield PlainStatic(id="unknown", classes="panel")
        yield from self.bottom()

    def on_mount(self) -> None:
        hyps = self.query_one("#hypotheses", PlainTable)
        hyps.border_title = "Root cause, ranked"
        hyps.add_columns("score", "cause", "where", "first seen")
        ev = self.query_one("#evidence", PlainTable)
        ev.border_title = "Evidence (enter: open raw line)"
        ev.add_columns("time", "host", "source", "line")
        self.query_one("#layers").border_title = "Layers"
        self.query_one("#activity").border_title = "Activity per host (key events)"
        self.query_one("#next").border_title = "Next in the playbook"
        self.query_one("#unknown").border_title = "What we don't know"
        self._paint_facts()
        super().on_mount()
        self.watch(self.app, "model", self._on_model, init=True)
        self.watch(self.app, "analysis_error", self._on_error, init=True)
        hyps.focus()

    # -- the parts that need no analysis: painted at once -------------------------------------
    @guarded("bundle not read")
    def _paint_facts(self) -> None:
        self._title, self._hosts, self._gaps = self.store.path.name, [], []
        with self.store.read() as bundle:
            meta = bundle.meta()
            hosts = query.hosts_seen(bundle)
            coverage = bundle.coverage()
            missing = query.missing_sources(bundle)
            unknown = query.unrecognised_groups(bundle, limit=3)
        self._title = meta.get("title") or str(self.store.path.name)
        self._hosts = hosts
        self.query_one("#head", PlainStatic).update(Text.assemble(
            ("gpuwb · ", "bold"), (self._title, "bold"), f"   {len(self._hosts)} hosts · analysing…"))
        gaps = _coverage_gaps([c for c in coverage if c.get("status") not in ("ok", "collected")])
        gaps += [f"{', '.join(hosts[:4])}{'…' if len(hosts) > 4 else ''}: no {source} evidence"
                 for source, hosts in missing.items()]
        if not coverage:
            gaps.insert(0, "handed-over files, no capture record: what was not collected is unknown")
        gaps += [f"{g['lines']} error line(s) no catalog entry knows ({g['program'] or g['layer']}): "
                 f"{clip(g['example'], 60)} (gpuwb catalog unknown)" for g in unknown]
        self._gaps = gaps

    # -- the rest, when the analysis arrives ----------------------------------------------------
    def _on_error(self, error: str | None) -> None:
        if error:
            self.query_one("#head", PlainStatic).update(Text(f"gpuwb · {self._title}   analysis failed: {error}",
                                                        style="bold red"))

    def analysis_changed(self, analysis: Analysis | None) -> None:
        if analysis is None:
            return
        self._paint_layers(analysis)
        self._paint_hypotheses(analysis)
        self._paint_activity(analysis)
        self._paint_next(analysis)

    def journal_changed(self) -> None:
        if self.analysis is not None:
            self._paint_next(self.analysis)

    def _on_model(self, model: dict[str, Any] | None) -> None:
        if model is None or self.analysis is None:
            return
        self._paint_head(self.analysis, model)
        self._paint_layers(self.analysis, model)
        self._paint_unknown(model)

    def _paint_head(self, analysis: Analysis, model: dict[str, Any]) -> None:
        header, impact = model["header"], model.get("impact") or {}
        gpus = len(impact.get("gpus") or [])
        severity = header.get("severity") or "not set"
        right = (f"{analysis.workload} · {_count(len(impact.get('hosts') or self._hosts), 'host')} · "
                 f"{_count(impact.get('rank_count') or 0, 'rank')} · {_count(gpus, 'GPU')} with errors · "
                 f"{severity if severity.startswith('SEV') else 'severity ' + severity} · {header.get('status', '')}")
        line1 = Text.assemble(("gpuwb · ", "bold"), (header.get("title") or self._title, "bold"), "   ", right)
        parts = [f"window {short_time(impact.get('start'))} → {short_time(impact.get('end'))}"]
        if impact.get("duration"):
            parts[0] += f" ({_duration(impact['duration'])})"
        times = model.get("times") or {}
        for key, word in (("ttd", "detected"), ("ttm", "mitigated"), ("ttr", "recovered")):
            if times.get(key):
                parts.append(f"{word} +{_duration(times[key])}")
        if not times.get("ttm"):
            parts.append("not mitigated yet")
        training = impact.get("training") or {}
        if training.get("gpu_hours") is not None:
            parts.append(f"{training['gpu_hours']} GPU-h lost since {training.get('basis', 'start')}")
        inference = impact.get("inference") or {}
        if inference.get("slo_breach"):
            parts.append(str(inference["slo_breach"]))
        sure = _confidence_headline(analysis)
        line2 = Text.assemble(sure, " · " if sure else "", " · ".join(parts))
        room = self.query_one("#head").content_size.width or self.size.width
        if line1.cell_len > room:  # the title keeps line 1; impact, then the counts, on line 2
            line1 = Text.assemble(("gpuwb · ", "bold"), (header.get("title") or self._title, "bold"))
            line2 = Text.assemble(sure, " · " if sure else "", " · ".join(parts) + " · " + right)
        for line in (line1, line2):
            line.no_wrap, line.overflow = True, "ellipsis"
        self.query_one("#head", PlainStatic).update(Text("\n").join([line1, line2]))

    def _paint_layers(self, analysis: Analysis, model: dict[str, Any] | None = None) -> None:
        """All five layers always show: the long form when it fits the panel, else the short one."""
        self._layer_inputs = (analysis, model)
        room = self.query_one("#layers").content_size.width or self.size.width - 4
        strip = self._layer_strip(analysis, model, short=False)
        if strip.cell_len > room:
            strip = self._layer_strip(analysis, model, short=True)
        self.query_one("#layers", PlainStatic).update(strip)

    def _layer_strip(self, analysis: Analysis, model: dict[str, Any] | None, *, short: bool) -> Text:
        decided = {row["layer"]: row for row in (model or {}).get("layers") or []}
        strip = Text()
        focus = _focus_layer(analysis)
        for n, layer in enumerate(LAYERS, start=1):
            verdict = decided.get(layer, {}).get("verdict") or analysis.layer_verdicts.get(layer, "no_evidence")
            name = SHORT_LAYER[layer] if short else f"{n} {LAYER_TITLES[layer]}"
            word = VERDICT_MARKS[verdict] if short else f"{VERDICT_MARKS[verdict]} {verdict.replace('_', ' ')}"
            strip.append(f"{name} ", "bold" if layer == focus else "")
            strip.append(word, verdict_style(verdict))
            if decided.get(layer, {}).get("overridden") and not short:
                strip.append(f" ({decided[layer].get('decided') or 'overridden'})", "italic")
            if layer == focus:
                strip.append(" ◀", "bold")
            strip.append("   " if not short else "  ")
        return strip

    def on_resize(self) -> None:
        """Widths are known only after layout: the strip and the activity lanes are fitted again."""
        if getattr(self, "_layer_inputs", None):
            self._paint_layers(*self._layer_inputs)
        if self.analysis is not None:
            self._paint_activity(self.analysis)

    def _paint_hypotheses(self, analysis: Analysis) -> None:
        table = self.query_one("#hypotheses", PlainTable)
        table.clear()
        c = analysis.confidence
        table.border_title = plain("Root cause, ranked" + (f" · {c.label if c.sure_enough else 'NOT SURE ' + c.label}"
                                                           if c else ""))
        if not analysis.hypotheses:
            table.add_row("", Text("no root cause ranked: walk the playbook (p)", "italic"), "", "")
        for h in analysis.hypotheses:
            mark = "▶ " if h.rank == 1 else "  "
            table.add_row(Text(f"{mark}{h.score:.2f}", "bold" if h.rank == 1 else ""),
                          Text(f"{h.cause} ({SHORT_LAYER.get(h.layer, h.layer)})", "bold" if h.rank == 1 else ""),
                          plain(h.where),
                          short_time(h.first_seen), key=str(h.rank))
        self._show_evidence(analysis.top)

    def on_data_table_row_highlighted(self, event: PlainTable.RowHighlighted) -> None:
        if event.data_table.id != "hypotheses" or self.analysis is None or event.row_key.value is None:
            return
        rank = int(event.row_key.value)
        self._show_evidence(next((h for h in self.analysis.hypotheses if h.rank == rank), None))

    def on_data_table_row_selected(self, event: PlainTable.RowSelected) -> None:
        """Enter on a cause goes down to its evidence; Enter on an evidence line opens it raw."""
        if event.data_table.id == "hypotheses":
            self.query_one("#evidence", PlainTable).focus()
        elif event.data_table.id == "evidence":
            self.action_open_evidence()

    def _show_evidence(self, h: Hypothesis | None) -> None:
        table = self.query_one("#evidence", PlainTable)
        table.clear()
        self._evidence = list(h.evidence) if h else []
        table.border_title = plain(f"Evidence for #{h.rank} {h.cause} (enter: open raw line)" if h else "Evidence")
        for n, e in enumerate(self._evidence):
            table.add_row(short_time(e.ts, seconds=True), plain(e.host or "-"), plain(e.source or "-"),
                          plain(e.text, 160), key=str(n))

    @guarded("activity not read")
    def _paint_activity(self, analysis: Analysis) -> None:
        start, end = _incident_window(analysis)
        if start is None or end is None:
            self.query_one("#activity", PlainStatic).update(Text("no dated events", "italic"))
            return
        width = self.query_one("#activity").content_size.width
        columns = max(12, min(ACTIVITY_COLUMNS, width - 20)) if width else ACTIVITY_COLUMNS
        bucket_s = max(1.0, (end - start).total_seconds() / columns)
        with self.store.read() as bundle:
            rows = query.event_density(bundle, since=start, until=end, bucket_s=bucket_s,
                                       max_lanes=ACTIVITY_QUERY_LANES)
        per_host: dict[str, list[int]] = {}
        for host, _layer, b, n, _sev in rows:
            if 0 <= b < columns:
                per_host.setdefault(host, [0] * columns)[b] += n
        culprit = analysis.top.host if analysis.top else None
        first = analysis.first_anomaly
        out = Text(f"1 col = {_span(bucket_s)} from {short_time(start)}\n", "dim")
        hosts = sorted(per_host, key=lambda h: (h == "-", h))
        more = 0
        if len(hosts) > ACTIVITY_LANES:  # a fleet: the culprit and the first anomaly's host first, the rest counted
            named = [h for h in dict.fromkeys((culprit, first.host if first else None)) if h in per_host]
            hosts = named + [h for h in hosts if h not in named]
            more = max(len(hosts), len(set(self._hosts) - {"-"})) - (ACTIVITY_LANES - 1)
            hosts = hosts[:ACTIVITY_LANES - 1]
        for host in hosts:
            out.append(f"{clip(host if host != '-' else '(no host)', 10):<10} ", "bold" if host == culprit else "")
            out.append(sparkline(per_host[host]), "red" if host == culprit else "")
            if first and first.host == host:
                out.append(" ◀ first", "bold")
            out.append("\n")
        if more:
            out.append(f"… {more} more host(s) (t: timeline)\n", "dim")
        if first and first.ts:
            out.append(f"first anomaly {short_time(first.ts, seconds=True)} on {first.host or '-'}", "bold")
        self.query_one("#activity", PlainStatic).update(out)

    def _paint_next(self, analysis: Analysis) -> None:
        out = Text()
        c = analysis.confidence
        if c is not None and not c.sure_enough:  # collecting what tells the two apart comes first
            width = max(20, (self.query_one("#next").content_size.width or 72) - 4)
            for t in c.tell_apart:
                out.append("tell apart ▶ ", "bold")
                out.append_text(plain(t.line, 2 * width))  # two lines at most: the playbook's steps follow
                out.append("\n")
        marks = {"ok": ("✓", "green"), "attention": ("!", "yellow"), "todo": ("☐", "")}
        for step in analysis.stage0[:4]:
            mark, style = marks.get(step.status or "todo", ("☐", ""))
            out.append(f"stage 0  {mark} ", style)
            out.append(clip(step.title, max(20, (self.query_one("#next").content_size.width or 72) - 12)) + "\n")
        focus = _focus_layer(analysis)
        if focus:
            out.append(f"layer {LAYERS.index(focus) + 1}  ▶ {LAYER_TITLES[focus]}: ", "bold")
            out.append(clip(analysis.layer_focus.get(focus) or "review its checks (p)", 80))
        self.query_one("#next", PlainStatic).update(out)

    def _paint_unknown(self, model: dict[str, Any]) -> None:
        lines = list(self._gaps)
        if self.analysis and self.analysis.window[0] is None:
            lines.append("no dated evidence: times unknown")
        if not lines:
            lines = ["every collector ran; no gap recorded"]
        self.query_one("#unknown", PlainStatic).update(Text(" · ".join(lines)))

    # -- actions --------------------------------------------------------------------------------
    def action_open_evidence(self) -> None:
        table = self.query_one("#evidence", PlainTable)
        evidence = getattr(self, "_evidence", [])
        if not evidence:
            self.notify("no evidence line to open", severity="warning")
            return
        row = table.cursor_row if self.focused is table else 0
        e = evidence[min(max(row, 0), len(evidence) - 1)]
        if e.artifact is None:
            self.notify("this evidence was derived; it has no raw line", severity="warning")
            return
        self.cockpit.open_evidence(e.artifact, e.line)

    def action_layer(self, layer: str) -> None:
        self.cockpit.show_layer(layer)


def _confidence_headline(analysis: Analysis) -> Text:
    """``likely 0.83``, or ``NOT SURE 0.42: X or Y — to tell apart: …`` (what to collect for each);
    empty without a ranked cause. Evidence-source text shows as written (never read as markup)."""
    c, top = analysis.confidence, analysis.top
    if c is None or top is None:
        return Text()
    if c.sure_enough:
        return Text(c.label, "bold green" if c.level == "sure" else "bold yellow")
    mine = top.cause + (f" on {top.host}" if top.host else "")
    rival = c.rival()
    collect = "; ".join(t.collect[0] for t in c.tell_apart if t.collect)
    out = Text.assemble((f"NOT SURE {c.calibrated:.2f}", "bold red"), ": ", plain(mine))
    if rival:
        out.append(" or ")
        out.append_text(plain(rival))
    if collect:
        out.append(" — to tell apart: ")
        out.append_text(plain(collect))
    return out


def _coverage_gaps(bad: list[dict[str, Any]]) -> list[str]:
    """One line per collector that missed; past GAPS_LISTED (a fleet), one per collector, status and
    reason with the number of hosts."""
    if len(bad) <= GAPS_LISTED:
        return [f"{c['collector']}{' on ' + c['host'] if c.get('host') else ''}: {c['status']}"
                f"{' (' + c['reason'] + ')' if c.get('reason') else ''}" for c in bad]
    groups: dict[tuple[str, str, str], set[str | None]] = {}
    for c in bad:
        groups.setdefault((c["collector"], c["status"], c.get("reason") or ""), set()).add(c.get("host"))
    return [f"{collector} on {_count(len(hosts), 'host')}: {status}{' (' + reason + ')' if reason else ''}"
            for (collector, status, reason), hosts in groups.items()]


def _focus_layer(analysis: Analysis) -> str | None:
    """The layer to look at now: the top hypothesis' layer, else the worst one."""
    if analysis.top is not None:
        return analysis.top.layer
    order = {"fault": 3, "suspect": 2, "clear": 1, "no_evidence": 0}
    worst = max(LAYERS, key=lambda layer: order[analysis.layer_verdicts.get(layer, "no_evidence")])
    return worst if analysis.layer_verdicts.get(worst) in ("fault", "suspect") else None


def _incident_window(analysis: Analysis) -> tuple[datetime | None, datetime | None]:
    """Around the incident rather than the whole bundle: boot lines from days earlier would squash
    the interesting minutes into one column."""
    first = analysis.first_anomaly.ts if analysis.first_anomaly else None
    start, end = analysis.window
    if first is not None:
        start = max(start or first, first - timedelta(minutes=15))
    if start is not None and end is not None and end - start > timedelta(hours=6):
        end = start + timedelta(hours=6)
    return start, end


def _duration(text: str) -> str:
    """``0:22:47.997`` as ``22m47s``: a responder counts minutes, not microseconds."""
    clock = str(text).split(".")[0]
    days = ""
    if "day" in clock:
        days, clock = clock.split(",")
        days = days.split()[0] + "d"
    h, m, s = (int(x) for x in clock.strip().split(":"))
    return f"{days}{h}h{m:02d}m" if h or days else f"{m}m{s:02d}s"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


SCREEN = Spec(name="overview", key="o", title="Overview", order=0, factory=OverviewScreen)
