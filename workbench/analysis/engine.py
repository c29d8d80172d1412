"""``analyze``: the playbook walk over a bundle, as the analyze JSON object of docs/cli.md.

Decide the workload, evaluate every check of its playbook into per-layer verdicts, rank the
candidate root causes (workbench/analysis/hypotheses.py) and name the first anomaly of the winning chain.
The CLI, the TUI and the report all call ``analyze`` so they cannot disagree.

Beyond the first design's keys the object carries: ``impact`` (failure, degradation or none, from the
symptoms), ``playbook`` (workload and title), ``workload_signals``,
``clock_offsets`` (host -> seconds subtracted from its times), ``stage0`` and ``recover`` (the
playbook's steps with what the bundle says about them), ``checks`` (every check with its
question, why, verdict and row count), ``symptoms`` (symptom groups and the cause that explains
each) and ``layer_focus``. Hypotheses carry, besides the first design's fields, ``consequences`` (downstream
causes it led to, e.g. kv_cache_pressure after a traffic surge), ``chain`` (the root, its consequences
and the symptoms they explain, in order: workbench/analysis/chains.py), ``absorbed`` (causes folded into
it at the same place, e.g. the PCIe error before an Xid 79), ``explains`` (how many symptom groups
it explains, its strength and explanatory power) and ``symptom_evidence`` (the earliest lines of each
symptom group it explains, with the symptom ``kind`` and the group's ``count``: what the report quotes).
``confidence`` is the first hypothesis' calibrated confidence (workbench/analysis/confidence.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa

from collectors.framework.vocabulary import LAYERS, SYMPTOMS, VERDICTS
from workbench.analysis import chains
from workbench.analysis.causes import load_causes
from workbench.analysis.clockskew import estimate_offsets
from workbench.analysis.confidence import confidence
from workbench.analysis.hypotheses import (
    LOW_SCORE,
    MAX_EVIDENCE,
    SIGNIFICANT,
    STATE_ORIGINS,
    Candidate,
    Engine,
    Place,
    describe,
)
from workbench.analysis.incident_focus import IncidentFocus, artifact_jobs
from workbench.analysis.playbook import (
    CheckResult,
    Playbook,
    Presence,
    evaluate_check,
    evaluate_step,
    load_playbook,
    prepare,
    run_rows,
)
from workbench.analysis.workload import detect_workload
from workbench.store.bundle import Bundle
from workbench.times import iso

MAX_HYPOTHESES = 10
PER_CAUSE_LISTED = 4
"""Hypotheses of one cause listed at most: a fleet's thousand hosts showing the same noise would fill the
list; the others are counted on the last one listed (``more_places``)."""
TOP_FAULT = 0.35
"""A top hypothesis this strong makes the checks behind it a fault in their layer."""
MIN_LISTED = 0.02
_ORDER = {verdict: n for n, verdict in enumerate(reversed(VERDICTS))}


def analyze(bundle: Bundle, workload: str | None = None) -> dict[str, Any]:
    """The whole analysis of one bundle; ``workload`` overrides the detected one."""
    con = bundle.con
    prepare(con)
    detected, signals = detect_workload(con)
    playbook = load_playbook(workload or detected)
    presence = Presence.of(con)
    offsets = estimate_offsets(con)
    causes = load_causes()
    results = [evaluate_check(con, check, presence) for check in playbook.checks()]
    _mark_origins(con, results)
    symptom_rows, _ = run_rows(con, playbook.symptoms_sql, {}, group_by=("kind", "host", "gpu", "rank"))
    focus = IncidentFocus.of(symptom_rows, playbook.params["horizon_s"], artifact_jobs(con)).read_records(con)
    symptom_rows = focus.own(symptom_rows)
    place = Place.of(con)
    place.job_hosts |= focus.hosts  # the scheduler's node list says where the job ran, with no NCCL INFO
    engine = Engine(place, offsets, causes, playbook.params["horizon_s"], playbook.params["tolerance_s"])
    engine.run_began = focus.began
    cause_rows = focus.weigh([r for res in results if res.check.role == "cause" for r in res.rows])
    locators = [r for res in results if res.check.role == "locator" for r in res.rows]
    ranked, groups = engine.rank(cause_rows, symptom_rows, locators)
    listed, folded = _per_cause([c for c in ranked if c.score >= MIN_LISTED])
    hypotheses = [_hypothesis(n, c, causes, groups, engine) for n, c in enumerate(listed, start=1)]
    for h in reversed(hypotheses):  # the count goes on the last one listed of its cause
        if folded.get(h["cause"]):
            h["more_places"] = folded.pop(h["cause"])
    top = ranked[0] if ranked and ranked[0].score >= LOW_SCORE else None
    window = _window(con, top, groups, playbook.params["horizon_s"])
    return {
        "workload": playbook.workload if workload else detected,
        "impact": _impact(groups),
        "window": {"start": iso(window[0]), "end": iso(window[1])},
        "first_anomaly": _first_anomaly(top, results, groups, window, playbook.params["horizon_s"],
                                        playbook.params["tolerance_s"]),
        "hypotheses": hypotheses,
        "confidence": confidence(hypotheses),
        "layers": _layers(playbook, results, ranked, groups),
        "playbook": {"workload": playbook.workload, "title": playbook.title},
        "workload_signals": signals,
        "clock_offsets": offsets,
        "stage0": [evaluate_step(con, step) for step in playbook.stage0],
        "recover": _recover(playbook, top, causes),
        "checks": [_check_json(res) for res in results],
        "symptoms": [_symptom_json(g) for g in groups],
        "layer_focus": {plan.layer: plan.focus for plan in playbook.layers},
    }


FAILURE_SYMPTOMS = frozenset(kind for kind, (impact, _) in SYMPTOMS.items() if impact == "failure")
DEGRADATION_SYMPTOMS = frozenset(kind for kind, (impact, _) in SYMPTOMS.items() if impact == "degradation")


def _impact(groups: list) -> str:
    """"failure" (jobs or requests failed) and "degradation" (slow but working) take different
    paths through the playbook: a failure starts from the rank or request that broke first, a
    degradation from what is slowing everyone (throttling, queueing, memory watermark)."""
    kinds = {g.kind for g in groups}
    if kinds & FAILURE_SYMPTOMS:
        return "failure"
    if kinds & DEGRADATION_SYMPTOMS:
        return "degradation"
    return "none"


def _mark_origins(con: duckdb.DuckDBPyConnection, results: list[CheckResult]) -> None:
    """Attach each evidence row's ts_origin (snapshot state vs timed line) from the event table."""
    keys = {(r["artifact"], r["line"]) for res in results for r in res.rows
            if r["artifact"] is not None and r["line"] is not None}
    if not keys:
        return
    ordered = sorted(keys)
    table = pa.table({"artifact": pa.array([k[0] for k in ordered], pa.string()),
                      "line": pa.array([k[1] for k in ordered], pa.int64())})
    con.register("_evidence_keys", table)
    try:
        origins = {(a, line): o for a, line, o in con.execute(
            "SELECT e.artifact, e.line, any_value(e.ts_origin) FROM event e JOIN _evidence_keys k "
            "ON e.artifact = k.artifact AND e.line = k.line GROUP BY e.artifact, e.line").fetchall()}
    finally:
        con.unregister("_evidence_keys")
    for res in results:
        for row in res.rows:
            row["origin"] = origins.get((row["artifact"], row["line"]))


