"""PCIe link health from ``lspci -vv``: links trained below their capability, and AER error status.

A GPU or NIC on a x8 link where it should have x16, or one at Gen1 speed, halves its bandwidth
and makes that rank the straggler of every collective; AER status bits are what is left of the
correctable/uncorrectable errors once the kernel log has rotated. GPUs lower their link speed at
idle to save power (newer lspci then marks the speed "(downgraded)"), so width degradation is
always flagged, speed degradation only when lspci marks it, and a GPU's speed-only downgrade is
the separate ``info`` kind ``pcie_link_downshift`` (lspci cannot tell idle power saving from a
fault); NICs do not idle down, so their lower speed is ``pcie_link_degraded``.
AER status is read on every device: the root port above a GPU is usually where errors land.

Artifact kind: ``lspci_vv`` (``lspci -vv``/``-vvv``, with or without ``-D``/``-nn``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, Event, HostFact, ParseContext, Row, Skipped, gpu_id
from collectors.framework.lazy_re import lazy_regex

NAME = "pci"
LAYER = "hardware"
KINDS = ("lspci_vv",)
TIMEOUT = 20.0

_HEADER = lazy_regex(r"^((?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.+?)(?:\s\[[0-9a-f]{4}\])?:"
                     r"\s+(.*)$")
_LNK = lazy_regex(r"^\s+(LnkCap|LnkSta):\s+(.*)$")
_SPEED = lazy_regex(r"Speed\s+([\d.]+GT/s|unknown)(\s*\((?:downgraded|ok)\))?", re.IGNORECASE)
_WIDTH = lazy_regex(r"Width\s+x(\d+)(\s*\((?:downgraded|ok|strange)\))?", re.IGNORECASE)
_AER = lazy_regex(r"^\s+(UESta|UESvrt|CESta):\s+(.*)$")
_BIT = lazy_regex(r"([A-Za-z][\w]*)([+-])")

_GPU_CLASS = lazy_regex(r"VGA compatible controller|3D controller|Display controller|Processing accelerators",
                        re.IGNORECASE)
_NIC_CLASS = lazy_regex(r"Ethernet controller|Infiniband controller|Network controller|Fabric controller",
                        re.IGNORECASE)
DEFAULT_FATAL = {"DLP", "SDES", "FCP", "RxOF", "MalfTLP", "SurpriseDown"}
"""Uncorrectable errors the PCIe spec makes fatal by default, used when UESvrt was not printed."""


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("lspci"):
        ctx.missing("lspci", "unavailable: pciutils not installed")
        return
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        ctx.missing("lspci -vv capabilities", "denied: link status and AER registers need root")
    yield ctx.run(["lspci", "-vv", "-D"], kind="lspci_vv", timeout=15)


def sniff(name: str, head: str) -> dict[str, int]:
    if re.search(r"^\s+Lnk(?:Cap|Sta):\s", head, re.MULTILINE) and _HEADER_LINE.search(head):
        return {"lspci_vv": 95}
    if len(_HEADER_LINE.findall(head)) >= 2 and re.search(r"^\s+(Subsystem|Control|Kernel driver in use):", head,
                                                          re.MULTILINE):
        return {"lspci_vv": 85}
    return {}


_HEADER_LINE = lazy_regex(r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7] [^:\n]+:", re.MULTILINE)


@dataclass
class _Link:
    speed: str | None
    speed_marked: bool
    width: int | None
    width_marked: bool
    annotated: bool
    """Newer lspci writes '(ok)' or '(downgraded)' after LnkSta values; older versions write neither."""
    line: int


@dataclass
class _Device:
    pci: str
    cls: str
    name: str
    line: int
    links: dict[str, _Link] = field(default_factory=dict)
    aer: dict[str, dict[str, bool]] = field(default_factory=dict)
    aer_line: int | None = None
    denied: bool = False

    @property
    def role(self) -> str:
        if _GPU_CLASS.search(self.cls):
            return "gpu"
        if _NIC_CLASS.search(self.cls):
            return "nic"
        return "other"


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    device: _Device | None = None
    for n, line in ctx.lines(stream):
        if m := _HEADER.match(line):
            if device is not None:
                yield from _device_rows(device, ctx)
            pci = gpu_id(m.group(1))
            device = _Device(pci, m.group(2), m.group(3), n)
            continue
        if device is None:
            if line.strip():
                yield Skipped(n, "not an lspci line")
            continue
        if "<access denied>" in line:
            device.denied = True
        elif m := _LNK.match(line):
            text = m.group(2)
            speed, width = _SPEED.search(text), _WIDTH.search(text)
            device.links[m.group(1)] = _Link(speed.group(1) if speed else None,
                                             bool(speed and "downgraded" in (speed.group(2) or "").lower()),
                                             int(width.group(1)) if width else None,
                                             bool(width and "downgraded" in (width.group(2) or "").lower()),
                                             bool(re.search(r"\((?:ok|downgraded|strange)\)", text)), n)
        elif m := _AER.match(line):
            device.aer[m.group(1)] = {bit: sign == "+" for bit, sign in _BIT.findall(m.group(2))}
            device.aer_line = device.aer_line or n
    if device is not None:
        yield from _device_rows(device, ctx)


def _gts(speed: str | None) -> float | None:
    if not speed or speed.lower() == "unknown":
        return None
    try:
        return float(speed.lower().removesuffix("gt/s"))
    except ValueError:
        return None


def _device_rows(device: _Device, ctx: ParseContext) -> Iterator[Row]:
    ts, origin = ctx.snapshot_time()
    if device.denied and not device.links and not device.aer:
        yield Skipped(device.line, "capabilities not readable (lspci -vv needs root)")
    yield from _link_rows(device, ts, origin)
    yield from _aer_rows(device, ts, origin)


def _link_rows(device: _Device, ts: datetime | None, origin: str) -> Iterator[Row]:
    if "LnkCap" not in device.links or "LnkSta" not in device.links or device.role == "other":
        return
    cap, sta = device.links["LnkCap"], device.links["LnkSta"]
    cap_speed, cap_width, sta_speed, sta_width = cap.speed, cap.width, sta.speed, sta.width
    speed_marked, width_marked, line = sta.speed_marked, sta.width_marked, sta.line
    yield HostFact(f"pcie.{device.pci}.link", f"{sta_speed} x{sta_width} (capable {cap_speed} x{cap_width})")
    width_low = cap_width is not None and sta_width is not None and sta_width < cap_width
    cap_g, sta_g = _gts(cap_speed), _gts(sta_speed)
    speed_low = cap_g is not None and (sta_g is None or sta_g < cap_g) and (
        speed_marked or (not sta.annotated and device.role == "nic"))
    if not (width_low or speed_low):
        return
    degraded = "+".join(k for k, low in (("width", width_low), ("speed", speed_low)) if low)
    if sta_width == 0:
        severity = "error"
    elif width_low:
        severity = "warning"
    else:
        severity = "info" if device.role == "gpu" else "warning"
    downshift = degraded == "speed" and device.role == "gpu"
    note = " (a GPU lowers its link speed when idle)" if downshift else ""
    yield Event(kind="pcie_link_downshift" if downshift else "pcie_link_degraded", ts=ts,
                ts_origin=origin if ts else "none", ts_approx=origin == "mtime",
                severity=severity, gpu=device.pci if device.role == "gpu" else None, line=line,
                message=f"{device.pci} {device.name}: link {sta_speed} x{sta_width}, capable {cap_speed} "
                        f"x{cap_width}{note}",
                attrs={"device": device.pci, "role": device.role, "name": device.name, "cap_speed": cap_speed,
                       "cap_width": cap_width, "sta_speed": sta_speed, "sta_width": sta_width, "degraded": degraded,
                       "marked": speed_marked or width_marked})


def _aer_rows(device: _Device, ts: datetime | None, origin: str) -> Iterator[Row]:
    uncorrected = [bit for bit, on in device.aer.get("UESta", {}).items() if on]
    corrected = [bit for bit, on in device.aer.get("CESta", {}).items() if on]
    if uncorrected:
        svrt = device.aer.get("UESvrt")
        fatal_bits = {b for b, on in svrt.items() if on} if svrt else DEFAULT_FATAL
        fatal = any(bit in fatal_bits for bit in uncorrected)
        severity = "uncorrected_fatal" if fatal else "uncorrected_nonfatal"
        yield _aer_event(device, ts, origin, severity, uncorrected, "critical" if fatal else "error")
    if corrected:
        yield _aer_event(device, ts, origin, "corrected", corrected, "warning")


def _aer_event(device: _Device, ts: datetime | None, origin: str, severity: str, bits: list[str], level: str) -> Event:
    return Event(kind="pcie_aer", ts=ts, ts_origin=origin if ts else "none", ts_approx=origin == "mtime",
                 severity=level, gpu=device.pci if device.role == "gpu" else None, line=device.aer_line,
                 message=f"{device.pci} {device.name}: AER {severity.replace('_', ' ')} status {' '.join(bits)}",
                 attrs={"severity": severity, "device": device.pci, "bits": bits, "role": device.role,
                        "name": device.name})
