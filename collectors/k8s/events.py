"""The one event every Kubernetes reader emits, ``k8s_event``, with what its message says (container, lacking
resources, eviction and scheduling details, Xid, GPU UUID, exit code); and Kubernetes' time spellings."""

from __future__ import annotations

import email.utils
import re
from datetime import datetime
from typing import Any

from collectors.base import Event, to_utc
from collectors.framework.lazy_re import lazy_regex
from collectors.k8s.messages import eviction_attrs, scheduling_attrs

SEVERITY = {"OOMKilled": "error", "Evicted": "error", "NodeNotReady": "error", "CrashLoopBackOff": "error",
            "XidCriticalError": "error", "DeviceUnhealthy": "error", "SystemOOM": "error", "Error": "error",
            "FailedScheduling": "warning", "Preempting": "warning", "Preempted": "warning",
            "PreemptionByScheduler": "warning", "BackOff": "warning", "Unhealthy": "warning", "Killing": "info",
            "Completed": "info", "NodeNotSchedulable": "warning", "ContainerCannotRun": "error",
            "UnexpectedAdmissionError": "error", "FailedCreate": "warning", "ImagePullBackOff": "warning",
            "ErrImagePull": "warning", "EvictionThresholdMet": "warning"}

_NAME = r"[\"']?([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)[\"']?"
_CONTAINER_IN_MSG = lazy_regex(rf"(?:(?:[Cc]reated|[Ss]tarted|[Ss]topping|[Kk]illing|failed|[Ff]ailed to start) "
                               rf"container {_NAME}(?=[\s,.:;]|$)|"
                               rf"\bContainer {_NAME} (?:was|failed|definition|exceeded|is))")
_INSUFFICIENT = lazy_regex(r"[Ii]nsufficient ([\w./-]+)")
_XID = lazy_regex(r"\bXid(?:=|:\s*|\s+)(?P<xid>\d+)")
_UUID = lazy_regex(r"\b(GPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,})")
_EXIT = lazy_regex(r"[Ee]xit ?[Cc]ode[=: ]+(\d+)")


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


def k8s_event(reason: str, message: str, *, ts: datetime | None, origin: str = "iso", approx: bool = False,
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
