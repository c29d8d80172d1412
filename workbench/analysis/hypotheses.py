"""Root-cause hypotheses from check rows: tell the cause from its symptoms and from the noise.

Rows of the cause checks are grouped per cause and place (a GPU, a host, or the whole job or
service: the cause's ``scope``). The cause catalog's relations then fold the picture together: a
PCIe fatal error and the GPU falling off the bus right after it on the same host are one failure
(``absorbs``); a traffic surge that filled the KV cache is the cause and the KV cache its
consequence (``leads_to``). Each candidate is scored by

* strength: how strongly its evidence points at a root cause (independent checks add up),
* explanatory power: the share of symptoms it explains, by place (same GPU or host as the
  symptom, a host of the same job, the rank that went silent) and by time (it came first, within
  the workload's horizon; a state seen in a snapshot may predate the snapshot),

so the Xid 79 on the failing rank's GPU outranks an earlier Xid 13 from another user's job, and a
corrected AER that was always there or a throttle on an idle GPU stays low. Times are compared
after the per-host clock offsets are applied. Lines without a time (what responders paste into a
ticket) still take part: where a time is missing, the order of lines in a file they share stands in
for it, and a bundle that names no host at all is one machine.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any

import duckdb

from collectors.base import gpu_id
from collectors.framework.hostlist import expand_hostlist as slurm_hostlist
from workbench.analysis.clockskew import offset_of
from workbench.analysis.localisation import PEER_RELATION, PeerResolver, attribute, count_once, reporters
from workbench.query.rank_places import job_nodes, rank_places
from workbench.times import iso

LOW_SCORE = 0.2
"""Below this a hypothesis is background: the engine does not call it a root cause."""
SIGNIFICANT = 0.2
"""Rows weaker than this (corrected AER, an idle GPU's throttle) never join another cause's picture."""
STATE_ORIGINS = frozenset({"captured", "mtime", "snapshot"})
"""Timestamps that say when a state was seen, not when it began."""
SAMPLED_KINDS = frozenset({"gpu_sample", "gpu_throttle"})
"""Readings of a GPU's state at a sample time (nvidia-smi, NVML, DCGM): when it was seen, not when it began."""
NO_SYMPTOM_FACTOR = 0.6
BASE_FIT = 0.15
"""The share of a candidate's strength it keeps when it explains none of the symptoms."""
CHANGE_LATENCY_S = 86_400.0
"""A change can lie dormant until the next restart or job start: a change this long before the rest
of its cause's evidence still belongs to the same episode."""
MAX_EVIDENCE = 12
MAX_SCORED = 200
"""Candidates whose explanatory power is computed: on a big bad night there are thousands."""


@dataclass
class Place:
    """Who ran where (topology) and which GPUs exist: the map symptoms are related on."""

    rank_place: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    job_hosts: set[str] = field(default_factory=set)
    machines: set[str] = field(default_factory=set)
    gpus_in_use: dict[str, set[str]] = field(default_factory=dict)
    known_gpus: dict[str, set[str]] = field(default_factory=dict)
    peers: PeerResolver | None = None
    """Which host an address, GID or ``host:port`` in a line belongs to (workbench/analysis/localisation.py)."""
    pod_nodes: dict[str, str] = field(default_factory=dict)
    """A pod (or serving instance) seen by name, e.g. in metrics, -> the one node it ran on, as Kubernetes
    events (the kubelet's ``source.host``, the scheduler's assignment) or its log kept under a host's
    folder say: a pod's evidence is its node's, not a place of its own."""
    task_lines: dict[tuple[str, int], tuple[str, str | None]] = field(default_factory=dict)
    """(artifact, line) -> host and GPU of a line printed under a per-node launcher's ``srun -l`` task
    that names no rank (a traceback, a CUDA error): the task's node, the local rank's GPU on it."""

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> Place:
        place = cls()
        for host, gpu in con.execute("SELECT DISTINCT host, gpu FROM topology WHERE host IS NOT NULL").fetchall():
            place.job_hosts.add(host)
            if gpu:
                place.gpus_in_use.setdefault(host, set()).add(gpu_id(gpu))
        places = rank_places(con)
        for rank, where in places.items():
            place.rank_place[rank] = (where.host, gpu_id(where.gpu))
            if where.host:
                place.job_hosts.add(where.host)
                if where.gpu:
                    place.gpus_in_use.setdefault(where.host, set()).add(gpu_id(where.gpu))
        place.job_hosts |= set(job_nodes(con, None) or ())  # the scheduler's node list, when no rank map names them
        place.machines = {r[0] for r in con.execute(
            "SELECT DISTINCT host FROM event WHERE host IS NOT NULL AND coalesce(ts_origin, '') <> 'derived' "
            "UNION SELECT DISTINCT host FROM gpu_sample WHERE host IS NOT NULL "
            "UNION SELECT DISTINCT host FROM host_inventory WHERE host IS NOT NULL").fetchall()}
        place.machines |= place.job_hosts
        for host, gpu in con.execute(
                "SELECT DISTINCT host, gpu FROM gpu_inventory WHERE gpu IS NOT NULL UNION "
                "SELECT DISTINCT host, gpu FROM gpu_sample WHERE gpu IS NOT NULL UNION "
                "SELECT DISTINCT host, gpu FROM topology WHERE gpu IS NOT NULL").fetchall():
            place.known_gpus.setdefault(host or "", set()).add(gpu_id(gpu))
        place.peers = PeerResolver.of(con, place.machines, place.job_hosts)
        place.task_lines = _task_lines(con, places)
        place.pod_nodes = _pod_nodes(con, place.machines)
        return place

    def ranks_at(self, host: str | None, gpu: str | None) -> list[int]:
        return sorted(r for r, (h, g) in self.rank_place.items()
                      if h == host and (gpu is None or g == gpu))


def _pod_nodes(con: duckdb.DuckDBPyConnection, machines: set[str]) -> dict[str, str]:
    """Pod -> node, where the evidence names exactly one node for it: Kubernetes events about the pod
    (``Pod/NAME`` with the node the kubelet or scheduler reported), and a log file named after the pod
    collected from a host (``hgx05/logs/vllm-…-jpj2q.log``). Names that are machines themselves are not
    pods."""
    seen: dict[str, set[str]] = {}
    for obj, node in con.execute(
            "SELECT DISTINCT attrs->>'object', coalesce(attrs->>'node', host) FROM event WHERE kind = 'k8s_event' "
            "AND (attrs->>'object') LIKE 'Pod/%' AND coalesce(attrs->>'node', host) IS NOT NULL").fetchall():
        seen.setdefault(obj.split("/", 1)[1], set()).add(node)
    for source, host in con.execute(
            "SELECT DISTINCT source, host FROM artifact WHERE host IS NOT NULL AND source IS NOT NULL").fetchall():
        name = source.replace("\\", "/").rsplit("/", 1)[-1]
        stem = name.split(".log", 1)[0] if ".log" in name else ""
        if stem and stem != host and "-" in stem:
            seen.setdefault(stem, set()).add(host)
    return {pod: next(iter(nodes)) for pod, nodes in seen.items()
            if len(nodes) == 1 and pod not in machines and next(iter(nodes)) in machines}


def _task_lines(con: duckdb.DuckDBPyConnection,
                places: dict[int, Any]) -> dict[tuple[str, int], tuple[str, str | None]]:
    """Lines under a per-node launcher's task with no host or rank of their own, placed on the task's
    node (the job's node list in order, workbench/query/rank_places.py) and on the GPU of the rank with
    that local rank there, where the ranks' places say which."""
    rows = con.execute(
        "SELECT artifact, line, job, TRY_CAST(attrs->>'launcher_task' AS INTEGER), "
        "TRY_CAST(attrs->>'local_rank' AS INTEGER) FROM event WHERE host IS NULL AND rank IS NULL "
        "AND (attrs->>'launcher_task') IS NOT NULL AND artifact IS NOT NULL AND line IS NOT NULL").fetchall()
    if not rows:
        return {}
    gpu_of: dict[tuple[str, int], set[str]] = {}
    for where in places.values():
        if where.host and where.device is not None and where.gpu:
            gpu_of.setdefault((where.host, where.device), set()).add(gpu_id(where.gpu))
    nodes_of: dict[str | None, list[str] | None] = {}
    out: dict[tuple[str, int], tuple[str, str | None]] = {}
    for artifact, line, job, task, local in rows:
        if job not in nodes_of:
            nodes_of[job] = (job_nodes(con, {job}) if job else None) or job_nodes(con, None)
        nodes = nodes_of[job]
        if task is None or not nodes or not 0 <= task < len(nodes):
            continue
        host = nodes[task]
        gpus = gpu_of.get((host, local)) if local is not None else None
        out[(artifact, line)] = (host, next(iter(gpus)) if gpus and len(gpus) == 1 else None)
    return out


@dataclass
class SymptomGroup:
    """One symptom kind on one host (or, without a host, for one set of nodes): what a cause has to
    explain. Ranks and GPUs of the host are kept together: a thousand ranks' timeouts are a hundred
    hosts' worth of explaining, not a thousand."""

    kind: str
    host: str | None
    nodes: frozenset[str]
    rows: list[dict[str, Any]]
    first: datetime | None
    gpus: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    count: int = 0
    explained_by: Candidate | None = None


@dataclass
class Candidate:
    """One possible root cause at one place, with its evidence and what it explains."""

    cause: str
    layer: str
    scope: str
    host: str | None
    gpu: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    absorbed: list[str] = field(default_factory=list)
    consequences: list[Candidate] = field(default_factory=list)
    consequence_of: Candidate | None = None
    dropped: bool = False
    boost: float = 0.0
    fit: dict[int, float] = field(default_factory=dict)
    explain: float = 0.0
    score: float = 0.0

    def touch(self) -> None:
        """Forget the derived values after the rows or the boost changed."""
        for name in ("strength", "peak", "significant_times", "first_seen", "is_state"):
            self.__dict__.pop(name, None)

    @cached_property
    def strength(self) -> float:
        """Noisy-OR over checks: independent checks agreeing make a cause more certain."""
        best: dict[str, float] = {}
        for row in self.rows:
            best[row["check"]] = max(best.get(row["check"], 0.0), row["strength"])
        miss = 1.0 - self.boost
        for value in best.values():
            miss *= 1.0 - value
        return 1.0 - miss

    @cached_property
    def peak(self) -> float:
        return max((r["strength"] for r in self.rows), default=0.0)

    @cached_property
    def significant_times(self) -> list[datetime]:
        """Times of the evidence that carries the candidate (at least half its peak strength), sorted:
        weak early rows (background noise) do not move it."""
        floor = 0.5 * self.peak
        return sorted(r["at"] for r in self.rows if r["at"] is not None and r["strength"] >= floor)

    @cached_property
    def first_seen(self) -> datetime | None:
        times = self.significant_times
        return times[0] if times else None

    @cached_property
    def is_state(self) -> bool:
        """All evidence is snapshot state (nvidia-smi -q, ibstat): seen then, possibly true before. A GPU's
        readings taken at one moment (a throttle in the one nvidia-smi -q of the bundle, stamped by its
        own header) are that too; a series of samples is not: the sample before bounds the start."""
        if not self.rows:
            return False
        if all(r.get("origin") in STATE_ORIGINS or r["kind"] == "gpu_sample" for r in self.rows):
            return True
        return (all(r["kind"] in SAMPLED_KINDS for r in self.rows)
                and len({r["at"] for r in self.rows if r["at"] is not None}) <= 1)


def expand_hostlist(text: str | None) -> frozenset[str]:
    """A symptom row's ``nodes``: a JSON list of names (a job event's attrs) or a Slurm host list."""
    if not text:
        return frozenset()
    text = text.strip()
    if text.startswith("["):
        try:
            names = json.loads(text)
        except ValueError:
            return frozenset()
        return frozenset(str(x) for x in names) if isinstance(names, list) else frozenset()
    return frozenset(slurm_hostlist(text))


class Engine:
    """Turns evaluated checks and symptom rows into ranked candidates."""

    def __init__(self, place: Place, offsets: dict[str, float], causes: dict[str, dict[str, Any]],
                 horizon_s: float, tolerance_s: float) -> None:
        self.place = place
        self.offsets = offsets
        self.causes = causes
        self.horizon = horizon_s
        self.tolerance = tolerance_s
        self.run_began: datetime | None = None
        """When the incident job's run began (IncidentFocus.began): a consequence that accrues over the
        whole run (a time limit) may have been caused by anything seen since then."""
        self._reporter_cache: dict[tuple[int, int], set[str]] = {}

    # -- rows --------------------------------------------------------------------------------
    def locate(self, row: dict[str, Any]) -> dict[str, Any]:
        """Fill host/GPU from the rank's topology and put the time on the consensus clock."""
        rank = row.get("rank")
        if rank is not None and rank in self.place.rank_place:
            host, gpu = self.place.rank_place[rank]
            if row.get("host") in (None, host):
                row["host"] = row.get("host") or host
                row["gpu"] = row.get("gpu") or gpu
        elif row.get("host") is None and rank is None and self.place.task_lines:
            host, gpu = self.place.task_lines.get((row.get("artifact"), row.get("line")), (None, None))
            if host:
                row["host"], row["gpu"] = host, row.get("gpu") or gpu
        node = self.place.pod_nodes.get(row.get("host") or "") if self.place.pod_nodes else None
        if node:
            row["host"] = node
        if row.get("gpu"):
            row["gpu"] = gpu_id(row["gpu"])
        ts = row.get("ts")
        row["at"] = ts - timedelta(seconds=offset_of(self.offsets, row)) if ts else None
        return row

    def group_symptoms(self, rows: list[dict[str, Any]]) -> list[SymptomGroup]:
        groups: dict[tuple, SymptomGroup] = {}
        for row in rows:
            self.locate(row)
            nodes = expand_hostlist(row.get("nodes")) if row["host"] is None else frozenset()
            key = (row["kind"], row["host"], nodes)
            group = groups.get(key)
            if group is None:
                group = groups[key] = SymptomGroup(kind=row["kind"], host=row["host"], nodes=nodes, rows=[],
                                                   first=None)
            group.rows.append(row)
            group.count += 1
            if row["gpu"]:
                group.gpus.add(row["gpu"])
            if row["rank"] is not None:
                group.ranks.add(row["rank"])
            if row["at"] is not None and (group.first is None or row["at"] < group.first):
                group.first = row["at"]
        return sorted(groups.values(), key=lambda g: (g.first is None, g.first or datetime.min, g.kind))

    def candidates(self, rows: list[dict[str, Any]]) -> list[Candidate]:
        found: dict[tuple, Candidate] = {}
        for row in rows:
            self.locate(row)
            entry = self.causes[row["cause"]]
            scope = entry["scope"]
            if scope in ("gpu", "host"):
                row = attribute(row, self.place.peers)  # a line about a peer counts on the peer
            host = row["host"] if scope in ("gpu", "host") else None
            gpu = row["gpu"] if scope == "gpu" else None
            key = (row["cause"], host, gpu)
            cand = found.get(key)
            if cand is None:
                cand = found[key] = Candidate(cause=row["cause"], layer=entry["layer"], scope=scope, host=host,
                                              gpu=gpu)
            cand.rows.append(row)
        for cand in found.values():
            count_once(cand.rows)
        self._fold_gpuless(found)
        self._fold_hostless(found)
        out = [episode for cand in found.values() for episode in self._episodes(cand)]
        for cand in out:
            if cand.scope == "global":
                hosts = {r["host"] for r in cand.rows}
                cand.host = next(iter(hosts)) if len(hosts) == 1 else None
        return out

    def _episodes(self, cand: Candidate) -> list[Candidate]:
        """Split a candidate where its evidence pauses for longer than the horizon: a deploy two days
        ago and the one an hour ago are two candidates, judged each on its own timing. A stretch of
        changes only joins the evidence after it when that follows within CHANGE_LATENCY_S."""
        rows = sorted(cand.rows, key=lambda r: (r["at"] is None, r["at"] or datetime.min))
        groups: list[list[dict[str, Any]]] = []
        last: datetime | None = None
        for row in rows:
            at = row["at"]
            if groups and at is not None and last is not None:
                gap = (at - last).total_seconds()
                dormant = all(r["kind"] == "change" for r in groups[-1]) and gap <= CHANGE_LATENCY_S
                if gap > self.horizon and not dormant:
                    groups.append([])
            if not groups:
                groups.append([])
            groups[-1].append(row)
            last = at or last
        if len(groups) == 1:
            return [cand]
        return [Candidate(cause=cand.cause, layer=cand.layer, scope=cand.scope, host=cand.host, gpu=cand.gpu,
                          rows=group) for group in groups]

    def _fold_gpuless(self, found: dict[tuple, Candidate]) -> None:
        """A GPU-scoped row without a GPU (a CUDA error with no rank map, a UUID no reading ties to a bus id)
        joins the one GPU candidate of the same cause on its host, when there is exactly one. Without
        a host, only when no row of the bundle names one (a paste from one machine)."""
        hostless = not self.place.machines
        for key, cand in list(found.items()):
            cause, host, gpu = key
            if cand.scope != "gpu" or gpu is not None or (host is None and not hostless):
                continue
            siblings = [c for (k_cause, k_host, k_gpu), c in found.items()
                        if k_cause == cause and k_host == host and k_gpu is not None]
            if len(siblings) == 1:
                siblings[0].rows.extend(cand.rows)
                siblings[0].touch()
                del found[key]

    @staticmethod
    def _fold_hostless(found: dict[tuple, Candidate]) -> None:
        """A host-scoped row without a host (slurmstepd's "Detected 1 oom-kill event(s) in step ...",
        which names no node) joins the one candidate of the same cause that has a host, when there is
        exactly one: the same failure, now with its place."""
        for key, cand in list(found.items()):
            cause, host, _ = key
            if cand.scope != "host" or host is not None:
                continue
            siblings = [c for (k_cause, k_host, _), c in found.items() if k_cause == cause and k_host is not None]
            if len(siblings) == 1:
                siblings[0].rows.extend(cand.rows)
                siblings[0].touch()
                del found[key]

    # -- relations ---------------------------------------------------------------------------
    def _same_place(self, a: Candidate, b: Candidate) -> bool:
        if a.scope == "global":
            return True
        if not _same_host(a.host, b.host):
            return False
        if a.gpu and b.gpu and a.gpu != b.gpu:
            known = self.place.known_gpus.get(a.host or "", set())
            return a.gpu not in known or b.gpu not in known
        return True

    def _close(self, a: Candidate, b: Candidate) -> bool:
        if a.first_seen is None or b.first_seen is None:
            return True
        return abs((b.first_seen - a.first_seen).total_seconds()) <= self.horizon

    def fold(self, cands: list[Candidate]) -> None:
        """Apply the catalog: absorb parts of the same failure, then link causes to consequences
        (workbench/analysis/chains.py decides each link: direction, place, time order)."""
        from workbench.analysis import chains  # chains reads this module's types: imported when used
        for a in sorted(cands, key=lambda c: -c.strength):
            if a.dropped:
                continue
            for b in cands:
                if b is a or b.dropped or b.cause not in self.causes[a.cause]["absorbs"]:
                    continue
                strong = [r for r in b.rows if r["strength"] >= SIGNIFICANT]
                if strong and b.strength <= a.strength and self._same_place(a, b) and self._close(a, b):
                    a.rows.extend(strong)
                    a.absorbed.append(b.cause)
                    b.rows = [r for r in b.rows if r["strength"] < SIGNIFICANT]
                    b.dropped = not b.rows
                    a.touch()
                    b.touch()
        live = [c for c in cands if not c.dropped and c.rows]
        for a in sorted(live, key=lambda c: (c.first_seen is None, c.first_seen or datetime.min)):
            if a.peak < SIGNIFICANT:
                continue  # background (a few old symbol errors) leads nowhere: it would steal the cause it "led to"
            for b in live:
                if b is a or b.consequence_of is not None or b.cause not in self.causes[a.cause]["leads_to"]:
                    continue
                if _descends(a, b) or not chains.leads(self, a, b):
                    continue
                chains.link(a, b)

    # -- scoring -----------------------------------------------------------------------------
    def relation(self, c: Candidate, g: SymptomGroup) -> float:
        """How plausibly a cause at c's place reaches a symptom at g's place (0..1)."""
        if c.scope == "global":
            return 0.8
        if c.host is None:
            # nothing in the bundle names a host: one machine's paste, where everything is local
            return 1.0 if g.host is None and not g.nodes and not self.place.machines else 0.5
        if g.host is None:
            if g.nodes:
                r = 0.7 if c.host in g.nodes else 0.0
            else:
                r = 0.5
        elif _same_host(g.host, c.host):
            r = 0.8 if (c.gpu and g.gpus and c.gpu not in g.gpus) else 1.0
        elif g.host in self._reporters(c):
            r = PEER_RELATION  # the symptom's host reported the failure against c's host
        elif c.host in self.place.job_hosts and g.host in self.place.job_hosts:
            r = 0.6
        elif g.host not in self.place.machines:
            r = 0.5  # a serving instance or pod seen only in metrics: which node it ran on is unknown
        else:
            r = 0.0
        in_use = self.place.gpus_in_use.get(c.host)
        if c.scope == "gpu" and c.gpu and in_use and c.gpu not in in_use:
            r *= 0.3
        return r

    def _reporters(self, c: Candidate) -> set[str]:
        """The hosts that reported c's failure against c's host (cached per candidate and row count)."""
        key = (id(c), len(c.rows))
        if key not in self._reporter_cache:
            self._reporter_cache[key] = reporters(c.rows)
        return self._reporter_cache[key]

    def timing(self, c: Candidate, g: SymptomGroup) -> float:
        """1 when the cause was active shortly before the symptom (its latest significant evidence
        before it lies within the horizon, or at any time before it for a cause the catalog calls
        ``lasting``); decays when that evidence is older; low when all of it came after the symptom,
        unless it is snapshot state that may have been true before."""
        times = c.significant_times
        if not times or g.first is None:
            return _paste_order(c.rows, g.rows)
        n = bisect.bisect_right(times, g.first + timedelta(seconds=self.tolerance))
        if n == 0:
            return 0.6 if c.is_state else 0.1
        lag = (g.first - times[n - 1]).total_seconds()
        if lag <= self.horizon or self.causes[c.cause].get("lasting"):
            return 1.0  # a lasting state (Fabric Manager down) seen hours ago is still true now
        return math.exp(-(lag - self.horizon) / self.horizon)

    def score(self, cands: list[Candidate], groups: list[SymptomGroup], locators: list[dict[str, Any]]) -> None:
        """Explanatory power for the candidates that could matter (strength of LOW_SCORE or more, the
        strongest MAX_SCORED of them); the rest keep BASE_FIT of their strength, which is below
        LOW_SCORE anyway."""
        contenders = sorted((c for c in cands if c.strength >= LOW_SCORE), key=lambda c: -c.strength)[:MAX_SCORED]
        chosen = {id(c) for c in contenders}
        for c in cands:
            c.fit = {i: self.relation(c, g) * self.timing(c, g) for i, g in enumerate(groups)} \
                if id(c) in chosen else {}
        for c in cands:
            for b in _downstream(c):
                for i, value in b.fit.items():
                    c.fit[i] = max(c.fit.get(i, 0.0), value)
        for c in cands:
            explain = sum(c.fit.values()) / len(groups) if groups else 0.0
            explain += self._locator_bonus(c, locators)
            c.explain = min(1.0, explain)
            if groups:
                c.score = c.strength * (BASE_FIT + (1.0 - BASE_FIT) * c.explain)
            else:
                c.score = c.strength * NO_SYMPTOM_FACTOR
            if c.consequence_of is not None:
                c.score *= 0.5
        scored = [c for c in cands if c.fit]
        for i, g in enumerate(groups):
            best = max(scored, key=lambda c: (c.fit.get(i, 0.0) * c.score, -id(c)), default=None)
            if best is not None and best.fit.get(i, 0.0) >= 0.3 and best.score >= LOW_SCORE:
                root = best
                while root.consequence_of is not None:
                    root = root.consequence_of
                g.explained_by = root

    def _locator_bonus(self, c: Candidate, locators: list[dict[str, Any]]) -> float:
        """The rank that went silent first marks where the failure started."""
        bonus = 0.0
        for loc in locators:
            if c.host is None or not _same_host(loc["host"], c.host):
                continue
            if c.scope != "gpu" or c.gpu is None or loc["gpu"] is None or loc["gpu"] == c.gpu:
                bonus = max(bonus, 0.3)
            else:
                bonus = max(bonus, 0.1)
        return bonus

    def rank(self, rows: list[dict[str, Any]], symptoms: list[dict[str, Any]],
             locators: list[dict[str, Any]]) -> tuple[list[Candidate], list[SymptomGroup]]:
        """Candidates best first (score, then earliest), and the symptom groups with their explainer."""
        for loc in locators:
            self.locate(loc)
        cands = self.candidates(rows)
        self.fold(cands)
        live = [c for c in cands if not c.dropped and c.rows]
        groups = self.group_symptoms(symptoms)
        self.score(live, groups, locators)
        live.sort(key=lambda c: (-round(c.score, 6), c.first_seen is None, c.first_seen or datetime.min, c.cause))
        return live, groups


def _precedes_in_paste(a: Candidate, b: Candidate) -> bool:
    """One of the candidates has no time (a pasted excerpt, a log without timestamps): the order of
    the lines in a file they share is the order of events, so a's first line after b's first line in
    every file they share says a did not come first. Without a shared file, nothing contradicts the
    catalog's direction (a leads to b) when neither has any time at all."""
    first_a = _first_lines(a)
    first_b = _first_lines(b)
    shared = first_a.keys() & first_b.keys()
    if shared:
        return any(first_a[art] < first_b[art] for art in shared)
    return all(r["at"] is None for r in a.rows + b.rows)


def _same_host(a: str | None, b: str | None) -> bool:
    """Host names are case-insensitive: srun prints ``Orion-01-01`` where slurmstepd prints
    ``orion-01-01`` for the same node."""
    return a == b or (a is not None and b is not None and a.lower() == b.lower())


def _paste_order(cause_rows: list[dict[str, Any]], symptom_rows: list[dict[str, Any]]) -> float:
    """Timing when the cause or the symptom has no time: in a file they share, the cause's line before
    the symptom's is the order a log is written in (1.0), after it is unlikely (0.3); no shared file
    says nothing (0.5)."""
    cause = _first_line_of(cause_rows)
    symptom = _first_line_of(symptom_rows)
    shared = cause.keys() & symptom.keys()
    if not shared:
        return 0.5
    return 1.0 if any(cause[art] <= symptom[art] for art in shared) else 0.3


def _first_lines(c: Candidate) -> dict[str, int]:
    return _first_line_of(c.rows)


def _first_line_of(rows: list[dict[str, Any]]) -> dict[str, int]:
    first: dict[str, int] = {}
    for r in rows:
        if r.get("artifact") is not None and r.get("line") is not None:
            first[r["artifact"]] = min(first.get(r["artifact"], r["line"]), r["line"])
    return first


def _descends(a: Candidate, b: Candidate) -> bool:
    """a is (transitively) a consequence of b: linking b under a would make a cycle."""
    up = a.consequence_of
    while up is not None:
        if up is b:
            return True
        up = up.consequence_of
    return False


def _downstream(c: Candidate) -> list[Candidate]:
    out: list[Candidate] = []
    todo = list(c.consequences)
    while todo:
        b = todo.pop()
        out.append(b)
        todo.extend(b.consequences)
    return out


def describe(c: Candidate, causes: dict[str, dict[str, Any]], groups: list[SymptomGroup],
             ranks: list[int]) -> str:
    """One sentence a responder can read aloud: the cause, where and when, its strongest line, and the
    chain from it to what the users saw."""
    from workbench.analysis import chains  # chains reads this module's types: imported when used

    if c.host:
        where = c.host + (f" GPU {c.gpu}" if c.gpu else "")
    elif c.gpu:
        where = f"GPU {c.gpu}"
    else:
        where = "the whole job/service" if c.scope == "global" else "a host the evidence does not name"
    if ranks:
        where += f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:8]))}" \
                 f"{'…' if len(ranks) > 8 else ''})"
    strongest = max(c.rows, key=lambda r: (r["strength"], -(r["at"] or datetime.max).timestamp()))
    text = (strongest.get("text") or strongest.get("kind") or "").strip()
    mine = [g for g in groups if g.explained_by is c]
    kinds = Counter(g.kind for g in mine)
    parts = [f"{causes[c.cause]['title']} on {where}"]
    if c.first_seen:
        parts.append(f"first seen {iso(c.first_seen, 'seconds')}")
    sentence = ", ".join(parts) + f": {text[:160]}"
    if c.absorbed:
        sentence += f" (with {', '.join(sorted(set(c.absorbed)))} at the same place)"
    chain = chains.chain_sentence(c, causes, groups, ranks, told=text[:160])
    if chain:
        sentence += f"; {chain}"
    if mine:
        sentence += "; explains " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    return sentence
