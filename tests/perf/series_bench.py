"""Serving-metric arithmetic before and after pandas/numpy: counter rates, histogram quantiles, anomaly onsets.

Writes a synthetic fleet into a bundle's ``series`` table (default 1,000 hosts x 20 metrics, one hour of
15 s scrapes: 6 vLLM histograms with 11 buckets plus _sum/_count, 5 counters with restarts, 9 gauges;
a few hosts have an incident half-way), then times in a fresh process each, so peak RSS is each one's own:

    rate/increase        signals() over the counter metrics (rates, error ratio, request rate)
    histogram quantile   signals() over the histogram metrics (per-interval p50/p95/p99, _sum/_count means)
    anomaly detection    the onset scan over every curve (curves computed once beforehand, not timed)
    whole derivation     series_anomaly.derive(): signals + detection

The baseline is the pure-Python code the project had before (workbench/query/series.py and
workbench/ingest/derivations/series_anomaly.py), kept below verbatim; the new code is imported from the package.
Both must give the same curves and events: the "same" column compares them.

    python tests/perf/series_bench.py               # 1,000 hosts
    python tests/perf/series_bench.py --hosts 50    # quicker
"""

# ruff: noqa: E501  (the baseline is kept verbatim)

from __future__ import annotations

import argparse
import bisect
import json
import math
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa

from collectors.base import Event, to_utc
from collectors.framework.metric_vocabulary import (
    COUNTERS,
    CUMULATIVE_LATENCY,
    IDENTITY_LABELS,
    LATENCY,
    family,
    unit_scale,
)
from workbench.ingest.derivations import series_anomaly as new_anomaly
from workbench.query import series as new_series
from workbench.store.bundle import Bundle
from workbench.table import format_table

# == baseline: workbench/query/series.py before pandas (verbatim) ======================================

# -- quantiles ---------------------------------------------------------------------------------

