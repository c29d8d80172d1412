"""Per-host clock offsets, estimated from events several hosts saw at the same true moment.

Which host failed first is decided by timestamps from different clocks. When NTP drifted, a cause
on a host whose clock runs 40 s ahead looks later than its own consequences elsewhere. Anchors
that happened simultaneously everywhere correct that: every rank of a collective started it at
the same moment (the watchdog line's time minus its elapsed milliseconds), and one job state
change is logged by each node's daemon. Offsets are relative to the consensus of the hosts
(median), so one skewed host among several is the one that moves.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median

import duckdb

from workbench.query.rank_places import rank_places

MIN_OFFSET_S = 1.0
"""Smaller offsets are clock noise and log granularity, not skew."""
MAX_OFFSET_S = 86_400.0
"""Larger ones mean the anchors are not the same moment (a reused sequence number), not skew."""

_ANCHORS = """
SELECT host, rank,
       'nccl:' || coalesce(job, '') || ':' || coalesce(attrs->>'op', '') || ':' || (attrs->>'seq') AS anchor,
       epoch(ts) - coalesce(TRY_CAST(attrs->>'elapsed_ms' AS DOUBLE), 0) / 1000.0 AS t
FROM event
WHERE kind = 'nccl_timeout' AND (host IS NOT NULL OR rank IS NOT NULL) AND ts IS NOT NULL AND attrs->>'seq' IS NOT NULL
  AND coalesce(ts_origin, '') <> 'derived'
UNION ALL
SELECT host, NULL AS rank,
       'job:' || coalesce(attrs->>'job', job, '') || ':' || upper(coalesce(attrs->>'state', '')) AS anchor,
       epoch(ts) AS t
FROM event
WHERE kind = 'job_state' AND host IS NOT NULL AND ts IS NOT NULL AND coalesce(ts_origin, '') <> 'derived'
"""


def estimate_offsets(con: duckdb.DuckDBPyConnection) -> dict[str, float]:
    """host -> seconds its clock runs ahead of the consensus (subtract to correct). Only hosts with
    a significant offset are listed; hosts without shared anchors are taken as correct."""
    per_anchor: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    places = rank_places(con)
    for host, rank, anchor, t in con.execute(_ANCHORS).fetchall():
        host = host or (places[rank].host if rank in places else None)
        if t is not None and host is not None:
            per_anchor[anchor][host].append(float(t))
    deviations: dict[str, list[float]] = defaultdict(list)
    for hosts in per_anchor.values():
        if len(hosts) < 2:
            continue
        starts = {host: median(times) for host, times in hosts.items()}
        centre = median(starts.values())
        for host, start in starts.items():
            deviations[host].append(start - centre)
    offsets: dict[str, float] = {}
    for host, values in deviations.items():
        offset = median(values)
        if MIN_OFFSET_S <= abs(offset) <= MAX_OFFSET_S:
            offsets[host] = round(offset, 3)
    return offsets
