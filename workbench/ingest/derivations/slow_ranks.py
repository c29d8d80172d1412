"""Slow ranks and slow steps, from the step times the trainers logged (``step_time`` events).

A synchronous job runs at the pace of its slowest rank: one GPU that clocks down for heat, a host
with a noisy neighbour or a bad link makes every step slower, and nothing fails. Two things show it:

- ``straggler_rank`` (layer gpu): a rank whose step time, compared over the same steps with the other
  ranks of its job (the median across ranks, robust to a few odd values), stays at SLOW_RATIO or more
  for at least MIN_SLOW_STEPS steps and for most of the steps from its first slow one on: attrs
  reason ``slow_steps``, evidence ``step_time``, ratio (its median over the slow steps), steps (how
  many), of_steps (compared from its first slow step on), first_step, last_step, median_s and rank_s
  (median seconds per step of all ranks and of this rank over the slow steps; for throughput-only
  logs the inverse of the throughput, with median_throughput/rank_throughput and unit), measure,
  ranks_compared, step_events ({id, artifact, line} of the rank's slow steps). Host and GPU come from
  the rank's own events, else from the topology. Each rank's step time is only comparable where the
  trainer measured what the rank itself did (``measure`` compute, e.g. DeepSpeed's forward/backward
  timers): the whole-step wall time is the same on every rank of a synchronous job, so there the
  ranks agree and nothing is flagged.
- ``throughput_drop`` (layer business): the job's pace (the median rank's step time; the slowest
  rank's for compute timers) rises to DROP_RATIO times its earlier median and stays there: attrs
  baseline_s, slow_s, ratio, first_step, points, measure, metric, nodes (the job's hosts, so the
  symptom is placed on them).

Steps are matched by their number (and epoch); lines without one by their order in each rank's log.
A job whose trainer logs several measures (DeepSpeed's timers and its samples/s) gets one straggler
event per rank (the one over most steps) and one throughput_drop (the earliest).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from collectors.base import Event
from workbench.ingest.derivations.stragglers import MAX_LISTED, RankTopology

NAME = "slow_ranks"
SLOW_RATIO = 1.3
MIN_SLOW_STEPS = 3
CONSISTENT = 0.6
"""Share of a rank's steps, from its first slow one on, that must be slow: a few noisy steps are not a
straggler, a rank that fell behind and stayed behind is."""
MIN_RANKS = 3
"""Below three ranks the median is not a majority: no one can be called the odd one out."""
DROP_RATIO = 1.2
MIN_BASELINE = 3
MIN_DROP_POINTS = 3
_MEASURES = {"step": "whole-step time", "compute": "compute time, without waiting for the others"}
MAX_POINTS = 240
"""The job's pace is scanned at this many points at most (consecutive steps merged by median)."""


@dataclass
class _Sample:
    values: list[float] = field(default_factory=list)
    ts: datetime | None = None
    host: str | None = None
    gpu: str | None = None
    refs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def value(self) -> float:
        return statistics.median(self.values)


Metric = tuple[str | None, str, str]
"""(job, measure, unit): only like is compared with like."""
Key = tuple


def derive(con: duckdb.DuckDBPyConnection) -> Iterator[Event]:
    steps: dict[Metric, dict[Key, dict[int | None, _Sample]]] = defaultdict(lambda: defaultdict(dict))
    rows = con.execute(
        "SELECT id, ts, host, gpu, rank, job, CAST(attrs AS VARCHAR), artifact, line FROM event "
        "WHERE kind = 'step_time' AND coalesce(ts_origin, '') <> 'derived' ORDER BY ts NULLS LAST, id").fetchall()
    for eid, ts, host, gpu, rank, job, attrs_text, artifact, line in rows:
        attrs = json.loads(attrs_text or "{}")
        if attrs.get("summary"):
            continue
        metric, value = _cost(job, attrs)
        key = _key(attrs)
        if metric is None or value is None or key is None:
            continue
        sample = steps[metric][key].setdefault(rank, _Sample())
        sample.values.append(value)
        if ts is not None and (sample.ts is None or ts < sample.ts):
            sample.ts = ts
        sample.host = sample.host or host
        sample.gpu = sample.gpu or gpu
        if len(sample.refs) < 4:
            sample.refs.append({"id": eid, "artifact": artifact, "line": line})
    if not steps:
        return
    topo = RankTopology(con)
    stragglers: dict[tuple[str | None, int | None], Event] = {}
    drops: dict[str | None, Event] = {}
    for metric, by_key in steps.items():
        ordered = sorted(by_key.items(), key=lambda kv: (_first_ts(kv[1]) or datetime.max, kv[0]))
        for event in _slow_ranks(metric, ordered, topo):
            seen = stragglers.get((event.job, event.rank))
            if seen is None or event.attrs["steps"] > seen.attrs["steps"]:
                stragglers[(event.job, event.rank)] = event
        for event in _throughput_drop(metric, ordered, topo):
            seen = drops.get(event.job)
            if seen is None or _drop_order(event) < _drop_order(seen):
                drops[event.job] = event
    yield from stragglers.values()
    yield from drops.values()


