"""Machine checks in the kernel log: MCE banks, EDAC memory-controller counts, CPU thermal throttling, and
firmware-first (GHES) reports, whose PCIe errors are AER in disguise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.base import Row
from collectors.framework.kernel_lines.record import PCI, LineFamily, Record
from collectors.framework.kernel_lines.record import pci_of as _pci
from collectors.framework.lazy_re import lazy_regex

_GHES_SEV = lazy_regex(r"\[Hardware Error\]:\s+event severity: (\w+)")
_GHES_SECTION = lazy_regex(r"\[Hardware Error\]:\s+section_type: (.+?)\s*$")
_GHES_DEVICE = lazy_regex(rf"\[Hardware Error\]:\s+device_id: (?P<dev>{PCI})")
_MCE_BANK = lazy_regex(r"CPU (?P<cpu>\d+): Machine Check(?: Exception)?: (?P<code>\w+) Bank (?P<bank>\d+): "
                       r"(?P<status>[0-9a-fA-F]+)")
_MCE_THERMAL = lazy_regex(r"CPU(?P<cpu>\d+): (?P<what>Core|Package) temperature above threshold")
_EDAC = lazy_regex(r"EDAC (?P<mc>[\w-]+)(?: MC\d+)?: (?P<count>\d+) (?P<type>CE|UE) (?P<rest>.*)")


class MachineCheckLines(LineFamily):
    """``[Hardware Error]``, MCE and EDAC lines; remembers the GHES report being read (severity, section)."""

    ghes: dict[str, Any]

    def _hardware_error(self, rec: Record) -> Iterator[Row]:
        """Machine checks and firmware-first (GHES) reports, whose PCIe errors are AER in disguise."""
        msg = rec.message
        if m := _GHES_SEV.search(msg):
            self.ghes = {"severity": m.group(1).lower(), "line": rec.line}
            return
        if m := _GHES_SECTION.search(msg):
            section = m.group(1)
            self.ghes["section"] = section
            if "PCIe" not in section:
                yield self._event(rec, "mce", "hardware", _ghes_level(self.ghes.get("severity")), subsystem="ghes",
                                  section=section, ghes_severity=self.ghes.get("severity"))
            return
        if (m := _GHES_DEVICE.search(msg)) and "PCIe" in self.ghes.get("section", ""):
            dev = _pci(m.group("dev"))
            ghes = self.ghes.get("severity") or ""
            severity = "corrected" if ghes == "corrected" else "uncorrected_fatal" if ghes == "fatal" \
                else "uncorrected_nonfatal"
            self.ghes = {}
            yield self._event(rec, "pcie_aer", "hardware", "warning" if severity == "corrected" else "error",
                              gpu=self._gpu_of(dev), severity=severity, device=dev, type="GHES PCIe error")
            return
        if m := _MCE_BANK.search(msg):
            yield self._event(rec, "mce", "hardware", "error", subsystem="mce", cpu=int(m.group("cpu")),
                              bank=int(m.group("bank")), status=m.group("status"), code=m.group("code"))
        elif "Machine check events logged" in msg or "Machine Check" in msg:
            yield self._event(rec, "mce", "hardware", "warning", subsystem="mce")

    def _mce(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _EDAC.search(msg):
            ue = m.group("type") == "UE"
            yield self._event(rec, "mce", "hardware", "critical" if ue else "warning", subsystem="edac",
                              controller=m.group("mc"), count=int(m.group("count")), type=m.group("type"),
                              location=m.group("rest").strip())
        elif m := _MCE_THERMAL.search(msg):
            yield self._event(rec, "mce", "hardware", "warning", subsystem="thermal", cpu=int(m.group("cpu")),
                              what=m.group("what").lower())


def _ghes_level(severity: str | None) -> str:
    return {"corrected": "warning", "recoverable": "error", "fatal": "critical"}.get(severity or "", "error")
