"""Per-host clock offsets, estimated from the clock ties of the bundle (workbench/analysis/clock_ties.py).

Which host failed first is decided by timestamps from different clocks. When NTP drifted, a cause
on a host whose clock runs 40 s ahead looks later than its own consequences elsewhere. Moments that
several clocks stamped correct that. Offsets are measured against the reference clocks (the Slurm
controller, the Kubernetes API, Prometheus) where a host shares moments with them; a host measured so
then measures the hosts it shares moments with; a moment no measured clock saw is judged by the
consensus (median) of three or more hosts, so one skewed host among several is the one that moves.

A wrong offset moves a culprit's first line by a minute and is worse than none, so an offset is kept
only when a host's estimates agree: AGREE of them within the ties' slack of their median, from at
least two moments or one moment of a kind exact enough to stand alone (``STRONG``); two hosts that
disagree with no third clock to tell which is right get none, and so does a host whose ties scatter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from statistics import median
from typing import Any

import duckdb

from workbench.analysis.clock_ties import REFERENCE, SLACK_S, STRONG, Tie, reference_artifacts, ties

MIN_OFFSET_S = 1.0
"""Smaller offsets are clock noise and log granularity, not skew."""
MAX_OFFSET_S = 86_400.0
"""Larger ones mean the ties are not the same moment (a reused sequence number), not skew."""
AGREE = 0.75
"""Share of a host's estimates that must lie within the slack of their median."""


class ClockOffsets(dict):
    """host -> seconds its clock runs ahead of the reference (subtract to correct), plus the artifacts
    stamped by a reference clock, whose rows keep their times whatever host they name. Serialises as
    the plain mapping (``analyze``'s ``clock_offsets``)."""

    def __init__(self, offsets: dict[str, float] | None = None, reference: Iterable[str] = ()) -> None:
        super().__init__(offsets or {})
        self.reference: frozenset[str] = frozenset(reference)


def offset_of(offsets: dict[str, float], row: dict[str, Any]) -> float:
    """The seconds to subtract from ``row``'s time: its host's offset, or 0 for a row of a reference-clock
    artifact (a controller or API line about that host)."""
    if row.get("artifact") in getattr(offsets, "reference", ()):
        return 0.0
    return offsets.get(row.get("host") or "", 0.0)


def estimate(found: list[Tie]) -> dict[str, float]:
    """host -> offset from the ties (the module's rules); only significant offsets are listed."""
    moments: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[str, str] = {}
    for tie in found:
        moments[tie.moment][tie.clock].append(tie.t)
        kinds[tie.moment] = tie.kind
    stamps: dict[str, dict[str, float]] = {}
    for moment, clocks in moments.items():
        slack = SLACK_S.get(kinds[moment], 1.0)
        # a clock whose stamps of one key spread wider than the slack saw several happenings, not one
        single = {clock: median(ts) for clock, ts in clocks.items() if max(ts) - min(ts) <= slack}
        if len(single) >= 2:
            stamps[moment] = single
    known: dict[str, float] = {REFERENCE: 0.0}
    for _ in range(4):  # a host measured against the reference then measures the hosts it shares moments with
        estimates: dict[str, list[tuple[float, str]]] = defaultdict(list)
        for moment, clocks in stamps.items():
            anchored = [t - known[c] for c, t in clocks.items() if c in known]
            if anchored:
                centre = median(anchored)
            elif len(clocks) >= 3:
                centre = median(clocks.values())
            else:
                continue  # two unknown clocks: which one is wrong cannot be told
            for clock, t in clocks.items():
                if clock not in known:
                    estimates[clock].append((t - centre, kinds[moment]))
        learned = {host: value for host, values in estimates.items() if (value := _agreed(values)) is not None}
        if not learned:
            break
        known.update(learned)
    finest: dict[str, float] = {}
    for tie in found:  # an offset smaller than the slack of the host's finest tie kind is within its noise
        finest[tie.clock] = min(finest.get(tie.clock, MAX_OFFSET_S), SLACK_S.get(tie.kind, MIN_OFFSET_S))
    return {host: round(value, 3) for host, value in sorted(known.items())
            if host != REFERENCE and max(MIN_OFFSET_S, finest.get(host, MIN_OFFSET_S)) <= abs(value) <= MAX_OFFSET_S}


def _agreed(values: list[tuple[float, str]]) -> float | None:
    """The median of one host's estimates when they agree (AGREE within the slack, enough support), else None."""
    centre = median(v for v, _ in values)
    slack = max(SLACK_S.get(kind, 1.0) for _, kind in values)
    inside = [(v, kind) for v, kind in values if abs(v - centre) <= slack]
    if len(inside) < AGREE * len(values):
        return None
    if len(inside) < 2 and not any(kind in STRONG for _, kind in inside):
        return None
    return median(v for v, _ in inside)


def estimate_offsets(con: duckdb.DuckDBPyConnection) -> ClockOffsets:
    """host -> seconds its clock runs ahead of the reference (subtract to correct), with the bundle's
    reference-clock artifacts. Only hosts with a significant, agreed offset are listed; the others are
    taken as correct."""
    reference = reference_artifacts(con)
    return ClockOffsets(estimate(ties(con, reference)), reference)
