"""Kubernetes: what the cluster did to the workload's pods and nodes, and why.

Live, when ``kubectl`` has a current context, it saves events, pods and nodes as JSON. Offline it
reads those JSON/YAML documents, ``kubectl get events``/``get pods``/``get nodes`` tables,
``kubectl describe pod`` text (container states, limits, the Events table), kubelet/containerd
log lines and NVIDIA device-plugin logs, in any mix: responders paste several into one file.

Every finding is one ``k8s_event`` whose ``reason`` is spelled as Kubernetes writes it
(OOMKilled, Evicted, FailedScheduling, BackOff, CrashLoopBackOff, Killing, Unhealthy,
NodeNotReady, SuccessfulRescale, Preempting, ...), so playbooks test one attribute whatever the
source. Where Kubernetes has no word, the emitting component's own is used: the device plugin's
``XidCriticalError`` and ``DeviceUnhealthy`` (with ``xid`` and ``gpu_uuid``). Ages in tables
(``18m``) are anchored on the file's mtime, else a dated neighbour, and marked approximate.

In a JSON or YAML document each object is read on its own: one that is not what Kubernetes writes (an
item that is not an object, ``involvedObject`` a string, a time that does not parse, ``count`` not a
number) is one counted skip and the others are read; a list cut short by kubectl's deadline, a watch
stream of objects and a YAML stream with a broken document keep every complete object
(collectors/framework/json_items.py).

Event kinds emitted here: k8s_event, and k8s_runtime_error for an error line of a node agent that
carries no Kubernetes reason; their attrs are declared in collectors/catalog/events.yaml.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO

from collectors._k8s_messages import eviction_attrs, scheduling_attrs
from collectors.base import (
    MONTHS,
    Artifact,
    CaptureContext,
    Event,
    ParseContext,
    Row,
    Skipped,
    infer_year,
    to_utc,
)
from collectors.framework.json_items import Damage, Malformed, decoded, one_item, values
from collectors.framework.lazy_re import lazy_regex

NAME = "k8s"
LAYER = "scheduling"
JSON_KINDS = ("k8s_events_json", "k8s_pods_json", "k8s_nodes_json", "k8s_json")
TEXT_KINDS = ("k8s_events_table", "k8s_describe", "k8s_pods_table", "kubelet_log", "gpu_device_plugin_log")
KINDS = JSON_KINDS + ("k8s_yaml",) + TEXT_KINDS
TIMEOUT = 60.0

COMMAND_TIMEOUT = 30.0
MAX_DOC_BYTES = 256 << 20

SEVERITY = {"OOMKilled": "error", "Evicted": "error", "NodeNotReady": "error", "CrashLoopBackOff": "error",
            "XidCriticalError": "error", "DeviceUnhealthy": "error", "SystemOOM": "error", "Error": "error",
            "FailedScheduling": "warning", "Preempting": "warning", "Preempted": "warning",
            "PreemptionByScheduler": "warning", "BackOff": "warning", "Unhealthy": "warning", "Killing": "info",
            "Completed": "info", "NodeNotSchedulable": "warning", "ContainerCannotRun": "error",
            "UnexpectedAdmissionError": "error", "FailedCreate": "warning", "ImagePullBackOff": "warning",
            "ErrImagePull": "warning", "EvictionThresholdMet": "warning"}
QUIET_WAITING = {"ContainerCreating", "PodInitializing"}
HEALTHY_POD_STATUS = {"Running", "Completed", "Succeeded"}

_NAME = r"[\"']?([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)[\"']?"
_CONTAINER_IN_MSG = lazy_regex(rf"(?:(?:[Cc]reated|[Ss]tarted|[Ss]topping|[Kk]illing|failed|[Ff]ailed to start) "
                               rf"container {_NAME}(?=[\s,.:;]|$)|"
                               rf"\bContainer {_NAME} (?:was|failed|definition|exceeded|is))")
_INSUFFICIENT = lazy_regex(r"[Ii]nsufficient ([\w./-]+)")
_XID = lazy_regex(r"\bXid(?:=|:\s*|\s+)(?P<xid>\d+)")
_UUID = lazy_regex(r"\b(GPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,})")
_EXIT = lazy_regex(r"[Ee]xit ?[Cc]ode[=: ]+(\d+)")

_GO_LOG = lazy_regex(r"^(?P<d>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+(?P<msg>.*)$")
_KLOG = lazy_regex(r"^(?P<lvl>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+\d+\s+"
                   r"(?P<src>[\w./-]+:\d+)\]\s*(?P<msg>.*)$")
_SYSLOG = lazy_regex(r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
                     r"(?P<host>\S+)\s+(?P<prog>[\w./-]+?)(?:\[\d+\])?:\s*(?P<msg>.*)$")
_RFC3339_SYSLOG = lazy_regex(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+(?P<host>\S+)\s+"
                             r"(?P<prog>[\w./-]+?)(?:\[\d+\])?:\s*(?P<msg>.*)$")
_LOGFMT = lazy_regex(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_NO_FIT = lazy_regex(r'"Unable to schedule pod; no fit; waiting".*?\berr="((?:[^"\\]|\\.)*)"')
_EVENT_OCCURRED = lazy_regex(r'"Event occurred".*?\breason="(\w+)"')
_NPD_STATUS = lazy_regex(r"New status generated: &\{Source:(?P<source>[\w-]+) Events:\[\{Severity:\w+ "
                         r"Timestamp:.*? Reason:(?P<reason>\w+) Message:(?P<message>.*?)\}")
_AGENTS = ("kubelet", "containerd", "dockerd", "crio", "k3s", "k3s-agent", "rke2", "nvidia-device-plugin",
           "nvidia-container-runtime", "nvidia-container-toolkit", "gpu-operator", "gpu-feature-discovery",
           "node-problem-detector", "kube-scheduler")

_TABLE_WORDS = ("LAST SEEN", "FIRST SEEN", "NOMINATED NODE", "READINESS GATES", "LASTSEEN", "FIRSTSEEN",
                "SUBOBJECTPATH", "NAMESPACE", "SUBOBJECT", "RESTARTS", "MESSAGE", "VERSION", "REASON", "OBJECT",
                "SOURCE", "STATUS", "COUNT", "READY", "ROLES", "TYPE", "NAME", "KIND", "FROM", "NODE", "AGE", "IP",
                "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME")
_DESCRIBE_KEYS = {"state", "last state", "last termination state", "reason", "exit code", "signal", "started",
                  "finished", "message", "ready", "restart count", "limits", "requests", "image", "image id",
                  "container id", "port", "ports", "host port", "host ports", "command", "args", "environment",
                  "mounts", "liveness", "readiness", "startup", "environment variables from"}
_POD_KEYS = {"name", "namespace", "node", "status", "reason", "message", "priority", "start time", "labels",
             "annotations", "ip", "ips", "controlled by", "qos class", "node-selectors", "tolerations",
             "service account", "priority class name", "runtime class name"}
_SECTION = lazy_regex(r"^(Containers|Init Containers|Ephemeral Containers|Conditions|Volumes|Events|Tolerations|"
                      r"Node-Selectors|QoS Class|Labels|Annotations):\s*(?P<rest>.*)$")


# ===================================================================== live capture
def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--k8s-namespace", metavar="NS", dest="k8s_namespace",
                        help="Kubernetes namespace to collect events and pods from (default: all namespaces)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Events, pods and nodes as JSON, when kubectl is installed and pointed at a cluster."""
    if ctx.which("kubectl") is None:
        ctx.missing("kubernetes", "unavailable: kubectl not installed")
        return
    context = ctx.run(["kubectl", "config", "current-context"], kind="k8s_context", timeout=10)
    if context.info.get("exit_code") != 0:
        ctx.missing("kubernetes", "unavailable: kubectl has no current context")
        return
    namespace = ctx.options.get("k8s_namespace")
    scope = ["-n", str(namespace)] if namespace else ["-A"]
    wait = f"--request-timeout={int(COMMAND_TIMEOUT) - 5}s"
    for argv, kind in ((["kubectl", "get", "events", *scope, "-o", "json", wait], "k8s_events_json"),
                       (["kubectl", "get", "pods", *scope, "-o", "json", wait], "k8s_pods_json"),
                       (["kubectl", "get", "nodes", "-o", "json", wait], "k8s_nodes_json")):
        art = ctx.run(argv, kind=kind, timeout=COMMAND_TIMEOUT)
        if art.info.get("exit_code") != 0:
            stderr = (art.info.get("stderr") or art.info.get("error") or "").strip().splitlines()
            ctx.missing(" ".join(argv[:3]), f"error: exit {art.info.get('exit_code')}: {stderr[-1] if stderr else ''}")
        yield art


