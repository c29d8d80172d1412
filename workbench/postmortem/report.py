"""The postmortem: one model built from the bundle, the analysis and the journal, three renderings.

:func:`build` gathers what a team circulates after an incident — header, summary, impact,
timeline with time-to-detect/mitigate/recover, the cause → intermediate → symptom chain with
quoted evidence, layered findings with who confirmed or overrode them, action items, and the
evidence appendix with the root digest and a fresh verification. :func:`render` turns that
model into Markdown, self-contained HTML or JSON with the templates shipped in
``workbench/templates``.

Two rules shape it. Evidence is data: templates receive it as values and never evaluate it,
HTML is autoescaped, and the Markdown environment refuses any value that did not pass through
one of its escaping filters. And a bundle may hold millions of events: the timeline comes from
per-kind SQL aggregates (:func:`workbench.query.events.key_events`), never from loading the table.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from collectors.framework.vocabulary import FAILED_JOB_STATES, LAYER_TITLES, LAYERS
from workbench import __version__
from workbench.postmortem.svg import Lane, Mark, line_chart, swimlane
from workbench.query import events as query
from workbench.store import journal
from workbench.store.bundle import Bundle, BundleDamaged
from workbench.store.row_columns import utc_naive
from workbench.times import iso, parse_iso

FORMATS = ("md", "html", "json")
ACTION_PRIORITY = {"monitoring": "P1", "isolation": "P1", "change_control": "P2", "drills": "P3"}
ACTION_CATEGORY = {"monitoring": "Monitoring", "change_control": "Change control", "isolation": "Isolation",
                   "drills": "Drills"}
QUOTE_MAX_ARTIFACT = 64 << 20
"""Quote the raw line from artifacts up to this size; larger ones quote the parsed text instead
(finding line N means reading the artifact up to it)."""
KEY_PER_KIND = 3
CONTRIBUTING_MIN_SCORE = 0.15
"""Hypotheses scored below this are the engine's long tail (boot-time link flaps, old faults of other
jobs); `gpuwb analyze` lists them, the postmortem does not."""
ONSET_KINDS = ("request_rate_surge", "latency_spike", "queue_backlog", "kv_cache_saturation", "error_rate_spike")
"""Anomalies read off the metrics whose onsets the latency chart marks."""
MAX_LANES = 16
HOSTS_LISTED = 12
"""Hosts the Impact section names one by one (the culprit first when there are more); the rest are counted."""
RANK_RANGES_LISTED = 16
"""Rank ranges the Impact section prints before '…' (a fleet job has thousands of ranks)."""
APPENDIX_LISTED = 100
"""Artifacts the evidence appendix lists one by one; past it, the culprit host's and cluster-wide ones
are listed and the others counted per collector and kind (a 1,000-node merge holds thousands)."""
GAPS_LISTED = 40
"""Coverage gaps listed one by one; past it, one line per collector, status and reason with its host count."""


# -- building the model ----------------------------------------------------------------------------

def build(bundle: Bundle, *, analysis: dict[str, Any] | None = None, causes: dict[str, Any] | None = None,
          generated_at: datetime | None = None, verify: bool = True, isolation: bool = False,
          history: str | os.PathLike[str] | None = None, baseline: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the postmortem says, as plain data. ``analysis`` and ``causes`` default to the
    engine's and the catalog's; tests inject fixed ones, and ``generated_at`` for stable output.
    ``isolation`` adds the isolation and change rules (workbench/prevention/isolation.py) under that key;
    ``history`` (a folder) what the incident history has seen of the culprits, under that key;
    ``baseline`` (a loaded baseline file) the drift from that accepted state, under ``baseline_drift``."""
    analysis_error = None
    if analysis is None:
        analysis, analysis_error = _run_analysis(bundle)
    if causes is None:
        causes = _load_causes()
    state = journal.state(bundle)
    meta = bundle.meta()
    hyps = list(analysis.get("hypotheses") or [])
    start, end = _window(bundle, analysis)
    first = analysis.get("first_anomaly") or None
    first_ts = _ts(first.get("ts")) if first else None
    times = _times(bundle, state, first_ts or start, end,
                   " ".join(str(first.get(k)) for k in ("kind", "host") if first.get(k)) if first else "",
                   list(analysis.get("symptoms") or []))
    root = _root_cause(bundle, state, hyps, causes)
    impact = _impact(bundle, analysis, hyps, times, start, end)
    model: dict[str, Any] = {
        "tool": f"gpuwb {__version__}",
        "generated_at": utc_naive(generated_at) or datetime.now(timezone.utc).replace(tzinfo=None, microsecond=0),
        "header": _header(meta, state, analysis, root, times, start, end),
        "analysis_error": analysis_error,
        "first_anomaly": {**first, "ts": first_ts} if first else None,
        "times": times,
        "impact": impact,
        "root_cause": root,
        "layers": _layers(analysis, state),
        "contributing": _contributing(hyps, root, causes, state),
        "retro": {k: [_entry(e) for e in state.retro.get(k, [])] for k in ("well", "wrong", "lucky")},
        "actions": _actions(root, causes, state),
        "timeline": _timeline(bundle, state, times, start, end),
        "evidence": _evidence(bundle, verify, focus={root["host"]} if root and root.get("host") else set()),
    }
    model["summary"] = _summary(state, root, impact, model["header"])
    model["charts"] = _charts(bundle, times, start, end)
    model["monitoring"] = _monitoring(bundle, root, hyps, times, end)
    if isolation:
        from workbench.prevention.isolation import for_report

        model["isolation"] = for_report(bundle, model, hyps, causes, CONTRIBUTING_MIN_SCORE)
    if history is not None:
        from workbench.fleet.history import History

        model["history"] = History.open(history).seen_before_bundle(bundle, analysis)
    if baseline is not None:
        from workbench.prevention.baseline import analysis_drift

        model["baseline_drift"] = analysis_drift(bundle, baseline, analysis)
    return model


