"""Serving metrics in one vocabulary, and the arithmetic Prometheus does on them.

Parsers store every sample as it was exposed and add one label, ``metric``, naming it in the
common vocabulary of collectors/framework/metric_vocabulary.py (which also says each name's unit), so a
check can ask for "p99 TTFT" whatever engine served it.

Derived numbers (interval quantiles from bucket deltas, counter rates, error ratios) are not
stored: :func:`signals` recomputes them from the series table, so the anomaly derivation, the
analysis and the report read the same curves. Quantiles follow Prometheus' histogram_quantile:
buckets as deltas between successive scrapes (a decrease means the server restarted: the new
cumulative counts are the delta), linear interpolation inside the bucket holding the rank.

The arithmetic runs on whole columns: DuckDB filters the rows where they sit and hands them over
as Arrow (series_table.py groups them), the counter increases of every series are taken in one pass,
and the quantiles of every interval of every histogram sharing a bucket layout as one matrix
(series_math.py: the Prometheus functions). numpy is imported inside the functions: ``gpuwb capture``
imports the collectors that share this vocabulary and must not pay for it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from collectors.framework.metric_vocabulary import (
    COUNTERS,
    CUMULATIVE_LATENCY,
    IDENTITY_LABELS,
    LATENCY,
    family,
    unit_scale,
)
from workbench.query.series_math import QUANTILES, increases, interval_rows
from workbench.query.series_table import SeriesValues, Times, aggregate, factorize, group_runs, load_table

if TYPE_CHECKING:
    import numpy as np


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
class _Curve:
    """One aggregated series of a group: its times and values, and what it is."""

    metric: str
    key: str
    kind: str
    ts: np.ndarray
    value: np.ndarray


def signals(con: Any, metrics: Iterable[str] | None = None) -> list[Signal]:
    """Every curve the series table supports, per host and server identity.

    Histograms give per-interval p50/p95/p99 (stat ``p50``...), summaries and quantile-labelled
    values give their quantiles, Triton cumulative durations give a per-interval ``mean``,
    gauges their ``value``, counters a per-second ``rate``; failure vs success counters give
    ``error_rate`` (ratio), and request counters a ``request_rate``. Latencies are in seconds."""
    if not con.execute("SELECT EXISTS (SELECT 1 FROM series)").fetchall()[0][0]:
        return []  # most bundles (logs only): no need to load numpy and pyarrow.compute to find nothing
    import numpy as np

    table = load_table(con, metrics)
    if len(table.ts) == 0:
        return []
    sets, names = table.values["labels"], table.values["name"]
    label_code, name_code = table.codes["labels"], table.codes["name"]

    def per_set(values: list[Any], dtype: Any = object) -> np.ndarray:
        """A per-row array from one value per distinct label set."""
        return np.array(values + [values[0] if values else None], dtype=dtype)[label_code]

    identities = [tuple((k, labels[k]) for k in IDENTITY_LABELS if labels.get(k)) for labels in sets]
    identity_ids = _ids(identities)
    times = Times(table.ts)
    when = times.index
    group = factorize([table.codes["host"], per_set([identity_ids[i] for i in identities], np.int64)], when)
    first_rows = np.unique(group, return_index=True)[1]
    approx = np.zeros(len(first_rows), dtype=bool)
    stamped_late = per_set([labels.get("ts_origin") in ("mtime", "captured") for labels in sets], bool)
    approx[np.unique(group[stamped_late])] = True
    heads = [(table.values["host"][table.codes["host"][r]] if table.codes["host"][r] >= 0 else None,
              dict(identities[label_code[r]])) for r in first_rows.tolist()]

    families = [family(name) for name in names]
    base_ids = _ids(b for b, _ in families)
    bases = list(base_ids)
    base = np.array([base_ids[b] for b, _ in families] + [0], dtype=np.int64)[name_code]
    suffixes = _ids(["", *(s for _, s in families)])
    suffix_of = np.array([suffixes[s] for _, s in families] + [0], dtype=np.int8)[name_code]

    def suffix_is(text: str) -> np.ndarray:
        return suffix_of == suffixes.get(text, -1)

    metric_ids = _ids(labels.get("metric", "") for labels in sets)
    metrics_ = list(metric_ids)
    metric = per_set([metric_ids[labels.get("metric", "")] for labels in sets], np.int64)
    bucket = suffix_is("_bucket") & per_set(["le" in labels for labels in sets], bool)
    quantile = ~bucket & per_set(["quantile" in labels for labels in sets], bool) & ~suffix_is("_sum") & ~suffix_is(
        "_count")
    plain = ~bucket & ~quantile
    out: list[tuple[tuple[int, ...], Signal]] = []

    def emit(g: int, order: tuple[int, ...], metric: str, stat: str, unit: str,
             points: list[tuple[datetime, float]], source: str) -> None:
        host, ident = heads[g]
        out.append(((g, *order), Signal(host, metric, stat, unit, dict(ident), points, bool(approx[g]), source)))

    le = per_set([_bound(labels.get("le")) for labels in sets], float)
    rows = np.flatnonzero(bucket & ~np.isnan(le))  # a bound that is not a number cannot rank
    _bucket_signals([group[rows], metric[rows], base[rows]], le[rows], when[rows], table.value[rows],
                    lambda g, m, b: (g, metrics_[m], bases[b]), times, emit)
    rows = np.flatnonzero(quantile)
    stats = [labels.get("stat") or _quantile_stat(labels.get("quantile")) for labels in sets]
    stat_ids = _ids(stats)
    stat_names = list(stat_ids)
    stat_id = per_set([stat_ids[stat] for stat in stats], np.int64)
    quantiles = aggregate([group[rows], metric[rows], base[rows], stat_id[rows]], when[rows], table.value[rows],
                           "max", times)
    bounds = quantiles.bounds()
    for s, (g, m, b, st) in enumerate(quantiles.keys):
        m, b = metrics_[m], bases[b]
        scale = unit_scale(b) if m in LATENCY else 1.0
        values = quantiles.value[bounds[s]:bounds[s + 1]] * scale
        finite = np.isfinite(values)
        emit(g, (1, s), m, stat_names[st], "s" if m in LATENCY else "",
             times.points(quantiles.ts[bounds[s]:bounds[s + 1]][finite], values[finite]), b)
    rows = np.flatnonzero(plain)
    pair_id = factorize([name_code[rows], label_code[rows]], when[rows])
    keys = []
    for r in rows[np.unique(pair_id, return_index=True)[1]].tolist():
        name, stat = names[name_code[r]], sets[label_code[r]].get("stat")
        kind = "cumulative" if family(name)[0] in CUMULATIVE_LATENCY else (family(name)[1] or "value")
        keys.append((name if stat is None else f"{name}|{stat}", kind))
    key_ids = _ids(keys)
    key_id = np.array([key_ids[key] for key in keys], dtype=np.int64)[pair_id]
    plain_series = aggregate([group[rows], metric[rows], key_id], when[rows], table.value[rows], "sum", times)
    by_id = list(key_ids)
    plain_series.keys = [(g, metrics_[m], *by_id[k]) for g, m, k in plain_series.keys]
    _plain_signals(plain_series, times, emit)
    out.sort(key=lambda item: item[0])
    return [signal for _, signal in out]


def _ids(keys: Iterable[Any]) -> dict[Any, int]:
    """Each distinct key's number, in order of first appearance."""
    ids: dict[Any, int] = {}
    for key in keys:
        ids.setdefault(key, len(ids))
    return ids