# ===================================================================== sniffing
_DEVICE_PLUGIN_WORDS = ("XidCriticalError", "device marked unhealthy", "nvidia-device-plugin", "k8s-device-plugin")
"""Plain substring tests, each far cheaper than one search for all four."""


def sniff(name: str, head: str) -> dict[str, int]:
    text = head.lstrip()
    if not text:
        return {}
    if text.startswith(("{", "[")):
        if not ('"apiVersion"' in head and '"kind"' in head):
            return {}
        if re.search(r'"kind"\s*:\s*"(?:EventList|Event)"|"involvedObject"|"regarding"', head):
            return {"k8s_events_json": 90}
        if re.search(r'"kind"\s*:\s*"(?:PodList|Pod)"|"containerStatuses"', head):
            return {"k8s_pods_json": 90}
        if re.search(r'"kind"\s*:\s*"(?:NodeList|Node)"', head):
            return {"k8s_nodes_json": 90}
        return {"k8s_json": 70}
    if "apiVersion:" in head and re.search(r"^-?\s*apiVersion:\s*\S+", head, re.M) \
            and re.search(r"^\s*kind:\s*\w+", head, re.M):
        return {"k8s_yaml": 85}
    lines = [line for line in head.splitlines()[:300] if line.strip()]
    scores: dict[str, int] = {}
    table_head = "\n".join(lines[:60]).upper()  # both tables below need REASON or RESTARTS: one test, not one per line
    for line in lines[:60] if "REASON" in table_head or "RESTARTS" in table_head else ():
        cols = {c for c, _ in _table_columns(line)}
        if {"LAST SEEN", "REASON"} <= cols or {"LASTSEEN", "REASON"} <= cols:
            scores["k8s_events_table"] = 90
        elif {"NAME", "READY", "STATUS", "RESTARTS"} <= cols:
            scores["k8s_pods_table"] = 85
    describe = sum(1 for line in lines if re.match(
        r"^\s*(?:(?:Last State|Exit Code|Restart Count|Init Containers|Containers|Events|Controlled By|QoS Class):|"
        r"(?:Last )?State:\s+(?:Waiting|Running|Terminated)\s*$|Reason:\s+[A-Z]\w+\s*$)", line))
    if describe >= 2 or ("Reason" in head and re.search(r"^\s*Type\s+Reason\s+Age\s+From\s+Message", head, re.M)):
        scores["k8s_describe"] = max(scores.get("k8s_describe", 0), 90 if describe >= 3 else 85)
    if any(word in head for word in _DEVICE_PLUGIN_WORDS):
        scores["gpu_device_plugin_log"] = 80
    agents = sum(1 for line in lines if (m := _SYSLOG.match(line) or _RFC3339_SYSLOG.match(line))
                 and m.group("prog").lower() in _AGENTS)
    if agents:
        scores["kubelet_log"] = 75 if agents * 2 >= len(lines) else 40
    return scores


