"""Clock ties: one moment seen on several clocks, and which lines are on the reference clock.

Which host failed first is decided by timestamps from different clocks. A *tie* is a moment that two
or more clocks stamped: every rank of a collective started it together (the watchdog's time minus its
elapsed milliseconds), every rank of a synchronous training job finishes step N together (data
parallelism waits on the all-reduce), one job state change logged by each node's daemon and by the
controller, one Kubernetes event as the API server stored it and as the node's kubelet logged it, and
each host's ``date`` printed in a capture that one collector stamped, and a container the API server
saw end ``OOMKilled`` against the node kernel's kill of a container's process.

Some artifacts are stamped by a *reference clock* (the Slurm controller, the Kubernetes API, the
Prometheus server, the deploy system): a line there about a host (``node dgx32 DOWN``) is not on that
host's clock and must not get its offset (:data:`REFERENCE_KINDS`, :func:`offset_of`). Offsets are
measured against those clocks where a host shares moments with them, else against the consensus of
the hosts that share a moment.

A wrong offset moves a culprit's first line by a minute and is worse than none, so an offset is only
kept when the ties agree: every estimate of a host within the ties' slack of their median (a quarter
may be outliers), from at least two moments, or one moment of a kind exact enough to stand alone
(:data:`STRONG`); two hosts that disagree with no third clock to tell which is right get no offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb

from workbench.query.rank_places import rank_places

REFERENCE = "<reference>"
"""The clock of the artifacts in REFERENCE_KINDS: taken as true, offset 0 by definition."""

REFERENCE_KINDS: frozenset[str] = frozenset({
    "sacct", "sacct_json", "sinfo", "squeue", "scontrol_job", "scontrol_node", "sacctmgr_event",
    "k8s_events_json", "k8s_pods_json", "k8s_nodes_json", "k8s_json", "k8s_yaml", "k8s_events_table",
    "k8s_describe", "k8s_pods_table",
    "prom_text", "prom_api_json", "prom_query_log",
    "change_records",
})
"""Artifact kinds whose times a cluster service stamped, not the host a line is about: Slurm's
accounting and controller state (sacct, sinfo, scontrol), Kubernetes API objects, Prometheus samples
(the scrape time, the server's clock) and the deploy system's change records."""

CONTROLLER_LOG_KINDS: frozenset[str] = frozenset({"slurm_log"})
"""Daemon logs that are the controller's (reference) when the artifact names no host (collected
centrally: slurmctld.log) and a node's own daemon (slurmd, slurmstepd) when it sits under a host."""

SLACK_S: dict[str, float] = {"nccl_collective": 1.0, "job_state": 2.0, "training_step": 2.0, "k8s_event": 2.0,
                             "capture_date": 1.0, "oom_exit": 2.0}
"""How far apart, in true time, the observations of one moment of each tie kind may be: a collective
starts within milliseconds on every rank; a step ends within one step's time; a daemon logs a state
change a second or two after the controller decided it; ``date`` prints whole seconds."""
STRONG: frozenset[str] = frozenset({"nccl_collective", "job_state", "capture_date", "oom_exit"})
"""Tie kinds exact enough that one moment alone gives an offset; the others need two moments."""


@dataclass(frozen=True)
class Tie:
    """One clock's stamp of one shared moment."""

    moment: str
    clock: str
    t: float
    kind: str


def reference_artifacts(con: duckdb.DuckDBPyConnection) -> frozenset[str]:
    """The artifacts (sha256) on a reference clock (REFERENCE_KINDS, CONTROLLER_LOG_KINDS without a host)."""
    rows = con.execute("SELECT sha256 FROM artifact WHERE kind IN (SELECT unnest(?)) "
                       "OR (kind IN (SELECT unnest(?)) AND host IS NULL)",
                       [sorted(REFERENCE_KINDS), sorted(CONTROLLER_LOG_KINDS)]).fetchall()
    return frozenset(sha for (sha,) in rows)


_TIES = """
SELECT e.host, e.rank,
       'nccl:' || coalesce(e.job, '') || ':' || coalesce(e.attrs->>'pg_guid', '') || ':' || coalesce(e.attrs->>'op', '')
           || ':' || (e.attrs->>'seq') AS moment,
       epoch(e.ts) - coalesce(TRY_CAST(e.attrs->>'elapsed_ms' AS DOUBLE), 0) / 1000.0 AS t,
       'nccl_collective' AS tie, e.artifact
FROM event e
WHERE e.kind = 'nccl_timeout' AND e.attrs->>'seq' IS NOT NULL
UNION ALL
SELECT e.host, NULL, 'job:' || coalesce(e.attrs->>'job', e.job, '') || ':' || upper(coalesce(e.attrs->>'state', '')),
       epoch(e.ts), 'job_state', e.artifact
FROM event e
WHERE e.kind = 'job_state' AND e.attrs->>'state' IS NOT NULL
UNION ALL
SELECT e.host, e.rank, 'step:' || coalesce(e.job, '') || ':' || coalesce(e.attrs->>'framework', '') || ':'
           || coalesce(e.attrs->>'measure', '') || ':' || (e.attrs->>'step'),
       epoch(e.ts), 'training_step', e.artifact
FROM event e
WHERE e.kind = 'step_time' AND e.attrs->>'step' IS NOT NULL AND e.rank IS NOT NULL
UNION ALL
SELECT coalesce(e.host, e.attrs->>'node'), NULL,
       'k8s:' || coalesce(e.attrs->>'namespace', '') || ':' || coalesce(e.attrs->>'object', '') || ':'
           || coalesce(e.attrs->>'container', '') || ':' || coalesce(e.attrs->>'reason', ''),
       epoch(e.ts), 'k8s_event', e.artifact
FROM event e
WHERE e.kind = 'k8s_event' AND e.attrs->>'reason' IS NOT NULL AND e.attrs->>'object' IS NOT NULL
"""
"""The moments each tie kind shares, keyed so that two clocks' rows with one key are one happening
(a reason repeated hours apart has several stamps on one clock, and such a moment is dropped there,
see :func:`estimate`)."""

