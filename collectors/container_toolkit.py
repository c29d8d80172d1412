"""The NVIDIA container toolkit's own logs: ``nvidia-container-cli -d`` / ``nvidia-container-toolkit.log``
(libnvidia-container's glog lines), ``nvidia-container-runtime.log`` (logrus text or JSON), ``nvidia-ctk``
output, and the docker/containerd/podman error text a responder pastes beside them.

When a GPU container does not start, the reason is one line of this text ("nvidia-container-cli:
initialization error: nvml error: driver not loaded", "unsatisfied condition: cuda>=12.2", "unresolvable
CDI devices"), and which layer it names decides the fix: a driver that is missing or another version
than its libraries (reboot, reinstall), an image that wants a newer driver, or a runtime never set up
for GPUs. Known messages come from the signature catalog (collectors/catalog/signatures/
container_toolkit.yaml, which names their causes); a warning or error of the toolkit's own log that no
signature knows is classified by what its message chain is about (driver discovery, CDI, devices, config,
OCI spec) as a ``container_toolkit_error``, else kept as a ``container_toolkit_line``. The versions the
logs print become host facts, to set beside the driver's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

from collectors.base import Event, HostFact, ParseContext, Row, Skipped
from collectors.framework.framing.times import parse_iso
from collectors.framework.lazy_re import lazy_regex

NAME = "container_toolkit"
LAYER = "gpu"
KINDS = ("container_toolkit_log",)
TIMEOUT = 10.0
PRIORITY = 50
SIGNATURES_INLINE = True
"""parse() matches the signature catalog on each line's message with the line's own time and level."""

_NAME_HINT = re.compile(r"nvidia-container-(?:toolkit|runtime|cli)|nvidia-ctk|container-toolkit", re.IGNORECASE)
_OWN_FRAMES = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (?:nvc\w*|driver|rpc|dxcore|jetson_\w+)\.c:\d+\]"
                         r"|^(?:time=\"[^\"]*\" level=\w+ msg=|\{\"level\":\"\w+\",\"msg\":)", re.MULTILINE)
_HEAD_HINTS = ("nvidia-container-cli", "nvidia-container-runtime", "nvidia-ctk", "NVIDIA Container Runtime",
               "nvidia-container-toolkit", "libnvidia-container", "initializing library context", "CDI")
_LOGRUS_TEXT = re.compile(r'time="(?P<time>[^"]*)"\s+level=(?P<level>\w+)\s+msg="(?P<msg>(?:[^"\\]|\\.)*)"')
_LOGRUS_SHORT = re.compile(r"^(?P<level>INFO|WARN|ERRO|FATA|PANI|DEBU|TRAC)\[(?P<secs>\d+)\]\s+(?P<msg>.*)$")
_GLOG = re.compile(r"^(?P<level>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+\d+\s+"
                   r"(?P<where>[\w.-]+:\d+)\]\s?(?P<msg>.*)$")
_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "fatal", "INFO": "info", "WARN": "warning",
           "ERRO": "error", "FATA": "fatal", "PANI": "panic", "DEBU": "debug", "TRAC": "trace",
           "warn": "warning", "warning": "warning", "error": "error", "fatal": "fatal", "panic": "panic"}
_FAMILIES: tuple[tuple[str, Any, str | None], ...] = (
    ("requirement", lazy_regex(r"unsatisfied condition|requirements? not met|\bnot met\b", re.I),
     "driver_stack_mismatch"),
    ("requirement_syntax", lazy_regex(r"invalid (?:constraint|operator|value|version string)|invailid value", re.I),
     None),
    ("driver_discovery", lazy_regex(r"locat|lookup|not found|missing|symlink|soname|driver version|cuda version"
                                    r"|compute capability|driver root|libnvidia|libcuda|firmware|ldcache|ldconfig"
                                    r"|search path|librar|discover|mount|\bcsv\b|wildcard|environment variables"
                                    r"|container edits|compat", re.I), "gpu_runtime_misconfigured"),
    ("cdi", lazy_regex(r"\bcdi\b|container device interface", re.I), "gpu_runtime_misconfigured"),
    ("devices", lazy_regex(r"device|\bmig\b|capabilit|imex|nvidia-caps|/dev/|\bgpus?\b", re.I),
     "gpu_runtime_misconfigured"),
    ("config", lazy_regex(r"config|log.?level|\bmode\b|option|flag|toml|\blog\b|logger|log file"
                          r"|must be specified", re.I), "gpu_runtime_misconfigured"),
    ("oci", lazy_regex(r"\boci\b|\bspec\b|specification|bundle|runtime|\bexec|hook|container state|modif|path"
                       r"|open file", re.I), "gpu_runtime_misconfigured"),
)
"""What an error of the toolkit's own log is about, by the words of its message chain, and the cause an
error-level line of that family points to: every family is the toolkit failing to set a container up for
its GPUs, except an image's requirement the host driver does not meet. A warning gets its family, no cause."""

_SEVERITY = {"warning": "warning", "error": "error", "fatal": "critical", "panic": "critical"}
"""Levels at which a line of the toolkit's own log is an event even when no signature knows it."""
_VERSIONS = (
    (lazy_regex(r"initializing library context \(version=(?P<v>[\w.~+-]+)"), "nvidia_container_cli"),
    (lazy_regex(r"^cli-version: (?P<v>[\w.~+-]+)"), "nvidia_container_cli"),
    (lazy_regex(r"NVIDIA Container Runtime version (?P<v>[\w.~+-]+)"), "nvidia_container_runtime"),
    (lazy_regex(r"NVIDIA Container Toolkit CLI version (?P<v>[\w.~+-]+)"), "nvidia_ctk"),
    (lazy_regex(r"NVIDIA Container Runtime Hook version (?P<v>[\w.~+-]+)"), "nvidia_container_runtime_hook"),
)


def sniff(name: str, head: str) -> dict[str, int]:
    """The toolkit's logs by name, or by the toolkit's own line frames (libnvidia-container's glog lines, the
    runtime's logrus lines) beside its name; an error pasted in another program's output (a kubectl
    describe, a docker run) stays that program's: the signature catalog reads the line there."""
    hinted = any(hint in head for hint in _HEAD_HINTS)
    if _NAME_HINT.search(name):
        return {"container_toolkit_log": 90 if hinted else 70}
    if hinted and len(_OWN_FRAMES.findall(head[:65536])) >= 2:
        return {"container_toolkit_log": 80}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    from collectors.framework.framing.wrappers import Framed, peel
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
            yield _own_line(framed, level, n)


def _own_line(framed: Any, level: str, n: int) -> Event:
    """A warning or error of the toolkit's own log that no signature knows: its family and cause when its
    words name one (container_toolkit_error), else kept as text (container_toolkit_line, a catch-all)."""
    message = framed.message.strip()
    attrs: dict[str, Any] = {"error": message[:300], "level": level}
    kind = "container_toolkit_line"
    for family, words, cause in _FAMILIES:
        if words.search(message):
            kind = "container_toolkit_error"
            attrs["family"] = family
            if cause and level != "warning":
                attrs["causes"] = [cause]
            break
    return Event(kind=kind, message=message[:2000], ts=framed.ts, ts_origin=framed.ts_origin, ts_raw=framed.ts_raw,
                 ts_approx=framed.ts_approx, severity=_SEVERITY[level], line=n, attrs=attrs)


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
    """(the time, the text as written) of an ISO stamp: the collectors' one ISO reader, framing.parse_iso."""
    return (parse_iso(text), text) if text else (None, None)
