"""The postmortem's times and timeline: first anomaly, detection, mitigation and recovery (the responders'
or inferred) with the durations between, the key events of every layer with the responders' notes, and the
swimlane and latency charts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS
from workbench.postmortem.chain import KEY_PER_KIND
from workbench.postmortem.humanize import as_time
from workbench.postmortem.impact import latency_curve
from workbench.postmortem.svg import Lane, Mark, line_chart, swimlane
from workbench.query import events as query
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.times import parse_iso

ONSET_KINDS = ("request_rate_surge", "latency_spike", "queue_backlog", "kv_cache_saturation", "error_rate_spike")
"""Anomalies read off the metrics whose onsets the latency chart marks."""
MAX_LANES = 16


def build_times(bundle: Bundle, state: journal.JournalState, start: datetime | None, end: datetime | None,
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
                      if (ts := as_time(s.get("first_seen"))) and ts >= start and (end is None or ts <= end))
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


def build_timeline(bundle: Bundle, state: journal.JournalState, times: dict[str, Any], start: datetime | None,
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


def build_charts(bundle: Bundle, times: dict[str, Any], start: datetime | None, end: datetime | None) -> dict[str, Any]:
    """The swimlane of event density per host and layer with the incident's marks, and the latency curve with its
    SLO and the onsets of the serving anomalies; None each where there is nothing to draw."""
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
    curve = latency_curve(bundle)
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