def _drop_order(event: Event) -> tuple[datetime, bool]:
    """Earliest first; at the same time the whole step's pace before a compute timer's."""
    return event.ts or datetime.max, event.attrs.get("measure") != "step"


def _cost(job: str | None, attrs: dict[str, Any]) -> tuple[Metric | None, float | None]:
    """Seconds per step where logged, else the inverse of the throughput (same ratios, other unit)."""
    measure = str(attrs.get("measure") or "step")
    seconds = attrs.get("seconds")
    if isinstance(seconds, (int, float)) and seconds > 0 and math.isfinite(seconds):
        return (job, measure, "s"), float(seconds)
    rate = attrs.get("throughput")
    if isinstance(rate, (int, float)) and rate > 0 and math.isfinite(rate):
        return (job, measure, str(attrs.get("unit") or "per s")), 1.0 / rate
    return None, None


def _key(attrs: dict[str, Any]) -> Key | None:
    step = attrs.get("step")
    if isinstance(step, int):
        epoch = attrs.get("epoch") if attrs.get("framework") == "tqdm" else None
        return ("step", epoch if isinstance(epoch, int) else -1, step, attrs.get("framework"))
    index = attrs.get("index")
    if isinstance(index, int):
        return ("index", -1, index, attrs.get("framework"))
    return None


def _first_ts(samples: dict[int | None, _Sample]) -> datetime | None:
    times = [s.ts for s in samples.values() if s.ts is not None]
    return min(times) if times else None


def _step_of(key: Key) -> int | None:
    return key[2] if key[0] == "step" else None


@dataclass
class _Seen:
    """One rank at one step: its value against the median of the ranks."""

    key: Key
    ratio: float
    value: float
    median: float
    sample: _Sample


def _slow_ranks(metric: Metric, ordered: list[tuple[Key, dict[int | None, _Sample]]],
                topo: RankTopology) -> Iterator[Event]:
    seen: dict[int, list[_Seen]] = defaultdict(list)
    compared: set[int] = set()
    for key, samples in ordered:
        ranked = {r: s.value for r, s in samples.items() if r is not None}
        if len(ranked) < MIN_RANKS:
            continue
        median = statistics.median(ranked.values())
        if median <= 0:
            continue
        compared.update(ranked)
        for rank, value in ranked.items():
            seen[rank].append(_Seen(key, value / median, value, median, samples[rank]))
    flagged = []
    for rank, entries in sorted(seen.items()):
        first = next((i for i, e in enumerate(entries) if e.ratio >= SLOW_RATIO), None)
        if first is None:
            continue
        tail = entries[first:]
        slow = [e for e in tail if e.ratio >= SLOW_RATIO]
        if len(slow) >= MIN_SLOW_STEPS and len(slow) >= CONSISTENT * len(tail):
            flagged.append((rank, slow, len(tail)))
    if len(flagged) * 2 >= len(compared):
        return  # half the job "slow" is a job that changed pace, not a straggler
    for rank, slow, of_steps in flagged:
        yield _straggler(metric, rank, slow, of_steps, len(compared), topo)


