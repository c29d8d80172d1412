"""Serving metrics in one vocabulary, and the arithmetic Prometheus does on them.

Parsers store every sample as it was exposed and add one label, ``metric``, naming it in the
common vocabulary of collectors/_metric_vocabulary.py (which also says each name's unit), so a
check can ask for "p99 TTFT" whatever engine served it.

Derived numbers (interval quantiles from bucket deltas, counter rates, error ratios) are not
stored: :func:`signals` recomputes them from the series table, so the anomaly derivation, the
analysis and the report read the same curves. Quantiles follow Prometheus' histogram_quantile:
buckets as deltas between successive scrapes (a decrease means the server restarted: the new
cumulative counts are the delta), linear interpolation inside the bucket holding the rank.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from collectors._metric_vocabulary import (
    COUNTERS,
    CUMULATIVE_LATENCY,
    IDENTITY_LABELS,
    LATENCY,
    family,
    unit_scale,
)

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
