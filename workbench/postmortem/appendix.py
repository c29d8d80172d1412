"""The postmortem's evidence appendix: the artifacts (few listed, many grouped), the coverage gaps, the root
digest and a fresh verification; storage that cannot be read in full stops the report instead of misleading."""

from __future__ import annotations

import os
from typing import Any

from workbench.query import events as query
from workbench.store.bundle import Bundle, BundleDamaged

APPENDIX_LISTED = 100
"""Artifacts the evidence appendix lists one by one; past it, the culprit host's and cluster-wide ones
are listed and the others counted per collector and kind (a 1,000-node merge holds thousands)."""
GAPS_LISTED = 40
"""Coverage gaps listed one by one; past it, one line per collector, status and reason with its host count."""


def build_evidence(bundle: Bundle, verify: bool, focus: set[str] | None = None) -> dict[str, Any]:
    """The appendix: artifacts (``focus`` hosts listed first when there are many), gaps, digests, verification."""
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
