"""The rank that fell behind first, from every rank's watchdog timeouts.

When one rank stops (its GPU hung, its host stalled, its data loader died), every other rank of
the process group blocks in the next collective and, after the timeout, each rank's
ProcessGroupNCCL watchdog reports the collective it was stuck in. The straggler is the rank whose
sequence number is behind: it reports SeqNum k while the others wait at k+1, or it reports nothing
while every other rank of a known communicator timed out. Per process group (and job), this reads
each rank's first stuck SeqNum (and its ``last enqueued / last completed`` work when logged) from
the ``nccl_timeout`` events, and fr_trace's ``missing ranks`` from ``nccl_flight_recorder`` events,
and writes:

- ``straggler_rank`` (layer gpu): rank, host and GPU bus id (from the rank's own events, else the
  ``topology`` table), attrs seq (its SeqNum, null when it logged none), expected_seq (where the
  others wait), pg, comm_id, evidence (``seq`` | ``no_timeout`` | ``flight_recorder``),
  waiting_ranks, timeout_events (ids of the waiting ranks' nccl_timeout events, which stay as they
  are: evidence rows are never updated), waiting_events ({id, rank, host, artifact, line}) and
  progress ({rank: {stuck_seq, last_enqueued, last_completed}});
- ``collective_mismatch`` (layer gpu): ranks stuck at the same SeqNum in different collectives (a
  desync in the program): seq, pg, ops {rank: op}.

A rank that logged nothing counts as a straggler only if the evidence shows it existed (a topology
row or any event of that rank) and it is a minority: a missing log is not a silent rank. A rank that is
slow rather than stopped is found from the step times (workbench/ingest/derivations/slow_ranks.py).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb

from collectors.base import Event
from workbench.query.rank_places import rank_places, world_size

NAME = "stragglers"
MAX_LISTED = 4096
"""Bound on the ranks and events listed in one derived event."""

_STUCK_REASONS = ("watchdog_timeout", "watchdog_progress")


@dataclass
class _Rank:
    """What one rank's timeouts say about how far it got."""

    stuck: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    ops: dict[int, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    first_ts: datetime | None = None
    host: str | None = None
    gpu: str | None = None


def _min(a: int | None, b: Any) -> int | None:
    if not isinstance(b, int):
        return a
    return b if a is None else min(a, b)


def derive(con: duckdb.DuckDBPyConnection) -> Iterator[Event]:
    groups: dict[tuple[str | None, str], dict[int, _Rank]] = defaultdict(dict)
    rows = con.execute(
        "SELECT id, ts, host, gpu, rank, job, CAST(attrs AS VARCHAR), artifact, line FROM event "
        "WHERE kind = 'nccl_timeout' AND coalesce(ts_origin, '') <> 'derived' ORDER BY ts NULLS LAST, id").fetchall()
    for eid, ts, host, gpu, rank, job, attrs_text, artifact, line in rows:
        attrs = json.loads(attrs_text or "{}")
        rank = rank if rank is not None else attrs.get("pg_rank")
        if rank is None or attrs.get("reason") not in _STUCK_REASONS:
            continue
        info = groups[(job, _pg(attrs))].setdefault(rank, _Rank())
        info.stuck = _min(info.stuck, attrs.get("seq"))
        info.last_enqueued = _min(info.last_enqueued, attrs.get("last_enqueued"))
        info.last_completed = _min(info.last_completed, attrs.get("last_completed"))
        if isinstance(attrs.get("seq"), int) and attrs.get("op"):
            info.ops.setdefault(attrs["seq"], attrs["op"])
        info.events.append({"id": eid, "rank": rank, "host": host, "artifact": artifact, "line": line})
        if ts is not None and (info.first_ts is None or ts < info.first_ts):
            info.first_ts = ts
        info.host = info.host or host
        info.gpu = info.gpu or gpu
    topo = RankTopology(con)
    for (job, pg), ranks in groups.items():
        yield from _stragglers(job, pg, ranks, topo)
        yield from _mismatches(job, pg, ranks)
    yield from _flight_recorder(con, topo)


def _pg(attrs: dict[str, Any]) -> str:
    pg = attrs.get("pg")
    if pg in (None, "0") or attrs.get("pg_id") == 0:
        return "default_pg"
    return str(pg)


class RankTopology:
    """Rank -> host and GPU as workbench/query/rank_places.py places them (NCCL init lines of the world
    communicator, else launcher evidence), and the job's size."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        size = world_size(con)
        self.world: dict[str | None, int] = {None: size} if size else {}
        self.where: dict[tuple[str | None, int], tuple[int, str | None, str | None, str | None]] = {
            (None, rank): (size, p.host, p.gpu, p.comm) for rank, p in rank_places(con).items()}
        self.seen = {r for (r,) in con.execute(
            "SELECT DISTINCT rank FROM event WHERE rank IS NOT NULL AND coalesce(ts_origin, '') <> 'derived'"
        ).fetchall()} | {rank for _, rank in self.where}

    def place(self, job: str | None, rank: int) -> tuple[str | None, str | None, str | None]:
        found = self.where.get((job, rank)) or self.where.get((None, rank))
        return (found[1], found[2], found[3]) if found else (None, None, None)

    def hosts(self, job: str | None) -> set[str]:
        """The hosts the job's ranks ran on."""
        return {where[1] for (j, _), where in self.where.items() if where[1] and j in (job, None)}

    def size(self, job: str | None, pg: str) -> int | None:
        if pg != "default_pg":
            return None
        return self.world.get(job) or self.world.get(None) or None


def _stragglers(job: str | None, pg: str, ranks: dict[int, _Rank], topo: RankTopology) -> Iterator[Event]:
    stuck = {r: i.stuck for r, i in ranks.items() if i.stuck is not None}
    if not stuck:
        return
    expected = max(stuck.values())
    first = min(stuck.values())
    if first < expected:
        behind = sorted(r for r, s in stuck.items() if s == first)
        waiting = sorted(r for r in stuck if r not in behind)
        for rank in behind:
            yield _event(job, pg, rank, first, expected, waiting, ranks, topo, "seq")
        return
    size = topo.size(job, pg)
    if size is None or len(stuck) < 2:
        return
    silent = sorted(r for r in topo.seen if 0 <= r < size and r not in stuck)
    if silent and len(silent) < len(stuck):
        waiting = sorted(stuck)
        for rank in silent[:MAX_LISTED]:
            yield _event(job, pg, rank, None, expected, waiting, ranks, topo, "no_timeout")


def _event(job: str | None, pg: str, rank: int, seq: int | None, expected: int, waiting: list[int],
           ranks: dict[int, _Rank], topo: RankTopology, evidence: str) -> Event:
    own = ranks.get(rank)
    t_host, t_gpu, comm = topo.place(job, rank)
    host = (own.host if own else None) or t_host
    gpu = (own.gpu if own else None) or t_gpu
    linked = [e for r in waiting for e in ranks[r].events][:MAX_LISTED]
    times = [i.first_ts for i in ranks.values() if i.first_ts is not None]
    progress = {str(r): {"stuck_seq": i.stuck, "last_enqueued": i.last_enqueued, "last_completed": i.last_completed}
                for r, i in sorted(ranks.items())[:MAX_LISTED]}
    where = ", ".join(x for x in (host, f"GPU {gpu}" if gpu else None) if x) or "host unknown"
    got = f"stopped at SeqNum {seq}" if seq is not None else "logged no timeout"
    message = (f"straggler: rank {rank} ({where}) {got} while {len(waiting)} rank(s) of {pg} timed out "
               f"waiting at SeqNum {expected}")
    return Event(kind="straggler_rank", message=message, ts=min(times) if times else None, ts_approx=True,
                 host=host, layer="gpu", severity="error", gpu=gpu, rank=rank, job=job,
                 attrs={"seq": seq, "expected_seq": expected, "pg": pg, "comm_id": comm, "evidence": evidence,
                        "waiting_ranks": waiting[:MAX_LISTED], "timeout_events": [e["id"] for e in linked],
                        "waiting_events": linked, "progress": progress})


def _mismatches(job: str | None, pg: str, ranks: dict[int, _Rank]) -> Iterator[Event]:
    by_seq: dict[int, dict[int, str]] = defaultdict(dict)
    for rank, info in ranks.items():
        for seq, op in info.ops.items():
            by_seq[seq][rank] = op
    for seq, ops in sorted(by_seq.items()):
        if len(set(ops.values())) < 2:
            continue
        times = [ranks[r].first_ts for r in ops if ranks[r].first_ts is not None]
        listing = ", ".join(f"rank {r}: {op}" for r, op in sorted(ops.items())[:16])
        yield Event(kind="collective_mismatch", ts=min(times) if times else None, ts_approx=True, layer="gpu",
                    severity="error", job=job,
                    message=f"collective mismatch in {pg} at SeqNum {seq}: {listing}",
                    attrs={"seq": seq, "pg": pg, "ops": {str(r): op for r, op in sorted(ops.items())[:MAX_LISTED]}})


def _flight_recorder(con: duckdb.DuckDBPyConnection, topo: RankTopology) -> Iterator[Event]:
    rows = con.execute(
        "SELECT id, ts, job, CAST(attrs AS VARCHAR), artifact, line, host FROM event "
        "WHERE kind = 'nccl_flight_recorder' AND coalesce(ts_origin, '') <> 'derived'").fetchall()
    for eid, ts, job, attrs_text, artifact, line, host in rows:
        attrs = json.loads(attrs_text or "{}")
        missing = [r for r in attrs.get("missing_ranks") or [] if isinstance(r, int)]
        expected = attrs.get("seq")
        if not missing or not isinstance(expected, int):
            continue
        joined = sorted(set(attrs.get("expected_ranks") or []) - set(missing))
        pg = _pg(attrs)
        for rank in missing[:MAX_LISTED]:
            r_host, gpu, comm = topo.place(job, rank)
            where = ", ".join(x for x in (r_host, f"GPU {gpu}" if gpu else None) if x) or "host unknown"
            yield Event(kind="straggler_rank", ts=ts, ts_approx=True, host=r_host, layer="gpu", severity="error",
                        gpu=gpu, rank=rank, job=job,
                        message=f"straggler: rank {rank} ({where}) never joined collective {expected} of {pg} "
                                f"(flight recorder)",
                        attrs={"seq": None, "expected_seq": expected, "pg": pg, "comm_id": comm,
                               "evidence": "flight_recorder", "waiting_ranks": joined[:MAX_LISTED],
                               "timeout_events": [eid],
                               "waiting_events": [{"id": eid, "rank": None, "host": host, "artifact": artifact,
                                                   "line": line}]})
