"""Causal chains: which of two present causes is the root, the links from it to its last consequence,
and the first anomaly as the chain's first link.

The cause catalog declares the direction (``leads_to``: a driver change leads to Fabric Manager
refusing to start, a container's own OOM kill to the restarts that look like missing capacity); the
evidence decides whether the link holds here: the upstream cause came first, at the place of the
downstream one, and was still showing shortly before it (or, for a consequence the catalog says
``accrues`` over the run, such as a time limit, at any time since the incident job began). A change
is the exception to "shortly": an upgrade lies dormant until the next restart or job start, so a
change up to CHANGE_LATENCY_S before the consequence on the same host still links. Without this the
louder line (Fabric Manager's error, the CUDA 802 it causes) outranks the quiet one that caused it
(the dpkg line of the day before).

The first anomaly is what a responder would put at the top of the timeline: the first link's
earliest timed evidence (the change before the first error, the first corrected error that led up
to the fatal one), or an explained symptom's earlier timed line (the slow rank's first step-time
rise before the throttle was ever sampled), never a snapshot's time when a timed line exists, and
never a symptom from outside the chain's own episode (an error days before a bad rollout).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from workbench.analysis.hypotheses import CHANGE_LATENCY_S, SIGNIFICANT, STATE_ORIGINS, Candidate, SymptomGroup
from workbench.times import iso

if TYPE_CHECKING:
    from workbench.analysis.hypotheses import Engine


BORROWED_ORIGINS = frozenset({"neighbour"})
"""Times a line took from another (the timed line before an untimed traceback): a bound, not its time."""


def is_state(row: dict[str, Any]) -> bool:
    """A row that says when a state was seen (a snapshot, a GPU sample), not when it began."""
    return row.get("origin") in STATE_ORIGINS or row.get("kind") == "gpu_sample"


def _carrying(c: Candidate) -> list[dict[str, Any]]:
    """The timed rows that carry the candidate (at least half its peak strength), oldest first."""
    floor = 0.5 * c.peak
    return sorted((r for r in c.rows if r["at"] is not None and r["strength"] >= floor), key=lambda r: r["at"])


def active_before(c: Candidate, when: datetime, horizon_s: float, tolerance_s: float) -> bool:
    """c started before ``when`` and was still showing within the horizon before it, or is a change
    made within CHANGE_LATENCY_S before it (dormant until the next restart); a snapshot state (df,
    ibstat) seen within the horizon after ``when`` may have been true all along."""
    if c.is_state and c.first_seen is not None and 0 <= (c.first_seen - when).total_seconds() <= horizon_s:
        return True
    limit = when + timedelta(seconds=tolerance_s)
    before = [r for r in _carrying(c) if r["at"] <= limit]
    if not before:
        return False
    if (when - before[-1]["at"]).total_seconds() <= horizon_s:
        return True
    return any(r["kind"] == "change" and (when - r["at"]).total_seconds() <= CHANGE_LATENCY_S for r in before)


def same_place(engine: Engine, a: Candidate, b: Candidate) -> bool:
    """b happened where a could cause it: the catalog's place rule, and for a consequence that is the
    whole job's or service's (restarts that look like missing capacity) when its evidence names a's
    host or no host at all."""
    if engine._same_place(a, b):
        return True
    if b.scope != "global" or a.host is None:
        return False
    hosts = {(r.get("host") or "").lower() for r in b.rows if r.get("host")}
    if not hosts or a.host.lower() in hosts:
        return True
    # a job-wide consequence (the time limit of a job a slow GPU paced) named on another host of the job
    job = {h.lower() for h in engine.place.job_hosts}
    return a.host.lower() in job and hosts <= job


def leads(engine: Engine, a: Candidate, b: Candidate) -> bool:
    """The catalog says a leads to b, and the evidence agrees: same place, a first (see module doc)."""
    if b.cause not in engine.causes[a.cause]["leads_to"] or b.peak < SIGNIFICANT or not same_place(engine, a, b):
        return False
    if a.first_seen is None or b.first_seen is None:
        from workbench.analysis.hypotheses import _precedes_in_paste

        return _precedes_in_paste(a, b)
    if active_before(a, b.first_seen, engine.horizon, engine.tolerance):
        return True
    if engine.causes[a.cause].get("lasting"):  # a state that stays true: begun before b is enough
        return active_before(a, b.first_seen, float("inf"), engine.tolerance)
    return bool(engine.causes[b.cause].get("accrues")) and during_run(a, b.first_seen, engine.run_began,
                                                                     engine.tolerance)


def during_run(c: Candidate, when: datetime, began: datetime | None, tolerance_s: float) -> bool:
    """c showed at some time between the incident job's start and ``when``: for a consequence that
    accrues over the whole run (the time limit of a job a hot GPU paced for hours), where the cause's
    latest line lies an hour or more before it."""
    if began is None:
        return False
    slack = timedelta(seconds=tolerance_s)
    return any(began - slack <= r["at"] <= when + slack for r in _carrying(c))


def link(a: Candidate, b: Candidate) -> None:
    """Make b a consequence of a. The consequence's evidence is the root's too, seen downstream: the
    root is at least as certain as what it led to (a quiet dpkg line under a loud Fabric Manager
    error), and the consequence's own score is halved when the candidates are scored."""
    b.consequence_of = a
    a.consequences.append(b)
    a.boost = 1.0 - (1.0 - a.boost) * (1.0 - b.strength)
    a.__dict__.pop("strength", None)


