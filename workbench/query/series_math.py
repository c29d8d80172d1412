"""The arithmetic Prometheus does on samples: histogram_quantile over cumulative buckets (per scrape, or
per interval from bucket deltas between successive scrapes, a decrease meaning the server restarted), and
counter increases with restarts. On whole columns with numpy, imported inside the functions (``gpuwb
capture`` imports the collectors that share the metric vocabulary and must not pay for it)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


QUANTILES = (0.5, 0.95, 0.99)


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]], *, allow_truncated: bool = False) -> float:
    """The q-quantile of cumulative ``(upper_bound, count)`` buckets, as Prometheus computes it.

    NaN when undefined (no observations, fewer than two buckets, no +Inf bucket). With
    ``allow_truncated`` a histogram cut before its +Inf bucket (a pasted or truncated page) uses
    its highest bucket as the total: the result is then a lower bound of the true quantile."""
    import numpy as np

    merged: dict[float, float] = {}
    for le, count in buckets:
        if math.isnan(le) or math.isnan(count):
            continue
        merged[le] = merged.get(le, 0.0) + count
    les = sorted(merged)
    counts = np.array([[merged[le] for le in les]], dtype=float).reshape(1, len(les))
    return float(quantile_rows(q, np.array(les, dtype=float), counts, allow_truncated=allow_truncated)[0])


def quantile_rows(q: float, les: np.ndarray, counts: np.ndarray, *, allow_truncated: bool = False) -> np.ndarray:
    """:func:`histogram_quantile` of every row of ``counts`` (cumulative counts, one column per
    upper bound of ``les``, sorted ascending, no NaN), computed for all rows at once."""
    import numpy as np

    rows = counts.shape[0]
    if math.isnan(q):
        return np.full(rows, math.nan)
    if q < 0:
        return np.full(rows, -math.inf)
    if q > 1:
        return np.full(rows, math.inf)
    if len(les) == 0:
        return np.full(rows, math.nan)
    if not math.isinf(les[-1]):
        if not allow_truncated:
            return np.full(rows, math.nan)
        les = np.append(les, math.inf)
        counts = np.hstack([counts, counts[:, -1:]])
    if len(les) < 2:
        return np.full(rows, math.nan)
    # Float noise can make cumulative counts dip; Prometheus flattens it (a running maximum from 0).
    monotonic = np.maximum.accumulate(np.maximum(counts, 0.0), axis=1)
    total = monotonic[:, -1]
    rank = q * total
    last = len(les) - 1
    with np.errstate(all="ignore"):
        hit = monotonic >= rank[:, None]
        b = np.where(hit.any(axis=1), hit.argmax(axis=1), last)
        before = np.maximum(b - 1, 0)
        at = np.arange(rows)
        start = np.where(b > 0, les[before], 0.0)
        below = np.where(b > 0, monotonic[at, before], 0.0)
        end, count = les[b], monotonic[at, b]
        out = start + (end - start) * ((rank - below) / (count - below))
    out = np.where((b == 0) & (les[0] <= 0), les[0], out)
    out = np.where(b == last, les[last - 1], out)
    return np.where(total <= 0, math.nan, out)


@dataclass
class IntervalQuantiles:
    """Quantiles of the observations made between the previous scrape and ``ts``."""

    ts: datetime
    observations: float
    values: dict[float, float]
    reset: bool = False


@dataclass
class _Intervals:
    """Per-interval results for rows of stacked scrapes: which rows count, and their numbers."""

    kept: np.ndarray
    observations: np.ndarray
    reset: np.ndarray
    values: dict[float, np.ndarray]


def interval_rows(les: np.ndarray, counts: np.ndarray, first: np.ndarray, qs: Sequence[float], *,
                   allow_truncated: bool, include_first: bool) -> _Intervals:
    """Observations between successive scrapes, and their quantiles, for stacked scrapes: ``counts``
    holds one scrape per row (NaN where a scrape lacks a bucket), several histograms one after
    another, each sorted by time; ``first`` marks the first scrape of each histogram. A bucket that
    went down means the server restarted, so the new cumulative counts are the interval's; a bucket
    the previous scrape lacked counts from zero."""
    import numpy as np

    previous = np.vstack([np.full((1, counts.shape[1]), math.nan), counts[:-1]])
    previous[first] = math.nan
    with np.errstate(invalid="ignore"):
        reset = (counts < previous).any(axis=1)  # comparisons with NaN (a bucket one side lacks) are False
        delta = np.where(reset[:, None], counts, counts - np.where(np.isnan(previous), 0.0, previous))
    observations = np.where(np.isnan(delta), -math.inf, delta).max(axis=1, initial=-math.inf)
    kept = observations > 0
    if not include_first:
        kept &= ~first
    rows = np.flatnonzero(kept)
    complete = ~np.isnan(delta[rows]).any(axis=1)
    values: dict[float, np.ndarray] = {}
    for q in qs:
        out = np.full(len(rows), math.nan)
        out[complete] = quantile_rows(q, les, delta[rows[complete]], allow_truncated=allow_truncated)
        for i in np.flatnonzero(~complete):  # a scrape that lacks some bucket: the buckets it has
            row = delta[rows[i]]
            out[i] = histogram_quantile(q, zip(les.tolist(), row.tolist()), allow_truncated=allow_truncated)
        values[q] = out
    return _Intervals(kept, observations, reset, values)


def interval_quantiles(scrapes: Sequence[tuple[datetime, dict[float, float]]],
                       qs: Sequence[float] = QUANTILES, *, allow_truncated: bool = False,
                       include_first: bool = False) -> list[IntervalQuantiles]:
    """Per-interval quantiles from successive cumulative scrapes of one histogram (sorted by time).

    The first scrape has no predecessor; with ``include_first`` its quantiles cover everything
    since the server started. Intervals without new observations are left out."""
    import numpy as np

    ordered = sorted(scrapes, key=lambda s: s[0])
    if not ordered:
        return []
    les = sorted({le for _, buckets in ordered for le in buckets if not math.isnan(le)})
    counts = np.array([[buckets.get(le, math.nan) for le in les] for _, buckets in ordered], dtype=float)
    counts = counts.reshape(len(ordered), len(les))
    first = np.zeros(len(ordered), dtype=bool)
    first[0] = True
    got = interval_rows(np.array(les, dtype=float), counts, first, qs, allow_truncated=allow_truncated,
                         include_first=include_first)
    return [IntervalQuantiles(ordered[row][0], float(got.observations[row]),
                              {q: float(got.values[q][i]) for q in qs}, bool(got.reset[row]))
            for i, row in enumerate(np.flatnonzero(got.kept))]


def increases(series_id: np.ndarray, ts_us: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, ...]:
    """Counter increases of many series at once: rows sorted by (series, time). Returns (row index,
    increase, seconds since the previous point) for each row that has a predecessor at an earlier
    time in its series; a decrease is a restart (Prometheus' rule), so the new value is the increase.
    NaN/Inf points are ignored."""
    import numpy as np

    finite = np.flatnonzero(np.isfinite(value))
    sid, ts, v = series_id[finite], ts_us[finite], value[finite]
    same = np.zeros(len(finite), dtype=bool)
    same[1:] = sid[1:] == sid[:-1]
    prev_ts = np.concatenate([ts[:1], ts[:-1]])
    prev_v = np.concatenate([v[:1], v[:-1]])
    keep = same & (ts > prev_ts)
    increase = np.where(v < prev_v, v, v - prev_v)
    seconds = (ts - prev_ts) / 1e6
    return finite[keep], increase[keep], seconds[keep]


def counter_deltas(points: Sequence[tuple[datetime, float]]) -> list[tuple[datetime, float, float]]:
    """(ts, increase, seconds since the previous point) for a counter; a decrease is a restart
    (Prometheus' rule), so the new value itself is the increase. NaN/Inf points are ignored."""
    import numpy as np

    ordered = sorted(points, key=lambda p: p[0])
    if not ordered:
        return []
    stamps = [ts for ts, _ in ordered]
    offsets = [(ts - stamps[0]) // timedelta(microseconds=1) for ts in stamps]
    rows, increase, seconds = increases(np.zeros(len(ordered), dtype=np.int64), np.array(offsets, dtype=np.int64),
                                         np.array([v for _, v in ordered], dtype=float))
    return [(stamps[r], inc, dt) for r, inc, dt in zip(rows.tolist(), increase.tolist(), seconds.tolist())]
