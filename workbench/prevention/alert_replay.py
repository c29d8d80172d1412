"""The bundle's own samples and events as Prometheus series on one evaluation grid, and the few
PromQL forms the monitoring templates (the causes' alerts:, rules/causes/) are written in, evaluated as
Prometheus 2.x evaluates them.

Why both: a rule is only worth leaving behind if it would have fired on this incident, and the
answer must be checkable. The replay gives the series a promtool unit test feeds to the real rule
engine (workbench/prevention/rules_test.py); :func:`alert_states` gives Python's own answer over the same
values, so promtool agreeing is a test and not an assumption.

The series, one grid point per :data:`STEP` (a sample is seen at the first grid point at or after
it; several in one step keep the last for counters, else the worst):

- ``DCGM_FI_DEV_*`` (dcgm-exporter field names) from ``gpu_sample``, labels ``instance`` (host) and
  ``pci_bus_id``; the clock-event reasons as NVML's bitmask; ``DCGM_FI_DEV_XID_ERRORS`` is the last
  Xid a GPU logged (0 before), as dcgm-exporter reports it;
- ``gpuwb_log_events_total{instance, kind, ...}``: a counter of the bundle's own events per host
  and kind (with ``xid``, ``state``, ``reason``, ``event_severity`` when the event has them), 0 from the
  first grid point: the log-derived counter where no exporter has the signal, labelled as the flight
  recorder's exporter labels it (workbench/capture/recorder/metrics.py :func:`event_labels`: the same values,
  the same bounds); events the analysis derived are not counted;
- the serving and node series as stored (vLLM, SGLang, TGI, Triton names), and ``ib.*`` counters
  under node-exporter's InfiniBand names.

The forms: ``SELECTOR OP N`` (instant value, 5 min lookback), ``increase(SELECTOR[W]) OP N``
(Prometheus' extrapolated increase, counter resets included), ``floor(SELECTOR / B) % 2 == 1``
(one bit of a bitmask) and ``histogram_quantile(Q, sum by (le, ...) (rate(SELECTOR[W]))) OP N``
(Prometheus' bucketQuantile over the summed bucket rates). Range and lookback windows are closed
at both ends, as in Prometheus 2.x.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from workbench.capture.recorder.metrics import EVENT_LABELS as EVENT_LABELS
from workbench.capture.recorder.metrics import METRIC, event_labels
from workbench.query.series_math import histogram_quantile
from workbench.store.bundle import Bundle

STEP = timedelta(minutes=1)
LOOKBACK = timedelta(minutes=5)
LOG_COUNTER = METRIC
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"

GPU_FIELDS: dict[str, tuple[str, str]] = {
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", "max"),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", "max"),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", "min"),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", "max"),
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", "max"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_volatile_corrected", "last"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_volatile_uncorrected", "last"),
    "DCGM_FI_DEV_RETIRED_DBE": ("retired_pages_dbe", "last"),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("remap_pending", "max"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("remap_failure", "max"),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("pcie_replay", "last"),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_gen", "min"),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_width", "min"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": ("nvlink_errors", "last"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("throttle_reasons", "bits"),
}
"""dcgm-exporter field -> (gpu_sample column, how one grid step keeps several samples)."""

CLOCK_EVENT_BITS = {"gpu_idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                    "sync_boost": 0x10, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
                    "display_clocks": 0x100, "board_limit": 0x200, "reliability": 0x400}
"""nvmlClocksEventReason* bits, by the names gpu_sample.throttle_reasons uses."""

NODE_NAMES = {"ib.symbol_error": "node_infiniband_symbol_error_total",
              "ib.link_downed": "node_infiniband_link_downed_total",
              "ib.link_error_recovery": "node_infiniband_link_error_recovery_total",
              "ib.port_rcv_errors": "node_infiniband_port_errors_received_total",
              "ib.port_xmit_discards": "node_infiniband_port_transmit_discards_total"}
"""Stored node counters -> node-exporter's names."""