# ===================================================================== parse
def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind in JSON_KINDS or kind == "k8s_yaml":
        yield from _parse_document(kind, stream, ctx)
    else:
        yield from _TextParser(ctx).run(stream)


def _parse_document(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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


def parse_k8s_time(value: Any) -> datetime | None:
    """RFC 3339 (``2023-11-13T03:50:55Z``, micro time) or ``describe``'s ``Mon, 13 Nov 2023 03:50:55 +0100``."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
    except ValueError:
        pass
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:?\d\d)?$", text)
    try:
        if m:
            frac = (m.group(2) or "")[:7]
            return to_utc(datetime.fromisoformat(m.group(1) + frac + (m.group(3) or "+00:00").replace("Z", "+00:00")))
        return to_utc(email.utils.parsedate_to_datetime(text))
    except (TypeError, ValueError, IndexError, OverflowError):  # a date that does not exist (month 13)
        return None


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


def _event(reason: str, message: str, *, ts: datetime | None, origin: str = "iso", approx: bool = False,
           host: str | None = None, severity: str | None = None, ts_raw: str | None = None,
           line: int | None = None, **attrs: Any) -> Event:
    """One k8s_event; attributes found in the message text fill what the caller did not know."""
    message = message or ""
    found: dict[str, Any] = {}
    if (m := _CONTAINER_IN_MSG.search(message)) is not None:
        found["container"] = m.group(1) or m.group(2)
    lacking = sorted(set(_INSUFFICIENT.findall(message)))
    if lacking:
        found["insufficient"] = [r.rstrip(".,") for r in lacking]
    if reason in ("Evicted", "Evicting", "EvictionThresholdMet") or "low on resource" in message:
        found.update(eviction_attrs(message))
    if "nodes are available" in message:
        found.update(scheduling_attrs(message))
    if (m := _XID.search(message)) is not None:
        found["xid"] = int(m.group("xid"))
    if (m := _UUID.search(message)) is not None:
        found["gpu_uuid"] = m.group(1)
    if (m := _EXIT.search(message)) is not None:
        found["exit_code"] = int(m.group(1))
    merged = {k: v for k, v in found.items() if v is not None}
    merged.update({k: v for k, v in attrs.items() if v not in (None, "", [], {})})
    merged["reason"] = reason
    if message:
        merged.setdefault("message", message[:2000])
    kind_type = merged.get("type")
    sev = severity or SEVERITY.get(reason) or ("warning" if kind_type == "Warning" else "info")
    where = merged.get("object") or merged.get("container") or merged.get("node") or ""
    text = f"{reason} {where}".strip() + (f": {message[:300]}" if message else "")
    return Event(kind="k8s_event", message=text, ts=ts, ts_origin=origin if ts else "none",
                 ts_approx=approx and ts is not None, ts_raw=ts_raw, host=host, severity=sev, attrs=merged,
                 line=line)


# --------------------------------------------------------------------- JSON / YAML objects
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
    return _event(reason, message, ts=ts, ts_raw=raw_ts if isinstance(raw_ts, str) else None, host=node,
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
        yield _event(reason, _text(status, "message") or "", ts=when, approx=True,
                     origin="iso" if latest else "mtime", host=node, phase=status.get("phase"), **common)
    for cond in conditions:
        reason = cond.get("reason")
        if cond.get("status") == "True" and cond.get("type") != "DisruptionTarget" or not reason:
            continue
        if cond.get("type") in ("PodScheduled", "DisruptionTarget") or reason == "Unschedulable":
            when = _when(cond, "lastTransitionTime")
            yield _event("FailedScheduling" if reason == "Unschedulable" else str(reason),
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
                    yield _event(reason, _text(term, "message") or "", ts=when or snapshot,
                                 approx=when is None, origin="iso" if when else "mtime", host=node,
                                 exit_code=code, signal=_number(term, "signal"),
                                 started=term.get("startedAt"), which=which, **extra, **common)
                wait = block.get("waiting")
                if isinstance(wait, dict) and (reason := _text(wait, "reason")) and reason not in QUIET_WAITING:
                    yield _event(reason, _text(wait, "message") or "", ts=snapshot, approx=True,
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
        yield _event(reason, _text(cond, "message") or "", ts=when, host=name, object=f"Node/{name}", node=name,
                     condition=ctype, condition_reason=cond.get("reason"), **gpus)
    if _part(node, "spec").get("unschedulable"):
        yield _event("NodeNotSchedulable", "node is cordoned (spec.unschedulable)", ts=None, host=name,
                     object=f"Node/{name}", node=name, **gpus)


# --------------------------------------------------------------------- text
def parse_age(text: str | None) -> timedelta | None:
    """kubectl ages: ``5m``, ``2m30s``, ``3d4h``, ``18m (x2 over 18m)`` (the first one)."""
    if not text:
        return None
    m = re.match(r"^\s*((?:\d+[smhdy])+)", text)
    if not m:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
    return timedelta(seconds=sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhdy])", m.group(1))))


def _count(text: str | None) -> int | None:
    m = re.search(r"\(x(\d+) over", text or "")
    if m:
        return int(m.group(1))
    return int(text) if text and text.strip().isdigit() else None


def _table_columns(line: str) -> list[tuple[str, int]]:
    """Known header names of a kubectl table with their start columns; [] when the line is not one."""
    if "\t" in line:
        names = [c.strip() for c in re.split(r"\t+", line.strip())]
        known = [c for c in names if c.upper() in _TABLE_WORDS]
        return [(c.upper(), -1) for c in names] if len(names) >= 3 and len(known) == len(names) else []
    found: list[tuple[str, int]] = []
    pos = 0
    upper = line.upper()
    while pos < len(line):
        while pos < len(line) and line[pos] == " ":
            pos += 1
        if pos >= len(line):
            break
        word = next((w for w in _TABLE_WORDS if upper.startswith(w, pos)
                     and (pos + len(w) == len(line) or line[pos + len(w)] == " ")), None)
        if word is None:
            return []
        found.append((word, pos))
        pos += len(word)
    return found if len(found) >= 3 else []


class _TextParser:
    """kubectl tables, describe text and node-agent logs, in any order, line by line."""

    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.table: dict[str, Any] | None = None
        self.pod: dict[str, Any] = {}
        self.section: str | None = None
        self.container: dict[str, Any] | None = None
        self.candidate: str | None = None
        self.block: str | None = None
        self.resources: tuple[str, int] | None = None
        self.last_ts: datetime | None = None
        self.base = 0

    def run(self, stream: BinaryIO) -> Iterator[Row]:
        for n, raw in self.ctx.lines(stream):
            try:
                yield from self._line(n, raw)
            except (ValueError, OverflowError, IndexError, KeyError) as exc:
                yield Skipped(n, f"unreadable Kubernetes line: {type(exc).__name__}")
        yield from self._flush_container()

    def _anchor(self) -> tuple[datetime | None, str]:
        if self.ctx.mtime is not None:
            return self.ctx.mtime, "mtime"
        if self.last_ts is not None:
            return self.last_ts, "neighbour"
        ref = self.ctx.reference_for(self.ctx.host)
        return ref, "neighbour"

    # -- dispatch
    def _line(self, n: int, line: str) -> Iterator[Row]:
        if not line.strip():
            self.table = None
            self.candidate = None
            yield from self._flush_container()
            return
        if self.table is not None:
            if re.fullmatch(r"[-\s]+", line):
                if self.table["starts"][0] >= 0:
                    self.table["starts"] = [m.start() for m in re.finditer(r"-+", line)]
                return  # a tab-separated table's ruler only underlines it
            row = None
            if self.table["starts"] and self.table["starts"][0] < 0 and "\t" in line:
                row = self._tab_row(line)
            elif self.table["starts"] and len(line) > self.table["starts"][-1]:
                row = self._slice(line)
            rows = self._table_row(n, row) if row is not None else None
            if rows is not None:
                yield from rows
                return
            self.table = None
        cols = _table_columns(line.strip()) if not line.startswith("  " * 3) else []
        if cols:
            yield from self._flush_container()
            offset = len(line) - len(line.lstrip())
            self.table = {"cols": [c for c, _ in cols], "starts": [p + offset if p >= 0 else -1 for _, p in cols],
                          "n": n}
            return
        log = self._log_line(n, line)
        if log is not None:
            yield from log
            return
        describe = self._describe_line(n, line)
        if describe is not None:
            yield from describe
            return
        yield Skipped(n, "not a Kubernetes line")

    def _slice(self, line: str) -> dict[str, str] | None:
        """A row cut at its header's columns; a value may start a little off its column, as when a
        reporter masked an IP with a longer string, so chunks go to the nearest column on their left."""
        table = self.table
        assert table is not None
        starts: list[int] = table["starts"]
        cols: list[str] = table["cols"]
        values: dict[str, list[str]] = {}
        for chunk in re.finditer(r"\S+(?: \S+)*", line):
            index = max((i for i, start in enumerate(starts) if start <= chunk.start() + 2), default=None)
            if index is None:
                return None
            if index == len(cols) - 1:
                values.setdefault(cols[index], []).append(line[chunk.start():].strip())
                break
            values.setdefault(cols[index], []).append(chunk.group())
        return {col: " ".join(values.get(col, [])) for col in cols}

    # -- tables: get events, describe's Events, get pods, get nodes
    def _tab_row(self, line: str) -> dict[str, str] | None:
        """Old kubectl separated columns by tabs; an empty SubobjectPath collapses into its neighbours' tabs."""
        assert self.table is not None
        cols: list[str] = self.table["cols"]
        values = [v.strip() for v in re.split(r"\t+", line.strip())]
        if len(values) == len(cols) - 1:
            gap = next((i for i, c in enumerate(cols) if c in ("SUBOBJECTPATH", "SUBOBJECT")), None)
            if gap is None:
                return None
            values.insert(gap, "")
        if len(values) < len(cols):
            return None
        values = values[:len(cols) - 1] + ["\t".join(values[len(cols) - 1:])]
        return dict(zip(cols, values))

    def _table_row(self, n: int, row: dict[str, str]) -> list[Row] | None:
        """The events of one table row; None when the line does not fit the table (the table ended)."""
        if "REASON" in row:
            if not re.fullmatch(r"[A-Za-z][\w:.-]*", row["REASON"]) or row.get("TYPE", "Normal") not in (
                    "Normal", "Warning", ""):
                return None
            return [self._event_row(n, row)]
        if "RESTARTS" in row:
            if not re.fullmatch(r"\d+/\d+", row.get("READY", "")):
                return None
            event = self._pod_row(n, row)
        elif "STATUS" in row and ("ROLES" in row or "VERSION" in row):
            event = self._node_row(n, row)
        else:
            return None
        return [event] if event is not None else []

    def _event_row(self, n: int, row: dict[str, str]) -> Event:
        age_text = row.get("LAST SEEN") or row.get("LASTSEEN") or row.get("AGE")
        age = parse_age(age_text)
        anchor, origin = self._anchor()
        ts = anchor - age if anchor is not None and age is not None else None
        approx = True
        if age is None and (when := parse_k8s_time(age_text)) is not None:
            # old kubectl printed the time itself: ``Tue, 07 Jul 2015 12:53:51 -0700``
            ts, origin, approx = when, "iso", False
        source = row.get("FROM") or row.get("SOURCE") or ""
        node = None
        m = re.match(r"^\{?\s*(kubelet|node-controller|nvidia\S*)[, ]+\s*([\w.-]+)\s*\}?$", source)
        if m:
            node = m.group(2)
        node = node or self.pod.get("node")
        obj = row.get("OBJECT") or (f"{row.get('KIND')}/{row.get('NAME')}" if row.get("KIND") else None)
        obj = obj or (f"Pod/{self.pod['name']}" if self.pod.get("name") else None)
        count = _count(row.get("COUNT")) or _count(age_text)
        return _event(row["REASON"], row.get("MESSAGE", ""), ts=ts, origin=origin, approx=approx, host=node,
                      line=n, ts_raw=age_text, type=row.get("TYPE"), object=obj, count=count, age=age_text,
                      namespace=row.get("NAMESPACE") or self.pod.get("namespace"),
                      component=re.sub(r"[{}]", "", source).split(",")[0].strip() or None, node=node)

    def _pod_row(self, n: int, row: dict[str, str]) -> Event | None:
        status = row.get("STATUS", "")
        ready = row.get("READY", "")
        restarts = _count(row.get("RESTARTS", "").split(" ")[0]) or 0
        m = re.fullmatch(r"(\d+)/(\d+)", ready)
        unready = bool(m and int(m.group(1)) < int(m.group(2)))
        if status in HEALTHY_POD_STATUS and not restarts and not (unready and status == "Running"):
            return None
        anchor, origin = self._anchor()
        node = row.get("NODE") if row.get("NODE") not in (None, "", "<none>") else None
        reason = status.split(":", 1)[1] if status.startswith("Init:") else status
        return _event(reason or "Unknown", "", ts=anchor, origin=origin, approx=True, host=node, line=n,
                      object=f"Pod/{row.get('NAME')}", namespace=row.get("NAMESPACE"), status=status, ready=ready,
                      restarts=restarts, age=row.get("AGE"), node=node,
                      init_container=status.startswith("Init:") or None)

    def _node_row(self, n: int, row: dict[str, str]) -> Event | None:
        status = row.get("STATUS", "")
        if "NotReady" in status:
            reason = "NodeNotReady"
        elif "SchedulingDisabled" in status:
            reason = "NodeNotSchedulable"
        else:
            return None
        anchor, origin = self._anchor()
        name = row.get("NAME")
        return _event(reason, "", ts=anchor, origin=origin, approx=True, host=name, line=n, object=f"Node/{name}",
                      node=name, status=status)

    # -- kubectl describe pod
    def _describe_line(self, n: int, line: str) -> list[Row] | None:
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if text.startswith("...") or text == "<none>":
            return []
        if self.resources is not None:
            which, depth = self.resources
            m = re.match(r"^([\w./-]+):\s*(\S+)\s*$", text)
            if indent > depth and m and self.container is not None:
                self.container.setdefault(which, {})[m.group(1)] = m.group(2)
                return []
            self.resources = None
        if re.match(r"^Name:\s+\S", text) and self.container is None:
            self.base = indent  # a describe pasted with every line indented still has its top level
        top = indent <= self.base
        sec = _SECTION.match(text)
        if sec and top:
            out = list(self._flush_container())
            self.section = sec.group(1)
            return out
        m = re.match(r"^([A-Za-z][\w .-]*?):\s*(.*)$", text)
        if m is None:
            if re.fullmatch(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?", text):
                self.candidate = text
                return []
            return None
        key, value = m.group(1).lower(), m.group(2).strip()
        if top and key in _POD_KEYS:
            return self._pod_key(n, key, value)
        if not value and key not in _DESCRIBE_KEYS and re.fullmatch(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?", m.group(1)):
            out = list(self._flush_container())
            self.container = {"name": m.group(1), "line": n, "init": self.section == "Init Containers" or None}
            return out
        if key not in _DESCRIBE_KEYS:
            return [] if not top else None
        if self.container is None:
            self.container = {"name": self.candidate, "line": n}
        if key in ("state", "last state", "last termination state"):
            self.block = "state" if key == "state" else "last_state"
            self.container[self.block] = {"state": value, "line": n}
        elif key in ("limits", "requests"):
            self.resources = (key, indent)
        elif key == "restart count":
            self.container["restart_count"] = int(value) if value.isdigit() else value
        elif key in ("reason", "exit code", "signal", "started", "finished", "message") and self.block:
            self.container[self.block][key] = value
        return []

    def _pod_key(self, n: int, key: str, value: str) -> list[Row]:
        if key == "name":
            out = list(self._flush_container())
            self.pod = {"name": value}
            return out
        if key == "node":
            self.pod["node"] = value.split("/")[0] if value and value != "<none>" else None
        elif key in ("namespace", "status", "message"):
            self.pod[key] = value
        elif key == "reason" and value:
            anchor, origin = self._anchor()
            return [_event(value, self.pod.get("message", ""), ts=anchor, origin=origin, approx=True,
                           host=self.pod.get("node"), line=n, object=self._pod_object(),
                           namespace=self.pod.get("namespace"), phase=self.pod.get("status"))]
        return []

    def _pod_object(self) -> str | None:
        return f"Pod/{self.pod['name']}" if self.pod.get("name") else None

    def _flush_container(self) -> Iterator[Row]:
        container, self.container, self.block, self.resources = self.container, None, None, None
        if not container:
            return
        for which in ("state", "last_state"):
            block = container.get(which)
            if not block:
                continue
            state = block.get("state", "")
            reason = block.get("reason")
            common = {"container": container.get("name"), "init_container": container.get("init"),
                      "object": self._pod_object(),
                      "namespace": self.pod.get("namespace"), "limits": container.get("limits"),
                      "restart_count": container.get("restart_count"), "which": which, "state": state,
                      "node": self.pod.get("node")}
            if state == "Terminated" and reason:
                finished = parse_k8s_time(block.get("finished"))
                anchor, origin = (finished, "iso") if finished else self._anchor()
                code = block.get("exit code")
                sig = block.get("signal")
                yield _event(reason, block.get("message", ""), ts=anchor, origin=origin, approx=finished is None,
                             ts_raw=block.get("finished"), host=self.pod.get("node"), line=block.get("line"),
                             exit_code=int(code) if code and code.lstrip("-").isdigit() else None,
                             signal=int(sig) if sig and sig.isdigit() else None, started=block.get("started"),
                             finished=block.get("finished"), **common)
            elif state == "Waiting" and reason:
                anchor, origin = self._anchor()
                yield _event(reason, block.get("message", ""), ts=anchor, origin=origin, approx=True,
                             host=self.pod.get("node"), line=block.get("line"), **common)

    # -- node-agent and device-plugin logs
    def _log_line(self, n: int, line: str) -> list[Row] | None:
        ts, origin, host, prog, msg, raw = None, "iso", None, None, line, None
        if (m := _RFC3339_SYSLOG.match(line)) is not None:
            ts, host, prog, msg, raw = parse_k8s_time(m.group("ts")), m.group("host"), m.group("prog"), \
                m.group("msg"), m.group("ts")
        elif (m := _SYSLOG.match(line)) is not None:
            ts, origin, raw = self._syslog_time(m), "syslog_noyear", line[:m.start("host")].strip()
            host, prog, msg = m.group("host"), m.group("prog"), m.group("msg")
        elif (m := _GO_LOG.match(line)) is not None:
            raw, msg = m.group("d"), m.group("msg")
            ts = datetime.strptime(raw, "%Y/%m/%d %H:%M:%S").replace(tzinfo=timezone.utc)
        level = None
        if (k := _KLOG.match(msg)) is not None:
            level = {"I": "info", "W": "warning", "E": "error", "F": "fatal"}[k.group("lvl")]
            if ts is None:
                ts, origin, raw = self._klog_time(k), "glog_noyear", msg[:21]
            msg = k.group("msg")
        fields = dict((key, value.strip('"').replace('\\"', '"')) for key, value in _LOGFMT.findall(msg)) \
            if "level=" in msg or "msg=" in msg else {}
        if fields:
            level = fields.get("level", level)
            if ts is None and (when := parse_k8s_time(fields.get("time"))) is not None:
                ts, raw = when, fields.get("time")
        if ts is None and prog is None:
            return None
        if ts is not None:
            self.last_ts = ts
        component = (prog or "").lower() or None
        event = self._agent_message(n, msg, fields, level, component, host)
        if event is None:
            return []
        event.ts, event.ts_origin, event.ts_raw = ts, origin if ts else "none", raw
        event.host = event.host or host
        return [event]

    def _syslog_time(self, m: re.Match[str]) -> datetime | None:
        month = MONTHS.get(m.group("mon").lower())
        if not month:
            return None
        year, _ = infer_year(month, int(m.group("day")), self.ctx.reference_for(m.group("host")))
        try:
            return datetime.strptime(f"{year} {month} {m.group('day')} {m.group('clock')}",
                                     "%Y %m %d %H:%M:%S").replace(tzinfo=timezone.utc)
        except ValueError:
            return None

    def _klog_time(self, k: re.Match[str]) -> datetime | None:
        month, day = int(k.group("mm")), int(k.group("dd"))
        year, _ = infer_year(month, day, self.ctx.reference_for(self.ctx.host))
        clock = k.group("clock")[:15]
        try:
            return datetime.strptime(f"{year}-{month:02d}-{day:02d} {clock}",
                                     "%Y-%m-%d %H:%M:%S.%f" if "." in clock else "%Y-%m-%d %H:%M:%S"
                                     ).replace(tzinfo=timezone.utc)
        except ValueError:
            return None

    def _agent_message(self, n: int, msg: str, fields: dict[str, str], level: str | None, component: str | None,
                       host: str | None) -> Event | None:
        text = fields.get("msg") or msg
        detail = fields.get("error") or fields.get("err") or ""
        both = f"{text} {detail}"
        pod = re.search(r'pod="?([\w.-]+/[\w.-]+)"?', msg)
        container = re.search(r'container(?:Name)?="?([\w.-]+)"?', msg)
        common = {"component": component, "object": f"Pod/{pod.group(1).split('/')[1]}" if pod else None,
                  "namespace": pod.group(1).split("/")[0] if pod else None,
                  "container": container.group(1) if container else None, "node": host}
        if (ev := _EVENT_OCCURRED.search(msg)) is not None:
            # client-go's event recorder logs every event it sends (kubelet, scheduler, controllers)
            logged = dict((key, value.strip('"').replace('\\"', '"')) for key, value in _LOGFMT.findall(msg))
            obj = logged.get("object", "")
            return _event(logged.get("reason") or ev.group(1), logged.get("message", ""), ts=None, line=n,
                          component=component, type=logged.get("type"), node=host,
                          object=f"{logged.get('kind', 'Pod')}/{obj.split('/')[-1]}" if obj else None,
                          namespace=obj.split("/")[0] if "/" in obj else None)
        if (npd := _NPD_STATUS.search(msg)) is not None:
            # node-problem-detector's "New status generated": its problem reason and the matched line
            return _event(npd.group("reason"), npd.group("message"), ts=None, line=n, component="node-problem-detector",
                          node=host, which=npd.group("source"))
        if (sched := _NO_FIT.search(msg)) is not None:
            # kube-scheduler's own log of a pod it could not place: the FailedScheduling message is err="..."
            return _event("FailedScheduling", sched.group(1).replace('\\"', '"'), ts=None, line=n, **common)
        if re.search(r"XidCriticalError|\bXid[=: ]", both):
            return _event("XidCriticalError", msg, ts=None, line=n, **common)
        if re.search(r"device marked unhealthy|marking device \S+ as unhealthy|device \S+ is unhealthy", both, re.I):
            res = re.search(r"'([\w./-]+)' device marked unhealthy", both)
            return _event("DeviceUnhealthy", msg, ts=None, line=n, resource=res.group(1) if res else None, **common)
        rules = (("CrashLoopBackOff", r"CrashLoopBackOff"), ("BackOff", r"[Bb]ack-off restarting failed container"),
                 ("Unhealthy", r"Probe failed|probe failed"), ("SystemOOM", r"System OOM encountered"),
                 ("OOMKilled", r"OOMKilled"),
                 ("Evicted", r"[Ee]vict(?:ed|ing) pod|pods? evicted|pod is evicted successfully"),
                 ("EvictionThresholdMet", r"[Ee]viction manager: "),
                 ("Killing", r"Killing container with a grace period|Killing unwanted pod"),
                 ("NodeNotReady", r"Node became not ready|NodeNotReady"), ("FailedScheduling", r"FailedScheduling"))
        for reason, pattern in rules:
            if re.search(pattern, both):
                return _event(reason, msg, ts=None, line=n, **common)
        if level in ("error", "fatal", "panic"):
            attrs = {k: v for k, v in {"component": component, "level": level, "message": text[:2000],
                                       "error": detail[:2000] or None, "node": host}.items() if v}
            return Event(kind="k8s_runtime_error", message=f"{component or 'agent'}: {text[:300]}"
                         + (f": {detail[:300]}" if detail else ""), severity="error", attrs=attrs, line=n)
        return None
