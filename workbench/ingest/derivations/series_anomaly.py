"""Serving symptoms read off the metric curves: when latency, errors, queue, KV cache, throughput or
traffic left their baseline.

Each curve of :func:`workbench.query.series.signals` (p99 TTFT of one model on one host, its queue
depth, error ratio, ...) is scanned in time order. A point is anomalous when it is far from the
baseline of the points before it in robust units (median and MAD, z >= 5) *and* the shift is
large in plain terms (e.g. latency +50 %, queue +5 requests): the robust score ignores the usual
noise, the magnitude floor ignores trivial moves of a flat curve. The onset is the first point
of a run of at least two anomalous points (a single one only at the very end of the data, when
it is extreme). KV-cache saturation is a level, not a change: usage >= 0.9 for two points.

All curves are scanned together: their trailing medians come from one pandas rolling median over
the curves laid end to end, the magnitude test runs on whole numpy columns, and only the few points
that pass it get their MAD and run computed (pandas and numpy are imported when a scan runs).

Event kinds (layer): ``latency_spike``, ``error_rate_spike``, ``queue_backlog``,
``throughput_drop``, ``request_rate_surge`` (business) and ``kv_cache_saturation`` (gpu). Attrs:
``metric``, ``stat``, ``unit``, ``baseline``, ``peak``, ``onset``, ``end``, ``z``, ``points``,
``method`` and the server identity (``model_name``, ``instance``, ...).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from collectors.base import Event
from workbench.query import series
from workbench.times import iso

if TYPE_CHECKING:
    import numpy as np

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


@dataclass(frozen=True)
class Shape:
    """Which way a curve must move and how far (relative to its baseline, and at least ``floor``)."""

    direction: int = 1
    rel: float = 0.5
    floor: float = 0.0


def find_onset(values: Sequence[float], *, direction: int = 1, rel: float = 0.5, floor: float = 0.0,
               z: float = Z_THRESHOLD, min_baseline: int = MIN_BASELINE, persist: int = 2) -> Onset | None:
    """First run of points that left the trailing baseline (robust z and magnitude), or None."""
    return find_onsets([values], [Shape(direction, rel, floor)], z=z, min_baseline=min_baseline, persist=persist)[0]


def find_onsets(curves: Sequence[Sequence[float]], shapes: Sequence[Shape], *, z: float = Z_THRESHOLD,
                min_baseline: int = MIN_BASELINE, persist: int = 2) -> list[Onset | None]:
    """:func:`find_onset` of many curves at once (NaN/Inf points dropped, indices count the rest).

    The baseline of point i is the median of the up to ``BASELINE_POINTS`` points before it: one
    pandas rolling median over all curves laid end to end, each window kept inside its curve. The
    magnitude test then runs on whole columns, the MAD (over sliding windows) only for the points that
    pass it (rare on a healthy curve), and the run only from the points whose robust z is high enough."""
    if not curves:
        return []  # not even numpy to import: most bundles hold no serving metrics
    import numpy as np

    arrays = [np.asarray(values, dtype=float) for values in curves]
    arrays = [a[np.isfinite(a)] for a in arrays]
    lengths = np.array([len(a) for a in arrays])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    flat = np.concatenate(arrays)
    curve_start = np.repeat(offsets[:-1], lengths)
    median = _baseline_medians(flat, curve_start, min_baseline)
    direction = np.repeat([s.direction for s in shapes], lengths)
    need = np.maximum(np.repeat([s.rel for s in shapes], lengths) * np.abs(median),
                      np.repeat([s.floor for s in shapes], lengths))
    with np.errstate(invalid="ignore"):
        shift = direction * (flat - median)
        candidate = np.flatnonzero((shift >= need) & (shift > 0))
    # A perfectly flat baseline has MAD 0: take 1 % of its level as the noise floor, so z stays a
    # readable number (not 1e14) while the magnitude test ``need`` still decides.
    mad = _baseline_mads(flat, curve_start, median, candidate)
    scale = np.maximum(np.maximum(MAD_TO_SIGMA * mad, 0.01 * np.abs(median[candidate])), 1e-12)
    first = shift[candidate] / scale
    strong = first >= z
    at, scale, first = candidate[strong], scale[strong], first[strong]
    curve_of = np.searchsorted(offsets, at, side="right") - 1
    # The run from each strong point, against that point's baseline: long enough when the next
    # ``persist - 1`` points score too, or extreme enough when it reaches the end of its curve.
    end = offsets[curve_of + 1]
    passing = np.ones(len(at), dtype=bool)
    length = np.ones(len(at), dtype=np.int64)
    with np.errstate(invalid="ignore"):
        for k in range(1, persist):
            inside = at + k < end
            later = direction[at] * (flat[np.minimum(at + k, len(flat) - 1)] - median[at])
            passing &= inside & (later >= need[at]) & (later > 0) & (later / scale >= z)
            length += passing
    accepted = (length >= persist) | ((at + length == end) & (first >= 2 * z))
    found: list[Onset | None] = [None] * len(arrays)
    curves_hit, first_hit = np.unique(curve_of[accepted], return_index=True)
    for c, k in zip(curves_hit.tolist(), np.flatnonzero(accepted)[first_hit].tolist()):
        found[c] = _run_from(arrays[c], int(at[k] - offsets[c]), float(median[at[k]]), float(need[at[k]]),
                             float(scale[k]), shapes[c].direction, z)
    return found


def _baseline_mads(flat: np.ndarray, curve_start: np.ndarray, median: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Median absolute deviation of the baseline window before each point of ``at`` from its median."""
    import numpy as np
    from numpy.lib.stride_tricks import sliding_window_view

    if len(at) == 0:
        return np.zeros(0)
    padded = np.concatenate([np.full(BASELINE_POINTS, np.nan), flat])
    windows = sliding_window_view(padded, BASELINE_POINTS)[at].copy()  # flat[at - BASELINE_POINTS:at]
    first_index = at[:, None] - BASELINE_POINTS + np.arange(BASELINE_POINTS)[None, :]
    windows[first_index < curve_start[at][:, None]] = np.nan  # never the curve before
    return np.nanmedian(np.abs(windows - median[at][:, None]), axis=1)