def _straggler(metric: Metric, rank: int, slow: list[_Seen], of_steps: int, ranks: int,
               topo: RankTopology) -> Event:
    job, measure, unit = metric
    ratio = round(statistics.median(e.ratio for e in slow), 3)
    rank_cost = statistics.median(e.value for e in slow)
    median_cost = statistics.median(e.median for e in slow)
    t_host, t_gpu, comm = topo.place(job, rank)
    host = next((e.sample.host for e in slow if e.sample.host), None) or t_host
    gpu = next((e.sample.gpu for e in slow if e.sample.gpu), None) or t_gpu
    steps = [s for s in (_step_of(e.key) for e in slow) if s is not None]
    attrs: dict[str, Any] = {
        "reason": "slow_steps", "evidence": "step_time", "ratio": ratio, "steps": len(slow), "of_steps": of_steps,
        "first_step": min(steps) if steps else None, "last_step": max(steps) if steps else None,
        "measure": measure, "ranks_compared": ranks, "comm_id": comm,
        "step_events": [ref for e in slow for ref in e.sample.refs[:1]][:MAX_LISTED]}
    if unit == "s":
        attrs.update(median_s=round(median_cost, 6), rank_s=round(rank_cost, 6))
        pace = f"{rank_cost:.3f} s per step vs {median_cost:.3f} s"
    else:
        attrs.update(unit=unit, median_throughput=round(1 / median_cost, 3), rank_throughput=round(1 / rank_cost, 3))
        pace = f"{1 / rank_cost:,.1f} vs {1 / median_cost:,.1f} {unit}"
    where = ", ".join(x for x in (host, f"GPU {gpu}" if gpu else None) if x) or "host unknown"
    since = f" from step {attrs['first_step']}" if attrs["first_step"] is not None else ""
    times = [e.sample.ts for e in slow if e.sample.ts is not None]
    return Event(kind="straggler_rank", ts=min(times) if times else None, ts_approx=True, host=host, gpu=gpu,
                 rank=rank, job=job, layer="gpu", severity="warning", attrs=attrs,
                 message=f"straggler: rank {rank} ({where}) is {ratio:.2f}x slower than the median of {ranks} ranks "
                         f"over {len(slow)} steps{since}: {pace} ({_MEASURES.get(measure, measure)})")


def _throughput_drop(metric: Metric, ordered: list[tuple[Key, dict[int | None, _Sample]]],
                     topo: RankTopology) -> Iterator[Event]:
    job, measure, unit = metric
    points: list[tuple[float, datetime | None, Key]] = []
    hosts: set[str] = set()
    for key, samples in ordered:
        values = [s.value for s in samples.values()]
        pace = max(values) if measure == "compute" else statistics.median(values)
        points.append((pace, _first_ts(samples), key))
        hosts.update(s.host for s in samples.values() if s.host)
    points = _merge(points)
    for i in range(MIN_BASELINE, len(points) - MIN_DROP_POINTS + 1):
        baseline = statistics.median(p[0] for p in points[:i])
        after = [p[0] for p in points[i:]]
        limit = DROP_RATIO * baseline
        if baseline <= 0 or points[i][0] < limit or statistics.median(after) < limit:
            continue
        if sum(v >= limit for v in after) < CONSISTENT * len(after):
            continue
        slow = statistics.median(after)
        ratio = round(slow / baseline, 3)
        step = _step_of(points[i][2])
        attrs: dict[str, Any] = {"ratio": ratio, "first_step": step, "points": len(after), "measure": measure,
                                 "metric": "seconds per step" if unit == "s" else f"1/({unit})",
                                 "nodes": sorted(hosts | topo.hosts(job))[:MAX_LISTED]}
        if unit == "s":
            attrs.update(baseline_s=round(baseline, 6), slow_s=round(slow, 6))
            what = f"{baseline:.3f} s to {slow:.3f} s per step"
        else:
            attrs.update(unit=unit, baseline_throughput=round(1 / baseline, 3), slow_throughput=round(1 / slow, 3))
            what = f"{1 / baseline:,.1f} to {1 / slow:,.1f} {unit}"
        since = f" from step {step}" if step is not None else ""
        host = next(iter(hosts)) if len(hosts) == 1 else None
        yield Event(kind="throughput_drop", ts=points[i][1], ts_approx=True, host=host, job=job, layer="business",
                    severity="warning", attrs=attrs,
                    message=f"training slowed {ratio:.2f}x{since}: {what} ({_MEASURES.get(measure, measure)})")
        return


def _merge(points: list[tuple[float, datetime | None, Key]]) -> list[tuple[float, datetime | None, Key]]:
    """At most MAX_POINTS points: consecutive steps merged by their median, dated by the first."""
    if len(points) <= MAX_POINTS:
        return points
    size = math.ceil(len(points) / MAX_POINTS)
    merged = []
    for start in range(0, len(points), size):
        chunk = points[start:start + size]
        merged.append((statistics.median(p[0] for p in chunk), chunk[0][1], chunk[0][2]))
    return merged