def links(top: Candidate) -> list[Candidate]:
    """The chain's causes: the root, then everything it led to (transitively), each once, in time order."""
    out: list[Candidate] = [top]
    todo = list(top.consequences)
    while todo:
        c = todo.pop(0)
        if all(c is not seen for seen in out):
            out.append(c)
            todo.extend(c.consequences)
    rest = sorted(out[1:], key=lambda c: (c.first_seen is None, c.first_seen or datetime.max, c.cause))
    return [top, *rest]


def explained(top: Candidate, groups: list[SymptomGroup]) -> list[SymptomGroup]:
    """The symptom groups the chain explains (their explainer is the root), earliest first."""
    mine = [g for g in groups if g.explained_by is top]
    return sorted(mine, key=lambda g: (g.first is None, g.first or datetime.max, g.kind))


def first_seen(c: Candidate) -> datetime | None:
    """When a link began: its earliest timed carrying evidence; a snapshot's time only when it has nothing else."""
    rows = _carrying(c)
    timed = [r for r in rows if not is_state(r)]
    return (timed or rows)[0]["at"] if rows else None


def chain_json(top: Candidate, groups: list[SymptomGroup]) -> list[dict[str, Any]]:
    """The ``chain`` of a hypothesis: its causes from the root to the last consequence
    (``{cause, host, first_seen}``), then the symptoms they explain (``{symptom, host, first_seen,
    count}``). One link per cause and per symptom kind: the KV cache of four replicas filling is one
    step of the story; ``host`` is null when the link spans several."""
    out: list[dict[str, Any]] = []
    for c in links(top):
        seen = next((link for link in out if link["cause"] == c.cause), None)
        when = first_seen(c)
        if seen is None:
            out.append({"cause": c.cause, "host": c.host, "first_seen": when})
            continue
        seen["host"] = seen["host"] if seen["host"] == c.host else None
        seen["first_seen"] = min((t for t in (seen["first_seen"], when) if t is not None), default=None)
    kinds: list[dict[str, Any]] = []
    for g in explained(top, groups):
        seen = next((link for link in kinds if link["symptom"] == g.kind), None)
        if seen is None:
            kinds.append({"symptom": g.kind, "host": g.host, "first_seen": g.first, "count": g.count})
            continue
        seen["host"] = seen["host"] if seen["host"] == g.host else None
        seen["first_seen"] = min((t for t in (seen["first_seen"], g.first) if t is not None), default=None)
        seen["count"] += g.count
    return [{**link, "first_seen": iso(link["first_seen"])} for link in out + kinds]


def _at(when: datetime | None) -> str:
    return f" at {iso(when, 'seconds')}" if when else ""


def _link_phrase(same: list[Candidate], causes: dict[str, dict[str, Any]], root: bool) -> str:
    """One link in words (the candidates of one cause): a change is told by its own line (what was
    upgraded from what to what), any other cause by its title; where, and when it began."""
    rows = [r for c in same for r in _carrying(c)]
    change = next((r for r in sorted(rows, key=lambda r: r["at"]) if r["kind"] == "change"), None)
    what = (change.get("text") or "").strip()[:120] if change is not None else ""
    what = what or causes[same[0].cause]["title"]
    if not root and what[1:2].islower():
        what = what[:1].lower() + what[1:]
    hosts = sorted({c.host for c in same if c.host})
    where = f" on {hosts[0]}" if len(hosts) == 1 else f" on {len(hosts)} hosts" if hosts else ""
    starts = [t for t in (first_seen(c) for c in same) if t is not None]
    return f"{what}{where}{_at(min(starts) if starts else None)}"