LOWER_IS_WORSE = frozenset({"gen_throughput", "prompt_throughput"})
_SERVING_COUNTER = re.compile(r"(_total|_count|_sum|_bucket|_success|_failure|_us)$")

Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One replayed series: its values on the grid, None where it has no sample."""

    name: str
    labels: Labels
    values: list[float | None]


@dataclass
class Replay:
    """Series on a grid of ``length`` points, ``step`` apart from ``start`` (promtool's time 0)."""

    start: datetime
    step: timedelta
    length: int
    series: dict[str, list[Series]]

    def index(self, ts: datetime) -> int:
        """The first grid point at or after ``ts`` (when a scrape would have seen it)."""
        return max(0, math.ceil((ts - self.start) / self.step))

    def time(self, index: int) -> datetime:
        return self.start + index * self.step


def replay(bundle: Bundle, names: Iterable[str], since: datetime, until: datetime,
           event_kinds: Iterable[str] = ()) -> Replay:
    """The series ``names`` (and the log counter of ``event_kinds``) between ``since`` and ``until``."""
    start = since.replace(second=0, microsecond=0) - STEP  # counters read 0 once before the first event
    grid = Replay(start, STEP, max(1, math.ceil((until - start) / STEP) + 1), {})
    wanted = set(names)
    for name in sorted(wanted & set(GPU_FIELDS)):
        grid.series[name] = _gpu_series(bundle, grid, name, until)
    kinds = sorted(set(event_kinds))
    if LOG_COUNTER in wanted and kinds:
        grid.series[LOG_COUNTER] = _event_counters(bundle, grid, kinds, until)
    if XID_GAUGE in wanted:
        grid.series[XID_GAUGE] = _xid_gauges(bundle, grid, until)
    stored = {v: k for k, v in NODE_NAMES.items()}
    rest = sorted(wanted - set(GPU_FIELDS) - {LOG_COUNTER, XID_GAUGE})
    if rest:
        for name, found in _stored_series(bundle, grid, [stored.get(n, n) for n in rest], until).items():
            grid.series[NODE_NAMES.get(name, name)] = found
    return grid


def _bucketed(grid: Replay, rows: Iterable[tuple[Labels, datetime, float]], keep: str) -> list[tuple[Labels, list]]:
    """(labels, ts, value) rows -> one value list per label set, several samples in a step kept by ``keep``."""
    out: dict[Labels, list[float | None]] = {}
    for labels, ts, value in rows:
        i = grid.index(ts)
        if i >= grid.length or value is None or not math.isfinite(value):
            continue
        values = out.setdefault(labels, [None] * grid.length)
        old = values[i]
        if old is None or keep == "last":
            values[i] = value
        elif keep == "max":
            values[i] = max(old, value)
        elif keep == "min":
            values[i] = min(old, value)
        else:
            values[i] = float(int(old) | int(value))
    return sorted(out.items())


def _gpu_series(bundle: Bundle, grid: Replay, name: str, until: datetime) -> list[Series]:
    column, keep = GPU_FIELDS[name]
    rows = bundle.con.execute(
        f'SELECT host, gpu, ts, "{column}" FROM gpu_sample WHERE ts >= ? AND ts <= ? AND gpu IS NOT NULL '
        f'AND "{column}" IS NOT NULL ORDER BY ts', [grid.start, until]).fetchall()

    def value(raw: Any) -> float:
        if keep == "bits":
            return float(sum(CLOCK_EVENT_BITS.get(r, 0) for r in set(raw)))
        return float(raw)

    found = _bucketed(grid, ((_labels(instance=host, pci_bus_id=gpu), ts, value(v)) for host, gpu, ts, v in rows),
                      keep)
    return [Series(name, labels, values) for labels, values in found]


def _event_counters(bundle: Bundle, grid: Replay, kinds: list[str], until: datetime) -> list[Series]:
    marks = ", ".join("?" * len(kinds))
    rows = bundle.con.execute(
        f"SELECT ts, host, kind, attrs FROM event WHERE kind IN ({marks}) AND ts >= ? AND ts <= ? "
        "AND ts_origin IS DISTINCT FROM 'derived' ORDER BY ts",
        [*kinds, grid.start, until]).fetchall()
    steps: dict[Labels, list[float]] = {}
    for ts, host, kind, attrs in rows:
        labels = event_labels(host, kind, json.loads(attrs) if attrs else {})
        counts = steps.setdefault(labels, [0.0] * grid.length)
        counts[grid.index(ts)] += 1
    out = []
    for labels, counts in sorted(steps.items()):
        total, values = 0.0, []
        for n in counts:
            total += n
            values.append(total)
        out.append(Series(LOG_COUNTER, labels, values))
    return out


def _xid_gauges(bundle: Bundle, grid: Replay, until: datetime) -> list[Series]:
    rows = bundle.con.execute(
        "SELECT ts, host, coalesce(gpu, attrs->>'pci'), TRY_CAST(attrs->>'xid' AS INTEGER) FROM event "
        "WHERE kind = 'xid' AND ts >= ? AND ts <= ? ORDER BY ts", [grid.start, until]).fetchall()
    last: dict[Labels, list[float | None]] = {}
    for ts, host, gpu, xid in rows:
        if xid is None or gpu is None:
            continue
        values = last.setdefault(_labels(instance=host, pci_bus_id=gpu), [None] * grid.length)
        values[grid.index(ts)] = float(xid)
    out = []
    for labels, marks in sorted(last.items()):
        current, values = 0.0, []
        for mark in marks:
            current = mark if mark is not None else current
            values.append(current)
        out.append(Series(XID_GAUGE, labels, values))
    return out


def _stored_series(bundle: Bundle, grid: Replay, names: list[str], until: datetime) -> dict[str, list[Series]]:
    marks = ", ".join("?" * len(names))
    rows = bundle.con.execute(
        f"SELECT name, host, labels, ts, value FROM series WHERE name IN ({marks}) AND ts >= ? AND ts <= ? "
        "ORDER BY ts", [*names, grid.start, until]).fetchall()
    by_name: dict[str, list[tuple[Labels, datetime, float]]] = {}
    for name, host, labels, ts, value in rows:
        raw = {str(k): str(v) for k, v in (json.loads(labels) if labels else {}).items() if k != "metric"}
        if host and "instance" not in raw:
            raw["instance"] = host
        by_name.setdefault(name, []).append((_labels(**raw), ts, value))
    out = {}
    for name, found in by_name.items():
        keep = "last" if _SERVING_COUNTER.search(name) or name.startswith("ib.") else \
            "min" if name in LOWER_IS_WORSE else "max"
        out[name] = [Series(NODE_NAMES.get(name, name), labels, values)
                     for labels, values in _bucketed(grid, found, keep)]
    return out


def _labels(**labels: Any) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in labels.items() if v is not None and str(v) != ""))


