"""JSON and YAML documents (``kubectl get events/pods/nodes -o json|yaml``, a watch stream, a List cut short):
each object read on its own, one that is not what Kubernetes writes being one counted skip."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

from collectors.base import Event, ParseContext, Row, Skipped, to_utc
from collectors.framework.json_items import Damage, Malformed, decoded, one_item, values
from collectors.k8s.events import k8s_event, parse_k8s_time

MAX_DOC_BYTES = 256 << 20
QUIET_WAITING = {"ContainerCreating", "PodInitializing"}


def parse_document(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    data = stream.read(MAX_DOC_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_DOC_BYTES:
        yield Skipped(None, f"Kubernetes document larger than {MAX_DOC_BYTES >> 20} MiB")
        return
    text = decoded(data)
    docs = _yaml_documents(text) if kind == "k8s_yaml" else values(text, "items")
    snapshot = ctx.mtime
    for doc in docs:
        if isinstance(doc, Damage):
            yield Skipped(None, f"not a readable {kind} document: {doc.reason}"[:200])
            continue
        for obj in _objects(doc):
            yield from _item_rows(obj, snapshot)


def _yaml_documents(text: str) -> Iterator[Any]:
    """The documents of a YAML stream; one that does not load is one Damage, and the documents after it
    (each starts at a ``---`` line) are still read."""
    import yaml  # only YAML input needs it; JSON stays on the standard library

    # libyaml's safe loader where present: the pure-Python one takes 20 s on a 50 MB file
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        yield from list(yaml.load_all(text, Loader=loader))
        return
    except Exception:  # yaml raises many error types (and RecursionError): read the documents one by one
        pass
    for part in re.split(r"(?m)^---(?=[ \t]|$).*$", text):
        try:
            yield yaml.load(part, Loader=loader)
        except Exception as exc:  # any of them means "not a document"
            yield Damage(f"a YAML document does not load ({type(exc).__name__})")


def _objects(doc: Any) -> Iterator[Any]:
    """The objects of a document: itself, the items of a List, the documents of a list. An item that is
    not an object comes out too, so it is counted as skipped rather than dropped unseen."""
    if isinstance(doc, list):
        for item in doc:
            yield from _objects(item)
    elif isinstance(doc, dict):
        items = doc.get("items")
        if isinstance(items, list):
            yield from items
        elif items is not None and str(doc.get("kind", "")).endswith("List"):
            yield Malformed(f"{doc.get('kind')} items is not a list")
        else:
            yield doc
    elif doc is not None:  # an empty YAML document is None
        yield Malformed("document is not an object")


def _item_rows(obj: Any, snapshot: datetime | None) -> list[Row]:
    """The rows of one object, all or none (collectors/framework/json_items.py ``one_item``)."""
    def read() -> Iterator[Row]:
        if isinstance(obj, Malformed):
            raise obj
        if not isinstance(obj, dict):
            raise Malformed(f"list item is {type(obj).__name__}, not an object")
        return _object_events(obj, snapshot)

    return one_item(read, "Kubernetes object")


def _object_events(obj: dict, snapshot: datetime | None) -> Iterator[Row]:
    kind = obj.get("kind")
    if kind == "Event" or "involvedObject" in obj or "regarding" in obj:
        event = _json_event(obj)
        if event is not None:
            yield event
    elif kind == "Pod" or isinstance(obj.get("status"), dict) and "containerStatuses" in obj["status"]:
        yield from _json_pod(obj, snapshot)
    elif kind == "Node":
        yield from _json_node(obj)


def _when(obj: dict, key: str) -> datetime | None:
    """A time field of a JSON/YAML object: None when absent, else a time (YAML may have read it as one
    already); anything else makes the object malformed."""
    value = obj.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    when = parse_k8s_time(value)
    if when is None:
        raise Malformed(f"{key} is not a time")
    return when


def _part(obj: dict, key: str) -> dict:
    """A field that must be an object (``involvedObject``, ``metadata``, ``status``): {} when absent."""
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{key} is {type(value).__name__}, not an object")
    return value


def _text(obj: dict, key: str) -> str | None:
    """A field that must be a string (``reason``, ``message``): None when absent."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise Malformed(f"{key} is {type(value).__name__}, not a string")


