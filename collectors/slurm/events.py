"""The events every Slurm reader emits: a job's dated transitions (job_state), a step that did not complete
(step_killed) and a node's state (node_state)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from collectors.base import Event
from collectors.framework.hostlist import expand_hostlist
from collectors.slurm.messages import reason_class
from collectors.slurm.states import HEALTHY_NODE, JOB_SEVERITY, NODE_SEVERITY, TERMINAL, clean, job_state, node_state

MAX_NODES = 4096
"""Node names a job event's attrs carry: the whole list of any real job (the analysis relates a job's
failure to each node of it), bounded so that one malformed host list cannot bloat every event."""


def job_events(job: str | None, state_text: str | None, *, line: int | None = None, exit_code: str | None = None,
               derived: str | None = None, nodes: str | None = None, reason: str | None = None,
               elapsed: int | None = None, submit: datetime | None = None, start: datetime | None = None,
               end: datetime | None = None, snapshot: datetime | None = None, snapshot_origin: str = "mtime",
               name: str | None = None, partition: str | None = None, user: str | None = None,
               exit_status: tuple[int | None, int | None] | None = None, start_approx: bool = False,
               tres: str | None = None, batch_host: str | None = None) -> list[Event]:
    """One event per dated transition of a job or, for a step id, a step_killed when it did not complete.

    PENDING at submit, RUNNING (or CONFIGURING) at start, a terminal state at end; a state whose
    moment is unknown is dated by ``snapshot`` (when the output was taken), marked approximate.
    A job's event is filed on its batch host: the one Slurm printed, else the first node of the list
    (where Slurm runs a batch script); its attrs name every node. Not NULL: ingest files a host-less
    row on the host that captured it, which for a multi-node job is any node, once per node."""
    state, by = job_state(state_text)
    if state is None:
        return []
    node_list = expand_hostlist(nodes)
    code, sig = exit_status if exit_status is not None else exit_pair(exit_code)
    host = node_list[0] if node_list else None
    if job and "." in job:
        when = end or start or snapshot
        return step_event(job, state, code, sig, host, when, line, approx=not (end or start),
                           origin="iso" if (end or start) else snapshot_origin)
    batch_host = clean(batch_host)
    host = batch_host if batch_host in node_list else host
    common = {"job": job, "nodes": node_list[:MAX_NODES], "name": clean(name), "partition": clean(partition),
              "user": clean(user), "tres": clean(tres)}
    final = dict(common, state=state, reason=clean(reason), elapsed=elapsed)
    if state in TERMINAL:
        final.update(exit_code=code, signal=sig, cancelled_by=by,
                     derived_exit_code=derived.strip() if derived and derived.strip() else None)
    steps: list[tuple[str, datetime | None, dict[str, Any], bool, str]] = []
    if submit is not None:
        steps.append(("PENDING", submit, final if state == "PENDING" else dict(common, state="PENDING"), False, "iso"))
    if start is not None and node_list and state not in ("PENDING", "CONFIGURING"):
        steps.append(("RUNNING", start, final if state == "RUNNING" else dict(common, state="RUNNING"),
                      start_approx, snapshot_origin if start_approx else "iso"))
    if state in TERMINAL:
        steps.append((state, end or snapshot, final, end is None, "iso" if end else snapshot_origin))
    elif not steps or steps[-1][0] != state:
        if start is not None and state in ("RUNNING", "CONFIGURING"):
            steps.append((state, start, final, start_approx, snapshot_origin if start_approx else "iso"))
        else:
            steps.append((state, snapshot, final, True, snapshot_origin))
    return [_job_event(job, st, when, attrs, approx, origin, host, nodes if node_list else None, line)
            for st, when, attrs, approx, origin in steps]


def _job_event(job: str | None, state: str, when: datetime | None, attrs: dict[str, Any], approx: bool, origin: str,
               host: str | None, nodes: str | None, line: int | None) -> Event:
    attrs = {k: v for k, v in attrs.items() if v not in (None, [], "")}
    if state == "PENDING" and (waits := reason_class(attrs.get("reason"))) is not None:
        attrs["reason_class"] = waits
    label = f"job {job or '?'}" + (f" ({attrs['name']})" if attrs.get("name") else "")
    detail = f" exit {attrs['exit_code']}:{attrs.get('signal') or 0}" if "exit_code" in attrs else ""
    if "exit_code" not in attrs and attrs.get("signal"):
        detail = f" signal {attrs['signal']}"
    where = f" on {nodes}" if nodes and state != "PENDING" else ""
    why = f" reason {attrs['reason']}" if attrs.get("reason") else ""
    return Event(kind="job_state", message=f"{label} {state}{detail}{where}{why}", ts=when,
                 ts_origin=origin if when else "none", ts_approx=approx and when is not None,
                 host=host if state != "PENDING" else None, job=job, severity=JOB_SEVERITY.get(state, "info"),
                 attrs=attrs, line=line)


def step_event(step: str, state: str, code: int | None, sig: int | None, host: str | None, when: datetime | None,
                line: int | None, *, approx: bool, origin: str) -> list[Event]:
    if state in ("COMPLETED", "RUNNING", "PENDING", "COMPLETING"):
        return []
    job = step.split(".", 1)[0]
    attrs = {k: v for k, v in {"job": job, "step": step, "state": state, "exit_code": code, "signal": sig,
                               "node": host}.items() if v is not None}
    msg = f"step {step} {state}" + (f" exit {code}:{sig or 0}" if code is not None else "")
    return [Event(kind="step_killed", message=msg, ts=when, ts_origin=origin if when else "none",
                  ts_approx=approx and when is not None, host=host, job=job,
                  severity="error" if state in ("FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT") else "warning",
                  attrs=attrs, line=line)]


def node_event(node: str, state_text: str | None, *, reason: str | None = None, user: str | None = None,
               ts: datetime | None = None, line: int | None = None, approx: bool = False, origin: str = "iso",
               partition: str | None = None, only_unhealthy: bool = False,
               raw_state: str | None = None) -> Event | None:
    state, flags = node_state(state_text)
    reason = clean(reason)
    if only_unhealthy and state in HEALTHY_NODE and not reason and "NOT_RESPONDING" not in flags:
        return None
    attrs = {k: v for k, v in {"node": node, "state": state, "state_raw": raw_state or clean(state_text),
                               "flags": flags, "reason": reason, "user": clean(user),
                               "partition": clean(partition)}.items() if v not in (None, [], "")}
    severity = NODE_SEVERITY.get(state or "", "warning" if "NOT_RESPONDING" in flags else "info")
    msg = f"node {node} {state or 'reason set'}" + (f" ({attrs['state_raw']})" if attrs.get("state_raw")
                                                    and attrs["state_raw"] != state else "")
    if reason:
        msg += f": {reason}"
    return Event(kind="node_state", message=msg, ts=ts, ts_origin=origin if ts else "none",
                 ts_approx=approx and ts is not None, host=node, severity=severity, attrs=attrs, line=line)


def exit_pair(text: str | None) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(-?\d+)(?::(\d+))?\s*", text or "")
    if not m:
        return None, None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)