def _monitoring(bundle: Bundle, root: dict[str, Any] | None, hyps: list[dict[str, Any]], times: dict[str, Any],
                end: datetime | None) -> dict[str, Any]:
    """Alert rules of the root and contributing causes, each with when it would have fired on this
    incident's own samples and how long before detection (workbench/prevention/alert_rules.py). The inputs are
    kept so that ``gpuwb report --rules`` writes the very rules the report describes."""
    from workbench.prevention import alert_rules

    causes = [root["cause"]] if root and root.get("cause") else []
    causes += [h["cause"] for h in hyps if h.get("cause") and float(h.get("score") or 0) >= CONTRIBUTING_MIN_SCORE]
    start = times["start"]["ts"] if times.get("start") else None
    detection = times["detection"]["ts"] if times.get("detection") else None
    the_plan = alert_rules.plan(bundle, causes, start=start, detection=detection, end=end)
    return {"causes": the_plan.causes, "start": start, "detection": detection, "end": end,
            "rules": alert_rules.describe(the_plan), "unmeasured": alert_rules.unmeasured_causes(the_plan.causes)}


def _run_analysis(bundle: Bundle) -> tuple[dict[str, Any], str | None]:
    # Imported here: the engine pulls in playbooks and SQL checks that `gpuwb report -f json` of a
    # bundle without analysis does not need, and a broken engine must not stop the postmortem.
    try:
        from workbench.analysis.engine import analyze

        return analyze(bundle), None
    except Exception as exc:  # the report still carries the evidence, and says why analysis is missing
        return {}, f"{type(exc).__name__}: {exc}"


def _load_causes() -> dict[str, Any]:
    from workbench.analysis.causes import load_causes

    return dict(load_causes())


def _cause(causes: dict[str, Any], cid: str | None) -> dict[str, Any]:
    """The catalog entry of a cause id; empty when there is none or the id is unknown."""
    return causes.get(cid, {}) if cid else {}


def _cause_title(causes: dict[str, Any], cid: str | None) -> str:
    return _cause(causes, cid).get("title") or (cid or "unknown").replace("_", " ")


def _ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return utc_naive(value)
    try:
        return parse_iso(str(value))
    except ValueError:
        return None