def _bound(le: Any) -> float:
    """A bucket's upper bound; NaN when it is not a number."""
    try:
        return float(le)
    except (TypeError, ValueError):
        return math.nan


def _quantile_stat(quantile: Any) -> str:
    try:
        return f"p{float(quantile) * 100:g}"
    except (TypeError, ValueError):
        return f"q{quantile}"


def _bucket_signals(keys: list[np.ndarray], le: np.ndarray, when: np.ndarray, value: np.ndarray,
                    names: Callable[..., tuple[int, str, str]], times: Times, emit: Callable[..., None]) -> None:
    """p50/p95/p99 per interval of every histogram (``keys``: group, metric, family): the histograms
    that share a set of bucket bounds are stacked into one matrix (a row per scrape, a column per
    bound) and computed together."""
    import numpy as np

    if len(when) == 0:
        return
    sid = factorize(keys, when)
    bounds, le_index = np.unique(le, return_inverse=True)
    width, depth = len(times.stamps), len(bounds)
    key, summed, rows = group_runs((sid * width + when) * depth + le_index, value, "sum")
    representative = np.empty(int(sid.max()) + 1, dtype=np.int64)
    representative[sid[rows]] = rows
    named = [names(*(int(k[r]) for k in keys)) for r in representative.tolist()]
    scrape, column = key // depth, key % depth
    owner = scrape // width
    layouts: dict[int, list[int]] = defaultdict(list)
    for pair in np.unique(owner * depth + column).tolist():
        layouts[pair // depth].append(pair % depth)
    classes: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for s, columns in layouts.items():
        classes[tuple(columns)].append(s)
    class_of = np.empty(len(named), dtype=np.int64)
    for c, sids in enumerate(classes.values()):
        class_of[sids] = c
    row_class = class_of[owner]
    for c, (columns, sids) in enumerate(classes.items()):
        mine = row_class == c
        stacked, at = np.unique(scrape[mine], return_inverse=True)  # by histogram, then time
        position = np.full(depth, -1)
        position[list(columns)] = np.arange(len(columns))
        matrix = np.full((len(stacked), len(columns)), math.nan)
        matrix[at, position[column[mine]]] = summed[mine]
        row_sid, row_ts = stacked // width, times.stamps[stacked % width]
        starts = np.ones(len(stacked), dtype=bool)
        starts[1:] = row_sid[1:] != row_sid[:-1]
        got = interval_rows(bounds[list(columns)], matrix, starts, QUANTILES, allow_truncated=True,
                             include_first=False)
        kept = np.flatnonzero(got.kept)
        kept_sid, kept_ts = row_sid[kept], row_ts[kept]
        for s in sids:
            g, m, b = named[s]
            lo, hi = np.searchsorted(kept_sid, [s, s + 1])
            scale = unit_scale(b)
            for order, q in enumerate(QUANTILES):
                values = got.values[q][lo:hi]
                finite = np.isfinite(values)
                if finite.any():
                    emit(g, (0, s, order), m, _quantile_stat(str(q)), "s" if m in LATENCY else "",
                         times.points(kept_ts[lo:hi][finite], values[finite] * scale), b)


def _plain_signals(series: SeriesValues, times: Times, emit: Callable[..., None]) -> None:
    """Gauges, counter rates, means from cumulative durations and _sum/_count, error ratio and
    request rate. Counter increases of every series are taken in one pass; the rest is per group."""
    import numpy as np

    rows, increase, seconds = increases(series.sid, series.ts, series.value)
    inc_bounds = np.searchsorted(series.sid[rows], np.arange(len(series.keys) + 1))
    inc_ts = series.ts[rows]
    bounds = series.bounds()
    by_group: dict[int, list[int]] = defaultdict(list)
    for s, (g, *_rest) in enumerate(series.keys):
        by_group[int(g)].append(s)
    for g, sids in by_group.items():
        curves = {s: _Curve(str(m), str(k), str(kd), series.ts[bounds[s]:bounds[s + 1]],
                            series.value[bounds[s]:bounds[s + 1]])
                  for s, (_, m, k, kd) in ((s, series.keys[s]) for s in sids)}
        deltas = {s: (inc_ts[inc_bounds[s]:inc_bounds[s + 1]], increase[inc_bounds[s]:inc_bounds[s + 1]],
                      seconds[inc_bounds[s]:inc_bounds[s + 1]]) for s in sids}
        _group_signals(g, curves, deltas, times, emit)


def _group_signals(g: int, curves: dict[int, _Curve], deltas: dict[int, tuple[np.ndarray, ...]], times: Times,
                   emit: Callable[..., None]) -> None:

    served = _served(curves)
    counters: dict[str, list[int]] = defaultdict(list)
    for s, curve in curves.items():
        name = curve.key.split("|")[0]
        stat = curve.key.split("|")[1] if "|" in curve.key else None
        if curve.kind == "cumulative":
            ts, mean = _ratio_of_increases(deltas[s], served)
            if len(ts):
                emit(g, (2, s), curve.metric, "mean", "s", times.points(ts, mean * unit_scale(name)), name)
        elif curve.kind in ("_sum", "_count"):
            continue
        elif curve.metric in COUNTERS or curve.kind == "_total":
            counters[curve.metric].append(s)
        elif curve.metric in LATENCY:
            emit(g, (2, s), curve.metric, stat or "value", "s", times.points(curve.ts, curve.value * unit_scale(name)),
                 name)
        else:
            emit(g, (2, s), curve.metric, stat or "value", "", times.points(curve.ts, curve.value), name)
    _sum_count_means(g, curves, deltas, times, emit)
    rates = {metric: _merge([_rate(deltas[s]) for s in sids]) for metric, sids in counters.items()}
    for order, (metric, (ts, rate)) in enumerate(rates.items()):
        if len(ts):
            emit(g, (4, order), metric, "rate", "1/s", times.points(ts, rate), metric)
    _derived_rates(g, curves, deltas, rates, times, emit)


def _merge(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sum of several curves at each time any of them has."""
    import numpy as np

    ts = np.concatenate([p[0] for p in parts])
    values = np.concatenate([p[1] for p in parts])
    stamps, where = np.unique(ts, return_inverse=True)
    return stamps, np.bincount(where, weights=values, minlength=len(stamps))


def _rate(delta: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    ts, increase, seconds = delta
    positive = seconds > 0
    return ts[positive], increase[positive] / seconds[positive]


def _served(curves: dict[int, _Curve]) -> tuple[np.ndarray, ...]:
    """Increases of requests completed (success + failure), for Triton's cumulative durations."""
    import numpy as np

    parts = [(c.ts, c.value) for c in curves.values() if c.metric in ("request_success", "request_failure")]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0)
    ts, total = _merge(parts)
    rows, increase, seconds = increases(np.zeros(len(ts), dtype=np.int64), ts, total)
    return ts[rows], increase, seconds


def _ratio_of_increases(numerator: tuple[np.ndarray, ...],
                        denominator: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    import numpy as np

    _, num_at, den_at = np.intersect1d(numerator[0], denominator[0], assume_unique=True, return_indices=True)
    positive = denominator[1][den_at] > 0
    num_at, den_at = num_at[positive], den_at[positive]
    return numerator[0][num_at], numerator[1][num_at] / denominator[1][den_at]


def _sum_count_means(g: int, curves: dict[int, _Curve], deltas: dict[int, tuple[np.ndarray, ...]], times: Times,
                     emit: Callable[..., None]) -> None:
    """Mean latency per interval from a histogram's or summary's _sum and _count."""
    sums: dict[str, tuple[str, int]] = {}
    counts: dict[str, int] = {}
    for s, curve in curves.items():
        if curve.metric not in LATENCY or "|" in curve.key:
            continue
        if curve.kind == "_sum":
            sums[family(curve.key)[0]] = (curve.metric, s)
        elif curve.kind == "_count":
            counts[family(curve.key)[0]] = s
    for order, (base, (metric, s)) in enumerate(sums.items()):
        if base in counts:
            ts, mean = _ratio_of_increases(deltas[s], deltas[counts[base]])
            if len(ts):
                emit(g, (3, order), metric, "mean", "s", times.points(ts, mean * unit_scale(base)), base)


def _derived_rates(g: int, curves: dict[int, _Curve], deltas: dict[int, tuple[np.ndarray, ...]],
                   rates: dict[str, tuple[np.ndarray, np.ndarray]], times: Times, emit: Callable[..., None]) -> None:
    """Error ratio (failures / finished requests) and request arrival rate per interval."""
    import numpy as np

    empty = (np.zeros(0, dtype=np.int64), np.zeros(0))
    failure = rates.get("request_failure", empty)
    success = rates.get("request_success", empty)
    if len(failure[0]):
        finished = failure[1] + _at(success, failure[0])
        ok = finished > 0
        if ok.any() and len(success[0]):
            emit(g, (5, 0), "error_rate", "ratio", "", times.points(failure[0][ok], failure[1][ok] / finished[ok]),
                 "request_failure/request_success")
    if "requests_total" in rates:
        emit(g, (5, 1), "request_rate", "rate", "1/s", times.points(*rates["requests_total"]), "requests_total")
    elif len(success[0]):
        emit(g, (5, 1), "request_rate", "rate", "1/s", times.points(success[0], success[1] + _at(failure, success[0])),
             "request_success+request_failure")
    else:
        for s, curve in curves.items():
            if curve.kind == "_count" and curve.metric in ("e2e_latency", "ttft") and "|" not in curve.key:
                emit(g, (5, 1), "request_rate", "rate", "1/s", times.points(*_rate(deltas[s])), curve.key)
                return


def _at(curve: tuple[np.ndarray, np.ndarray], ts: np.ndarray) -> np.ndarray:
    """The curve's values at ``ts`` (0 where it has no point)."""
    import numpy as np

    stamps, values = curve
    if len(stamps) == 0:
        return np.zeros(len(ts))
    where = np.minimum(np.searchsorted(stamps, ts), len(stamps) - 1)
    return np.where(stamps[where] == ts, values[where], 0.0)