def chain_sentence(top: Candidate, causes: dict[str, dict[str, Any]], groups: list[SymptomGroup],
                   ranks: list[int], told: str = "") -> str:
    """The chain read aloud: "upgrade nvidia-utils-550 … on node09 at T led to NVIDIA Fabric Manager not
    running on node09 at T2, then job failed on ranks 2, 3"; empty when the chain is the cause alone."""
    by_cause: dict[str, list[Candidate]] = {}
    for c in links(top):
        by_cause.setdefault(c.cause, []).append(c)
    steps = [_link_phrase(same, causes, root=False) for same in list(by_cause.values())[1:]]
    kinds: list[str] = []
    for g in explained(top, groups):
        if g.kind not in kinds:
            kinds.append(g.kind)
    if kinds:
        on = f" on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:8]))}" if ranks else ""
        steps.append(", ".join(k.replace("_", " ") for k in kinds[:4]) + on)
    if not steps:
        return ""
    # the sentence has already named the cause, its place and time (``told``: the line it quotes): only
    # a change it did not quote is told again, by its own line
    change = next((r for r in _carrying(top) if r["kind"] == "change"), None)
    fresh = change is not None and (change.get("text") or "").strip()[:120] not in told
    text = _link_phrase(by_cause[top.cause], causes, root=True) if fresh else "it"
    return f"{text} led to {steps[0]}" + "".join(f", then {s}" for s in steps[1:])


def first_anomaly_rows(top: Candidate, groups: list[SymptomGroup], horizon_s: float) -> list[dict[str, Any]]:
    """The rows the first anomaly is the earliest of (see module doc): the chain's carrying evidence,
    the weaker lines of the same link that led up to it within the horizon (a corrected error before
    the fatal one), the lines of the symptoms it explains within the chain's episode (from a horizon
    before its first evidence; any, for a root seen only in a snapshot), and the symptoms at the
    root's own place in the horizon before it. Of the chain's evidence, the lines with a time of their
    own when there is one (a traceback stamped with the step line before it, ``neighbour``, happened
    some time after that); timed lines only, when there is one."""
    chain = links(top)
    rows = [r for c in chain for r in c.rows if r["strength"] >= SIGNIFICANT and r["at"] is not None]
    if not rows:
        return [r for c in chain for r in c.rows if r["strength"] >= SIGNIFICANT]
    timed = [r for r in rows if not is_state(r)]
    start = min(r["at"] for r in (timed or rows))
    margin = timedelta(seconds=horizon_s)
    precursors = [r for c in chain for r in _lead_up(c, start, horizon_s)]
    # a root seen only in a snapshot began before it was seen: what it explains may be its first sign,
    # however early; a timed root opens its episode (an error days before a rollout is not the rollout's)
    opens = None if top.is_state else start - margin
    symptoms = [r for g in explained(top, groups) for r in g.rows
                if r["at"] is not None and (opens is None or r["at"] >= opens)]
    # what the root's own place showed just before its first evidence (the slow rank's first slow step
    # before its GPU's throttle was ever sampled), explained by it or not
    symptoms += [r for g in groups if g.explained_by is not top and _at_place(top, g) for r in g.rows
                 if r["at"] is not None and start - margin <= r["at"] <= start]
    evidence = rows + precursors
    timed = [r for r in evidence if not is_state(r)]
    own = [r for r in timed if r.get("origin") not in BORROWED_ORIGINS]
    every = (own or timed or evidence) + symptoms
    timed = [r for r in every if not is_state(r)]
    return timed or every


def at_root(top: Candidate, rows: list[dict[str, Any]], first: dict[str, Any], tolerance_s: float) -> dict[str, Any]:
    """Of lines within the clock tolerance of the earliest, the one at the root's own place: the slow
    rank's own step line, not the job-wide drop another rank's clock stamped a second earlier."""
    if first["at"] is None or top.host is None or _here(top, first):
        return first
    near = [r for r in rows if r["at"] is not None and _here(top, r)
            and (r["at"] - first["at"]).total_seconds() <= tolerance_s]
    return min(near, key=lambda r: r["at"]) if near else first


def _here(c: Candidate, row: dict[str, Any]) -> bool:
    host = row.get("host")
    return host is not None and c.host is not None and host.lower() == c.host.lower()


def _at_place(c: Candidate, g: SymptomGroup) -> bool:
    """The symptom group is the candidate's own host (and GPU, for a GPU's cause)."""
    if c.host is None or g.host is None or c.host.lower() != g.host.lower():
        return False
    return c.scope != "gpu" or c.gpu is None or not g.gpus or c.gpu in g.gpus


def _lead_up(c: Candidate, start: datetime, horizon_s: float) -> list[dict[str, Any]]:
    """c's weak timed lines (corrected errors, a first slow step) within the horizon before ``start``:
    the same failure announcing itself. Older ones are background (a corrected AER that was always
    there), not the start of this failure."""
    return [r for r in c.rows if r["at"] is not None and r["strength"] < SIGNIFICANT and r["strength"] > 0
            and not is_state(r) and 0 < (start - r["at"]).total_seconds() <= horizon_s]