def _window(con: duckdb.DuckDBPyConnection, top: Candidate | None, groups: list,
            horizon_s: float) -> tuple[datetime | None, datetime | None]:
    """The stretch of time the incident covers: the winning chain's evidence and the symptoms it
    explains (without a winner, every symptom), widened by the playbook's horizon and kept within the
    evidence; all of the evidence when nothing is anomalous. Boot lines days before the failure do
    not open it."""
    start, end = con.execute("SELECT min(ts), max(ts) FROM event WHERE ts IS NOT NULL").fetchall()[0]
    moments = _incident_moments(top, groups)
    if moments and start is not None and end is not None:
        margin = timedelta(seconds=horizon_s)
        lo, hi = max(start, min(moments) - margin), min(end, max(moments) + margin)
        if lo <= hi:
            start, end = lo, hi
    return start, end


def _incident_moments(top: Candidate | None, groups: list) -> list[datetime]:
    if top is None:
        return [g.first for g in groups if g.first is not None]
    rows = [r for c in [top, *_consequences(top)] for r in c.rows
            if r["strength"] >= SIGNIFICANT and r["at"] is not None and not _is_state(r)]
    return [r["at"] for r in rows] + [g.first for g in groups if g.explained_by is top and g.first is not None]


def _evidence(row: dict[str, Any]) -> dict[str, Any]:
    return {"source": row.get("source") or row.get("check"), "ts": iso(row.get("ts")), "host": row.get("host"),
            "text": (row.get("text") or row.get("kind") or "")[:400], "artifact": row.get("artifact"),
            "line": row.get("line"), **({"reported_by": row["reported_by"]} if row.get("reported_by") else {})}


