"""GPUs: every GPU of every host, the ones the analysis names first, and how each one's samples moved.

The table answers "which card, what is it" (inventory, last reading, what is wrong with it now); the
panel below answers "since when": temperature, power against its limit, clocks, memory, utilisation,
ECC and retired pages, row remapping, PCIe link against its maximum and throttle reasons, each as a
one-line strip over the samples' time range. A GPU named by a hypothesis carries ``◀ #rank`` (the
mark, not only its colour, says so). Opened with ``--baseline``, each GPU's drift from the accepted
baseline (``workbench/prevention/baseline.py``) leads its state and its panel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.events import Resize

from collectors.base import gpu_id
from workbench.analysis.findings import Analysis
from workbench.prevention import baseline
from workbench.prevention.baseline import Drift
from workbench.query import events as query
from workbench.query import samples
from workbench.query.samples import Gpu
from workbench.tui.screens.base import CockpitScreen, Spec, guarded
from workbench.tui.text import BLOCKS, clip, plain, severity_style, short_time
from workbench.tui.widgets import PlainStatic, PlainTable

LABEL_WIDTH = 14
EVENT_LINES = 6
NOTABLE = ("warning", "error", "critical")
SUMMARY_WIDTH = 34
MIN_STRIP = 8
BENIGN_THROTTLE = frozenset({"gpu_idle", "applications_clocks", "sync_boost", "display_clocks"})
"""Throttle reasons that are the normal state of a GPU rather than a symptom."""


def strip(values: Sequence[float | None], width: int | None = None) -> str:
    """Block characters scaled between the smallest and the largest value (a 78→91 °C rise shows);
    a missing value is a blank; a flat line sits mid-height, or at the bottom when it is zero."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return " " * len(values)
    lo, hi = min(present), max(present)
    top = len(BLOCKS) - 1
    out = []
    for v in values:
        if v is None or not math.isfinite(v):
            out.append(" ")
        else:
            out.append(BLOCKS[int(round((v - lo) / (hi - lo) * top))] if hi > lo else BLOCKS[top // 2 if v else 0])
    return "".join(out)


def flag_strip(values: Sequence[bool | None]) -> str:
    """``█`` where a flag was set, ``·`` where it was clear, blank where unknown."""
    return "".join("█" if v else ("·" if v is not None else " ") for v in values)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _num(value: Any, fmt: str = "{:.0f}") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt.format(value)


def gpu_flags(gpu: Gpu) -> list[str]:
    """What is wrong with a GPU by its samples, worst first, in words (never only a colour)."""
    worst, inv = gpu.worst, gpu.inventory
    flags = []
    if gpu.samples == 0:
        flags.append("no samples")
    if worst.get("remap_failure"):
        flags.append("✗ remap failed")
    if worst.get("remap_pending"):
        flags.append("✗ remap pending")
    unc = max(worst.get("ecc_volatile_uncorrected") or 0, worst.get("ecc_aggregate_uncorrected") or 0)
    if unc:
        flags.append(f"✗ ECC unc {unc}")
    if worst.get("retired_pages_dbe"):
        flags.append(f"! retired dbe {worst['retired_pages_dbe']}")
    width, max_width = worst.get("pcie_width"), inv.get("pcie_max_width")
    if width and max_width and width < max_width:
        flags.append(f"! PCIe x{width}/x{max_width}")
    if worst.get("pcie_replay"):
        flags.append(f"! PCIe replay {worst['pcie_replay']}")
    if worst.get("nvlink_errors"):
        flags.append(f"! NVLink err {worst['nvlink_errors']}")
    bad = [r for r in worst.get("throttle_reasons") or [] if r not in BENIGN_THROTTLE]
    if bad:
        flags.append("! " + ",".join(bad))
    corr = max(worst.get("ecc_volatile_corrected") or 0, worst.get("ecc_aggregate_corrected") or 0)
    if corr:
        flags.append(f"ECC corr {corr}")
    return flags


class GpusScreen(CockpitScreen):
    """Inventory and samples per host and GPU."""

    BINDINGS = [Binding("enter", "open_raw", "raw line")]

    def __init__(self) -> None:
        super().__init__()
        self._gpus: list[Gpu] = []
        self._named: dict[tuple[str | None, str], tuple[int, str]] = {}
        self._shown: tuple[str | None, str] | None = None
        self._events: list[dict[str, Any]] = []
        self._drift: dict[tuple[str | None, str | None], list[Drift]] | None = None

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="gpus-head")
        yield PlainTable(id="gpus-table", classes="panel", cursor_type="row")
        with VerticalScroll(id="gpus-detail-box", classes="panel"):
            yield PlainStatic(id="gpus-detail")
        yield from self.bottom()

    def on_mount(self) -> None:
        table = self.query_one("#gpus-table", PlainTable)
        table.border_title = "GPUs (◀ named by the analysis · enter: raw line of its worst event)"
        for label, key in (("", "mark"), ("host", "host"), ("GPU", "gpu"), ("model", "model"), ("°C", "temp"),
                           ("W", "power"), ("util", "util"), ("state", "flags"), ("samples", "samples"),
                           ("driver", "driver"), ("vbios", "vbios"), ("PCIe max", "pcie"), ("memory", "memory"),
                           ("uuid", "uuid")):
            table.add_column(label, key=key)
        self.query_one("#gpus-detail-box").border_title = "Samples"
        self._read_gpus()
        super().on_mount()
        table.focus()

    @guarded("GPUs not read")
    def _read_gpus(self) -> None:
        with self.store.read() as bundle:
            self._gpus = samples.gpus(bundle)
            if self.cockpit.baseline is not None:
                self._drift = baseline.by_gpu(baseline.compare(bundle, self.cockpit.baseline))

    # -- data --------------------------------------------------------------------------------------
    def analysis_changed(self, analysis: Analysis | None) -> None:
        self._named = {}
        for h in (analysis.hypotheses if analysis else ()):
            if h.gpu:
                self._named.setdefault((h.host, gpu_id(h.gpu)), (h.rank, f"{h.layer}/{h.cause}"))
        self._paint_table()

    def named(self, gpu: Gpu) -> tuple[int, str] | None:
        """(rank, cause) of the best hypothesis naming this GPU; a hypothesis without a host names the
        bus id on any host."""
        key = gpu_id(gpu.gpu)
        return self._named.get((gpu.host, key)) or self._named.get((None, key))

    def drift(self, g: Gpu) -> list[Drift]:
        """This GPU's drift from the accepted baseline, then its host's (driver, DCGM, bus bandwidth)."""
        if self._drift is None:
            return []
        key = gpu_id(g.gpu)
        mine = [d for (host, bus), ds in self._drift.items() if host == g.host and bus and gpu_id(bus) == key
                for d in ds]
        return mine + self._drift.get((g.host, None), [])

    def ordered(self) -> list[Gpu]:
        """Named GPUs first, by their hypothesis' rank; then by host and bus id."""
        return sorted(self._gpus, key=lambda g: ((self.named(g) or (math.inf, ""))[0], g.host or "", g.gpu))

    def _paint_table(self) -> None:
        table = self.query_one("#gpus-table", PlainTable)
        table.clear()
        gpus = self.ordered()
        hosts = {g.host for g in gpus}
        named = [g for g in gpus if self.named(g)]
        head = Text.assemble(("GPUs · ", "bold"), f"{_count(len(hosts), 'host')} · {_count(len(gpus), 'GPU')}")
        if named:
            head.append(" · named by the analysis: ")
            head.append(", ".join(f"{g.host or '-'} {g.gpu} (#{self.named(g)[0]})" for g in named[:3]), "bold")
        elif self.analysis is None:
            head.append(" · analysing…", "dim")
        if not gpus:
            head.append(" · no GPU inventory or samples in this bundle", "italic")
        if self._drift is not None:
            drifted = sum(len(ds) for ds in self._drift.values())
            head.append(f" · {_count(drifted, 'drift')} from the accepted baseline" if drifted
                        else " · no drift from the accepted baseline", "bold red" if drifted else "")
        self.query_one("#gpus-head", PlainStatic).update(head)
        for g in gpus:
            table.add_row(*self._cells(g), key=f"{g.host or ''}|{g.gpu}")
        if gpus:
            table.move_cursor(row=0)
            self._show(gpus[0])
        else:
            self.query_one("#gpus-detail", PlainStatic).update(Text("nothing to show", "italic"))

    def _cells(self, g: Gpu) -> list[Any]:
        named = self.named(g)
        style = "bold" if named else ""
        inv, last = g.inventory, g.latest
        flags = [f"{'✗' if d.severity == 'error' else '!'} {d.kind}" for d in self.drift(g) if d.gpu] + gpu_flags(g)
        pcie = (f"gen{inv['pcie_max_gen']} x{inv['pcie_max_width']}"
                if inv.get("pcie_max_gen") and inv.get("pcie_max_width") else "-")
        memory = f"{inv['memory_total_mib'] / 1024:.0f} GiB" if inv.get("memory_total_mib") else "-"
        return [Text(f"◀ #{named[0]}" if named else "", "bold red" if named else ""),
                plain(g.host or "-", style=style), plain(g.gpu, style=style),
                plain((g.name or "-").removeprefix("NVIDIA "), 22), _num(last.get("temp_c")),
                _num(last.get("power_w")), _num(last.get("util_gpu"), "{:.0f}%"),
                plain(" · ".join(flags) or "ok", 40, "red" if any(f.startswith("✗") for f in flags) else ""),
                str(g.samples), plain(inv.get("driver") or "-"), plain(inv.get("vbios") or "-"), pcie, memory,
                plain(inv.get("uuid") or "-")]

    def on_data_table_row_highlighted(self, event: PlainTable.RowHighlighted) -> None:
        if event.data_table.id != "gpus-table" or event.row_key.value is None:
            return
        host, _, gpu = event.row_key.value.partition("|")
        found = next((g for g in self._gpus if (g.host or "") == host and g.gpu == gpu), None)
        if found is not None:
            self._show(found)

    def on_data_table_row_selected(self, event: PlainTable.RowSelected) -> None:
        if event.data_table.id == "gpus-table":
            self.action_open_raw()

    def action_open_raw(self) -> None:
        """The chosen GPU's worst event as a raw line: its earliest critical one, else error, else warning."""
        rank = {sev: n for n, sev in enumerate(reversed(NOTABLE))}
        dated = [e for e in self._events if e.get("artifact")]
        if not dated:
            self.notify("no raw line names this GPU", severity="warning")
            return
        worst = min(dated, key=lambda e: rank.get(e["severity"], len(rank)))
        self.cockpit.open_evidence(worst["artifact"], worst["line"])

    def on_resize(self, _event: Resize) -> None:
        chosen = next((g for g in self._gpus if (g.host, g.gpu) == self._shown), None)
        if chosen is not None:
            self._show(chosen)

    # -- the selected GPU ----------------------------------------------------------------------------
    @guarded("GPU samples not read")
    def _show(self, g: Gpu) -> None:
        self._shown = (g.host, g.gpu)
        width = max(MIN_STRIP, self.size.width - 6 - LABEL_WIDTH - SUMMARY_WIDTH)
        flt = query.EventFilter(hosts=(g.host,) if g.host else (), gpu=g.gpu, severities=NOTABLE)
        with self.store.read() as bundle:
            got = samples.gpu_samples(bundle, g.host, g.gpu, max_points=width)
            events = worst_events(bundle, flt)
            count = query.count_events(bundle, flt) if len(events) == EVENT_LINES else len(events)
        self.query_one("#gpus-detail-box").border_title = plain(f"Samples · {g.host or '-'} {g.gpu}")
        self._events = events
        detail = render_detail(g, got, self.named(g))
        detail.append_text(render_drift(self.drift(g)) if self._drift is not None else Text())
        detail.append_text(render_events(events, count, self.size.width - 6))
        self.query_one("#gpus-detail", PlainStatic).update(detail)


def render_detail(g: Gpu, got: samples.Samples, named: tuple[int, str] | None) -> Text:
    """The selected GPU: identity, then one strip per measurement with its first → last and extreme."""
    inv = g.inventory
    out = Text()
    if named:
        out.append(f"◀ #{named[0]} {named[1]}  ", "bold red")
    out.append(" · ".join(p for p in (g.name, inv.get("uuid"), inv.get("serial") and f"serial {inv['serial']}",
                                      inv.get("driver") and f"driver {inv['driver']}",
                                      inv.get("vbios") and f"vbios {inv['vbios']}") if p) or "no inventory")
    out.append("\n")
    if not got.rows:
        out.append("no samples of this GPU in the bundle (NVML/nvidia-smi did not answer for it, or were not "
                   "captured)\n", "italic")
        return out
    per = f"1 col = {got.bucket_s:.0f} s" if got.bucket_s else "1 col = 1 sample"
    out.append(f"{got.total} samples {short_time(got.rows[0]['ts'], seconds=True)} → "
               f"{short_time(got.rows[-1]['ts'], seconds=True)} ({per})\n", "dim")
    limit = inv.get("power_limit_w") or next((v for v in reversed(got.column("power_limit_w")) if v), None)
    mem_total = inv.get("memory_total_mib") or next((v for v in reversed(got.column("mem_total_mib")) if v), None)
    rows: list[tuple[str, str, str, str]] = [
        ("temp °C", "temp_c", "max", ""),
        ("power W", "power_w", "max", f" of {limit:.0f} limit" if limit else ""),
        ("SM clock MHz", "sm_clock_mhz", "min", ""),
        ("mem clock MHz", "mem_clock_mhz", "min", ""),
        ("memory MiB", "mem_used_mib", "max", f" of {mem_total:.0f}" if mem_total else ""),
        ("util %", "util_gpu", "max", ""),
        ("ECC vol corr", "ecc_volatile_corrected", "max", ""),
        ("ECC vol unc", "ecc_volatile_uncorrected", "max", ""),
        ("ECC agg corr", "ecc_aggregate_corrected", "max", ""),
        ("ECC agg unc", "ecc_aggregate_uncorrected", "max", ""),
        ("retired sbe", "retired_pages_sbe", "max", ""),
        ("retired dbe", "retired_pages_dbe", "max", ""),
        ("PCIe replay", "pcie_replay", "max", ""),
        ("NVLink errors", "nvlink_errors", "max", ""),
    ]
    for label, column, extreme, suffix in rows:
        values = got.column(column)
        present = [v for v in values if v is not None]
        if not present:
            continue
        top = max(present) if extreme == "max" else min(present)
        bad = column.startswith("ecc_") and "unc" in column and top or column == "retired_pages_dbe" and top
        out.append(f"{label:<{LABEL_WIDTH}}")
        out.append(strip(values), "red" if bad else "")
        out.append(clip(f"  {_num(present[0])} → {_num(present[-1])} ({extreme} {_num(top)}){suffix}",
                        SUMMARY_WIDTH) + "\n")
    _link_line(out, got, inv)
    for label, column in (("remap pending", "remap_pending"), ("remap failure", "remap_failure"),
                          ("retire pending", "retired_pending")):
        values = got.column(column)
        if any(v is not None for v in values):
            ever = any(values)
            out.append(f"{label:<{LABEL_WIDTH}}")
            out.append(flag_strip(values), "red" if ever else "")
            out.append("  ✗ yes\n" if ever else "  ✓ no\n")
    reasons = sorted({r for rs in got.column("throttle_reasons") for r in rs},
                     key=lambda r: (r in BENIGN_THROTTLE, r))
    for reason in reasons:
        values = [reason in rs for rs in got.column("throttle_reasons")]
        out.append(f"{clip('⏷ ' + reason, LABEL_WIDTH - 1):<{LABEL_WIDTH}}")
        out.append(flag_strip(values), "" if reason in BENIGN_THROTTLE else "yellow")
        out.append(f"  {sum(values)}/{len(values)} cols" + ("" if reason in BENIGN_THROTTLE else " !") + "\n")
    return out


def render_drift(drift: list[Drift]) -> Text:
    """The GPU's and its host's drift from the accepted baseline, worst first, in the baseline's words."""
    out = Text()
    if not drift:
        out.append("✓ as accepted: no drift from the baseline on this GPU or its host\n", "dim")
        return out
    out.append("drift from the accepted baseline\n", "bold")
    for d in drift:
        out.append(f"{'✗' if d.severity == 'error' else '!'} {d.severity:<8}", severity_style(d.severity))
        out.append(f"{d.message}\n")
    return out


def worst_events(bundle: Any, flt: query.EventFilter) -> list[dict[str, Any]]:
    """Up to EVENT_LINES of the GPU's events, worst severity first, in timeline order: the corrected
    AER errors before an Xid do not push the Xid out of the panel."""
    chosen: list[dict[str, Any]] = []
    for severity in reversed(NOTABLE):
        if len(chosen) < EVENT_LINES:
            chosen += query.events(bundle, replace(flt, severities=(severity,)), limit=EVENT_LINES - len(chosen))
    return sorted(chosen, key=lambda e: (e["ts"] is None, e["ts"] or datetime.min, e["artifact"] or "",
                                         -1 if e["line"] is None else e["line"]))


def render_events(events: list[dict[str, Any]], count: int, width: int) -> Text:
    """The GPU's own warnings and errors from the timeline (Xid, AER, fell off the bus, ...): what a
    GPU that stopped answering NVML still left behind."""
    out = Text()
    if not events:
        out.append("no warning or error names this GPU in the timeline", "dim")
        return out
    more = f", the worst {len(events)}" if count > len(events) else ""
    out.append(f"events on this GPU ({count} warning or worse{more})\n", "dim")
    for e in events:
        out.append(f"{short_time(e['ts'], seconds=True)} ")
        out.append(f"{e['severity']:<8} ", severity_style(e["severity"]))
        out.append(clip(f"{e['kind']:<16} {e['message']}", max(20, width - 28)) + "\n")
    return out


def _link_line(out: Text, got: samples.Samples, inv: dict[str, Any]) -> None:
    """PCIe generation and width now against the card's maximum (a narrower link is a fault; a lower
    generation on an idle GPU is power saving)."""
    gens, widths = got.column("pcie_gen"), got.column("pcie_width")
    if not any(v is not None for v in gens + widths):
        return
    max_gen, max_width = inv.get("pcie_max_gen"), inv.get("pcie_max_width")
    narrow = [w is not None and max_width is not None and w < max_width for w in widths]
    out.append(f"{'PCIe link':<{LABEL_WIDTH}}")
    out.append(flag_strip(narrow) if max_width else strip(widths), "red" if any(narrow) else "")
    last_gen = next((v for v in reversed(gens) if v is not None), None)
    last_width = next((v for v in reversed(widths) if v is not None), None)
    text = f"  gen {_num(last_gen)}/{_num(max_gen)} x{_num(last_width)}/x{_num(max_width)}"
    out.append(text + ("  ✗ narrower than max\n" if any(narrow) else "  ✓ full width\n" if max_width else "\n"))


SCREEN = Spec(name="gpus", key="g", title="GPUs", order=40, factory=GpusScreen)
