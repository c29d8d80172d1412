"""The postmortem model: one dict built from the bundle, the analysis and the journal.

:func:`build` gathers what a team circulates after an incident — header, summary, impact (impact.py),
timeline with time-to-detect/mitigate/recover (timeline.py), the cause → intermediate → symptom chain with
quoted evidence (chain.py), layered findings with who confirmed or overrode them, action items, and the
evidence appendix with the root digest and a fresh verification (appendix.py).
:func:`workbench.postmortem.render.render` turns that model into Markdown, self-contained HTML or JSON.

A bundle may hold millions of events: the timeline comes from per-kind SQL aggregates
(:func:`workbench.query.events.key_events`), never from loading the table.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS
from workbench import __version__
from workbench.postmortem.appendix import build_evidence
from workbench.postmortem.chain import build_root_cause, cause_entry, cause_title
from workbench.postmortem.humanize import as_time, fmt_duration, fmt_ms, fmt_ts
from workbench.postmortem.impact import build_impact
from workbench.postmortem.timeline import build_charts, build_timeline, build_times
from workbench.query import events as query
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.row_columns import utc_naive

ACTION_PRIORITY = {"monitoring": "P1", "isolation": "P1", "change_control": "P2", "drills": "P3"}
ACTION_CATEGORY = {"monitoring": "Monitoring", "change_control": "Change control", "isolation": "Isolation",
                   "drills": "Drills"}
CONTRIBUTING_MIN_SCORE = 0.15
"""Hypotheses scored below this are the engine's long tail (boot-time link flaps, old faults of other
jobs); `gpuwb analyze` lists them, the postmortem does not."""


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
    first_ts = as_time(first.get("ts")) if first else None
    times = build_times(bundle, state, first_ts or start, end,
                   " ".join(str(first.get(k)) for k in ("kind", "host") if first.get(k)) if first else "",
                   list(analysis.get("symptoms") or []))
    root = build_root_cause(bundle, state, hyps, causes)
    if root is not None:
        root["confidence"] = _confidence(analysis, root)
    impact = build_impact(bundle, analysis, hyps, times, start, end)
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
        "timeline": build_timeline(bundle, state, times, start, end),
        "evidence": build_evidence(bundle, verify, focus={root["host"]} if root and root.get("host") else set()),
    }
    model["summary"] = _summary(state, root, impact, model["header"])
    model["charts"] = build_charts(bundle, times, start, end)
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


def _confidence(analysis: dict[str, Any], root: dict[str, Any]) -> dict[str, Any] | None:
    """How sure the engine is of the root cause, in the words the cockpit uses (findings.Confidence);
    None when the root cause is not the engine's first hypothesis (a responder marked another one)
    or the analysis carries no confidence."""
    hyps = analysis.get("hypotheses") or []
    if not analysis.get("confidence") or not hyps or hyps[0].get("cause") != root.get("cause"):
        return None
    from workbench.analysis.findings import Confidence

    c = Confidence.from_json(analysis["confidence"])
    return {"label": c.label, "level": c.level, "calibrated": c.calibrated, "floor": c.floor,
            "sure_enough": c.sure_enough, "rival": c.rival(), "rival_score": c.runner_up_score,
            "tell_apart": [t.line for t in c.tell_apart]}


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


def _window(bundle: Bundle, analysis: dict[str, Any]) -> tuple[datetime | None, datetime | None]:
    window = analysis.get("window") or {}
    start, end = as_time(window.get("start")), as_time(window.get("end"))
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
        title = cause_title(causes, h.get("cause")) + (f" ({where})" if where else "")
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
    templates = (cause_entry(causes, root["cause"]).get("action_items") or {}) if root else {}
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
                 + (f", first seen {fmt_ts(root['first_seen'])} UTC." if root.get("first_seen") else ".")]
    failed = [j["job"] for j in impact["jobs"] if j["failed"]]
    if failed:
        parts.append(f"Job {', '.join(failed)} failed.")
    if impact.get("training"):
        t = impact["training"]
        parts.append(f"About {t['gpu_hours']:g} GPU-hours of work since the {t['basis']} were lost.")
    if impact.get("inference") and impact["inference"].get("breach"):
        inf = impact["inference"]
        parts.append(f"The latency SLO was breached for {fmt_duration(inf['breach'])} (peak {inf['metric']} "
                     f"{fmt_ms(inf['peak_p99_ms'])}).")
    return {"text": " ".join(parts), "by": "generated from the analysis", "generated": True}
