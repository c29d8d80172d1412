"""What freezes the ring: a new Xid, SXid, fallen-off-bus or fatal PCIe AER line in the kernel log
(recognised by the kernel collector's own line classifier, so the recorder and the bundle agree on
what a line is) or an Xid event from NVML; an NCCL watchdog or timeout line in a watched log; a trigger file dropped by
``gpuwb record trigger``; SIGUSR1. A burst of them is one incident (:class:`StormGate`).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from collectors.base import Event
from collectors.framework.kernel_lines import Classifier
from collectors.framework.kernel_lines.prefix import Stamp, split_prefix
from collectors.framework.kernel_lines.record import Record

KERNEL_TRIGGERS = ("xid", "sxid", "gpu_fell_off_bus")
NCCL_TIMEOUT = re.compile(r"Watchdog caught collective operation timeout|ran for \d+ milliseconds before timing out|"
                          r"NCCL watchdog|Heartbeat monitor timed out|NCCL (?:WARN|ERROR).*?[Tt]ime(?:d )?out|"
                          r"ProcessGroupNCCL.*?[Tt]imeout")
TRIGGER_FILE_SUFFIX = ".trigger"


@dataclass
class Trigger:
    """Why the ring is frozen now."""

    at: float
    reason: str
    source: str
    line: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"at": self.at, "reason": self.reason, "source": self.source, "line": self.line}


class KernelTriggers:
    """Feeds kernel lines through a long-lived classifier (a fallen-off-bus report spans lines)."""

    def __init__(self) -> None:
        self.classifier = Classifier()
        self.lines = 0

    def check(self, line: str, source: str, at: float) -> Trigger | None:
        self.lines += 1
        pre, message = split_prefix(line)
        if pre.ident is not None and pre.ident != "kernel":
            return None
        record = Record(message=message.strip(), stamp=Stamp(), host=pre.host, line=self.lines)
        try:
            rows = list(self.classifier.handle(record))
        except (ValueError, IndexError, KeyError):  # a line the classifier cannot read is no trigger
            return None
        for row in rows:
            if not isinstance(row, Event):
                continue
            if row.kind in KERNEL_TRIGGERS:
                code = row.attrs.get("xid") if row.kind == "xid" else row.attrs.get("sxid")
                return Trigger(at, f"{row.kind} {code}" if code is not None else row.kind, source, line)
            if row.kind == "pcie_aer" and row.attrs.get("severity") == "uncorrected_fatal":
                return Trigger(at, "fatal PCIe AER", source, line)
        return None


def nccl_trigger(line: str, source: str, at: float) -> Trigger | None:
    if NCCL_TIMEOUT.search(line):
        return Trigger(at, "NCCL watchdog/timeout", source, line)
    return None


def nvml_trigger(event: dict[str, object], at: float) -> Trigger | None:
    """An Xid NVML reported to the sampler's event set (seen even where the kernel log is not readable)."""
    xid = event.get("xid")
    if not isinstance(xid, int) or xid <= 0:
        return None
    where = f" on {event['pci_bus_id']}" if event.get("pci_bus_id") else ""
    return Trigger(at, f"xid {xid}", "nvml", f"NVML critical Xid event {xid}{where}")


def drop_trigger_file(folder: Path, reason: str) -> Path:
    """What ``gpuwb record trigger`` does: a file the running recorder picks up on its next poll."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{time.time_ns()}-{os.getpid()}{TRIGGER_FILE_SUFFIX}"
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"reason": reason, "at": time.time()}))
    os.replace(partial, path)
    return path


def take_trigger_files(folder: Path) -> list[Trigger]:
    """Trigger files dropped since the last poll, consumed (deleted) as they are read."""
    found = []
    if not folder.is_dir():
        return found
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not entry.name.endswith(TRIGGER_FILE_SUFFIX):
            continue
        try:
            doc = json.loads(Path(entry.path).read_text())
            reason = str(doc.get("reason") or "requested")
        except (OSError, ValueError, AttributeError):
            reason = "requested (unreadable trigger file)"
        Path(entry.path).unlink(missing_ok=True)
        found.append(Trigger(time.time(), f"requested: {reason}", "gpuwb record trigger"))
    return found


class StormGate:
    """One bundle per incident storm: a trigger opens an incident; triggers while it is being frozen
    or within ``cooldown_s`` after it are counted against it instead of starting another."""

    def __init__(self, cooldown_s: float) -> None:
        self.cooldown_s = cooldown_s
        self.busy_until: float | None = None
        self.absorbed = 0

    def admit(self, trigger: Trigger, freezing: bool) -> bool:
        if freezing or (self.busy_until is not None and trigger.at < self.busy_until):
            self.absorbed += 1
            return False
        self.busy_until = None
        self.absorbed = 0
        return True

    def finished(self, at: float) -> None:
        """The incident's bundle is done; the cool-down runs from now."""
        self.busy_until = at + self.cooldown_s
