"""Readers for GPU samples and serving series: what the GPUs and Latency screens draw.

GPU samples are downsampled in SQL, one row per time bucket, so a week of 1 s NVML samples costs a
screen no more than its width in rows. Each bucket keeps the value that matters in an incident, not
the average: the hottest temperature, the highest power and memory, the lowest clocks and PCIe link
(a throttle or a downtrained link shows), the highest error counters, any remap flag, every throttle
reason seen.

Serving curves (p99 TTFT, queue depth, error ratio, ...) come from :func:`workbench.query.series.signals`,
the same arithmetic the anomaly derivation and the report use, so a chart cannot disagree with the
anomaly it marks; they are downsampled to ``max_points`` by keeping each bucket's extreme.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from workbench.query import series
from workbench.query.events import time_bounds
from workbench.store.bundle import Bundle
from workbench.store.row_columns import utc_naive
from workbench.times import parse_iso

SAMPLE_AGGREGATES: dict[str, str] = {
    "temp_c": "max", "power_w": "max", "power_limit_w": "max", "sm_clock_mhz": "min", "mem_clock_mhz": "min",
    "mem_used_mib": "max", "mem_total_mib": "max", "util_gpu": "max", "util_mem": "max",
    "ecc_volatile_corrected": "max", "ecc_volatile_uncorrected": "max",
    "ecc_aggregate_corrected": "max", "ecc_aggregate_uncorrected": "max",
    "retired_pages_sbe": "max", "retired_pages_dbe": "max", "retired_pending": "bool_or",
    "remap_pending": "bool_or", "remap_failure": "bool_or",
    "pcie_gen": "min", "pcie_width": "min", "pcie_replay": "max", "nvlink_errors": "max",
}
"""Sample column -> how a time bucket keeps it (the incident-relevant extreme)."""

SAMPLE_COLUMNS = ("ts", *SAMPLE_AGGREGATES, "throttle_reasons", "samples")

INVENTORY_COLUMNS = ("index", "uuid", "name", "serial", "vbios", "driver", "cuda", "power_limit_w",
                     "pcie_max_gen", "pcie_max_width", "memory_total_mib")

SERVING_ORDER = ("e2e_latency", "ttft", "tpot", "queue_time", "queue_depth", "kv_cache_usage", "error_rate",
                 "request_rate", "requests_running", "gen_throughput", "generation_tokens", "preemptions")
"""The serving curves in the order a responder reads them; others follow alphabetically."""

LOWER_IS_WORSE = frozenset({"gen_throughput", "prompt_throughput", "generation_tokens", "prompt_tokens",
                            "request_success", "prefix_cache_hit_rate"})
"""Curves whose trouble is a fall (throughput): downsampling and "worst of" keep their lowest value."""

STAT_PREFERENCE = ("p99", "p95", "p90", "mean", "value", "ratio", "rate", "median", "p50")

_HELPERS: dict[str, tuple[str, ...]] = {
    "error_rate": ("request_failure", "request_success"),
    "request_rate": ("requests_total", "request_success", "request_failure", "e2e_latency", "ttft"),
}
"""Derived curves and the stored metrics they are computed from."""


# -- GPUs ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Gpu:
    """One GPU of one host: what the inventory says and how its samples ended."""

    host: str | None
    gpu: str
    inventory: dict[str, Any]
    samples: int
    first: datetime | None
    last: datetime | None
    latest: dict[str, Any]
    worst: dict[str, Any]
    """Over all samples: max temperature, max ECC counters, any remap flag, every throttle reason."""

    @property
    def name(self) -> str | None:
        return self.inventory.get("name")


def gpus(bundle: Bundle) -> list[Gpu]:
    """Every GPU the inventory or the samples name, by host and bus id."""
    inv_cols = ", ".join(f'max("{c}") AS "{c}"' for c in INVENTORY_COLUMNS)
    inventory = {(r[0], r[1]): dict(zip(INVENTORY_COLUMNS, r[2:])) for r in bundle.con.execute(
        f"SELECT host, gpu, {inv_cols} FROM gpu_inventory WHERE gpu IS NOT NULL GROUP BY host, gpu").fetchall()}
    latest_cols = [c for c in SAMPLE_COLUMNS if c not in ("ts", "samples")]
    latest = {(r[0], r[1]): dict(zip(["ts", *latest_cols], r[2:])) for r in bundle.con.execute(
        f"SELECT host, gpu, ts, {', '.join(latest_cols)} FROM gpu_sample WHERE gpu IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY host, gpu ORDER BY ts DESC NULLS LAST) = 1").fetchall()}
    worst_sql = ("max(temp_c), max(power_w), min(sm_clock_mhz), max(ecc_volatile_uncorrected), "
                 "max(ecc_aggregate_uncorrected), max(ecc_volatile_corrected), max(ecc_aggregate_corrected), "
                 "max(retired_pages_sbe), max(retired_pages_dbe), bool_or(remap_pending), bool_or(remap_failure), "
                 "min(pcie_gen), min(pcie_width), max(pcie_replay), max(nvlink_errors), "
                 "list_sort(list_distinct(flatten(list(throttle_reasons) FILTER (throttle_reasons IS NOT NULL))))")
    worst_names = ("temp_c", "power_w", "sm_clock_mhz", "ecc_volatile_uncorrected", "ecc_aggregate_uncorrected",
                   "ecc_volatile_corrected", "ecc_aggregate_corrected", "retired_pages_sbe", "retired_pages_dbe",
                   "remap_pending", "remap_failure", "pcie_gen", "pcie_width", "pcie_replay", "nvlink_errors",
                   "throttle_reasons")
    counts = {}
    for r in bundle.con.execute(f"SELECT host, gpu, count(*), min(ts), max(ts), {worst_sql} FROM gpu_sample "
                                "WHERE gpu IS NOT NULL GROUP BY host, gpu").fetchall():
        counts[(r[0], r[1])] = (r[2], r[3], r[4], dict(zip(worst_names, r[5:])))
    out = []
    for key in sorted(set(inventory) | set(latest) | set(counts), key=lambda k: (k[0] or "", k[1])):
        n, first, last, worst = counts.get(key, (0, None, None, {}))
        worst["throttle_reasons"] = list(worst.get("throttle_reasons") or [])
        out.append(Gpu(host=key[0], gpu=key[1], inventory=inventory.get(key, {}), samples=n, first=first,
                       last=last, latest=latest.get(key, {}), worst=worst))
    return out


@dataclass(frozen=True)
class Samples:
    """A GPU's samples, time-ordered; with ``bucket_s`` set each row is one time bucket of ``samples`` rows."""

    rows: list[dict[str, Any]]
    bucket_s: float | None
    total: int

    def column(self, name: str) -> list[Any]:
        return [row[name] for row in self.rows]