def _pick_evidence(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The strongest lines and the earliest ones, in time order, each line once."""
    by_strength = sorted(rows, key=lambda r: (-r["strength"], r["at"] or datetime.max))
    by_time = sorted(rows, key=lambda r: (r["at"] is None, r["at"] or datetime.max))
    chosen: list[dict[str, Any]] = []
    seen: set[tuple] = set()
    for row in by_time[:4] + by_strength:
        key = (row.get("artifact"), row.get("line"), row.get("text"))
        if key in seen:
            continue
        seen.add(key)
        chosen.append(row)
        if len(chosen) >= MAX_EVIDENCE:
            break
    chosen.sort(key=lambda r: (r["at"] is None, r["at"] or datetime.max))
    return [_evidence(r) for r in chosen]


def _per_cause(candidates: list[Candidate]) -> tuple[list[Candidate], dict[str, int]]:
    """The best MAX_HYPOTHESES with at most PER_CAUSE_LISTED of one cause, and how many of each cause
    were left out that way."""
    kept: list[Candidate] = []
    seen: dict[str, int] = {}
    folded: dict[str, int] = {}
    for c in candidates:
        if seen.get(c.cause, 0) < PER_CAUSE_LISTED:
            seen[c.cause] = seen.get(c.cause, 0) + 1
            kept.append(c)
        else:
            folded[c.cause] = folded.get(c.cause, 0) + 1
    kept = kept[:MAX_HYPOTHESES]
    return kept, {cause: n for cause, n in folded.items() if any(c.cause == cause for c in kept)}


def _hypothesis(n: int, c: Candidate, causes: dict[str, dict[str, Any]], groups: list, engine: Engine) -> dict:
    ranks = set(engine.place.ranks_at(c.host, c.gpu)) if c.scope != "global" and c.host else set()
    ranks.update(r["rank"] for r in c.rows if r.get("rank") is not None and c.scope != "global")
    mine = [g for g in groups if g.explained_by is c]
    symptoms = sorted({g.kind for g in mine})
    return {
        "rank": n, "layer": c.layer, "cause": c.cause, "score": round(min(1.0, c.score), 3),
        "host": c.host, "gpu": c.gpu, "ranks": sorted(ranks), "first_seen": iso(c.first_seen),
        "summary": describe(c, causes, groups, sorted(ranks)), "symptoms": symptoms,
        "evidence": _pick_evidence(c.rows),
        "consequences": sorted({b.cause for b in c.consequences}),
        "chain": chains.chain_json(c, groups),
        "absorbed": sorted(set(c.absorbed)),
        "explains": {"symptom_groups": len(mine), "of": len(groups), "strength": round(c.strength, 3),
                     "explanatory_power": round(c.explain, 3)},
        "symptom_evidence": [line for g in mine[:10] for line in _symptom_lines(g)],
    }


def _first_anomaly(top: Candidate | None, results: list[CheckResult], groups: list,
                   window: tuple[datetime | None, datetime | None], horizon_s: float,
                   tolerance_s: float) -> dict[str, Any] | None:
    """The first link of the winning chain (workbench/analysis/chains.py: its evidence, absorbed parts
    and consequences, what led up to it, the symptoms it explains within its episode); without a
    winner, the earliest suspect row or symptom within the window; None when nothing is anomalous.
    When nothing in the chain has a time (a pasted excerpt), its first line in the file is the first sign."""
    if top is not None:
        rows = chains.first_anomaly_rows(top, groups, horizon_s)
    else:
        rows = [r for res in results if res.check.role == "cause" for r in res.rows
                if r["strength"] >= res.check.suspect and r["at"] is not None]
        rows += [min((r for r in g.rows if r["at"] is not None), key=lambda r: r["at"])
                 for g in groups if g.first is not None]  # a group's first is its earliest row
        start, end = window
        rows = [r for r in rows if (start is None or r["at"] >= start) and (end is None or r["at"] <= end)]
    if not rows:
        return None
    first = min(rows, key=lambda r: (r["at"] is None, r["at"] or datetime.min, r.get("artifact") or "",
                                     r.get("line") or 0))
    if top is not None:
        first = chains.at_root(top, rows, first, tolerance_s)
    return {"ts": iso(first["at"]), "host": first.get("host"), "layer": first.get("layer") or _symptom_layer(first),
            "kind": first.get("kind"), "text": (first.get("text") or "")[:400]}


def _is_state(row: dict[str, Any]) -> bool:
    return row.get("origin") in STATE_ORIGINS or row.get("kind") == "gpu_sample"


def _symptom_layer(row: dict[str, Any]) -> str:
    return "business" if row.get("kind") in ("latency_spike", "error_rate_spike", "throughput_drop",
                                              "queue_backlog") else "scheduling"


def _layers(playbook: Playbook, results: list[CheckResult], ranked: list[Candidate], groups: list) -> dict[str, Any]:
    """Per-layer verdicts. A check's own verdict is capped by how the engine judged its rows: rows
    that only feed background hypotheses (below LOW_SCORE) do not make a layer suspect, and the
    checks behind a clear winner mark its layer a fault. The winner is clear at TOP_FAULT or more, or
    as the root cause (LOW_SCORE or more) that explains every symptom there is: one replica of a
    serving fleet whose GPU failed explains the survivors' latency, yet scores low because which node
    a pod seen only in its metrics ran on is unknown. The fault goes to the winner's own layer,
    whichever layer the checks that found it belong to (a GPU shared by two jobs is a scheduling
    fault seen in a CUDA OOM); those checks make their own layers only suspect."""
    best_of: dict[str, float] = {}
    for c in ranked:
        for row in c.rows:
            best_of[row["check"]] = max(best_of.get(row["check"], 0.0), c.score)
    top = ranked[0] if ranked and ranked[0].score >= LOW_SCORE else None
    explains_all = top is not None and bool(groups) and all(g.explained_by is top for g in groups)
    winner = top if top is not None and (top.score >= TOP_FAULT or explains_all) else None
    winners = {row["check"] for row in winner.rows} if winner else set()
    chained = {row["check"] for c in _consequences(ranked[0]) for row in c.rows} if winners else set()
    out: dict[str, Any] = {}
    for plan in playbook.layers:
        verdict = "no_evidence"
        findings = []
        for res in (r for r in results if r.check.layer == plan.layer):
            v = res.verdict
            if res.check.id in winners:
                v = "fault" if winner is not None and res.check.layer == winner.layer else "suspect"
            elif res.check.id in chained:
                v = "suspect"  # a link in the winner's chain: not this layer's own fault, not clear either
            elif res.check.role == "cause" and res.rows:
                best = best_of.get(res.check.id, 0.0)
                cap = "fault" if best >= 0.5 else "suspect" if best >= LOW_SCORE else "clear"
                v = min(v, cap, key=_ORDER.__getitem__)
            elif res.check.role == "locator" and v == "fault":
                v = "suspect"
            res.verdict = v
            if _ORDER[v] > _ORDER[verdict]:
                verdict = v
            findings.append({"check": res.check.id, "title": res.check.title, "rows": res.total})
        if winner is not None and plan.layer == winner.layer:
            verdict = "fault"
        out[plan.layer] = {"verdict": verdict, "findings": findings}
    for layer in LAYERS:
        out.setdefault(layer, {"verdict": "no_evidence", "findings": []})
    return out


def _consequences(top: Candidate) -> list[Candidate]:
    """Everything the top hypothesis led to, transitively (KV cache full, then OOM restarts)."""
    out: list[Candidate] = []
    todo = list(top.consequences)
    while todo:
        c = todo.pop()
        if all(c is not seen for seen in out):
            out.append(c)
            todo.extend(c.consequences)
    return out


def _check_json(res: CheckResult) -> dict[str, Any]:
    c = res.check
    return {"id": c.id, "layer": c.layer, "title": c.title, "question": c.question, "why": c.why,
            "causes": list(c.causes), "role": c.role, "verdict": res.verdict, "rows": res.total,
            "max_strength": round(res.max_strength, 3), "error": res.error}


def _symptom_lines(g: Any, per_group: int = 3) -> list[dict[str, Any]]:
    """The earliest lines of one symptom group, each with the symptom it shows (``kind``, after
    checks.yaml's mapping: a FAILED job_state is ``job_failed``) and the group's size (``count``)."""
    rows = sorted(g.rows, key=lambda r: (r["at"] is None, r["at"] or datetime.max, r.get("line") or 0))
    return [{**_evidence(r), "kind": g.kind, "count": g.count} for r in rows[:per_group]]


def _symptom_json(g: Any) -> dict[str, Any]:
    return {"kind": g.kind, "host": g.host, "gpus": sorted(g.gpus), "ranks": sorted(g.ranks),
            "first_seen": iso(g.first),
            "count": g.count, "text": (g.rows[0].get("text") or "")[:300],
            "explained_by": g.explained_by.cause if g.explained_by else None}


def _recover(playbook: Playbook, top: Candidate | None, causes: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    steps = [{"id": s.id, "title": s.title, "action": s.action, "why": s.why} for s in playbook.recover]
    if top is not None:
        steps.insert(0, {"id": "remediate", "title": f"Remediate: {causes[top.cause]['title']}",
                         "action": " ".join(causes[top.cause]["remediation"]),
                         "why": "What the cause catalog prescribes for the top hypothesis."})
    return steps
