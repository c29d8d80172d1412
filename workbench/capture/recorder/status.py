"""The recorder's health, in ``DIR/status.json``: what it follows, the ring's size, NVML's state, the
last trigger and the bundles written. Rewritten atomically, so ``gpuwb record status`` never reads a
half-written file."""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

STALE_AFTER_S = 60.0


def write_status(path: Path, status: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(status, indent=1, default=str))
    os.replace(partial, path)


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's (root's) process: it exists
        return True
    return True


def _when(epoch: float | None) -> str:
    if not epoch:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def recorder_state(status: dict[str, Any], now: float | None = None) -> str:
    """``running``, ``stalled`` (alive, status not rewritten for STALE_AFTER_S) or ``not running``."""
    now = time.time() if now is None else now
    age = now - float(status.get("updated_at") or 0)
    alive = pid_alive(int(status.get("pid") or 0)) if status.get("pid") else False
    return "running" if alive and age <= STALE_AFTER_S else ("not running" if not alive else "stalled")


def format_status(status: dict[str, Any], now: float | None = None) -> str:
    """The status as the lines ``gpuwb record status`` prints."""
    now = time.time() if now is None else now
    age = now - float(status.get("updated_at") or 0)
    state = recorder_state(status, now)
    ring = status.get("ring", {})
    lines = [f"recorder   {state} (pid {status.get('pid')}, since {_when(status.get('started_at'))}, "
             f"status {age:.0f} s old)",
             f"ring       {ring.get('bytes', 0) / (1 << 20):.1f} MiB in {ring.get('segments', 0)} segments "
             f"(cap {ring.get('max_bytes', 0) / (1 << 20):.0f} MiB, window {ring.get('window_s', 0) / 60:.0f} min), "
             f"{ring.get('records', 0)} records this run"]
    for source in status.get("sources", []):
        lines.append(f"follows    {source['source']}" + (f"  ({source['error']})" if source.get("error") else ""))
    nvml = status.get("nvml", {})
    lines.append(f"nvml       {nvml.get('state', '-')}" + (f": {nvml['reason']}" if nvml.get("reason") else "")
                 + (f", {nvml.get('samples', 0)} samples" if nvml.get("samples") else ""))
    metrics = status.get("metrics") or {}
    if metrics.get("state") not in (None, "off"):
        where = " and ".join(w for w in (metrics.get("textfile"),
                                          f"127.0.0.1:{metrics['port']}/metrics" if metrics.get("port") else None) if w)
        lines.append(f"metrics    gpuwb_log_events_total: {metrics.get('events', 0)} events in "
                     f"{metrics.get('series', 0)} series -> {where or '-'}"
                     + (f"  ({metrics['error']})" if metrics.get("error") else ""))
    last = status.get("last_trigger")
    lines.append(f"trigger    {last['reason']} at {_when(last['at'])} ({last['source']})" if last
                 else "trigger    none yet")
    if status.get("freezing"):
        lines.append("freezing   a bundle is being written")
    if status.get("absorbed"):
        lines.append(f"storm      {status['absorbed']} further trigger(s) joined the last incident")
    for bundle in status.get("failed", [])[-5:]:
        lines.append(f"failed     {bundle} (see the recorder's stderr)")
    for bundle in status.get("bundles", [])[-5:]:
        lines.append(f"bundle     {bundle}")
    return "\n".join(lines)