def _baseline_medians(flat: np.ndarray, curve_start: np.ndarray, min_baseline: int) -> np.ndarray:
    """Median of the trailing window before each point, the window never reaching into the curve before."""
    import numpy as np
    import pandas as pd
    from pandas.api.indexers import BaseIndexer

    class Before(BaseIndexer):
        def get_window_bounds(self, num_values: int = 0, min_periods: int | None = None, center: bool | None = None,
                              closed: str | None = None, step: int | None = None) -> tuple[np.ndarray, np.ndarray]:
            return self.lo, self.hi

    position = np.arange(len(flat), dtype=np.int64)
    lo = np.maximum(curve_start, position - BASELINE_POINTS).astype(np.int64)
    return pd.Series(flat).rolling(Before(lo=lo, hi=position), min_periods=min_baseline).median().to_numpy()


def _run_from(values: np.ndarray, i: int, median: float, need: float, scale: float, direction: int,
              z: float) -> Onset:
    """The anomalous run that starts at ``i`` against the baseline before it: where it ends, its peak."""
    import numpy as np

    shift = direction * (values[i:] - median)
    score = np.where((shift >= need) & (shift > 0), shift / scale, 0.0)
    short = np.flatnonzero(score[1:] < z)
    length = int(short[0]) + 1 if len(short) else len(score)
    run = values[i:i + length]
    return Onset(i, i + length - 1, median, float(run.max() if direction > 0 else run.min()),
                 float(score[:length].max()))