# -- the PromQL forms ----------------------------------------------------------------------------

_SELECTOR = r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<matchers>[^}]*)\})?"
_NUMBER = r"(?P<threshold>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_OP = r"(?P<op>>=|<=|==|!=|>|<)"
_FORMS = (
    ("increase", re.compile(rf"^increase\(\s*{_SELECTOR}\[(?P<window>\d+)(?P<unit>[smh])\]\s*\)\s*{_OP}\s*{_NUMBER}$")),
    ("bit", re.compile(rf"^floor\(\s*{_SELECTOR}\s*/\s*(?P<bit>\d+)\s*\)\s*%\s*2\s*==\s*1$")),
    ("quantile", re.compile(rf"^histogram_quantile\(\s*(?P<q>[0-9.]+)\s*,\s*sum\s+by\s*\((?P<by>[\w\s,]*)\)\s*"
                            rf"\(\s*rate\(\s*{_SELECTOR}\[(?P<window>\d+)(?P<unit>[smh])\]\s*\)\s*\)\s*\)\s*{_OP}\s*{_NUMBER}$")),
    ("value", re.compile(rf"^{_SELECTOR}\s*{_OP}\s*{_NUMBER}$")),
)
_MATCHER = re.compile(r'\s*(?P<label>[a-zA-Z_]\w*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNITS = {"s": 1, "m": 60, "h": 3600}
_COMPARE = {">": lambda a, b: a > b, "<": lambda a, b: a < b, ">=": lambda a, b: a >= b,
            "<=": lambda a, b: a <= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b}


@dataclass(frozen=True)
class Expr:
    """One rule expression in a form this module evaluates."""

    form: str
    name: str
    matchers: tuple[tuple[str, str, str], ...]
    op: str
    threshold: float
    window: timedelta | None = None
    bit: int | None = None
    quantile: float | None = None
    by: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        have = dict(labels)
        for label, op, value in self.matchers:
            got = have.get(label, "")
            hit = got == value if op in ("=", "!=") else re.fullmatch(value, got) is not None
            if hit != (op in ("=", "=~")):
                return False
        return True


def parse(expr: str) -> Expr:
    """The expression as an :class:`Expr`; ValueError for anything outside the supported forms."""
    text = " ".join(expr.split())
    for form, pattern in _FORMS:
        m = pattern.match(text)
        if not m:
            continue
        matchers = []
        body = m.group("matchers") or ""
        pos = 0
        while pos < len(body.strip()):
            mm = _MATCHER.match(body, pos)
            if not mm:
                raise ValueError(f"unsupported label matcher in {expr!r}")
            value = re.sub(r"\\(.)", r"\1", mm.group("value"))
            matchers.append((mm.group("label"), mm.group("op"), value))
            pos = mm.end()
        groups = m.groupdict()
        return Expr(form=form, name=m.group("name"), matchers=tuple(matchers),
                    op=groups.get("op") or "==", threshold=float(groups.get("threshold") or 1),
                    window=timedelta(seconds=int(groups["window"]) * _UNITS[groups["unit"]])
                    if groups.get("window") else None,
                    bit=int(groups["bit"]) if groups.get("bit") else None,
                    quantile=float(groups["q"]) if groups.get("q") else None,
                    by=tuple(b.strip() for b in (groups.get("by") or "").split(",") if b.strip()))
    raise ValueError(f"unsupported expression form: {expr!r}")


def measured(expr: Expr, grid: Replay) -> dict[Labels, list[float | None]]:
    """What the expression compares, per output series and grid point (None: no result there)."""
    if expr.form == "quantile":
        return _quantiles(expr, grid)
    out: dict[Labels, list[float | None]] = {}
    for s in grid.series.get(expr.name, []):
        if not expr.matches(s.labels):
            continue
        if expr.form == "increase":
            assert expr.window is not None
            values = [_increase(s.values, i, expr.window, grid.step) for i in range(grid.length)]
        else:
            values = [_instant(s.values, i, grid.step) for i in range(grid.length)]
            if expr.form == "bit":
                values = [None if v is None else math.floor(v / expr.bit) % 2 for v in values]
        out[s.labels] = values
    return out


def condition(expr: Expr, grid: Replay) -> dict[Labels, list[bool]]:
    """Where the expression returns a sample (the alert is pending or firing), per output series."""
    compare = _COMPARE["==" if expr.form == "bit" else expr.op]
    limit = 1.0 if expr.form == "bit" else expr.threshold
    return {labels: [v is not None and compare(v, limit) for v in values]
            for labels, values in measured(expr, grid).items()}


def alert_states(expr: Expr, hold: timedelta, grid: Replay) -> dict[Labels, list[bool]]:
    """Firing or not at each grid point, per output series: true for ``hold`` without a gap, as the rule
    manager evaluates an alerting rule every step from time 0."""
    out = {}
    for labels, cond in condition(expr, grid).items():
        firing, since = [], None
        for i, true in enumerate(cond):
            since = (since if since is not None else i) if true else None
            firing.append(since is not None and (i - since) * grid.step >= hold)
        out[labels] = firing
    return out


def _quantiles(expr: Expr, grid: Replay) -> dict[Labels, list[float | None]]:
    """``histogram_quantile(q, sum by (le, ...) (rate(x_bucket[W])))`` per group and grid point."""
    assert expr.window is not None and expr.quantile is not None
    keep = [b for b in expr.by if b != "le"]
    groups: dict[Labels, list[tuple[float, list[float | None]]]] = {}
    for s in grid.series.get(expr.name, []):
        labels = dict(s.labels)
        if not expr.matches(s.labels) or "le" not in labels:
            continue
        rates = [None if (v := _increase(s.values, i, expr.window, grid.step)) is None
                 else v / expr.window.total_seconds() for i in range(grid.length)]
        key = tuple((k, labels[k]) for k in sorted(keep) if labels.get(k))
        groups.setdefault(key, []).append((float(labels["le"]), rates))
    out: dict[Labels, list[float | None]] = {}
    for key, buckets in groups.items():
        values: list[float | None] = []
        for i in range(grid.length):
            summed: dict[float, float] = {}
            for le, rates in buckets:
                if rates[i] is not None:
                    summed[le] = summed.get(le, 0.0) + rates[i]
            q = histogram_quantile(expr.quantile, summed.items()) if summed else math.nan
            values.append(None if math.isnan(q) else q)
        out[key] = values
    return out


def _instant(values: list[float | None], i: int, step: timedelta) -> float | None:
    back = int(LOOKBACK / step)
    for j in range(i, max(-1, i - back - 1), -1):
        if values[j] is not None:
            return values[j]
    return None


def _increase(values: list[float | None], i: int, window: timedelta, step: timedelta) -> float | None:
    """Prometheus 2.x ``increase()`` (extrapolatedRate, counter) at grid point ``i``."""
    first = max(0, i - int(window / step))
    points = [(j, v) for j in range(first, i + 1) if (v := values[j]) is not None]
    if len(points) < 2:
        return None
    step_s = step.total_seconds()
    range_start, range_end = (i * step_s) - window.total_seconds(), i * step_s
    result = points[-1][1] - points[0][1]
    last = 0.0
    for _, v in points:
        if v < last:
            result += last
        last = v
    t_first, t_last = points[0][0] * step_s, points[-1][0] * step_s
    to_start, to_end = t_first - range_start, range_end - t_last
    sampled = t_last - t_first
    average = sampled / (len(points) - 1)
    if result > 0 and points[0][1] >= 0:
        to_zero = sampled * (points[0][1] / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    return result * (interval / sampled)