def gpu_samples(bundle: Bundle, host: str | None, gpu: str, *, since: datetime | None = None,
                until: datetime | None = None, max_points: int = 120) -> Samples:
    """Samples of one GPU between ``since`` and ``until``, at most ``max_points`` rows."""
    where = ["gpu = ?", "ts IS NOT NULL", "host IS NULL" if host is None else "host = ?"]
    params: list[Any] = [gpu] + ([] if host is None else [host])
    bounds, values = time_bounds(since, until)
    cond = " AND ".join(where + bounds)
    params += values
    total, lo, hi = bundle.con.execute(f"SELECT count(*), min(ts), max(ts) FROM gpu_sample WHERE {cond}",
                                       params).fetchall()[0]
    if not total:
        return Samples([], None, 0)
    points = max(1, int(max_points))
    aggregates = ", ".join(f"{fn}({c}) AS {c}" for c, fn in SAMPLE_AGGREGATES.items())
    reasons = ("list_sort(list_distinct(flatten(list(throttle_reasons) "
               "FILTER (throttle_reasons IS NOT NULL)))) AS throttle_reasons")
    span = (hi - lo).total_seconds()
    if total <= points or span <= 0:
        bucket_s, group, group_params = None, "ts", []
    else:
        bucket_s = span / points
        group = "least(floor((epoch(ts) - epoch(?::TIMESTAMP)) / ?), ?)"
        group_params = [lo, bucket_s, points - 1]
    sql = (f"SELECT min(ts) AS ts, {aggregates}, {reasons}, count(*) AS samples FROM gpu_sample "
           f"WHERE {cond} GROUP BY {group} ORDER BY 1")
    rows = bundle.con.execute(sql, params + group_params).fetchall()
    out = []
    for r in rows:
        row = dict(zip(SAMPLE_COLUMNS, r))
        row["throttle_reasons"] = list(row["throttle_reasons"] or [])
        out.append(row)
    return Samples(out, bucket_s, total)


