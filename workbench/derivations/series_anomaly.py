"""Serving symptoms read off the metric curves: when latency, errors, queue, KV cache, throughput or
traffic left their baseline.

Each curve of :func:`workbench.series.signals` (p99 TTFT of one model on one host, its queue
depth, error ratio, ...) is scanned in time order. A point is anomalous when it is far from the
baseline of the points before it in robust units (median and MAD, z >= 5) *and* the shift is
large in plain terms (e.g. latency +50 %, queue +5 requests): the robust score ignores the usual
noise, the magnitude floor ignores trivial moves of a flat curve. The onset is the first point
of a run of at least two anomalous points (a single one only at the very end of the data, when
it is extreme). KV-cache saturation is a level, not a change: usage >= 0.9 for two points.

Event kinds (layer): ``latency_spike``, ``error_rate_spike``, ``queue_backlog``,
``throughput_drop``, ``request_rate_surge`` (business) and ``kv_cache_saturation`` (gpu). Attrs:
``metric``, ``stat``, ``unit``, ``baseline``, ``peak``, ``onset``, ``end``, ``z``, ``points``,
``method`` and the server identity (``model_name``, ``instance``, ...).
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from collectors.base import Event, to_utc
from workbench import series

NAME = "series_anomaly"

BASELINE_POINTS = 120
"""The baseline is the trailing window of points before a candidate (bounded so long series stay fast)."""
MIN_BASELINE = 5
Z_THRESHOLD = 5.0
MAD_TO_SIGMA = 1.4826
KV_SATURATED = 0.9
STAT_PREFERENCE = ("p99", "p95", "p90", "mean", "value", "ratio", "rate", "median", "p50")


@dataclass(frozen=True)
class Rule:
    """Which curves a symptom is read from and how large a move must be to count."""

    kind: str
    layer: str
    metrics: tuple[str, ...]
    direction: int
    rel: float
    floor: float
    severity: str = "warning"
    fallback: tuple[str, ...] = ()
    """Curves read only when a server has none of ``metrics`` (Triton has no token counters)."""


RULES = (
    Rule("latency_spike", "business", tuple(sorted(series.LATENCY)), +1, rel=0.5, floor=0.001),
    Rule("error_rate_spike", "business", ("error_rate",), +1, rel=1.0, floor=0.02, severity="error",
         fallback=("request_failure",)),
    Rule("queue_backlog", "business", ("queue_depth",), +1, rel=1.0, floor=5.0),
    Rule("throughput_drop", "business", ("gen_throughput", "generation_tokens"), -1, rel=0.5, floor=0.0,
         fallback=("request_rate",)),
    Rule("request_rate_surge", "business", ("request_rate",), +1, rel=1.0, floor=0.5),
)


@dataclass
class Onset:
    """Where an anomalous run starts and how far it went."""

    start: int
    end: int
    baseline: float
    peak: float
    z: float


def find_onset(values: Sequence[float], *, direction: int = 1, rel: float = 0.5, floor: float = 0.0,
               z: float = Z_THRESHOLD, min_baseline: int = MIN_BASELINE, persist: int = 2) -> Onset | None:
    """First run of points that left the trailing baseline (robust z and magnitude), or None.

    The baseline window is kept sorted, so its median costs one bisect per point; the MAD is only
    computed for points that already pass the magnitude test (rare on a healthy curve)."""
    values = [v for v in values if math.isfinite(v)]
    n = len(values)
    window = sorted(values[max(0, min_baseline - BASELINE_POINTS):min_baseline])
    for i in range(min_baseline, n):
        median = _sorted_median(window)
        need = max(rel * abs(median), floor)
        if direction * (values[i] - median) >= need and direction * (values[i] - median) > 0:
            onset = _run_from(values, i, window, median, need, direction, z, persist)
            if onset is not None:
                return onset
        bisect.insort(window, values[i])
        if i - BASELINE_POINTS >= 0:
            del window[bisect.bisect_left(window, values[i - BASELINE_POINTS])]
    return None


def _sorted_median(ordered: list[float]) -> float:
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _run_from(values: list[float], i: int, window: list[float], median: float, need: float, direction: int,
              z: float, persist: int) -> Onset | None:
    """The anomalous run starting at ``i`` against this baseline, if it is long (or extreme) enough."""
    # A perfectly flat baseline has MAD 0: take 1 % of its level as the noise floor, so z stays a
    # readable number (not 1e14) while the magnitude test ``need`` still decides.
    scale = max(MAD_TO_SIGMA * statistics.median(abs(b - median) for b in window), 0.01 * abs(median), 1e-12)

    def score(value: float) -> float:
        shift = direction * (value - median)
        return shift / scale if shift >= need and shift > 0 else 0.0

    first = score(values[i])
    if first < z:
        return None
    j = i
    while j + 1 < len(values) and score(values[j + 1]) >= z:
        j += 1
    run = values[i:j + 1]
    if j - i + 1 >= persist or (j == len(values) - 1 and first >= 2 * z):
        peak = max(run) if direction > 0 else min(run)
        return Onset(i, j, median, peak, max(score(v) for v in run))
    return None


def find_saturation(values: Sequence[float], threshold: float, persist: int = 2) -> Onset | None:
    """First run of at least ``persist`` points at or above ``threshold``."""
    i = 0
    n = len(values)
    while i < n:
        if math.isfinite(values[i]) and values[i] >= threshold:
            j = i
            while j + 1 < n and math.isfinite(values[j + 1]) and values[j + 1] >= threshold:
                j += 1
            if j - i + 1 >= persist:
                before = [v for v in values[:i] if math.isfinite(v)]
                baseline = statistics.median(before) if before else math.nan
                return Onset(i, j, baseline, max(values[i:j + 1]), math.nan)
            i = j + 1
        else:
            i += 1
    return None


def derive(con: Any) -> Iterator[Event]:
    groups: dict[tuple[Any, ...], dict[str, series.Signal]] = defaultdict(dict)
    for signal in _best_stats(series.signals(con)):
        groups[(signal.host, tuple(sorted(signal.identity.items())))][signal.metric] = signal
    for by_metric in groups.values():
        for rule in RULES:
            wanted = [m for m in rule.metrics if m in by_metric] or [m for m in rule.fallback if m in by_metric]
            for metric in wanted:
                event = _check(rule, by_metric[metric])
                if event is not None:
                    yield event
        if "kv_cache_usage" in by_metric:
            event = _saturation(by_metric["kv_cache_usage"])
            if event is not None:
                yield event


def _best_stats(signals: list[series.Signal]) -> list[series.Signal]:
    """One curve per (host, identity, metric): p99 before p95 before mean, and so on."""
    best: dict[tuple[Any, ...], series.Signal] = {}
    for signal in signals:
        key = (signal.host, tuple(sorted(signal.identity.items())), signal.metric)
        rank = STAT_PREFERENCE.index(signal.stat) if signal.stat in STAT_PREFERENCE else len(STAT_PREFERENCE)
        current = best.get(key)
        if current is None or rank < _rank(current) or (rank == _rank(current)
                                                         and len(signal.points) > len(current.points)):
            best[key] = signal
    return list(best.values())


def _rank(signal: series.Signal) -> int:
    return STAT_PREFERENCE.index(signal.stat) if signal.stat in STAT_PREFERENCE else len(STAT_PREFERENCE)


def _check(rule: Rule, signal: series.Signal) -> Event | None:
    points = [(ts, v) for ts, v in signal.points if math.isfinite(v)]
    onset = find_onset([v for _, v in points], direction=rule.direction, rel=rule.rel, floor=rule.floor)
    if onset is None:
        return None
    verb = "rose" if rule.direction > 0 else "fell"
    text = (f"{_label(signal)} {verb} from {_fmt(onset.baseline, signal.unit)} to {_fmt(onset.peak, signal.unit)} "
            f"(robust z {onset.z:.1f})")
    return _event(rule.kind, rule.layer, rule.severity, signal, points, onset, text, "robust_z")


def _saturation(signal: series.Signal) -> Event | None:
    points = [(ts, v) for ts, v in signal.points if math.isfinite(v)]
    values = [v for _, v in points]
    threshold = KV_SATURATED * (100.0 if values and max(values) > 1.5 else 1.0)  # a percent column, not a fraction
    onset = find_saturation(values, threshold)
    if onset is None:
        return None
    text = (f"{_label(signal)} at {onset.peak:.2f} (>= {threshold:g}) for {onset.end - onset.start + 1} points; "
            f"baseline {onset.baseline:.2f}")
    event = _event("kv_cache_saturation", "gpu", "warning", signal, points, onset, text, "threshold")
    event.attrs["threshold"] = threshold
    return event


def _label(signal: series.Signal) -> str:
    who = signal.identity.get("model_name") or signal.identity.get("model") or signal.identity.get("instance")
    where = f" ({who})" if who else ""
    stat = "" if signal.stat in ("value", "rate", "ratio") else f"{signal.stat} "
    return f"{stat}{signal.metric}{where}"


def _fmt(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return "n/a"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if abs(value) < 1 else f"{value:.2f} s"
    return f"{value:.3g}{(' ' + unit) if unit else ''}"


def _event(kind: str, layer: str, severity: str, signal: series.Signal, points: list[tuple[datetime, float]],
           onset: Onset, text: str, method: str) -> Event:
    start, end = points[onset.start][0], points[onset.end][0]
    attrs: dict[str, Any] = {
        "metric": signal.metric, "stat": signal.stat, "unit": signal.unit,
        "baseline": _finite(onset.baseline), "peak": _finite(onset.peak), "z": _finite(onset.z),
        "onset": _iso(start), "end": _iso(end), "points": onset.end - onset.start + 1,
        "method": method, "series": signal.source}
    attrs.update(signal.identity)
    return Event(kind=kind, message=text, ts=start, ts_approx=signal.approx, host=signal.host, layer=layer,
                 severity=severity, attrs=attrs)


def _iso(when: datetime) -> str:
    return to_utc(when).isoformat().replace("+00:00", "Z")


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