def find_saturation(values: Sequence[float], threshold: float, persist: int = 2) -> Onset | None:
    """First run of at least ``persist`` points at or above ``threshold``."""
    import numpy as np

    array = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        over = np.isfinite(array) & (array >= threshold)
    edges = np.diff(np.concatenate([[0], over.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1) - 1
    long = np.flatnonzero(ends - starts + 1 >= persist)
    if not len(long):
        return None
    i, j = int(starts[long[0]]), int(ends[long[0]])
    before = array[:i][np.isfinite(array[:i])]
    baseline = float(np.median(before)) if len(before) else math.nan
    return Onset(i, j, baseline, float(array[i:j + 1].max()), math.nan)


def derive(con: Any) -> Iterator[Event]:
    yield from detect(series.signals(con))


def detect(signals: list[series.Signal]) -> Iterator[Event]:
    """The symptoms of a set of curves: each rule on the best statistic of each server's metric,
    every curve's onset found in one batch, then KV-cache saturation."""
    groups: dict[tuple[Any, ...], dict[str, series.Signal]] = defaultdict(dict)
    for signal in _best_stats(signals):
        groups[(signal.host, tuple(sorted(signal.identity.items())))][signal.metric] = signal
    checks: list[tuple[Rule | None, _Finite]] = []
    for by_metric in groups.values():
        for rule in RULES:
            wanted = [m for m in rule.metrics if m in by_metric] or [m for m in rule.fallback if m in by_metric]
            checks += [(rule, _Finite.of(by_metric[metric])) for metric in wanted]
        if "kv_cache_usage" in by_metric:
            checks.append((None, _Finite.of(by_metric["kv_cache_usage"])))
    rules = [(rule, curve) for rule, curve in checks if rule is not None]
    onsets = iter(find_onsets([curve.values for _, curve in rules],
                              [Shape(rule.direction, rule.rel, rule.floor) for rule, _ in rules]))
    for rule, curve in checks:
        event = _saturation(curve) if rule is None else _check(rule, curve, next(onsets))
        if event is not None:
            yield event


@dataclass
class _Finite:
    """A signal's finite values, and where each sits among its points."""

    signal: series.Signal
    values: np.ndarray
    at: np.ndarray

    @classmethod
    def of(cls, signal: series.Signal) -> _Finite:
        import numpy as np

        values = np.array([v for _, v in signal.points], dtype=float)
        at = np.flatnonzero(np.isfinite(values))
        return cls(signal, values[at], at)

    def ts(self, index: int) -> datetime:
        return self.signal.points[int(self.at[index])][0]


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


def _check(rule: Rule, curve: _Finite, onset: Onset | None) -> Event | None:
    if onset is None:
        return None
    signal = curve.signal
    verb = "rose" if rule.direction > 0 else "fell"
    text = (f"{_label(signal)} {verb} from {_fmt(onset.baseline, signal.unit)} to {_fmt(onset.peak, signal.unit)} "
            f"(robust z {onset.z:.1f})")
    return _event(rule.kind, rule.layer, rule.severity, curve, onset, text, "robust_z")


def _saturation(curve: _Finite) -> Event | None:
    values = curve.values
    threshold = KV_SATURATED * (100.0 if len(values) and values.max() > 1.5 else 1.0)  # a percent column
    onset = find_saturation(values, threshold)
    if onset is None:
        return None
    text = (f"{_label(curve.signal)} at {onset.peak:.2f} (>= {threshold:g}) for {onset.end - onset.start + 1} points; "
            f"baseline {onset.baseline:.2f}")
    event = _event("kv_cache_saturation", "gpu", "warning", curve, onset, text, "threshold")
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


def _event(kind: str, layer: str, severity: str, curve: _Finite, onset: Onset, text: str, method: str) -> Event:
    signal = curve.signal
    start, end = curve.ts(onset.start), curve.ts(onset.end)
    attrs: dict[str, Any] = {
        "metric": signal.metric, "stat": signal.stat, "unit": signal.unit,
        "baseline": _finite(onset.baseline), "peak": _finite(onset.peak), "z": _finite(onset.z),
        "onset": iso(start, "auto"), "end": iso(end, "auto"), "points": onset.end - onset.start + 1,
        "method": method, "series": signal.source}
    attrs.update(signal.identity)
    return Event(kind=kind, message=text, ts=start, ts_approx=signal.approx, host=signal.host, layer=layer,
                 severity=severity, attrs=attrs)


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None
