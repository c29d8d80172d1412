"""PCIe in the kernel log: AER reports (the header, its status register and error bits), DPC containment,
hotplug link changes and the negotiated link bandwidth."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.base import Row
from collectors.framework.kernel_lines.record import PCI, LineFamily, Record
from collectors.framework.kernel_lines.record import pci_of as _pci
from collectors.framework.lazy_re import lazy_regex

_AER_RECEIVED = lazy_regex(rf"(?P<dev>{PCI}): AER: (?:Multiple )?(?P<sev>Corrected|Uncorrected \((?:Non-Fatal|Fatal)\)|"
                           rf"Uncorrected|Uncorrectable) error (?:message )?received:?\s*(?:from |id=)?(?P<src>\S+)?")
_AER_BUS = lazy_regex(rf"(?:(?P<driver>[\w-]+) )?(?:(?P<dev>{PCI}): )?(?:AER: )?PCIe Bus Error: "
                      r"severity=(?P<sev>[^,]+), "
                      r"type=(?P<type>[^,]+)(?:, (?:id=(?P<id>[0-9a-fA-F]+))?\(?(?P<agent>[\w ]+ ID)?\)?)?")
_DPC = lazy_regex(rf"(?P<dev>{PCI}): DPC: containment event")
_AER_DETAIL = lazy_regex(rf"(?P<dev>{PCI}):\s+(?:AER:\s+)?(?:device \[(?P<id>[0-9a-fA-F]{{4}}:[0-9a-fA-F]{{4}})\] "
                         r"error status/mask=(?P<status>[0-9a-fA-F]+)/(?P<mask>[0-9a-fA-F]+)"
                         r"|\[\s*\d+\]\s+(?P<name>\S+))")
"""The lines under a ``PCIe Bus Error`` header: the status register, then one line per error bit
(kernels since 5.0 put ``AER:`` before them)."""
_XID_PCI = lazy_regex(rf"NVRM: Xid \(PCI:(?P<pci>{PCI})")
_PCIEHP = lazy_regex(rf"(?P<dev>{PCI}): pciehp: Slot\((?P<slot>[^)]*)\): Link (?P<st>Up|Down)")
_BANDWIDTH = lazy_regex(rf"(?P<dev>{PCI}): (?P<gbps>[\d.]+) Gb/s available PCIe bandwidth(?P<limited>, limited by "
                        rf"(?P<speed>[\d.]+ GT/s) PCIe (?P<width>x\d+) link at (?P<at>{PCI}) \(capable of "
                        r"(?P<cap>[\d.]+) Gb/s with (?P<capspeed>[\d.]+ GT/s) PCIe (?P<capwidth>x\d+) link\))?"
                        r"(?: \((?P<speed2>[\d.]+ GT/s) PCIe (?P<width2>x\d+) link\))?")


def is_aer_detail(msg: str) -> bool:
    """Whether ``msg`` is one of the lines under an AER header (which the header's event already holds)."""
    return _AER_DETAIL.search(msg) is not None


def _aer_severity(text: str) -> str:
    low = text.lower()
    if low.startswith("corrected"):
        return "corrected"
    if "non-fatal" in low or "nonfatal" in low:
        return "uncorrected_nonfatal"
    if "fatal" in low:
        return "uncorrected_fatal"
    return "uncorrected_nonfatal"


class PcieLines(LineFamily):
    """AER, DPC, pciehp and bandwidth lines; remembers the source an ``AER: ... error received`` named for the
    header that follows it."""

    aer_source: dict[str, str]

    def _pcie(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _AER_RECEIVED.search(msg):
            self.aer_source[_pci(m.group("dev")) or ""] = _pci(m.group("src")) or ""
            return
        if m := _AER_BUS.search(msg):
            dev = _pci(m.group("dev"))
            severity = _aer_severity(m.group("sev"))
            level = {"corrected": "warning", "uncorrected_nonfatal": "error"}.get(severity, "critical")
            yield self._event(rec, "pcie_aer", "hardware", level, gpu=self._aer_gpu(rec, dev, m.group("driver")),
                              severity=severity, device=dev, type=m.group("type").strip(), agent=m.group("agent"),
                              source=self.aer_source.pop(dev or "", None) or None, **self._aer_detail(rec, dev))
            return
        if m := _DPC.search(msg):
            dev = _pci(m.group("dev"))
            yield self._event(rec, "pcie_aer", "hardware", "critical", gpu=self._gpu_of(dev),
                              severity="uncorrected_fatal", device=dev, type="DPC containment")
            return
        if m := _PCIEHP.search(msg):
            dev = _pci(m.group("dev"))
            kind = "pcie_link_down" if m.group("st") == "Down" else "pcie_link_up"
            yield self._event(rec, kind, "hardware", "error" if kind == "pcie_link_down" else "info",
                              device=dev, slot=m.group("slot"))
            return
        if m := _BANDWIDTH.search(msg):
            dev = _pci(m.group("dev"))
            if m.group("limited"):
                yield self._event(rec, "pcie_link_degraded", "hardware", "warning", gpu=self._gpu_of(dev),
                                  device=dev, gbps=float(m.group("gbps")), speed=m.group("speed"),
                                  width=m.group("width"), limited_at=_pci(m.group("at")),
                                  capable_gbps=float(m.group("cap")), capable_speed=m.group("capspeed"),
                                  capable_width=m.group("capwidth"))
            else:
                yield self._event(rec, "pcie_bandwidth", "hardware", "info", device=dev, gbps=float(m.group("gbps")),
                                  speed=m.group("speed2"), width=m.group("width2"))

    def _aer_gpu(self, rec: Record, dev: str | None, driver: str | None) -> str | None:
        """The GPU an AER header is about: its driver is nvidia, or an Xid names the address (before the
        header, or in the text right after it, where the driver's reaction to the error usually is)."""
        if not dev:
            return None
        if driver == "nvidia" or self._gpu_of(dev):
            return dev
        later = {_pci(m.group("pci")) for m in _XID_PCI.finditer(rec.following())}
        return dev if dev in later else None

    @staticmethod
    def _aer_detail(rec: Record, dev: str | None) -> dict[str, Any]:
        """The status register and error bits the kernel prints under a header, as the header's attrs;
        the detail lines themselves make no events, so one AER report is one event."""
        detail: dict[str, Any] = {}
        names: list[str] = []
        for line in rec.following().splitlines():
            m = _AER_DETAIL.search(line)
            if not m or _pci(m.group("dev")) != dev:
                break
            if m.group("name"):
                names.append(m.group("name"))
            else:
                detail.update(pci_id=m.group("id").lower(), error_status=m.group("status"),
                              error_mask=m.group("mask"))
        return dict(detail, bits=names or None)
