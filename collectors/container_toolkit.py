"""The NVIDIA container toolkit's own logs: ``nvidia-container-cli -d`` / ``nvidia-container-toolkit.log``
(libnvidia-container's glog lines), ``nvidia-container-runtime.log`` (logrus text or JSON), ``nvidia-ctk``
output, and the docker/containerd/podman error text a responder pastes beside them.

When a GPU container does not start, the reason is one line of this text ("nvidia-container-cli:
initialization error: nvml error: driver not loaded", "unsatisfied condition: cuda>=12.2", "unresolvable
CDI devices"), and which layer it names decides the fix: a driver that is missing or another version
than its libraries (reboot, reinstall), an image that wants a newer driver, or a runtime never set up
for GPUs. Known messages come from the signature catalog (collectors/catalog/signatures/
container_toolkit.yaml, which names their causes); an error-level line of the toolkit's own log that no
signature knows is still a ``container_toolkit_error``, without a cause, so it is on the timeline. The
versions the logs print become host facts, to set beside the driver's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

from collectors.base import Event, HostFact, ParseContext, Row, Skipped, to_utc

NAME = "container_toolkit"
LAYER = "gpu"
KINDS = ("container_toolkit_log",)
TIMEOUT = 10.0
PRIORITY = 50
SIGNATURES_INLINE = True
"""parse() matches the signature catalog on each line's message with the line's own time and level."""

_NAME_HINT = re.compile(r"nvidia-container-(?:toolkit|runtime|cli)|nvidia-ctk|container-toolkit", re.IGNORECASE)
_HEAD_HINTS = ("nvidia-container-cli", "nvidia-container-runtime", "nvidia-ctk", "NVIDIA Container Runtime",
               "nvc.c:", "nvc_info.c:", "nvc_mount.c:", "nvidia-container-toolkit", "unresolvable CDI devices",
               "Auto-detected mode as")
_LOGRUS_TEXT = re.compile(r'time="(?P<time>[^"]*)"\s+level=(?P<level>\w+)\s+msg="(?P<msg>(?:[^"\\]|\\.)*)"')
_LOGRUS_SHORT = re.compile(r"^(?P<level>INFO|WARN|ERRO|FATA|PANI|DEBU|TRAC)\[(?P<secs>\d+)\]\s+(?P<msg>.*)$")
_GLOG = re.compile(r"^(?P<level>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+\d+\s+"
                   r"(?P<where>[\w.-]+:\d+)\]\s?(?P<msg>.*)$")
_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "fatal", "INFO": "info", "WARN": "warning",
           "ERRO": "error", "FATA": "fatal", "PANI": "panic", "DEBU": "debug", "TRAC": "trace",
           "warn": "warning", "warning": "warning", "error": "error", "fatal": "fatal", "panic": "panic"}
_SEVERITY = {"warning": "warning", "error": "error", "fatal": "critical", "panic": "critical"}
"""Levels at which a line of the toolkit's own log is an event even when no signature knows it."""
_VERSIONS = (
    (re.compile(r"initializing library context \(version=(?P<v>[\w.~+-]+)"), "nvidia_container_cli"),
    (re.compile(r"^cli-version: (?P<v>[\w.~+-]+)"), "nvidia_container_cli"),
    (re.compile(r"NVIDIA Container Runtime version (?P<v>[\w.~+-]+)"), "nvidia_container_runtime"),
    (re.compile(r"NVIDIA Container Toolkit CLI version (?P<v>[\w.~+-]+)"), "nvidia_ctk"),
    (re.compile(r"NVIDIA Container Runtime Hook version (?P<v>[\w.~+-]+)"), "nvidia_container_runtime_hook"),
)


def sniff(name: str, head: str) -> dict[str, int]:
    """The toolkit's logs by name, or a head that holds the toolkit's own lines."""
    hits = sum(1 for hint in _HEAD_HINTS if hint in head)
    if _NAME_HINT.search(name):
        return {"container_toolkit_log": 90 if hits else 70}
    if hits >= 2 or (hits and ("level=" in head or "] initializing library context" in head)):
        return {"container_toolkit_log": 75}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    from collectors.framework.framing import Framed, peel
    from collectors.framework.signatures import catalog, event_of

    signatures = catalog()
    versions: set[tuple[str, str]] = set()
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        try:
            framed, level = _frame(line, n, ctx, peel, Framed)
        except ValueError as exc:
            yield Skipped(n, f"unreadable line: {exc}"[:200])
            continue
        for pattern, key in _VERSIONS:
            m = pattern.search(framed.message)
            if m and (key, m.group("v")) not in versions:
                versions.add((key, m.group("v")))
                yield HostFact(f"versions.{key}", m.group("v"))
        found = signatures.match(framed.message)
        if found is not None:
            sig, attrs = found
            event = event_of(sig, attrs, framed, framed.message)
            if level and sig.kind == "container_toolkit_error":
                event.attrs.setdefault("level", level)
            yield event
        elif level in _SEVERITY:
            yield Event(kind="container_toolkit_error", message=framed.message.strip()[:2000], ts=framed.ts,
                        ts_origin=framed.ts_origin, ts_raw=framed.ts_raw, ts_approx=framed.ts_approx,
                        severity=_SEVERITY[level], line=n,
                        attrs={"error": framed.message.strip()[:300], "level": level})


def _frame(line: str, n: int, ctx: ParseContext, peel: Any, framed_type: Any) -> tuple[Any, str | None]:
    """The line's message, time and level as the toolkit printed them (logrus text or JSON, nvidia-ctk's
    short form, libnvidia-container's glog form), else as framing.peel reads any other wrapper."""
    stripped = line.strip()
    if stripped.startswith("{") and '"msg"' in stripped:
        doc = json.loads(stripped)
        if not isinstance(doc, dict):
            raise ValueError("JSON line is not an object")
        ts, raw = _iso(str(doc.get("time") or ""))
        return (framed_type(line=n, message=str(doc.get("msg") or ""), ts=ts, ts_raw=raw,
                            ts_origin="iso" if ts else "none"),
                _LEVELS.get(str(doc.get("level") or "").lower()))
    m = _LOGRUS_TEXT.search(line)
    if m:
        ts, raw = _iso(m.group("time"))
        msg = m.group("msg").replace('\\"', '"')
        return (framed_type(line=n, message=msg, ts=ts, ts_raw=raw, ts_origin="iso" if ts else "none"),
                _LEVELS.get(m.group("level").lower()))
    m = _LOGRUS_SHORT.match(stripped)
    if m:
        return framed_type(line=n, message=m.group("msg")), _LEVELS.get(m.group("level"))
    framed = peel(line, n, reference=ctx.reference_for(ctx.host))
    m = _GLOG.match(stripped)
    return framed, (_LEVELS.get(m.group("level")) if m else None)


def _iso(text: str) -> tuple[datetime | None, str | None]:
    if not text:
        return None, None
    try:
        return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00"))), text
    except ValueError:
        return None, text