def _window(bundle: Bundle, analysis: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    window = analysis.get("window") or {}
    start, end = _ts(window.get("start")), _ts(window.get("end"))
    if start is None or end is None:
        lo, hi = query.time_range(bundle)
        start, end = start or lo, end or hi
    return start, end


def _entry(e: journal.Entry) -> dict[str, Any]:
    return {"id": e.id, "at": e.at, "author": e.author, "text": e.body.get("text", "")}


def _header(meta: dict[str, str], state: journal.JournalState, analysis: dict[str, Any],
            root: dict[str, Any] | None, times: dict[str, Any], start: datetime | None,
            end: datetime | None) -> dict[str, Any]:
    fields = {k: e.body.get("value") for k, e in state.fields.items()}
    title = fields.get("title") or meta.get("title")
    if not title and root:
        title = root["title"] + (f" on {root['host']}" if root.get("host") else "")
    recovery = times["recovery"]["ts"] if times.get("recovery") else None
    return {"title": title or "GPU incident", "incident_id": meta.get("incident_id", ""),
            "severity": fields.get("severity") or "not set", "status": fields.get("status") or "draft",
            "workload": analysis.get("workload") or "unknown",
            "start": times["start"]["ts"] if times["start"] else start,
            "end": recovery or end, "created_at": meta.get("created_at"), "responders": list(state.responders)}


def _times(bundle: Bundle, state: journal.JournalState, start: datetime | None, end: datetime | None,
           what: str, symptoms: list[dict[str, Any]]) -> dict[str, Any]:
    """Start (first anomaly), detection, mitigation, recovery and the durations between them.
    Responder-entered times win; otherwise detection is the analysis' first symptom and mitigation
    the first drain/scale-out in the evidence, both marked approximate."""
    first = {"ts": start, "approx": False, "by": what.replace(" ", " on ", 1) if what else "start of the evidence"}
    out: dict[str, Any] = {"start": first if start else None}
    for which in journal.TIME_KINDS:
        entry = state.times.get(which)
        if entry:
            out[which] = {"ts": parse_iso(entry.body.get("ts")), "approx": False, "by": entry.author}
        else:
            out[which] = _inferred_time(bundle, which, start, end, symptoms)
    for name, which in (("ttd", "detection"), ("ttm", "mitigation"), ("ttr", "recovery")):
        mark = out.get(which)
        out[name] = (mark["ts"] - start) if (mark and start and mark["ts"] and mark["ts"] >= start) else None
    return out


def _inferred_time(bundle: Bundle, which: str, start: datetime | None, end: datetime | None,
                   symptoms: list[dict[str, Any]]) -> dict[str, Any] | None:
    if which == "recovery" or start is None:
        return None
    if which == "detection":
        seen = sorted((ts, str(s.get("kind"))) for s in symptoms
                      if (ts := _ts(s.get("first_seen"))) and ts >= start and (end is None or ts <= end))
        return {"ts": seen[0][0], "approx": True, "by": f"inferred: first symptom ({seen[0][1]})"} if seen else None
    rows = [r for r in query.events(bundle, query.EventFilter(kinds=("node_state", "k8s_event"), since=start,
                                                              until=end), limit=200)
            if _is_mitigation(r)][:1]
    if not rows:
        return None
    return {"ts": rows[0]["ts"], "approx": True, "by": f"inferred: first drain/scale-out ({rows[0]['kind']})"}


def _is_mitigation(row: dict[str, Any]) -> bool:
    attrs = row["attrs"] or {}
    if row["kind"] == "node_state":
        return any(word in str(attrs.get("state", "")).upper() for word in ("DRAIN", "DOWN", "FAIL"))
    return str(attrs.get("reason", "")) in ("SuccessfulRescale", "ScalingReplicaSet", "SuccessfulCreate")


# -- root cause and its chain ----------------------------------------------------------------------

def _root_cause(bundle: Bundle, state: journal.JournalState, hyps: list[dict[str, Any]],
                causes: dict[str, Any]) -> dict[str, Any] | None:
    """The responders' marked root cause if any (with the engine's matching hypothesis for its
    evidence), else the engine's first hypothesis."""
    marked = state.root_cause
    hyp = hyps[0] if hyps else None
    if marked:
        cid = marked.body.get("cause")
        hyp = next((h for h in hyps if h.get("cause") == cid), None)
    if hyp is None and marked is None:
        return None
    cid = marked.body.get("cause") if marked else hyp.get("cause")
    info = _cause(causes, cid)
    hyp = hyp or {}
    return {
        "cause": cid, "title": _cause_title(causes, cid), "layer": info.get("layer") or hyp.get("layer"),
        "host": (marked.body.get("host") if marked else None) or hyp.get("host"),
        "gpu": (marked.body.get("gpu") if marked else None) or hyp.get("gpu"),
        "ranks": list(hyp.get("ranks") or []), "score": hyp.get("score"), "first_seen": _ts(hyp.get("first_seen")),
        "summary": hyp.get("summary") or "", "description": " ".join(str(info.get("description") or "").split()),
        "marked_by": marked.author if marked else None, "marked_note": marked.body.get("text") if marked else None,
        "remediation": list(info.get("remediation") or []),
        "chain": _chain(bundle, hyp) if hyp else [],
    }


def _chain(bundle: Bundle, hyp: dict[str, Any]) -> list[dict[str, Any]]:
    """cause → intermediate → symptom, each link with its quoted evidence lines. Symptoms are the
    analysis' own (``symptom_evidence``: which lines show which symptom is its call, made once by
    playbooks/checks/); the cause's evidence in its own layer is the cause, elsewhere intermediate."""
    evidence = list(hyp.get("evidence") or [])
    shown = list(hyp.get("symptom_evidence") or [])
    found = query.events_at(bundle, [(e.get("artifact"), e.get("line")) for e in evidence + shown])
    artifacts = {a["sha256"]: a for a in bundle.artifacts()}
    links: dict[str, list[dict[str, Any]]] = {"cause": [], "intermediate": [], "symptom": []}
    symptom_lines = {(s.get("artifact"), s.get("line")) for s in shown}
    for ev in evidence:
        key = (ev.get("artifact"), ev.get("line"))
        if key in symptom_lines:
            continue
        row = found.get(key)
        role = "cause" if row is None or row["layer"] == hyp.get("layer") else "intermediate"
        links[role].append(_quote(bundle, ev, row, artifacts))
    per_kind: dict[str, int] = {}
    for symptom in _spread(shown):
        kind = str(symptom.get("kind"))
        per_kind[kind] = per_kind.get(kind, 0) + 1
        if per_kind[kind] > KEY_PER_KIND:
            continue
        item = _quote(bundle, symptom, found.get((symptom.get("artifact"), symptom.get("line"))), artifacts)
        item["of_total"] = symptom.get("count")
        links["symptom"].append(item)
    for role in links:
        links[role].sort(key=_quote_key)
    for item in links["cause"][:1]:
        item["trigger"] = True
    symptoms = [str(s) for s in hyp.get("symptoms") or []]
    order = [("cause", hyp.get("cause") or "cause"), ("intermediate", "intermediate effects"),
             ("symptom", ", ".join(symptoms) or "symptoms")]
    return [{"role": role, "label": label, "quotes": links[role]} for role, label in order if links[role]]


def _spread(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each host's first line of a symptom before any host's second, so that the few quoted per
    symptom show how far it spread (nccl_timeout on node01, node02, node03, not node01 three times)."""
    seen: dict[tuple[Any, Any], int] = {}
    ranked = []
    for n, line in enumerate(lines):
        key = (line.get("kind"), line.get("host"))
        seen[key] = seen.get(key, 0) + 1
        ranked.append((seen[key], n))
    return [lines[n] for _, n in sorted(ranked)]


def _quote_key(item: dict[str, Any]) -> tuple[Any, ...]:
    return (item["ts"] is None, item["ts"] or datetime.min, item["artifact"] or "", item["line"] or 0)


def _quote(bundle: Bundle, ev: dict[str, Any], row: dict[str, Any] | None,
           artifacts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One evidence line: the raw text as stored (the truth), else the parsed text, with its reference."""
    sha, line = ev.get("artifact"), ev.get("line")
    art = artifacts.get(sha or "")
    text = str(ev.get("text") or (row["message"] if row else ""))
    if art and line and art["size"] <= QUOTE_MAX_ARTIFACT:
        raw = bundle.artifact_lines(sha, int(line), 1)
        if raw:
            text = raw[0]
    return {"ts": _ts(ev.get("ts")) or (row["ts"] if row else None), "approx": bool(row and row["ts_approx"]),
            "host": ev.get("host") or (row["host"] if row else None), "kind": row["kind"] if row else None,
            "text": text, "artifact": sha, "artifact_name": art["source"] if art else None, "line": line,
            "source": ev.get("source") or (row["source"] if row else None),
            "trigger": False, "of_total": None}


# -- impact ----------------------------------------------------------------------------------------

def _impact(bundle: Bundle, analysis: dict[str, Any], hyps: list[dict[str, Any]], times: dict[str, Any],
            start: datetime | None, end: datetime | None) -> dict[str, Any]:
    scope = query.affected(bundle, start, end)
    hosts = sorted(set(scope["hosts"]) | {h["host"] for h in hyps[:1] if h.get("host")})
    if len(hosts) > HOSTS_LISTED:  # the few listed must name the culprit
        named = [h["host"] for h in hyps[:1] if h.get("host")]
        hosts = named + [h for h in hosts if h not in named]
    gpus = set(scope["gpus"]) | {(h.get("host"), h["gpu"]) for h in hyps[:1] if h.get("gpu")}
    ranks = set(scope["ranks"]) | {int(r) for h in hyps[:1] for r in h.get("ranks") or []}
    recovery = times.get("recovery")
    stop = recovery["ts"] if recovery else end
    jobs = _jobs(bundle, start, end)
    start = times["start"]["ts"] if times.get("start") else start
    if start is not None:  # jobs that ended before the incident began are history, not impact
        jobs = [j for j in jobs if j["last"] >= start or j["state"] in ("RUNNING", "PENDING", "REQUEUED")]
    out: dict[str, Any] = {
        "start": start, "end": stop, "duration": (stop - start) if start and stop else None,
        "duration_approx": not recovery, "hosts": hosts,
        "gpus": [{"host": h, "gpu": g} for h, g in sorted(gpus, key=lambda x: (x[0] or "", x[1] or ""))],
        "ranks": _ranges(sorted(ranks), limit=RANK_RANGES_LISTED), "rank_count": len(ranks), "jobs": jobs,
        "services": _services(bundle, start, end), "training": None, "inference": None,
    }
    workload = analysis.get("workload") or ""
    if workload in ("training", "mixed") or (not workload and jobs):
        out["training"] = _training_loss(bundle, jobs, times, start, end)
    if workload in ("inference", "mixed") or (not workload and out["services"]):
        out["inference"] = _inference_impact(bundle, start, end)
    return out


def _ranges(values: list[int], *, limit: int = 0) -> str:
    """0,1,2,3,7 -> '0-3, 7'; past ``limit`` ranges, '…'."""
    parts: list[str] = []
    run: list[int] = []
    for v in values:
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [v]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    if limit and len(parts) > limit:
        parts = parts[:limit] + ["…"]
    return ", ".join(parts)


def _jobs(bundle: Bundle, start: datetime | None, end: datetime | None) -> list[dict[str, Any]]:
    """Scheduler jobs seen in the window with their last state and first/last time."""
    return [{**j, "started": _ts(j["start_attr"]) or j["running_at"], "failed": (j["state"] or "") in FAILED_JOB_STATES}
            for j in query.jobs_seen(bundle, start, end)]


def _services(bundle: Bundle, start: datetime | None, end: datetime | None) -> list[str]:
    """Serving identities (model names, pods) with warnings in the window: from series labels and k8s events."""
    return query.serving_identities(bundle, start, end)


def _training_loss(bundle: Bundle, jobs: list[dict[str, Any]], times: dict[str, Any], start: datetime | None,
                   end: datetime | None) -> dict[str, Any] | None:
    """GPU-hours lost: GPUs of the failed job x time from the last good checkpoint (else job start)
    to the failure. The work since the checkpoint has to be redone."""
    failed = next((j for j in jobs if j["failed"]), jobs[0] if jobs else None)
    failure = failed["last"] if failed and failed["failed"] else (times["start"]["ts"] if times["start"] else start)
    if failure is None:
        return None
    gpus = query.job_gpu_count(bundle, failed["job"] if failed else None)
    since, basis = query.last_checkpoint(bundle, failure), "last good checkpoint"
    if since is None and failed and failed["started"]:
        since, basis = failed["started"], "job start"
    if since is None:
        since, basis = start, "start of the evidence window"
    if since is None or gpus == 0:
        return None
    lost = (failure - since).total_seconds() / 3600 * gpus
    return {"gpus": gpus, "since": since, "basis": basis, "until": failure, "gpu_hours": round(lost, 1),
            "job": failed["job"] if failed else None}


def _inference_impact(bundle: Bundle, start: datetime | None, end: datetime | None) -> dict[str, Any] | None:
    """SLO breach window, peak p99 and error count from the serving metrics."""
    curve = _latency_curve(bundle)
    errors = _error_count(bundle, start, end)
    oom = query.count_reason(bundle, "k8s_event", "OOMKilled", start, end)
    if curve is None and errors is None and not oom:
        return None
    out: dict[str, Any] = {"errors": errors, "oom_kills": oom, "peak_p99_ms": None, "peak_at": None,
                           "metric": None, "slo_ms": None, "slo_basis": None, "breach_start": None,
                           "breach_end": None, "breach": None}
    if curve:
        points, label, threshold, basis = curve["points"], curve["label"], curve["threshold"], curve["basis"]
        peak_at, peak = max(points, key=lambda p: (p[1], p[0]))
        over = [ts for ts, v in points if v > threshold]
        out.update(peak_p99_ms=round(peak), peak_at=peak_at, metric=label, slo_ms=round(threshold),
                   slo_basis=basis, breach_start=over[0] if over else None, breach_end=over[-1] if over else None,
                   breach=(over[-1] - over[0]) if over else None)
    return out


def _latency_curve(bundle: Bundle) -> dict[str, Any] | None:
    """The p99 latency curve a responder looks at first (end-to-end, else TTFT), in ms, worst server
    per point, with the SLO: the bundle's ``slo_p99_ms`` if set, else twice the early baseline."""
    from workbench.query.series import signals

    curves = [s for s in signals(bundle.con, ["e2e_latency", "ttft"]) if s.stat == "p99" and s.points]
    if not curves:
        return None
    metric = "e2e_latency" if any(s.metric == "e2e_latency" for s in curves) else "ttft"
    merged: dict[datetime, float] = {}
    for s in curves:
        if s.metric == metric:
            for ts, v in s.points:
                merged[ts] = max(merged.get(ts, 0.0), v * 1000)
    points = sorted(merged.items())
    slo = bundle.meta().get("slo_p99_ms")
    if slo:
        threshold, basis = float(slo), "bundle SLO"
    else:
        head = sorted(v for _, v in points[: max(len(points) // 4, 1)])
        threshold, basis = 2 * head[len(head) // 2], "2x the early baseline median"
    label = {"e2e_latency": "p99 end-to-end latency", "ttft": "p99 time to first token"}[metric]
    return {"points": points, "label": label, "threshold": threshold, "basis": basis}


def _error_count(bundle: Bundle, start: datetime | None, end: datetime | None) -> int | None:
    """Failed requests in the window: increases of failure counters, counter resets handled."""
    from workbench.query.series import counter_deltas, load_rows

    groups: dict[tuple[str | None, str], list[tuple[datetime, float]]] = {}
    for ts, host, name, labels, value in load_rows(bundle.con, ["request_failure"]):
        groups.setdefault((host, name + json.dumps(labels, sort_keys=True)), []).append((ts, value))
    if not groups:
        return None
    total = 0.0
    for points in groups.values():
        total += sum(inc for ts, inc, _ in counter_deltas(points)
                     if (start is None or ts >= start) and (end is None or ts <= end))
    return int(round(total))


# -- layers, factors, actions ---------------------------------------------------------------------

def _layers(analysis: dict[str, Any], state: journal.JournalState) -> list[dict[str, Any]]:
    """Business → hardware: the engine's verdict, and the responder's confirmation or override."""
    layers = analysis.get("layers") or {}
    titles = {c["id"]: c.get("title") or c["id"] for c in analysis.get("checks") or []}
    if state.check_verdicts and not titles:  # an injected analysis without its checks: the catalog's titles
        from workbench.analysis.playbook import load_library

        titles = {check.id: check.title for check in load_library()[0].values()}
    out = []
    for layer in LAYERS:
        info = layers.get(layer) or {}
        engine = info.get("verdict") or "no_evidence"
        entry = state.verdicts.get(layer)
        final, decided, reason = engine, "engine", ""
        if entry:
            final, reason = entry.body.get("verdict", engine), entry.body.get("reason", "")
            decided = ("confirmed by " if final == engine else "overridden by ") + entry.author
        findings = [f for f in info.get("findings") or [] if (f.get("rows") or 0) > 0]
        out.append({"layer": layer, "title": LAYER_TITLES[layer], "verdict": final, "engine_verdict": engine,
                    "decided": decided, "overridden": bool(entry) and final != engine, "reason": reason,
                    "findings": findings,
                    "reviews": [{"check": titles.get(check, check), "verdict": e.body.get("verdict"),
                                 "author": e.author, "reason": e.body.get("reason", "")}
                                for check, e in sorted(state.check_verdicts.items())
                                if e.body.get("layer") == layer],
                    "history": [{"author": e.author, "at": e.at, "verdict": e.body.get("verdict")}
                                for e in state.verdict_history.get(layer, [])]})
    return out


def _contributing(hyps: list[dict[str, Any]], root: dict[str, Any] | None, causes: dict[str, Any],
                  state: journal.JournalState) -> list[dict[str, Any]]:
    """Other hypotheses the engine found (not the root cause, not noise) and the responders' own factors."""
    out = []
    for h in hyps:
        if root and h.get("cause") == root["cause"] and h.get("host") == root.get("host"):
            continue
        if float(h.get("score") or 0) < CONTRIBUTING_MIN_SCORE:
            continue
        where = ", ".join(x for x in (h.get("host"), h.get("gpu")) if x)
        title = _cause_title(causes, h.get("cause")) + (f" ({where})" if where else "")
        summary = h.get("summary") or ""
        text = summary if summary.startswith(title.split(" (")[0]) else f"{title}: {summary}" if summary else title
        out.append({"text": text,
                    "by": f"engine, score {float(h.get('score') or 0):.2f}", "layer": h.get("layer")})
    for e in state.retro.get("factor", []):
        out.append({"text": e.body.get("text", ""), "by": e.author, "layer": None})
    return out[:12]


def _actions(root: dict[str, Any] | None, causes: dict[str, Any], state: journal.JournalState) -> list[dict[str, Any]]:
    """The cause catalog's follow-ups for the root cause, then the responders' own items. A responder
    item with the same title as a template takes its place (owner, priority, status are theirs)."""
    mine = {a.title.strip().lower(): a for a in state.actions}
    out: list[dict[str, Any]] = []
    templates = (_cause(causes, root["cause"]).get("action_items") or {}) if root else {}
    n = 0
    for category in ("monitoring", "change_control", "isolation", "drills"):
        for title in templates.get(category) or []:
            n += 1
            own = mine.pop(str(title).strip().lower(), None)
            out.append(_action_row(f"C{n}", str(title), ACTION_CATEGORY[category], own,
                                   ACTION_PRIORITY[category], f"catalog: {root['cause']}"))
    for a in state.actions:
        if a.title.strip().lower() in mine:
            out.append(_action_row(a.id, a.title, a.source or "responder", a, a.priority, f"responder: {a.created_by}"))
    return out


def _action_row(aid: str, title: str, category: str, own: journal.ActionItem | None, priority: str,
                origin: str) -> dict[str, Any]:
    if own is not None and not origin.startswith("responder"):
        origin = f"{origin}, adopted by {own.created_by}"
    return {"id": own.id if own else aid, "title": title, "category": category,
            "owner": (own.owner if own else None) or "unassigned", "priority": own.priority if own else priority,
            "status": own.status if own else "proposed", "due": own.due if own else None, "origin": origin}


# -- timeline --------------------------------------------------------------------------------------

def _timeline(bundle: Bundle, state: journal.JournalState, times: dict[str, Any], start: datetime | None,
              end: datetime | None) -> list[dict[str, Any]]:
    """Key events of every layer (first few per kind, with counts), the incident's marks and the
    responders' notes, in time order."""
    rows: list[dict[str, Any]] = []
    for ev in query.key_events(bundle, since=start, until=end, per_group=KEY_PER_KIND):
        more = ev["group_count"] - KEY_PER_KIND if ev["group_count"] > KEY_PER_KIND else 0
        rows.append({"ts": ev["ts"], "approx": bool(ev["ts_approx"]), "kind": ev["kind"], "layer": ev["layer"],
                     "host": ev["host"], "severity": ev["severity"], "text": ev["message"], "who": None,
                     "artifact": ev["artifact"], "line": ev["line"], "gpu": ev["gpu"], "rank": ev["rank"],
                     "more": more, "more_hosts": ev["group_hosts"], "mark": None})
    for name, label in (("start", "First anomaly"), ("detection", "Detected"), ("mitigation", "Mitigated"),
                        ("recovery", "Recovered")):
        mark = times.get(name)
        if mark and mark["ts"]:
            rows.append({"ts": mark["ts"], "approx": mark["approx"], "kind": "milestone", "layer": None,
                         "host": None, "severity": None, "text": f"{label} ({mark['by']})", "who": None,
                         "artifact": None, "line": None, "gpu": None, "rank": None, "more": 0, "more_hosts": 0,
                         "mark": name})
    for note in state.notes:
        when = parse_iso(note.body.get("ts")) or note.at
        rows.append({"ts": when, "approx": False, "kind": "note", "layer": None, "host": None, "severity": None,
                     "text": note.body.get("text", ""), "who": note.author, "artifact": None, "line": None,
                     "gpu": None, "rank": None, "more": 0, "more_hosts": 0, "mark": None})
    order = {"start": 0, "detection": 1, "mitigation": 2, "recovery": 3}
    rows.sort(key=lambda r: (r["ts"] or datetime.max, r["mark"] is None, order.get(r["mark"] or "", 9),
                             r["kind"], r["host"] or "", r["artifact"] or "", r["line"] or 0))
    return rows


# -- evidence appendix -----------------------------------------------------------------------------

def _evidence(bundle: Bundle, verify: bool, focus: set[str] | None = None) -> dict[str, Any]:
    arts = bundle.artifacts()
    gaps = [{"what": f"{c['collector']} ({c['host'] or '-'})", "status": c["status"], "reason": c["reason"] or ""}
            for c in bundle.coverage() if c["status"] != "ok"]
    for a in arts:
        if a["kind"] == "unknown":
            gaps.append({"what": a["source"], "status": "not parsed", "reason": "no collector recognised the format"})
        elif a["skipped"]:
            gaps.append({"what": a["source"], "status": "partly parsed",
                         "reason": f"{a['skipped']} of {a['lines']} lines skipped"})
    seal = bundle.last_seal()
    found = bundle.verification() if verify else None
    if found is not None and found.damaged:  # a report over storage that cannot be read in full would mislead
        raise BundleDamaged(bundle.path, found.damaged[0].removeprefix("storage damaged: "))
    problems = found.problems if found else []
    interrupted = found.interrupted if found else None
    folder = _common_folder([a["source"] for a in arts])
    listed, grouped = _listed_artifacts(arts, focus or set())
    return {"artifacts": [{"sha256": a["sha256"], "collector": a["collector"] or "-", "kind": a["kind"],
                           "host": a["host"], "source": a["source"][len(folder):] if folder else a["source"],
                           "size": a["size"], "lines": a["lines"], "events": a["events"]} for a in listed],
            "artifact_count": len(arts), "artifacts_grouped": grouped,
            "folder": folder,
            "total_size": sum(a["size"] for a in arts), "gaps": _grouped_gaps(gaps),
            "unrecognised": query.unrecognised_groups(bundle, limit=50),
            "root_digest": bundle.root_digest(), "sealed_digest": seal["root_digest"] if seal else None,
            "sealed_at": seal["sealed_at"] if seal else None,
            "complete": bool(seal and seal["complete"]) and not interrupted,
            "verified": verify, "verify_ok": verify and not problems, "interrupted": interrupted,
            # an interrupted ingest's unsealed artifacts are listed with the result, as verify prints them, and
            # do not fail it: they are not a tamper
            "problems": problems + ([interrupted] if interrupted else [])}


def _listed_artifacts(arts: list[dict[str, Any]], focus: set[str]) -> tuple[list[dict[str, Any]],
                                                                           list[dict[str, Any]]]:
    """All artifacts when they are few; else the focus hosts' and the cluster-wide ones (up to
    APPENDIX_LISTED), and the rest as one row per collector and kind: count, hosts, size, events."""
    if len(arts) <= APPENDIX_LISTED:
        return arts, []
    listed = [a for a in arts if a["host"] in focus or a["host"] is None][:APPENDIX_LISTED]
    shown = {a["sha256"] for a in listed}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for a in arts:
        if a["sha256"] in shown:
            continue
        g = groups.setdefault((a["collector"] or "-", a["kind"]), {
            "collector": a["collector"] or "-", "kind": a["kind"], "count": 0, "hosts": set(), "size": 0, "events": 0})
        g["count"] += 1
        g["hosts"].add(a["host"])
        g["size"] += a["size"] or 0
        g["events"] += a["events"] or 0
    return listed, [{**g, "hosts": len(g["hosts"])} for _, g in sorted(groups.items())]


def _grouped_gaps(gaps: list[dict[str, str]]) -> list[dict[str, str]]:
    """The gaps as they are when few; else one per status and reason, naming how many it covers."""
    if len(gaps) <= GAPS_LISTED:
        return gaps
    groups: dict[tuple[str, str], list[str]] = {}
    for g in gaps:
        groups.setdefault((g["status"], g["reason"]), []).append(g["what"])
    return [{"what": f"{whats[0]} and {len(whats) - 1} more" if len(whats) > 1 else whats[0],
             "status": status, "reason": reason} for (status, reason), whats in groups.items()]


def _common_folder(sources: list[str]) -> str:
    """The folder all ingested files share (``/tmp/x/evidence/``), so the table shows short paths."""
    paths = [p for p in sources if p.startswith("/")]
    if len(paths) < 2 or len(paths) != len(sources):
        return ""
    prefix = os.path.commonpath(paths)
    return prefix.rstrip("/") + "/" if prefix not in ("", "/") and prefix not in paths else ""


# -- summary ---------------------------------------------------------------------------------------

def _summary(state: journal.JournalState, root: dict[str, Any] | None, impact: dict[str, Any],
             header: dict[str, Any]) -> dict[str, Any]:
    if state.summary:
        return {"text": state.summary.body.get("text", ""), "by": state.summary.author, "generated": False}
    if root is None:
        return {"text": "The analysis named no root cause; the timeline and evidence below are what was collected.",
                "by": "generated", "generated": True}
    if root.get("summary"):
        parts = [root["summary"].rstrip(".") + "."]
    else:
        where = " ".join(x for x in (f"on {root['host']}" if root.get("host") else "",
                                     f"GPU {root['gpu']}" if root.get("gpu") else "") if x)
        parts = [f"{root['title']}{' ' + where if where else ''}"
                 + (f", first seen {_fmt_ts(root['first_seen'])} UTC." if root.get("first_seen") else ".")]
    failed = [j["job"] for j in impact["jobs"] if j["failed"]]
    if failed:
        parts.append(f"Job {', '.join(failed)} failed.")
    if impact.get("training"):
        t = impact["training"]
        parts.append(f"About {t['gpu_hours']:g} GPU-hours of work since the {t['basis']} were lost.")
    if impact.get("inference") and impact["inference"].get("breach"):
        inf = impact["inference"]
        parts.append(f"The latency SLO was breached for {_fmt_duration(inf['breach'])} (peak {inf['metric']} "
                     f"{_fmt_ms(inf['peak_p99_ms'])}).")
    return {"text": " ".join(parts), "by": "generated from the analysis", "generated": True}


# -- charts ----------------------------------------------------------------------------------------

def _charts(bundle: Bundle, times: dict[str, Any], start: datetime | None, end: datetime | None) -> dict[str, Any]:
    if start is None or end is None or end <= start:
        return {"swimlane": None, "latency": None}
    end = max([end] + [m["ts"] for name in ("detection", "mitigation", "recovery")
                       if (m := times.get(name)) and m["ts"]])
    first = times["start"]["ts"] if times.get("start") else None
    if first and first < end:  # the incident and its run-up, not weeks of boot noise before it
        start = first - max(timedelta(minutes=10), (end - first) / 4)
    span = (end - start).total_seconds()
    bucket = max(span / 120, 1.0)
    lanes: dict[tuple[str, str], Lane] = {}
    for host, layer, idx, count, severity in query.event_density(bundle, since=start, until=end, bucket_s=bucket,
                                                                 max_lanes=MAX_LANES):
        label = f"{host if host != '-' else '(no host)'} · {LAYER_TITLES.get(layer, layer)}"
        lane = lanes.setdefault((host, layer), Lane(label))
        lane.cells.append((start + timedelta(seconds=idx * bucket), count, severity))
    ordered = [lanes[k] for k in sorted(lanes, key=lambda k: (k[0] == "-", k[0],
                                                               LAYERS.index(k[1]) if k[1] in LAYERS else 9))]
    marks = [Mark(m["ts"], label, name) for name, label in (("start", "first anomaly"), ("detection", "detected"),
                                                            ("mitigation", "mitigated"), ("recovery", "recovered"))
             if (m := times.get(name)) and m["ts"]]
    chart = swimlane(ordered, start, end, timedelta(seconds=bucket), marks) if ordered else None
    latency = None
    curve = _latency_curve(bundle)
    if curve:
        firsts: dict[str, datetime] = {}
        for ev in query.events(bundle, query.EventFilter(kinds=ONSET_KINDS), limit=2000):
            if ev["ts"] is not None:
                firsts.setdefault(ev["kind"], ev["ts"])
        onsets = [Mark(ts, kind.replace("_", " "), "onset") for kind, ts in sorted(firsts.items(), key=lambda x: x[1])]
        points = [(ts, v) for ts, v in curve["points"] if start <= ts <= end] or curve["points"]
        lo, hi = min(start, points[0][0]), max(end, points[-1][0])
        latency = line_chart(points, lo, hi, onsets + marks[:1], title=f"{curve['label']} (ms, UTC)", unit="ms",
                             threshold=curve["threshold"])
    return {"swimlane": chart, "latency": latency}


# -- rendering -------------------------------------------------------------------------------------

def _fmt_ts(value: Any, approx: bool = False) -> str:
    ts = _ts(value)
    if ts is None:
        return "—"
    return ("~" if approx else "") + ts.strftime("%Y-%m-%d %H:%M:%S")


def _fmt_duration(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {sec} s" if sec else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


def _fmt_ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _fmt_size(size: int | None) -> str:
    if size is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)


class MdSafe(str):
    """Text already escaped for Markdown; the only kind of value the Markdown template may output."""


_MD_SPECIAL = re.compile(r"[\\`*{}\[\]<>#|!~$]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|&(?=[A-Za-z0-9#])")
"""Characters that can start Markdown or HTML syntax inline. An underscore between two letters or
digits cannot open emphasis and an ampersand not followed by a name cannot start an entity, so
identifiers like ``gpu_fell_off_bus`` stay readable in the raw file."""
_MD_LINE_START = re.compile(r"^([-+]|\d{1,9}[.)])(?=\s|$)")


def md_text(value: Any) -> MdSafe:
    """Prose from people or evidence, inline: Markdown and HTML syntax characters backslash-escaped,
    newlines folded, so it renders as the literal text wherever it lands (list item, table cell)."""
    text = " ".join(str("" if value is None else value).split())
    text = _MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text)
    text = _MD_LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], text)
    return MdSafe(text)


def md_code(value: Any, table: bool = False) -> MdSafe:
    """Machine text (log lines, ids) as an inline code span: literal, even with backticks in it.
    In a table cell the pipes are escaped too (GFM splits cells before reading code spans)."""
    text = " ".join(str("" if value is None else value).split()) or " "
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or longest else ""
    if table:
        text = text.replace("|", "\\|")
    return MdSafe(f"{fence}{pad}{text}{pad}{fence}")


def md_block(value: Any, indent: int = 0) -> MdSafe:
    """Raw evidence as a fenced code block (fence longer than any backtick run inside), indented to
    sit inside a list item."""
    text = str("" if value is None else value).replace("\r", "")
    longest = max((len(run) for run in re.findall(r"`+", text)), default=2)
    fence = "`" * max(3, longest + 1)
    pad = " " * indent
    lines = [f"{fence}text", *text.split("\n"), fence]
    return MdSafe("\n".join(pad + line for line in lines))


def _md_finalize(value: Any) -> Any:
    if isinstance(value, (MdSafe, int, float)) and not isinstance(value, bool):
        return value
    raise TypeError(f"markdown template printed an unescaped value {value!r:.60}; pass it through md/code/block")


def _environment(fmt: str) -> Any:
    from jinja2 import Environment, PackageLoader, StrictUndefined

    common = {"loader": PackageLoader("workbench.postmortem", "templates"), "undefined": StrictUndefined,
              "trim_blocks": True, "lstrip_blocks": True, "keep_trailing_newline": True}
    if fmt == "html":
        env = Environment(autoescape=True, **common)
    else:
        env = Environment(autoescape=False, finalize=_md_finalize, **common)
        env.filters.update(md=md_text, code=md_code, block=md_block)
        env.filters.update(ts=lambda v, approx=False: md_text(_fmt_ts(v, approx)),
                           dur=lambda v: md_text(_fmt_duration(v)), size=lambda v: md_text(_fmt_size(v)),
                           ms=lambda v: md_text(_fmt_ms(v)))
    if fmt == "html":
        env.filters.update(ts=_fmt_ts, dur=_fmt_duration, size=_fmt_size, ms=_fmt_ms)
    env.globals.update(LAYER_TITLES=LAYER_TITLES)
    return env


def render(model: dict[str, Any], fmt: str) -> str:
    """The model as Markdown (``md``), self-contained HTML (``html``) or JSON (``json``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; one of: {', '.join(FORMATS)}")
    if fmt == "json":
        data = {k: v for k, v in model.items() if k != "charts"}
        return json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n"
    return _environment(fmt).get_template(f"report.{fmt}.j2").render(r=model)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value, "auto")
    if isinstance(value, timedelta):
        return value.total_seconds()
    return str(value)
