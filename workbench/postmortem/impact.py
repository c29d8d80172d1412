"""The postmortem's Impact section: hosts, GPUs, ranks, jobs and services hit, the GPU-hours a training job
lost and a serving fleet's SLO breach, read off the bundle by SQL aggregates."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from collectors.framework.vocabulary import FAILED_JOB_STATES
from workbench.postmortem.humanize import as_time
from workbench.query import events as query
from workbench.store.bundle import Bundle

HOSTS_LISTED = 12
"""Hosts the Impact section names one by one (the culprit first when there are more); the rest are counted."""
RANK_RANGES_LISTED = 16
"""Rank ranges the Impact section prints before '…' (a fleet job has thousands of ranks)."""


def build_impact(bundle: Bundle, analysis: dict[str, Any], hyps: list[dict[str, Any]], times: dict[str, Any],
                 start: datetime | None, end: datetime | None) -> dict[str, Any]:
    """Who and what the incident hit between ``start`` and ``end`` (recovery when known), and what it cost."""
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
    return [{**j, "started": as_time(j["start_attr"]) or j["running_at"],
             "failed": (j["state"] or "") in FAILED_JOB_STATES} for j in query.jobs_seen(bundle, start, end)]


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
    curve = latency_curve(bundle)
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


def latency_curve(bundle: Bundle) -> dict[str, Any] | None:
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
    from workbench.query.series_math import counter_deltas
    from workbench.query.series_table import load_rows

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
