"""Slurm's spellings of job and node states, times and durations, read into the one word a playbook tests."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from collectors.base import to_utc

JOB_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
              "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "COMPLETING", "CONFIGURING", "RESIZING",
              "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT",
              "RESV_DEL_HOLD", "REVOKED")
JOB_CODES = {"PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CD": "COMPLETED", "CA": "CANCELLED", "F": "FAILED",
             "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "BF": "BOOT_FAIL", "DL": "DEADLINE",
             "OOM": "OUT_OF_MEMORY", "CG": "COMPLETING", "CF": "CONFIGURING", "RS": "RESIZING", "RQ": "REQUEUED",
             "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD", "SE": "SPECIAL_EXIT", "ST": "STOPPED", "SI": "SIGNALING",
             "SO": "STAGE_OUT", "RD": "RESV_DEL_HOLD", "RV": "REVOKED"}
TERMINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT", "REQUEUED"}
JOB_SEVERITY = {"FAILED": "error", "NODE_FAIL": "error", "OUT_OF_MEMORY": "error", "TIMEOUT": "error",
                "BOOT_FAIL": "error", "DEADLINE": "error", "CANCELLED": "warning", "PREEMPTED": "warning",
                "REQUEUED": "warning", "REQUEUE_HOLD": "warning", "SUSPENDED": "warning", "SPECIAL_EXIT": "warning",
                "PENDING": "debug"}
NODE_WORDS = {"alloc": "ALLOCATED", "allocated": "ALLOCATED", "comp": "COMPLETING", "completing": "COMPLETING",
              "mix": "MIXED", "mixed": "MIXED", "idle": "IDLE", "drng": "DRAINING", "draining": "DRAINING",
              "drain": "DRAINED", "drained": "DRAINED", "down": "DOWN", "fail": "FAIL", "failg": "FAILING",
              "failing": "FAILING", "maint": "MAINT", "resv": "RESERVED", "reserved": "RESERVED",
              "futr": "FUTURE", "future": "FUTURE", "unk": "UNKNOWN", "unknown": "UNKNOWN", "boot": "REBOOT",
              "inval": "INVAL", "plnd": "PLANNED", "planned": "PLANNED", "npc": "PERFCTRS", "blocked": "BLOCKED",
              "pow_dn": "POWERED_DOWN", "pow_up": "POWERING_UP", "powered_down": "POWERED_DOWN",
              "powering_up": "POWERING_UP", "powering_down": "POWERING_DOWN", "not_responding": "NOT_RESPONDING",
              "no_respond": "NOT_RESPONDING", "resume": "RESUME", "undrain": "RESUME", "reboot": "REBOOT",
              "reboot_requested": "REBOOT_REQUESTED", "reboot_issued": "REBOOT_ISSUED", "cloud": "CLOUD",
              "power_down": "POWER_DOWN", "power_up": "POWER_UP", "perfctrs": "PERFCTRS", "dynamic_norm": "DYNAMIC"}
NODE_SUFFIX = {"*": "NOT_RESPONDING", "~": "POWERED_OFF", "#": "POWERING_UP", "!": "POWER_DOWN_PENDING",
               "%": "POWERING_DOWN", "$": "MAINT_RESERVATION", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
               "-": "PLANNED"}
# The one word a playbook tests, most serious condition first.
NODE_CANON = (("DOWN", {"DOWN"}), ("DRAIN", {"DRAINED", "DRAINING", "DRAIN"}), ("FAIL", {"FAIL", "FAILING"}),
              ("MAINT", {"MAINT"}), ("REBOOT", {"REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED"}))
HEALTHY_NODE = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "RESERVED", "PLANNED", "FUTURE", "CLOUD", "POWERED_DOWN",
                "POWERING_UP", "POWERED_OFF", "POWERING_DOWN", "POWER_DOWN_PENDING", "DYNAMIC", "RESUME"}
NODE_SEVERITY = {"DOWN": "error", "FAIL": "error", "DRAIN": "warning", "MAINT": "warning", "NOT_RESPONDING": "warning",
                 "REBOOT": "warning"}


def parse_time(text: str | None) -> datetime | None:
    """A Slurm time (ISO, with or without offset) as UTC; 'Unknown', 'None', 'N/A' -> None."""
    if not text:
        return None
    text = text.strip()
    if not re.match(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d)?", text):
        return None
    try:
        return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1)))
    except ValueError:
        return None


def parse_duration(text: str | None) -> int | None:
    """Slurm durations ``[D-]HH:MM:SS``, ``MM:SS``, ``MM`` as seconds."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?(?:\.\d+)?\s*", text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if c is not None:
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        secs = int(a) * 60 + int(b) if days is None else int(a) * 3600 + int(b) * 60
    else:
        secs = int(a) * 60 if days is None else int(a) * 3600
    return secs + int(days or 0) * 86400


def job_state(text: str | None) -> tuple[str | None, str | None]:
    """Slurm's state spellings (``CANCELLED by 0``, ``CANCELLED+``, ``CA``, ``CONFIGUR``) -> (STATE, by-uid)."""
    if not text:
        return None, None
    raw = text.strip()
    by = None
    m = re.match(r"^(\S+)\s+by\s+(\S+)", raw)
    if m:
        raw, by = m.group(1), m.group(2)
    word = raw.rstrip("+").upper()
    if not word:
        return None, by
    if word in JOB_CODES:
        return JOB_CODES[word], by
    if word in JOB_STATES:
        return word, by
    matches = [s for s in JOB_STATES if s.startswith(word)]
    if len(matches) >= 1 and len(word) >= 4:
        return matches[0], by
    return (word if re.fullmatch(r"[A-Z_]{2,}", word) else None), by


def node_state(text: str | None) -> tuple[str | None, list[str]]:
    """``IDLE+DRAIN``, ``drng@``, ``down*``, ``drained`` -> (canonical state, detail flags)."""
    if not text:
        return None, []
    words: list[str] = []
    for i, piece in enumerate(re.split(r"[+,\s]+", text.strip())):
        core = piece.rstrip("*~#!%$@^-")
        if core and i > 0 and core.upper() == "DRAIN":
            words.append("DRAIN")  # scontrol's +DRAIN flag; sinfo's lone "drain" means drained
        elif core:
            words.append(NODE_WORDS.get(core.lower(), core.upper()))
        words.extend(NODE_SUFFIX[suffix] for suffix in piece[len(core):])
    seen = set(words)
    for canon, members in NODE_CANON:
        if seen & members:
            flags = [w for w in words if w != canon]
            if canon == "DRAIN" and not seen & {"DRAINED", "DRAINING"}:
                # scontrol's IDLE+DRAIN is drained; ALLOCATED/MIXED+DRAIN still runs jobs: draining
                flags.append("DRAINING" if seen & {"ALLOCATED", "MIXED", "COMPLETING"} else "DRAINED")
            return canon, flags
    suffixes = set(NODE_SUFFIX.values())
    primary = next((w for w in words if w not in suffixes), words[0] if words else None)
    return primary, [w for w in words if w != primary]


def clean(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in ("", "none", "(null)", "n/a", "unknown") else text
