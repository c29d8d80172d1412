"""nvidia-smi's one-line failures (``No devices were found``, ``Unable to determine the device handle for
GPU 0000:3B:00.0: Unknown Error``, ``Failed to initialize NVML: ...``): each an ``nvidia_smi_error`` event
naming the GPU where the line does."""

from __future__ import annotations

import re
from collections.abc import Iterator

from collectors.base import Event, Row, normalize_pci
from collectors.framework.text_blocks import TextParser

ERRORS = (
    (re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*([0-9A-Fa-f:.]+):\s*(.*)$"),
     "Unable to determine the device handle"),
    (re.compile(r"NVIDIA-SMI has failed because (.*)$"), "NVIDIA-SMI has failed"),
    (re.compile(r"Failed to initialize NVML:\s*(.*)$"), "Failed to initialize NVML"),
    (re.compile(r"^\s*(No devices were found)\s*$"), "No devices were found"),
    (re.compile(r"Unable to query number of GPUs:?\s*(.*)$"), "Unable to query number of GPUs"),
)


def is_failure(line: str) -> bool:
    return any(pattern.search(line) for pattern, _ in ERRORS)


def open_failure(parser: TextParser, n: int, line: str, stripped: str) -> list[Row] | None:
    if not is_failure(line):
        return None
    return list(failure_events(parser, n, line))


def failure_events(parser: TextParser, n: int, line: str) -> Iterator[Row]:
    for pattern, label in ERRORS:
        m = pattern.search(line)
        if not m:
            continue
        pci = normalize_pci(m.group(1)) if m.re.groups >= 2 else None
        detail = (m.group(m.re.groups) or "").strip() if m.re.groups else ""
        reason = re.split(r"\.\s", detail)[0].rstrip(". ") if detail else None
        if label == "No devices were found":
            reason = None
        clock = parser.clock()
        yield Event(kind="nvidia_smi_error", message=line.strip(), ts=clock.ts, ts_origin=clock.origin,
                    ts_approx=clock.approx, host=parser.host, layer="gpu", severity="error", gpu=pci,
                    attrs={"error": label, "reason": reason, "pci": pci}, line=n)
        return
