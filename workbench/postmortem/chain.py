"""The postmortem's root cause and its chain: the responders' marked cause or the engine's first hypothesis,
and cause → intermediate → symptom, each link with its evidence lines quoted from the stored bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workbench.postmortem.humanize import as_time
from workbench.query import events as query
from workbench.store import journal
from workbench.store.bundle import Bundle

QUOTE_MAX_ARTIFACT = 64 << 20
"""Quote the raw line from artifacts up to this size; larger ones quote the parsed text instead
(finding line N means reading the artifact up to it)."""
KEY_PER_KIND = 3


def cause_entry(causes: dict[str, Any], cid: str | None) -> dict[str, Any]:
    """The catalog entry of a cause id; empty when there is none or the id is unknown."""
    return causes.get(cid, {}) if cid else {}


def cause_title(causes: dict[str, Any], cid: str | None) -> str:
    """The catalog's title of a cause, else its id spelled out."""
    return cause_entry(causes, cid).get("title") or (cid or "unknown").replace("_", " ")


def build_root_cause(bundle: Bundle, state: journal.JournalState, hyps: list[dict[str, Any]],
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
    info = cause_entry(causes, cid)
    hyp = hyp or {}
    return {
        "cause": cid, "title": cause_title(causes, cid), "layer": info.get("layer") or hyp.get("layer"),
        "host": (marked.body.get("host") if marked else None) or hyp.get("host"),
        "gpu": (marked.body.get("gpu") if marked else None) or hyp.get("gpu"),
        "ranks": list(hyp.get("ranks") or []), "score": hyp.get("score"), "first_seen": as_time(hyp.get("first_seen")),
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
    return {"ts": as_time(ev.get("ts")) or (row["ts"] if row else None), "approx": bool(row and row["ts_approx"]),
            "host": ev.get("host") or (row["host"] if row else None), "kind": row["kind"] if row else None,
            "text": text, "artifact": sha, "artifact_name": art["source"] if art else None, "line": line,
            "source": ev.get("source") or (row["source"] if row else None),
            "trigger": False, "of_total": None}