def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]], *, allow_truncated: bool = False) -> float:
    """The q-quantile of cumulative ``(upper_bound, count)`` buckets, as Prometheus computes it.

    NaN when undefined (no observations, fewer than two buckets, no +Inf bucket). With
    ``allow_truncated`` a histogram cut before its +Inf bucket (a pasted or truncated page) uses
    its highest bucket as the total: the result is then a lower bound of the true quantile."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for le, count in buckets:
        if math.isnan(le) or math.isnan(count):
            continue
        merged[le] = merged.get(le, 0.0) + count
    ordered = sorted(merged.items())
    if not ordered:
        return math.nan
    if not math.isinf(ordered[-1][0]):
        if not allow_truncated:
            return math.nan
        ordered.append((math.inf, ordered[-1][1]))
    running = 0.0
    monotonic = []
    for le, count in ordered:  # float noise can make cumulative counts dip; Prometheus flattens it
        running = max(running, count)
        monotonic.append((le, running))
    if len(monotonic) < 2:
        return math.nan
    total = monotonic[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, count) in enumerate(monotonic) if count >= rank or i == len(monotonic) - 1)
    if b == len(monotonic) - 1:
        return monotonic[-2][0]
    if b == 0 and monotonic[0][0] <= 0:
        return monotonic[0][0]
    start, below = (monotonic[b - 1] if b > 0 else (0.0, 0.0))
    end, count = monotonic[b]
    return start + (end - start) * ((rank - below) / (count - below))


def bucket_deltas(previous: dict[float, float] | None, current: dict[float, float]) -> tuple[dict[float, float], bool]:
    """Observations between two scrapes of one histogram: (per-bucket deltas, reset). Any bucket
    that went down means the server restarted, so the new cumulative counts are the delta."""
    if previous is None:
        return dict(current), False
    reset = any(current.get(le, 0.0) < count for le, count in previous.items() if le in current)
    if reset:
        return dict(current), True
    return {le: count - previous.get(le, 0.0) for le, count in current.items()}, False


@dataclass
class IntervalQuantiles:
    """Quantiles of the observations made between the previous scrape and ``ts``."""

    ts: datetime
    observations: float
    values: dict[float, float]
    reset: bool = False


def interval_quantiles(scrapes: Sequence[tuple[datetime, dict[float, float]]],
                       qs: Sequence[float] = (0.5, 0.95, 0.99), *, allow_truncated: bool = False,
                       include_first: bool = False) -> list[IntervalQuantiles]:
    """Per-interval quantiles from successive cumulative scrapes of one histogram (sorted by time).

    The first scrape has no predecessor; with ``include_first`` its quantiles cover everything
    since the server started. Intervals without new observations are left out."""
    out: list[IntervalQuantiles] = []
    previous: dict[float, float] | None = None
    for ts, buckets in sorted(scrapes, key=lambda s: s[0]):
        if previous is None and not include_first:
            previous = buckets
            continue
        delta, reset = bucket_deltas(previous, buckets)
        previous = buckets
        finite = [v for v in delta.values() if not math.isnan(v)]
        observations = max(finite) if finite else 0.0
        if observations <= 0:
            continue
        values = {q: histogram_quantile(q, delta.items(), allow_truncated=allow_truncated) for q in qs}
        out.append(IntervalQuantiles(ts, observations, values, reset))
    return out


def counter_deltas(points: Sequence[tuple[datetime, float]]) -> list[tuple[datetime, float, float]]:
    """(ts, increase, seconds since the previous point) for a counter; a decrease is a restart
    (Prometheus' rule), so the new value itself is the increase. NaN/Inf points are ignored."""
    out: list[tuple[datetime, float, float]] = []
    previous: tuple[datetime, float] | None = None
    for ts, value in sorted(points, key=lambda p: p[0]):
        if not math.isfinite(value):
            continue
        if previous is not None and ts > previous[0]:
            increase = value if value < previous[1] else value - previous[1]
            out.append((ts, increase, (ts - previous[0]).total_seconds()))
        previous = (ts, value)
    return out


# -- signals: the curves a responder looks at --------------------------------------------------

@dataclass
class Signal:
    """One curve per server/model: p99 TTFT, queue depth, error ratio, request rate, ..."""

    host: str | None
    metric: str
    stat: str
    unit: str
    identity: dict[str, str]
    points: list[tuple[datetime, float]] = field(default_factory=list)
    approx: bool = False
    source: str = ""


@dataclass
class _Rows:
    """The rows of one (host, identity) group, split by how they must be combined."""

    buckets: dict[tuple[str, str], dict[datetime, dict[float, float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict)))
    quantiles: dict[tuple[str, str, str], dict[datetime, float]] = field(
        default_factory=lambda: defaultdict(dict))
    plain: dict[tuple[str, str, str], dict[datetime, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    approx: bool = False


def load_rows(con: Any, metrics: Iterable[str] | None = None) -> Iterator[tuple[datetime, str | None, str,
                                                                                dict[str, str], float]]:
    """Series rows that carry a vocabulary name, oldest first, fetched in batches."""
    sql = ("SELECT ts, host, name, labels, value FROM series "
           "WHERE json_extract_string(labels, '$.metric') IS NOT NULL AND ts IS NOT NULL")
    params: list[Any] = []
    wanted = sorted(set(metrics or ()))
    if wanted:
        sql += f" AND json_extract_string(labels, '$.metric') IN ({', '.join('?' for _ in wanted)})"
        params = wanted
    cur = con.execute(sql + " ORDER BY ts", params)
    while True:
        batch = cur.fetchmany(50_000)
        if not batch:
            return
        for ts, host, name, labels, value in batch:
            yield ts, host, name, json.loads(labels) if labels else {}, value


def signals(con: Any, metrics: Iterable[str] | None = None) -> list[Signal]:
    """Every curve the series table supports, per host and server identity.

    Histograms give per-interval p50/p95/p99 (stat ``p50``...), summaries and quantile-labelled
    values give their quantiles, Triton cumulative durations give a per-interval ``mean``,
    gauges their ``value``, counters a per-second ``rate``; failure vs success counters give
    ``error_rate`` (ratio), and request counters a ``request_rate``. Latencies are in seconds."""
    groups: dict[tuple[str | None, tuple[tuple[str, str], ...]], _Rows] = defaultdict(_Rows)
    for ts, host, name, labels, value in load_rows(con, metrics):
        if value is None or math.isnan(value):
            continue
        metric = labels.get("metric", "")
        identity = tuple((k, labels[k]) for k in IDENTITY_LABELS if labels.get(k))
        rows = groups[(host, identity)]
        rows.approx = rows.approx or labels.get("ts_origin") in ("mtime", "captured")
        base, suffix = family(name)
        if suffix == "_bucket" and "le" in labels:
            try:
                le = float(labels["le"])
            except ValueError:
                continue
            per_ts = rows.buckets[(metric, base)][ts]
            per_ts[le] = per_ts.get(le, 0.0) + value
        elif "quantile" in labels and suffix not in ("_sum", "_count"):
            stat = labels.get("stat") or _quantile_stat(labels["quantile"])
            per_ts = rows.quantiles[(metric, base, stat)]
            per_ts[ts] = max(per_ts.get(ts, value), value)  # quantiles do not add up: keep the worst
        else:
            kind = "cumulative" if base in CUMULATIVE_LATENCY else (suffix or "value")
            stat = labels.get("stat")
            rows.plain[(metric, name if stat is None else f"{name}|{stat}", kind)][ts] += value
    out: list[Signal] = []
    for (host, identity), rows in groups.items():
        out.extend(_group_signals(host, dict(identity), rows))
    return out


def _quantile_stat(quantile: str) -> str:
    try:
        return f"p{float(quantile) * 100:g}"
    except ValueError:
        return f"q{quantile}"


def _group_signals(host: str | None, identity: dict[str, str], rows: _Rows) -> Iterator[Signal]:
    def signal(metric: str, stat: str, unit: str, points: list[tuple[datetime, float]], source: str) -> Signal:
        return Signal(host, metric, stat, unit, identity, points, rows.approx, source)

    for (metric, base), by_ts in rows.buckets.items():
        scale = unit_scale(base)
        intervals = interval_quantiles(sorted(by_ts.items()), allow_truncated=True)
        for q in (0.5, 0.95, 0.99):
            points = [(iv.ts, iv.values[q] * scale) for iv in intervals if math.isfinite(iv.values[q])]
            if points:
                yield signal(metric, _quantile_stat(str(q)), "s" if metric in LATENCY else "", points, base)
    for (metric, base, stat), by_ts in rows.quantiles.items():
        scale = unit_scale(base) if metric in LATENCY else 1.0
        points = [(ts, v * scale) for ts, v in sorted(by_ts.items()) if math.isfinite(v)]
        yield signal(metric, stat, "s" if metric in LATENCY else "", points, base)
    served = _served(rows)
    counters: dict[str, list[list[tuple[datetime, float]]]] = defaultdict(list)
    for (metric, key, kind), by_ts in rows.plain.items():
        name = key.split("|")[0]
        stat = key.split("|")[1] if "|" in key else None
        points = sorted(by_ts.items())
        if kind == "cumulative":
            mean = _ratio_of_increases(points, served)
            if mean:
                yield signal(metric, "mean", "s", [(ts, v * unit_scale(name)) for ts, v in mean], name)
        elif kind in ("_sum", "_count"):
            continue
        elif metric in COUNTERS or kind == "_total":
            counters[metric].append(points)
        elif metric in LATENCY:
            yield signal(metric, stat or "value", "s", [(ts, v * unit_scale(name)) for ts, v in points], name)
        else:
            yield signal(metric, stat or "value", "", points, name)
    yield from _sum_count_means(rows, signal)
    rates = {metric: _merge([p for points in series for p in _rate(points)]) for metric, series in counters.items()}
    for metric, points in rates.items():
        if points:
            yield signal(metric, "rate", "1/s", points, metric)
    yield from _derived_rates(rows, rates, signal)


def _merge(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    merged: dict[datetime, float] = defaultdict(float)
    for ts, value in points:
        merged[ts] += value
    return sorted(merged.items())


def _rate(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    return [(ts, inc / dt) for ts, inc, dt in counter_deltas(points) if dt > 0]


def _served(rows: _Rows) -> list[tuple[datetime, float]]:
    """Requests completed (success + failure) per scrape time, for Triton's cumulative durations."""
    merged: dict[datetime, float] = defaultdict(float)
    for (metric, _, _), by_ts in rows.plain.items():
        if metric in ("request_success", "request_failure"):
            for ts, value in by_ts.items():
                merged[ts] += value
    return sorted(merged.items())


def _ratio_of_increases(numerator: list[tuple[datetime, float]],
                        denominator: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    den = {ts: inc for ts, inc, _ in counter_deltas(denominator)}
    return [(ts, inc / den[ts]) for ts, inc, _ in counter_deltas(numerator) if den.get(ts, 0) > 0]


def _sum_count_means(rows: _Rows, signal: Any) -> Iterator[Signal]:
    """Mean latency per interval from a histogram's or summary's _sum and _count."""
    sums: dict[str, tuple[str, dict[datetime, float]]] = {}
    counts: dict[str, dict[datetime, float]] = {}
    for (metric, key, kind), by_ts in rows.plain.items():
        if metric not in LATENCY or "|" in key:
            continue
        if kind == "_sum":
            sums[family(key)[0]] = (metric, by_ts)
        elif kind == "_count":
            counts[family(key)[0]] = by_ts
    for base, (metric, by_ts) in sums.items():
        if base in counts:
            mean = _ratio_of_increases(sorted(by_ts.items()), sorted(counts[base].items()))
            if mean:
                yield signal(metric, "mean", "s", [(ts, v * unit_scale(base)) for ts, v in mean], base)


def _derived_rates(rows: _Rows, rates: dict[str, list[tuple[datetime, float]]], signal: Any) -> Iterator[Signal]:
    """Error ratio (failures / finished requests) and request arrival rate per interval."""
    failure = dict(rates.get("request_failure", []))
    success = dict(rates.get("request_success", []))
    if failure:
        ratio = [(ts, f / (f + success.get(ts, 0.0))) for ts, f in sorted(failure.items())
                 if f + success.get(ts, 0.0) > 0]
        if ratio and success:
            yield signal("error_rate", "ratio", "", ratio, "request_failure/request_success")
    if "requests_total" in rates:
        yield signal("request_rate", "rate", "1/s", rates["requests_total"], "requests_total")
    elif success:
        total = [(ts, s + failure.get(ts, 0.0)) for ts, s in sorted(success.items())]
        yield signal("request_rate", "rate", "1/s", total, "request_success+request_failure")
    else:
        for (metric, key, kind), by_ts in rows.plain.items():
            if kind == "_count" and metric in ("e2e_latency", "ttft") and "|" not in key:
                yield signal("request_rate", "rate", "1/s", _rate(sorted(by_ts.items())), key)
                return


# == baseline: workbench/ingest/derivations/series_anomaly.py before pandas (verbatim) ===================

series = SimpleNamespace(LATENCY=LATENCY, Signal=Signal, signals=signals)

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


# == the benchmark ==============================================================================

MODEL = "llama-3-8b"
LES = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, math.inf)
HISTOGRAMS = (  # family, vocabulary name, median seconds when healthy
    ("vllm:time_to_first_token_seconds", "ttft", 0.04), ("vllm:e2e_request_latency_seconds", "e2e_latency", 0.6),
    ("vllm:time_per_output_token_seconds", "tpot", 0.012), ("vllm:request_queue_time_seconds", "queue_time", 0.01),
    ("vllm:request_prefill_time_seconds", "prefill_time", 0.03),
    ("vllm:request_decode_time_seconds", "decode_time", 0.5))
COUNTER_SERIES = (("vllm:request_success_total", "request_success", {"finished_reason": "stop"}),
                  ("vllm:request_success_total", "request_failure", {"finished_reason": "abort"}),
                  ("vllm:prompt_tokens_total", "prompt_tokens", {}), ("vllm:generation_tokens_total", "generation_tokens", {}),
                  ("vllm:num_preemptions_total", "preemptions", {}))
GAUGES = (("vllm:num_requests_running", "requests_running"), ("vllm:num_requests_waiting", "queue_depth"),
          ("vllm:num_requests_swapped", "requests_swapped"), ("vllm:gpu_cache_usage_perc", "kv_cache_usage"),
          ("vllm:cpu_cache_usage_perc", "cpu_cache_usage"), ("vllm:avg_generation_throughput_toks_per_s", "gen_throughput"),
          ("vllm:avg_prompt_throughput_toks_per_s", "prompt_throughput"),
          ("vllm:gpu_prefix_cache_hit_rate", "prefix_cache_hit_rate"), ("sglang:num_used_tokens", "kv_tokens_used"))
ROWS = {
    "rate/increase": [m for _, m, _ in COUNTER_SERIES],
    "histogram quantile": [m for _, m, _ in HISTOGRAMS],
    "anomaly detection": None,
    "whole derivation": None,
}
T0 = datetime(2026, 11, 29, 22, 0)


def _cumulative(increments: np.ndarray, restart: np.ndarray) -> np.ndarray:
    """Running totals along time (axis 1) that start again from the increments at each host's restart
    scrape (0: no restart)."""
    total = np.cumsum(increments, axis=1)
    extra = (1,) * (increments.ndim - 2)
    before = np.take_along_axis(total, np.clip(restart - 1, 0, None).reshape((-1, 1) + extra), axis=1)
    after = (np.arange(increments.shape[1])[None, :] >= restart[:, None]) & (restart[:, None] > 0)
    return total - np.where(after.reshape(after.shape + extra), before, 0)


def _lognormal_cdf(le: float, median: np.ndarray, sigma: float = 0.5) -> np.ndarray:
    if math.isinf(le):
        return np.ones_like(median)
    return 0.5 * (1 + np.vectorize(math.erf)((np.log(le) - np.log(median)) / (sigma * math.sqrt(2))))


def _host_batch(rng: np.random.Generator, hosts: int, scrapes: int) -> list[tuple[str, str, np.ndarray]]:
    """(name, labels JSON, values[hosts, scrapes]) of every series of ``hosts`` servers."""
    incident = np.zeros((hosts, scrapes), dtype=bool)
    hit = rng.random(hosts) < 0.05
    incident[hit, scrapes // 2:] = True
    restart = np.where(rng.random(hosts) < 0.3, rng.integers(1, scrapes, hosts), 0)
    arrivals = rng.poisson(60, (hosts, scrapes)) * np.where(incident, 3, 1)
    out: list[tuple[str, str, np.ndarray]] = []

    def labels(metric: str, **extra: str) -> str:
        return json.dumps({**extra, "metric": metric, "model_name": MODEL})

    for name, metric, median in HISTOGRAMS:
        centre = np.where(incident, median * 8, median) * np.exp(rng.normal(0, 0.05, (hosts, scrapes)))
        cdf = np.stack([_lognormal_cdf(le, centre) for le in LES], axis=2)
        shares = np.diff(np.concatenate([np.zeros((hosts, scrapes, 1)), cdf], axis=2), axis=2)
        per_bucket = np.zeros((hosts, scrapes, len(LES)), dtype=np.int64)
        left, rest = arrivals.copy(), np.ones((hosts, scrapes))
        for k in range(len(LES)):  # a multinomial draw as a chain of binomials: every request lands in one bucket
            share = np.clip(shares[..., k] / np.maximum(rest, 1e-12), 0, 1) if k < len(LES) - 1 else np.ones_like(rest)
            per_bucket[..., k] = rng.binomial(left, share)
            left -= per_bucket[..., k]
            rest -= shares[..., k]
        cumulative = _cumulative(np.cumsum(per_bucket, axis=2), restart)
        for k, le in enumerate(LES):
            out.append((f"{name}_bucket", labels(metric, le="+Inf" if math.isinf(le) else repr(le)), cumulative[..., k]))
        observed = per_bucket.sum(axis=2)
        out.append((f"{name}_sum", labels(metric), _cumulative(observed * centre * 1.13, restart)))
        out.append((f"{name}_count", labels(metric), _cumulative(observed.astype(float), restart)))
    aborted = np.where(incident, (arrivals * 0.3).astype(int), rng.binomial(arrivals, 0.002))
    increments = {"request_success": arrivals - aborted, "request_failure": aborted,
                  "prompt_tokens": arrivals * rng.integers(400, 600, (hosts, scrapes)),
                  "generation_tokens": (arrivals * rng.integers(90, 110, (hosts, scrapes)) / np.where(incident, 4, 1)),
                  "preemptions": rng.poisson(0.05, (hosts, scrapes))}
    for name, metric, extra in COUNTER_SERIES:
        out.append((name, labels(metric, **extra), _cumulative(increments[metric].astype(float), restart)))
    kv = np.where(incident, 0.97, 0.4 + 0.1 * rng.random((hosts, scrapes)))
    gauges = {"requests_running": rng.normal(20, 2, (hosts, scrapes)),
              "queue_depth": np.where(incident, 40 + rng.integers(0, 5, (hosts, scrapes)), rng.integers(0, 3, (hosts, scrapes))),
              "requests_swapped": np.zeros((hosts, scrapes)), "kv_cache_usage": kv,
              "cpu_cache_usage": 0.05 + 0.01 * rng.random((hosts, scrapes)),
              "gen_throughput": rng.normal(6000, 150, (hosts, scrapes)) / np.where(incident, 4, 1),
              "prompt_throughput": rng.normal(30000, 900, (hosts, scrapes)),
              "prefix_cache_hit_rate": 0.3 + 0.02 * rng.random((hosts, scrapes)), "kv_tokens_used": kv * 100_000}
    for name, metric in GAUGES:
        out.append((name, labels(metric), gauges[metric].astype(float)))
    return out


def build(path: Path, hosts: int, minutes: int, step_s: int, seed: int = 7) -> int:
    """Writes the fleet into a new bundle; returns its number of series rows."""
    rng = np.random.default_rng(seed)
    scrapes = minutes * 60 // step_s
    stamps = np.array([np.datetime64(T0 + timedelta(seconds=step_s * i), "us") for i in range(scrapes)])
    bundle = Bundle.create(path, title="series benchmark")
    try:
        for first in range(0, hosts, 50):
            batch = min(50, hosts - first)
            names = pa.array([f"gpu-{first + h:04d}" for h in range(batch)])
            tables = []
            for name, labels, values in _host_batch(rng, batch, scrapes):
                n = batch * scrapes
                tables.append(pa.table({
                    "ts": pa.array(np.tile(stamps, batch)),
                    "host": pa.DictionaryArray.from_arrays(pa.array(np.repeat(np.arange(batch, dtype=np.int32), scrapes)), names),
                    "name": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([name])),
                    "labels": pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([labels])),
                    "value": pa.array(values.reshape(-1).astype(float))}))
            fleet = pa.concat_tables(tables)
            bundle.con.register("fleet", fleet)
            bundle.con.execute("INSERT INTO series SELECT ts, host::VARCHAR, name::VARCHAR, labels::VARCHAR, value, NULL FROM fleet")
            bundle.con.unregister("fleet")
        return bundle.con.execute("SELECT count(*) FROM series").fetchone()[0]
    finally:
        bundle.close()


def _curve_digest(curves: Iterable[Any]) -> list[list[Any]]:
    out = []
    for c in curves:
        finite = [v for _, v in c.points if math.isfinite(v)]
        out.append([c.host, c.metric, c.stat, sorted(c.identity.items()), len(c.points), math.fsum(finite)])
    return sorted(out, key=lambda d: json.dumps(d[:5]))


def _event_digest(events: Iterable[Event]) -> list[list[Any]]:
    return sorted([e.kind, e.host, e.attrs["onset"], e.attrs["end"], e.attrs["peak"]] for e in events)


def measure(db: Path, row: str, impl: str) -> dict[str, Any]:
    """One timing, in this (fresh) process. pandas is imported before the clock starts on both sides
    (the new code imports it on first use: about a second once per process on a loaded machine)."""
    import pandas  # noqa: F401

    con = Bundle.open(db).con
    con.execute("SET enable_progress_bar = false")
    if row == "anomaly detection":
        curves = new_series.signals(con)
        series.signals = lambda _con: curves
        started = time.perf_counter()
        digest = _event_digest(derive(con) if impl == "old" else new_anomaly.detect(curves))
    elif row == "whole derivation":
        started = time.perf_counter()
        digest = _event_digest(derive(con) if impl == "old" else new_anomaly.derive(con))
    else:
        started = time.perf_counter()
        digest = _curve_digest((signals if impl == "old" else new_series.signals)(con, ROWS[row]))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "digest": digest}


def _same(old: list[list[Any]], new: list[list[Any]]) -> bool:
    if len(old) != len(new):
        return False
    for a, b in zip(old, new):
        if a[:-1] != b[:-1] or not (a[-1] == b[-1] or (isinstance(a[-1], float) and math.isclose(a[-1], b[-1], rel_tol=1e-9))):
            return False
    return True


def grouping(rows: int) -> tuple[float, float]:
    """Seconds to sum ``rows`` values per (series, scrape, bucket) with pandas' groupby and with the
    stable sort + reduceat that workbench/query/series.py uses (the step where the two differ most)."""
    import pandas as pd

    rng = np.random.default_rng(1)
    series_id = np.sort(rng.integers(0, max(rows // 2640, 1), rows))
    scrape, bucket, value = rng.integers(0, 240, rows), rng.integers(0, 11, rows), rng.random(rows)
    started = time.perf_counter()
    pd.DataFrame({"s": series_id, "t": scrape, "b": bucket, "v": value}).groupby(["s", "t", "b"])["v"].sum()
    with_pandas = time.perf_counter() - started
    started = time.perf_counter()
    key = (series_id * 240 + scrape) * 11 + bucket
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    np.add.reduceat(value[order], np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])))
    return with_pandas, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=60)
    parser.add_argument("--step", type=int, default=15, help="seconds between scrapes")
    parser.add_argument("--measure", nargs=3, metavar=("DB", "ROW", "IMPL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        db, row, impl = args.measure
        print(json.dumps(measure(Path(db), row, impl)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "fleet.duckdb"
        started = time.perf_counter()
        rows = build(db, args.hosts, args.minutes, args.step)
        print(f"{args.hosts} hosts x {len(HISTOGRAMS) + len(COUNTER_SERIES) + len(GAUGES)} metrics, "
              f"{args.minutes} min of {args.step} s scrapes: {rows:,} series rows (built in "
              f"{time.perf_counter() - started:.1f} s)", flush=True)
        table = []
        for row in ROWS:
            got = {}
            for impl in ("old", "new"):
                out = subprocess.run([sys.executable, __file__, "--measure", str(db), row, impl], capture_output=True,
                                     text=True, check=True)
                got[impl] = json.loads(out.stdout.strip().splitlines()[-1])
            old, new = got["old"], got["new"]
            table.append([row, f"{old['seconds']:.2f}", f"{new['seconds']:.2f}",
                          f"{old['seconds'] / max(new['seconds'], 1e-9):.1f}x", f"{old['rss_mb']:.0f}",
                          f"{new['rss_mb']:.0f}", "yes" if _same(old["digest"], new["digest"]) else "NO",
                          len(new["digest"])])
            print(format_table(["", "old s", "new s", "speedup", "old peak RSS MiB", "new peak RSS MiB", "same",
                                "curves/events"], table[-1:]).splitlines()[-1], flush=True)
        print()
        print(format_table(["", "old s", "new s", "speedup", "old peak RSS MiB", "new peak RSS MiB", "same",
                            "curves/events"], table))
        bucket_rows = args.hosts * len(HISTOGRAMS) * len(LES) * (args.minutes * 60 // args.step)
        with_pandas, with_numpy = grouping(bucket_rows)
        print(f"\nsumming {bucket_rows:,} bucket rows per (series, scrape, bound): pandas groupby {with_pandas:.2f} s, "
              f"numpy stable sort + reduceat {with_numpy:.2f} s")


if __name__ == "__main__":
    main()