def _number(obj: dict, key: str) -> int | None:
    """A field that must be a whole number (``count``, ``exitCode``): None when absent."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise Malformed(f"{key} is {type(value).__name__}, not a number")
    return value


def _json_event(obj: dict) -> Event | None:
    reason = _text(obj, "reason")
    if not reason:
        return None
    involved = _part(obj, "involvedObject") or _part(obj, "regarding")
    meta = _part(obj, "metadata")
    series = _part(obj, "series")
    source = _part(obj, "source")
    # An event repeated ``count`` times spans firstTimestamp..lastTimestamp; the timeline wants its onset.
    stamps = [(where.get(key), _when(where, key)) for where, key in (
        (obj, "firstTimestamp"), (obj, "eventTime"), (obj, "deprecatedFirstTimestamp"), (obj, "lastTimestamp"),
        (series, "lastObservedTime"), (meta, "creationTimestamp"), (obj, "deprecatedLastTimestamp"))]
    raw_ts, ts = next(((raw, when) for raw, when in stamps[:6] if when is not None), (None, None))
    last_seen = next((raw for raw, when in (stamps[3], stamps[4], stamps[6]) if when is not None), None)
    component = source.get("component") or obj.get("reportingComponent") or obj.get("reportingController")
    node = _text(source, "host") or (_text(involved, "name") if involved.get("kind") == "Node" else None)
    field_path = _text(involved, "fieldPath") or ""
    container = re.search(r"\{([^}]+)\}", field_path)
    count = _number(obj, "count") or _number(series, "count") or _number(obj, "deprecatedCount")
    message = _text(obj, "message") or _text(obj, "note") or ""
    return k8s_event(reason, message, ts=ts, ts_raw=raw_ts if isinstance(raw_ts, str) else None, host=node,
                     object=f"{involved.get('kind', '?')}/{involved.get('name', '?')}",
                     namespace=involved.get("namespace") or meta.get("namespace"),
                     container=container.group(1) if container else None, type=obj.get("type"), count=count,
                     component=component, node=node, last_seen=last_seen if last_seen != raw_ts else None)


def _json_pod(pod: dict, snapshot: datetime | None) -> Iterator[Row]:
    meta, spec, status = _part(pod, "metadata"), _part(pod, "spec"), _part(pod, "status")
    name, namespace, node = meta.get("name"), meta.get("namespace"), _text(spec, "nodeName")
    obj = f"Pod/{name}"
    limits = {c.get("name"): (c.get("resources") or {}).get("limits")
              for key in ("containers", "initContainers") for c in spec.get(key) or [] if isinstance(c, dict)}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    latest = max((when for c in conditions if (when := _when(c, "lastTransitionTime"))), default=None)
    common = {"object": obj, "namespace": namespace, "node": node}
    if reason := _text(status, "reason"):
        when = latest or snapshot
        yield k8s_event(reason, _text(status, "message") or "", ts=when, approx=True,
                        origin="iso" if latest else "mtime", host=node, phase=status.get("phase"), **common)
    for cond in conditions:
        reason = cond.get("reason")
        if cond.get("status") == "True" and cond.get("type") != "DisruptionTarget" or not reason:
            continue
        if cond.get("type") in ("PodScheduled", "DisruptionTarget") or reason == "Unschedulable":
            when = _when(cond, "lastTransitionTime")
            yield k8s_event("FailedScheduling" if reason == "Unschedulable" else str(reason),
                            _text(cond, "message") or "", ts=when or snapshot, approx=when is None,
                            origin="iso" if when else "mtime", host=node, condition=cond.get("type"), **common)
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for cs in status.get(key) or []:
            if not isinstance(cs, dict):
                continue
            cname = cs.get("name")
            extra = {"container": cname, "limits": limits.get(cname), "restart_count": cs.get("restartCount"),
                     "init_container": key == "initContainerStatuses" or None}
            for which, block in (("state", _part(cs, "state")), ("last_state", _part(cs, "lastState"))):
                term = block.get("terminated")
                if isinstance(term, dict) and (reason := _text(term, "reason")):
                    code = _number(term, "exitCode")
                    if reason == "Completed" and not code:
                        continue
                    when = _when(term, "finishedAt")
                    yield k8s_event(reason, _text(term, "message") or "", ts=when or snapshot,
                                    approx=when is None, origin="iso" if when else "mtime", host=node,
                                    exit_code=code, signal=_number(term, "signal"),
                                    started=term.get("startedAt"), which=which, **extra, **common)
                wait = block.get("waiting")
                if isinstance(wait, dict) and (reason := _text(wait, "reason")) and reason not in QUIET_WAITING:
                    yield k8s_event(reason, _text(wait, "message") or "", ts=snapshot, approx=True,
                                    origin="mtime", host=node, which=which, **extra, **common)


def _json_node(node: dict) -> Iterator[Row]:
    name = _text(_part(node, "metadata"), "name")
    status = _part(node, "status")
    capacity = _part(status, "capacity").get("nvidia.com/gpu")
    allocatable = _part(status, "allocatable").get("nvidia.com/gpu")
    gpus = {"gpu_capacity": capacity, "gpu_allocatable": allocatable}
    for cond in status.get("conditions") or []:
        if not isinstance(cond, dict):
            continue
        ctype, cstatus = cond.get("type"), cond.get("status")
        when = _when(cond, "lastTransitionTime")
        if ctype == "Ready" and cstatus != "True":
            reason = "NodeNotReady"
        elif ctype != "Ready" and cstatus == "True" and cond.get("reason"):
            reason = str(cond["reason"])
        else:
            continue
        yield k8s_event(reason, _text(cond, "message") or "", ts=when, host=name, object=f"Node/{name}", node=name,
                        condition=ctype, condition_reason=cond.get("reason"), **gpus)
    if _part(node, "spec").get("unschedulable"):
        yield k8s_event("NodeNotSchedulable", "node is cordoned (spec.unschedulable)", ts=None, host=name,
                        object=f"Node/{name}", node=name, **gpus)
