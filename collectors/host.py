"""Host facts: hostname, kernel, OS, boot time, CPU/memory, software versions, redacted environment.

Boot time matters beyond the facts table: raw dmesg seconds only become UTC with it, so these
kinds are parsed first at ingest (PRIORITY 0). Offline it reads what responders usually hand
over: ``uptime -s``, ``/proc/uptime`` next to a ``date`` output, ``/proc/stat`` (btime).
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, HostFact, ParseContext, Row, Skipped
from collectors.framework.json_items import decoded
from collectors.framework.lazy_re import lazy_regex

NAME = "host"
LAYER = "hardware"
KINDS = ("host_facts", "uptime_since", "proc_uptime", "proc_stat", "date")
TIMEOUT = 10.0
PRIORITY = 0

_UPTIME_S = lazy_regex(r"^\s*(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\s*$")
_PROC_UPTIME = lazy_regex(r"^\s*(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*$")
_BTIME = lazy_regex(r"^btime\s+(\d+)\s*$", re.MULTILINE)
_DATE = lazy_regex(r"^\s*(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d:\d\d:\d\d)\s+"
                   r"(?:([A-Z]{2,5}|[+-]\d{4})\s+)?(\d{4})\s*$")
_ISO_DATE = lazy_regex(r"^\s*(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s*$")

PACKAGES = ("torch", "vllm", "tensorrt_llm", "sglang", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "deepspeed",
            "transformers", "jax", "nvidia-ml-py")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    yield Artifact(source="host facts", kind="host_facts", data=json.dumps(host_facts(), indent=1).encode())


def host_facts() -> dict:
    """What this host is, from /proc and the Python runtime: no subprocess, nothing slow."""
    facts: dict = {"hostname": socket.gethostname(), "kernel": platform.release(), "arch": platform.machine(),
                   "date": datetime.now(timezone.utc).isoformat()}
    uptime = _read("/proc/uptime")
    if uptime:
        seconds = float(uptime.split()[0])
        facts["uptime_s"] = seconds
        facts["boot_time"] = (datetime.now(timezone.utc) - timedelta(seconds=seconds)).isoformat()
    stat = _read("/proc/stat")
    if stat and (m := _BTIME.search(stat)):
        facts["boot_time"] = datetime.fromtimestamp(int(m.group(1)), tz=timezone.utc).isoformat()
    osrel = _read("/etc/os-release") or ""
    for line in osrel.splitlines():
        if line.startswith("PRETTY_NAME="):
            facts["os"] = line.split("=", 1)[1].strip('"')
    cpuinfo = _read("/proc/cpuinfo") or ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            facts["cpu_model"] = line.split(":", 1)[1].strip()
            break
    facts["cpus"] = os.cpu_count()
    meminfo = _read("/proc/meminfo") or ""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            facts["mem_total_kb"] = int(line.split()[1])
    facts["loadavg"] = (_read("/proc/loadavg") or "").strip()
    versions: dict[str, str] = {}
    driver = _read("/proc/driver/nvidia/version")
    if driver and (m := re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", driver)):
        versions["driver"] = m.group(1)
    for candidate in ("/usr/local/cuda/version.json", "/usr/local/cuda/version.txt"):
        text = _read(candidate)
        if text and (m := re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"|CUDA Version ([\d.]+)', text)):
            versions["cuda"] = m.group(1) or m.group(2)
            break
    for lib in Path("/usr/lib/x86_64-linux-gnu").glob("libnccl.so.*.*"):
        versions["nccl"] = lib.name.removeprefix("libnccl.so.")
    from importlib import metadata  # deferred: a capture reads versions, an ingest never does

    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    facts["versions"] = versions
    from collectors.framework.redact import redact_env  # deferred: its rules compile for capture, not ingest

    facts["env"] = redact_env(dict(os.environ))
    facts["cmdline"] = (_read("/proc/cmdline") or "").strip()
    facts["timezone"] = time.strftime("%Z")
    return facts


def _read(path: str) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read(1 << 20)
    except OSError:
        return None


def sniff(name: str, head: str) -> dict[str, int]:
    text = head.strip()
    if not text:
        return {}
    if text.startswith("{") and '"hostname"' in head and '"kernel"' in head:
        return {"host_facts": 90}
    lines = text.splitlines()
    if len(lines) == 1:
        if _UPTIME_S.match(lines[0]):
            return {"uptime_since": 80}
        if _PROC_UPTIME.match(lines[0]):
            return {"proc_uptime": 80}
        if _DATE.match(lines[0]) or _ISO_DATE.match(lines[0]):
            return {"date": 70}
    if _BTIME.search(head) and head.startswith("cpu "):
        return {"proc_stat": 90}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "host_facts":
        yield from _parse_facts(stream, ctx)
        return
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        if kind == "uptime_since" and (m := _UPTIME_S.match(line)):
            boot = datetime.fromisoformat(m.group(1).replace(" ", "T")).replace(tzinfo=timezone.utc)
            yield HostFact("boot_time", boot.isoformat())
        elif kind == "proc_uptime" and (m := _PROC_UPTIME.match(line)):
            yield HostFact("uptime_s", m.group(1))
        elif kind == "proc_stat" and (m := _BTIME.match(line)):
            yield HostFact("boot_time", datetime.fromtimestamp(int(m.group(1)), tz=timezone.utc).isoformat())
        elif kind == "date" and (when := parse_date_output(line)):
            yield HostFact("date", when.isoformat())
        elif kind != "proc_stat":
            yield Skipped(n, f"not a {kind} line")


def parse_date_output(line: str) -> datetime | None:
    """``date`` (C locale) or ``date -u --iso-8601=seconds`` output as UTC."""
    if m := _ISO_DATE.match(line):
        return datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).astimezone(timezone.utc)
    m = _DATE.match(line)
    if not m:
        return None
    month, day, clock, zone, year = m.groups()
    when = datetime.strptime(f"{year} {month} {day} {clock}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
    if zone and re.fullmatch(r"[+-]\d{4}", zone):
        sign = 1 if zone[0] == "+" else -1
        when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:]))
    return when


def _parse_facts(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    try:
        facts = json.loads(decoded(stream.read(8 << 20)))
    except ValueError as exc:
        yield Skipped(None, f"host facts are not JSON: {exc}")
        return
    if not isinstance(facts, dict):
        yield Skipped(None, "host facts are not a JSON object")
        return
    host = facts.get("hostname") or ctx.host
    for key, value in facts.items():
        if key in ("versions", "env") and isinstance(value, dict):
            for sub, val in value.items():
                yield HostFact(f"{key}.{sub}", str(val), host=host)
        elif value is not None:
            yield HostFact(key, str(value), host=host)