# -- serving series ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Curve:
    """One serving curve (a metric and its statistic, on one host and server identity) and its points."""

    metric: str
    stat: str
    unit: str
    host: str | None
    labels: tuple[tuple[str, str], ...]
    count: int
    first: datetime | None
    last: datetime | None
    points: list[tuple[datetime, float]] = field(default_factory=list, compare=False)
    approx: bool = False

    @property
    def title(self) -> str:
        """``p99 ttft``; plain gauges and rates are just their metric."""
        return self.metric if self.stat in ("value", "rate", "ratio") else f"{self.stat} {self.metric}"

    @property
    def who(self) -> str:
        """The server: its model or instance label, else the host."""
        labels = dict(self.labels)
        return labels.get("model_name") or labels.get("model") or labels.get("instance") or self.host or "-"


def _order(metric: str) -> tuple[int, str]:
    return (SERVING_ORDER.index(metric) if metric in SERVING_ORDER else len(SERVING_ORDER), metric)


def _stat_rank(stat: str) -> int:
    return STAT_PREFERENCE.index(stat) if stat in STAT_PREFERENCE else len(STAT_PREFERENCE)


def _curve(signal: series.Signal, points: list[tuple[datetime, float]] | None = None) -> Curve:
    finite = [(ts, v) for ts, v in signal.points if math.isfinite(v)]
    return Curve(metric=signal.metric, stat=signal.stat, unit=signal.unit, host=signal.host,
                 labels=tuple(sorted(signal.identity.items())), count=len(finite),
                 first=finite[0][0] if finite else None, last=finite[-1][0] if finite else None,
                 points=points if points is not None else [], approx=signal.approx)


def series_names(bundle: Bundle) -> list[Curve]:
    """Every serving curve the bundle supports (without points), in reading order: metric, host, statistic."""
    curves = [_curve(s) for s in series.signals(bundle.con) if s.points]
    return sorted((c for c in curves if c.count), key=lambda c: (_order(c.metric), c.host or "", c.labels,
                                                                 _stat_rank(c.stat), c.stat))


def series_points(bundle: Bundle, name: str, *, stat: str | None = None, host: str | None = None,
                  labels: dict[str, str] | None = None, since: datetime | None = None,
                  until: datetime | None = None, max_points: int = 200) -> list[Curve]:
    """The curves of metric ``name`` (its most telling statistic unless ``stat`` is given: p99 before
    mean), one per host and server, with at most ``max_points`` points between ``since`` and ``until``."""
    return curves(bundle, [name], stat=stat, host=host, labels=labels, since=since, until=until,
                  max_points=max_points).get(name, [])


