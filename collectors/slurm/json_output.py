"""The ``--json`` outputs: ``sacct --json`` / ``squeue --json`` (jobs and steps), ``scontrol show node --json``
and ``sinfo --json`` (nodes), Slurm 20.11 through 24.x."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, BinaryIO

from collectors.base import Event, HostFact, ParseContext, Row, Skipped
from collectors.framework.json_items import decoded, one_item
from collectors.slurm.events import job_events, node_event
from collectors.slurm.states import clean, job_state

MAX_JSON_BYTES = 256 << 20


def parse_json(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    data = stream.read(MAX_JSON_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_JSON_BYTES:
        yield Skipped(None, f"Slurm JSON larger than {MAX_JSON_BYTES >> 20} MiB")
        return
    try:
        doc = json.loads(decoded(data))
    except ValueError as exc:
        yield Skipped(None, f"not valid JSON: {exc}"[:200])
        return
    if not isinstance(doc, dict):
        yield Skipped(None, "Slurm JSON is not an object")
        return
    release = _dig(doc, "meta", "Slurm", "release") or _dig(doc, "meta", "slurm", "release") or ""
    broken = str(release).startswith("22.05")
    if release:
        yield HostFact("versions.slurm", str(release))
    snapshot = ctx.mtime
    readers = (("jobs", lambda job: _json_job(job, broken, snapshot)),
               ("nodes", lambda node: [e for e in (_json_node(node, snapshot),) if e is not None]),
               ("sinfo", lambda entry: _json_sinfo(entry, snapshot)))
    for key, read in readers:  # one item that cannot be read is one counted skip, the others are read
        items = doc.get(key) or []
        if not isinstance(items, list):
            yield Skipped(None, f"Slurm JSON {key!r} is not a list")
            continue
        for item in items:
            if isinstance(item, dict):
                yield from one_item(lambda item=item, read=read: read(item), f"Slurm JSON {key!r} item")


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _num(value: Any) -> int | None:
    """Slurm JSON numbers: plain, or {"set": bool, "infinite": bool, "number": n} since 23.02."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _epoch(value: Any) -> datetime | None:
    n = _num(value)
    if not n or n <= 0:
        return None
    try:
        return datetime.fromtimestamp(n, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        return str(value[0]) if value else None
    return None if value is None else str(value)


def _json_exit(value: Any, state: str | None, broken: bool) -> tuple[int | None, int | None]:
    if isinstance(value, dict):
        status = _first(value.get("status"))
        code = _num(value.get("return_code"))
        sig = _num(_dig(value, "signal", "id")) or _num(_dig(value, "signal", "signal_id"))
        if broken or (status == "SUCCESS" and code == 0 and state in ("FAILED", "OUT_OF_MEMORY")):
            # the return code is the part 22.05 gets wrong; a signal it names is still real
            return None, sig if status == "SIGNALED" else None
        return code, sig
    n = _num(value)
    if n is None:
        return None, None
    # squeue --json gives the raw wait status (exit code << 8 | signal), correct in 22.05 too
    return (n >> 8) & 0xFF, n & 0x7F


def _json_job(job: dict, broken: bool, snapshot: datetime | None) -> Iterator[Row]:
    job_id = job.get("job_id")
    array_task = _num(_dig(job, "array", "task_id"))
    jid = None if job_id is None else str(job_id) + (f"_{array_task}" if array_task is not None else "")
    state_obj = job.get("state")
    state = _first(state_obj.get("current")) if isinstance(state_obj, dict) else _first(job.get("job_state") or
                                                                                         state_obj)
    reason = state_obj.get("reason") if isinstance(state_obj, dict) else job.get("state_reason")
    times = job.get("time") if isinstance(job.get("time"), dict) else {}
    canon, _ = job_state(state)
    code, sig = _json_exit(job.get("exit_code"), canon, broken)
    nodes = job.get("nodes")
    yield from job_events(
        jid, state, exit_status=(code, sig), nodes=nodes if isinstance(nodes, str) else None, reason=clean(reason),
        elapsed=_num(times.get("elapsed")), submit=_epoch(times.get("submission") or job.get("submit_time")),
        start=_epoch(times.get("start") or job.get("start_time")), end=_epoch(times.get("end") or job.get("end_time")),
        snapshot=snapshot, name=job.get("name"), partition=job.get("partition"),
        user=job.get("user") or job.get("user_name"), batch_host=job.get("batch_host"))
    for step in job.get("steps") or []:
        if not isinstance(step, dict):
            continue
        sid = step.get("step")
        sid = sid.get("id") if isinstance(sid, dict) else sid
        if isinstance(sid, dict):
            sid = sid.get("step_id") or sid.get("name")
        if sid is None or jid is None:
            continue
        sname = str(sid) if "." in str(sid) else f"{jid}.{sid}"
        stime = step.get("time") if isinstance(step.get("time"), dict) else {}
        sstate = _first(step.get("state"))
        scanon, _ = job_state(sstate)
        scode, ssig = _json_exit(step.get("exit_code"), scanon, broken)
        snodes = _dig(step, "nodes", "range")
        yield from job_events(sname, sstate, exit_status=(scode, ssig), nodes=snodes, start=_epoch(stime.get("start")),
                              end=_epoch(stime.get("end")), snapshot=snapshot)


def _json_node(node: dict, snapshot: datetime | None) -> Event | None:
    name = node.get("name") or node.get("hostname")
    if not name:
        return None
    state = node.get("state")
    parts = [str(s) for s in (state if isinstance(state, list) else [state]) if s]
    parts += [str(f) for f in node.get("state_flags") or []]
    when = _epoch(node.get("reason_changed_at"))
    reason = node.get("reason")
    if isinstance(reason, dict):
        when = when or _epoch(reason.get("time"))
        reason = reason.get("description")
    return node_event(str(name), "+".join(parts), reason=reason, user=node.get("reason_set_by_user"),
                      ts=when or snapshot, approx=when is None, origin="iso" if when else "mtime",
                      only_unhealthy=True)


def _json_sinfo(entry: dict, snapshot: datetime | None) -> Iterator[Row]:
    names = _dig(entry, "nodes", "nodes") or []
    states = _dig(entry, "node", "state") or []
    reason = entry.get("reason") if isinstance(entry.get("reason"), dict) else {}
    when = _epoch(reason.get("time"))
    for name in names if isinstance(names, list) else []:
        event = node_event(str(name), "+".join(str(s) for s in states), reason=reason.get("description"),
                           user=reason.get("user"), ts=when or snapshot, approx=when is None,
                           origin="iso" if when else "mtime", only_unhealthy=True)
        if event is not None:
            yield event