CAPTURE_SPREAD_S = 2.0
"""Hosts' ``date`` outputs whose files one collector stamped within this many seconds of each other
were taken in one capture, on that collector's clock: each host's ``date`` against its file's capture
time is then a tie. A lone ``date`` file's time may be the host's own clock or a later copy's."""
CAPTURE_MAX_S = 3600.0
"""A ``date`` further than this from its capture time is another moment (a file copied later, a
pasted old output), not a skewed clock."""

_CAPTURES = """
SELECT i.host, i.value, epoch(a.captured_at) AS captured
FROM host_inventory i JOIN artifact a ON a.sha256 = i.artifact
WHERE i.key = 'date' AND i.host IS NOT NULL AND a.captured_at IS NOT NULL
"""

_TIMED = ("FROM (SELECT * FROM event WHERE ts IS NOT NULL AND coalesce(ts_origin, '') NOT IN "
          "('derived', 'neighbour')) e")
"""Only rows stamped by a clock: a time the workbench derived (a neighbour's, a snapshot's) ties nothing."""


def ties(con: duckdb.DuckDBPyConnection, reference: frozenset[str] | None = None) -> list[Tie]:
    """Every clock's stamp of every shared moment: a row of a reference artifact is on REFERENCE, any
    other on its host's clock (the rank's host where the row names only a rank)."""
    reference = reference_artifacts(con) if reference is None else reference
    places = rank_places(con)
    out: list[Tie] = []
    query = (f"SELECT host, rank, moment, t, tie, artifact FROM ({_TIES.replace('FROM event e', _TIMED)}) q "
             "WHERE t IS NOT NULL")
    for host, rank, moment, t, kind, artifact in con.execute(query).fetchall():
        if artifact in reference:
            clock = REFERENCE
        else:
            clock = host or (places[rank].host if rank in places else None)
        if clock is not None:
            out.append(Tie(moment=moment, clock=clock, t=float(t), kind=kind))
    return out + capture_ties(con) + oom_ties(con, reference)


OOM_PAIR_S = 180.0
"""A container's ``OOMKilled`` end and a kernel OOM kill in a container's cgroup on its node this close
are paired, when each is the other's only candidate: the runtime records the exit the moment the kernel
kills the process. Wider than any skew worth correcting this way, narrow enough that another
container's kill an hour before is not a candidate."""

_OOM = """
SELECT e.artifact, coalesce(e.attrs->>'node', e.host) AS node, epoch(e.ts) AS t,
       e.kind = 'k8s_event' AS api
FROM event e
WHERE e.ts IS NOT NULL AND ((e.kind = 'k8s_event' AND e.attrs->>'reason' = 'OOMKilled')
   OR (e.kind = 'oom_kill' AND coalesce(e.attrs->>'cgroup', e.attrs->>'oom_cgroup', '') LIKE '%kubepods%'))
"""


def oom_ties(con: duckdb.DuckDBPyConnection, reference: frozenset[str]) -> list[Tie]:
    """A container's OOMKilled end on the API server's clock against the kernel's kill on its node's."""
    api: dict[str, list[float]] = {}
    kernel: dict[str, list[float]] = {}
    for artifact, node, t, is_api in con.execute(_OOM).fetchall():
        if node is None:
            continue
        if is_api and artifact in reference:
            api.setdefault(node, []).append(float(t))
        elif not is_api and artifact not in reference:
            kernel.setdefault(node, []).append(float(t))
    out: list[Tie] = []
    for node, ends in sorted(api.items()):
        kills = sorted(set(kernel.get(node, [])))
        for end in sorted(set(ends)):
            near = [k for k in kills if abs(k - end) <= OOM_PAIR_S]
            if len(near) == 1 and sum(abs(near[0] - e) <= OOM_PAIR_S for e in set(ends)) == 1:
                moment = f"oom:{node}:{end:.0f}"
                out += [Tie(moment=moment, clock=REFERENCE, t=end, kind="oom_exit"),
                        Tie(moment=moment, clock=node, t=near[0], kind="oom_exit")]
    return out


def capture_ties(con: duckdb.DuckDBPyConnection) -> list[Tie]:
    """Each host's ``date`` output against its file's capture time, where one capture took several hosts'
    (CAPTURE_SPREAD_S); a ``date`` printed in whole seconds is read as the middle of that second."""
    found: dict[str, tuple[float, float]] = {}
    for host, value, captured in con.execute(_CAPTURES).fetchall():
        try:
            when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            continue
        when = when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when
        stamp = when.timestamp() + (0.5 if when.microsecond == 0 else 0.0)
        if abs(stamp - float(captured)) <= CAPTURE_MAX_S:
            found[host] = (stamp, float(captured))
    captures = sorted(captured for _, captured in found.values())
    out: list[Tie] = []
    for host, (stamp, captured) in sorted(found.items()):
        together = sum(abs(other - captured) <= CAPTURE_SPREAD_S for other in captures)
        if together >= 2:
            out += [Tie(moment=f"capture:{host}", clock=host, t=stamp, kind="capture_date"),
                    Tie(moment=f"capture:{host}", clock=REFERENCE, t=captured, kind="capture_date")]
    return out