def curves(bundle: Bundle, names: Sequence[str] | None = None, *, stat: str | None = None, host: str | None = None,
           labels: dict[str, str] | None = None, since: datetime | None = None, until: datetime | None = None,
           max_points: int = 200) -> dict[str, list[Curve]]:
    """:func:`series_points` for several metrics (every one when ``names`` is None) in one pass over the
    series table, by metric in reading order."""
    wanted: set[str] | None = None
    if names is not None:
        wanted = set(names)
        for name in names:
            wanted |= set(_HELPERS.get(name, ()))
            if name in series.LATENCY:
                wanted |= {"request_success", "request_failure"}  # Triton's cumulative durations are per request
    best: dict[tuple[Any, ...], series.Signal] = {}
    for signal in series.signals(bundle.con, sorted(wanted) if wanted is not None else None):
        if (names is not None and signal.metric not in names) or not signal.points:
            continue
        if (host is not None and signal.host != host) or (stat is not None and signal.stat != stat):
            continue
        if labels and any(signal.identity.get(k) != v for k, v in labels.items()):
            continue
        key = (signal.metric, signal.host or "", tuple(sorted(signal.identity.items())))
        if key not in best or _stat_rank(signal.stat) < _stat_rank(best[key].stat):
            best[key] = signal
    lo, hi = utc_naive(since), utc_naive(until)
    out: dict[str, list[Curve]] = {}
    for key in sorted(best, key=lambda k: (_order(k[0]), k[1], k[2])):
        signal = best[key]
        points = [(ts, v) for ts, v in signal.points if math.isfinite(v)
                  and (lo is None or ts >= lo) and (hi is None or ts <= hi)]
        lowest = signal.metric in LOWER_IS_WORSE
        out.setdefault(signal.metric, []).append(_curve(signal, downsample(points, max_points, lowest=lowest)))
    return out


def downsample(points: list[tuple[datetime, float]], max_points: int, *,
               lowest: bool = False) -> list[tuple[datetime, float]]:
    """At most ``max_points`` points: equal time buckets, each keeping its first time and its largest
    value (a one-scrape spike stays visible), or its smallest with ``lowest`` (a throughput dip)."""
    if len(points) <= max_points or max_points < 1:
        return list(points)
    start, end = points[0][0], points[-1][0]
    span = (end - start).total_seconds()
    pick = min if lowest else max
    if span <= 0:
        return [pick(points, key=lambda p: p[1])]
    buckets: dict[int, tuple[datetime, float]] = {}
    for ts, value in points:
        b = min(int((ts - start).total_seconds() / span * max_points), max_points - 1)
        if b not in buckets:
            buckets[b] = (ts, value)
        elif pick(value, buckets[b][1]) != buckets[b][1]:
            buckets[b] = (buckets[b][0], value)
    return [buckets[b] for b in sorted(buckets)]


# -- anomalies -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Anomaly:
    """A serving symptom found by the ``series_anomaly`` derivation: when a curve left its baseline."""

    onset: datetime | None
    end: datetime | None
    kind: str
    metric: str | None
    stat: str | None
    unit: str
    host: str | None
    labels: tuple[tuple[str, str], ...]
    baseline: float | None
    peak: float | None
    severity: str | None
    message: str


_ANOMALY_ATTRS = frozenset({"metric", "stat", "unit", "baseline", "peak", "onset", "end", "z", "points", "method",
                            "series", "threshold"})


def anomalies(bundle: Bundle) -> list[Anomaly]:
    """Every series anomaly, by onset."""
    rows = bundle.con.execute(
        "SELECT ts, kind, host, severity, message, attrs FROM event "
        "WHERE source = 'series_anomaly' AND ts_origin = 'derived' ORDER BY ts NULLS LAST, host, kind").fetchall()
    out = []
    for ts, kind, host, severity, message, attrs in rows:
        a = json.loads(attrs) if attrs else {}
        end = a.get("end")
        out.append(Anomaly(
            onset=ts, end=parse_iso(end),
            kind=kind, metric=a.get("metric"), stat=a.get("stat"), unit=a.get("unit") or "", host=host,
            labels=tuple(sorted((k, str(v)) for k, v in a.items() if k not in _ANOMALY_ATTRS and v is not None)),
            baseline=a.get("baseline"), peak=a.get("peak"), severity=severity, message=message or ""))
    return out
