"""The NVIDIA driver's kernel messages: NVRM lines (Xid, GPU inventory, fallen off the bus, driver load, GSP
heartbeat, NVLink, the module's own families), NVSwitch SXid, and the nvidia-* modules' errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collectors.base import GpuInventory, HostFact, Row
from collectors.framework.kernel_lines.pcie import is_aer_detail
from collectors.framework.kernel_lines.record import ERROR_WORDS, PCI, LineFamily, Record
from collectors.framework.kernel_lines.record import pci_of as _pci
from collectors.framework.lazy_re import lazy_regex

_XID = lazy_regex(r"NVRM: Xid \((?P<loc>[^)]*)\):?\s*(?P<xid>\d+)(?:,\s*|\s+|$)(?P<rest>.*)")
_PIDNAME = lazy_regex(r"pid=(?P<pid>'?<?[\w-]+>?'?)(?:,\s*name=(?P<name>[^,]*))?,?\s*")
_CAUSED = lazy_regex(r"caused by previous Xid (\d+)")
_CHANNEL = lazy_regex(r"\b(?:Ch|Channel ID|[Cc]hannel)\s+((?:0x)?[0-9a-fA-F]{8})\b")
_GSP_TIMEOUT = lazy_regex(r"Timeout after (?P<secs>\d+)s of waiting for RPC response from GPU(?P<idx>\d+) GSP! "
                          r"Expected function (?P<func>\d+ \(\w+\))(?: sequence (?P<seq>\d+))?")
_RECOVERY = lazy_regex(r"GPU recovery action changed from (?P<old>0x[0-9a-fA-F]+ \([^)]*\)) to "
                       r"(?P<new>0x[0-9a-fA-F]+ \([^)]*\))")
_CONTAINED = lazy_regex(r"(?P<what>Contained|Uncontained): (?P<unit>.+?)\. RST: (?P<rst>Yes|No)"
                        r"(?:, D-RST: (?P<drst>Yes|No))?")
_NVLINK5 = lazy_regex(r"(?P<unit>[A-Z][A-Z0-9_]*)\s+(?P<sev>Fatal|Nonfatal|Non-fatal)\s+(?P<xc>XC\d+)\s+"
                      r"(?P<inj>i\d+)\s+"
                      r"Link\s+(?P<link>-?\d+)\s+\((?P<regs>0x[0-9a-fA-F]+(?:\s+0x[0-9a-fA-F]+)*)\)")
"""r560+ pads the fields to columns (``NETIR_LINK_EVT  Fatal   XC0 i0 Link 01``), earlier drivers print one space."""
_NVLINK74 = lazy_regex(r"NVLink: (?P<what>[\w-]+ )?error detected on link (?P<link>\d+)\s*\((?P<regs>[^)]*)\)")
_LINKNO = lazy_regex(r"\blink (\d+)\b", re.IGNORECASE)
_HEXWORDS = lazy_regex(r"^[0-9a-fA-F]{8}(?:\s+[0-9a-fA-F]{8})+\s*$")
_MMU = lazy_regex(r"MMU Fault: ENGINE (?P<engine>\S+)(?: (?P<client>\S+))? faulted @ (?P<addr>0x[0-9a-fA-F_]+)\. "
                  r"Fault is of type (?P<type>\S+)")
_GR = lazy_regex(r"Graphics (?P<what>.+?) Exception on \(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+)(?:, SM (?P<sm>\d+))?\): "
                 r"(?P<exc>.+)")
_GPU_AT = lazy_regex(rf"NVRM: GPU at (?:PCI:)?(?P<pci>{PCI}): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_SERIAL = lazy_regex(r"NVRM: GPU Board Serial Number: ?(?P<serial>\S*)")
_FOB_ONE = lazy_regex(r"NVRM: GPU (?:at )?(?:PCI:)?"
                      r"(?P<pci>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?):? "
                      r"(?:GPU )?has fallen off the bus")
"""Older drivers name the GPU without its PCI domain (``NVRM: GPU 18:00.0: GPU has fallen off the bus.``)."""
_FOB_HEAD = lazy_regex(rf"NVRM: The NVIDIA GPU (?P<pci>{PCI})"
                       r"(?:.*?\(PCI ID: (?P<pciid>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})\))?")
_DRIVER = lazy_regex(r"NVRM: loading NVIDIA UNIX (?:(?P<open>Open )|[\w-]+ )?Kernel Module(?: for \S+)?\s+"
                     r"(?P<ver>\d+\.\d+(?:\.\d+)?)")
"""The open module says ``Open Kernel Module for x86_64  570.158.01``, the proprietary one
``x86_64 Kernel Module  535.104.05``."""
_HEARTBEAT = lazy_regex(r"Heartbeat timed out,.*?diff (?P<diff>\d+) timeout (?P<timeout>\d+)")
_NVRM_FUNC = lazy_regex(r"NVRM: (?:GPU\d+ )?(\w+): ")
_DRIVER_FAMILIES = (
    ("driver_platform_error", re.compile(
        r"\bdsi\b|dsi_|panel|\bclk|clock|\bDT\b|dt node|device tree|gpio|\bi2c|bpmp|powergate|devfreq|thermal|"
        r"cooling|hdacodec|mipi|dpaux|\bniso\b|\biso\b|\bicc|reset_control|\bSOC\b|Tegra|display|UPHY|OF node|\bof_|"
        r"SMMU|RSDP|ACPI|_PR3|\bDSM\b|WMMX|nvif|backlight|\bdcb\b|Tcpc2disp|MRQ_|nv_imp|window-head-mask|"
        r"memory-region|power-domains|framebuffer|platform (?:device|driver)|SRAT|Hypervisor|libspdm|PBI",
        re.IGNORECASE)),
    ("driver_client_error", re.compile(
        r"ioctl|copy (?:in|out)|invalid context|mmap|dma-buf|dma_buf|dma attachment|nv_buf|minor|excluded|unbind|"
        r"\bp2p|Userspace|VM: |open\(\)|non-existent GPU|structure size|sg->|unimplemented|Import arguments|"
        r"atomic or interrupt context|procfs|proc data|nv-caps|IMEX|semaphore|mutex|spinlock|rwlock|"
        r"won't map|unsupported mode|can't (?:map|unmap)|file private|UUID cache|Wrong input|invalid path",
        re.IGNORECASE)),
    ("driver_memory_error", re.compile(
        r"alloc|leak|memory|bytes|\bpages?\b|vmap|NUMA|onlining|memblock|\bcache\b|stack|mlock|pfn|page table|"
        r"translate address|size mismatch", re.IGNORECASE)),
    ("driver_device_error", re.compile(
        r"probe|init|regist|\bPCI|PCIe|\bBAR|IRQ|\bMSI|interrupt|\bFLR\b|remov|bound to|legacy GPU|\bVF\b|IOMMU|SVA|"
        r"request_mem_region|pci_enable_device|chrdev|cdev|No NVIDIA|None of the NVIDIA|conflicting|another driver|"
        r"ownership|audio driver|BIOS|Plug & Play|\bPAT\b|notifier|Device start|currently unavailable|"
        r"use this GPU|rm_init|hotplug|[Pp]atch|timer|queue|module parameter|Persistence|GPUs found|token|"
        r"firewall|DpAux|Minor device|PM %s|System Power Management|power management|suspend|resume",
        re.IGNORECASE)),
)
"""The NVIDIA kernel module's own messages (kernel-open/nvidia), by what they are about: the SoC platform
(Tegra display, clocks, device tree, ACPI), a client's call (ioctl, mmap, dma-buf, /proc, capabilities), the
driver's memory, or setting up, resetting and removing a GPU (probe, PCI resources, IRQ/MSI, BAR, FLR). The
first family that matches names the line; collectors/catalog/harvest/nvidia_driver.yaml holds the messages."""
_HEX_WORD = lazy_regex(r"\b0x[0-9a-fA-F]{16}\b")
NV_BARE = ("nv-caps", "dma_buf", "nv_buf", "libspdm", "DSI panel", "DSI Panel", "Dsi panel", "DP UPHY",
           "SOC interrupt", "display irq", "dpaux irq", "hdacodec irq", "Tcpc2disp", "dcb array", "dcb blob",
           "UnbindLock", "GPU UUID cache", "get backlight", "MRQ_EMC", "nv_imp_", "icc_put", "icc_set_bw")
"""Literals of the NVIDIA module's messages that it prints without an ``NVRM:`` prefix."""
_ANY_PCI = lazy_regex(rf"(?:PCI:|\b)(?P<pci>{PCI})\b")
_GPU_INDEX = lazy_regex(r"\bGPU(\d{1,2})\b")
_ERRORISH = lazy_regex(ERROR_WORDS, re.IGNORECASE)
_SXID = lazy_regex(rf"(?P<dev>[\w-]*nvswitch\d*): SXid \(PCI:(?P<pci>{PCI})\):\s*(?P<sxid>\d+),?\s*(?P<rest>.*)")
_NV_MODULE = lazy_regex(r"^(?P<mod>nvidia[-_](?:peermem|uvm|fs|modeset|drm|nvlink|nvswitch\d*)|nvidia)[: ]\s*"
                        r"(?P<rest>.*)")
_NV_FUNC = lazy_regex(r"^(?P<func>\w+:\d+)\s")

NVLINK5 = range(144, 151)


def _recovery_severity(action: str) -> str:
    code = action.split()[0].lower()
    return {"0x0": "info", "0x1": "error", "0x2": "critical", "0x3": "error", "0x4": "error"}.get(code, "critical")


class NvidiaLines(LineFamily):
    """NVRM, SXid and nvidia-module lines; remembers which PCI id is which GPU UUID, the Xid just seen, the
    GPU inventory line waiting for its serial number, and a "fallen off the bus" said over several lines."""

    pending_gpu: dict[str, Any] | None
    fob_head: tuple[str, str | None, int] | None
    fob_seen: dict[str, int]
    last_xid: tuple[str | None, int] | None

    def flush(self) -> Iterator[Row]:
        """Rows held back for a following line that never came."""
        if self.pending_gpu is not None:
            info, self.pending_gpu = self.pending_gpu, None
            yield GpuInventory(gpu=info["pci"], host=info["host"], uuid=info["uuid"], serial=info.get("serial"))

    def _nvrm(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _XID.search(msg):
            yield from self._xid(rec, m)
            return
        if m := _GPU_AT.search(msg):
            pci = _pci(m.group("pci"))
            if pci:
                self.uuid_by_pci[pci] = m.group("uuid")
                self.pending_gpu = {"pci": pci, "uuid": m.group("uuid"), "host": rec.host}
            return
        if m := _SERIAL.search(msg):
            if self.pending_gpu is not None and m.group("serial"):
                self.pending_gpu["serial"] = m.group("serial")
            yield from self.flush()
            return
        if "fallen off the bus" in msg:
            pci = None
            pci_id = None
            if (m := _FOB_ONE.search(msg)) or (m := _FOB_HEAD.search(msg)):
                pci = _pci(m.group("pci"))
                pci_id = m.groupdict().get("pciid")
            elif self.fob_head and rec.line - self.fob_head[2] <= 5:
                pci, pci_id = self.fob_head[0], self.fob_head[1]
            if pci and self._new_fall(pci, rec.line):
                yield self._event(rec, "gpu_fell_off_bus", "hardware", "critical", gpu=pci, pci=pci, pci_id=pci_id,
                                  uuid=self.uuid_by_pci.get(pci))
                return
        if m := _FOB_HEAD.search(msg):
            self.fob_head = (_pci(m.group("pci")) or "", m.group("pciid"), rec.line)
        if m := _DRIVER.search(msg):
            yield HostFact("versions.driver", m.group("ver"), host=rec.host)
            yield self._event(rec, "driver_loaded", "gpu", "info", version=m.group("ver"),
                              flavor="open" if m.group("open") else "proprietary")
            return
        if m := _HEARTBEAT.search(msg):
            yield self._event(rec, "gsp_heartbeat_timeout", "gpu", "critical", gpu=self._recent_gpu(rec),
                              diff_ms=int(m.group("diff")), timeout_ms=int(m.group("timeout")))
            return
        pci_match = _ANY_PCI.search(msg)
        gpu = _pci(pci_match.group("pci")) if pci_match else None
        if ("NVLink" in msg or "nvlink" in msg) and _ERRORISH.search(msg):
            link = _LINKNO.search(msg)
            yield self._event(rec, "nvlink_error", "hardware", "error", gpu=gpu, source="driver",
                              link=int(link.group(1)) if link else None,
                              func=fm.group(1) if (fm := _NVRM_FUNC.search(msg)) else None)
            return
        if family := _driver_family(msg):
            yield self._event(rec, family, "gpu", "warning" if "warn" in (rec.level or "") else "error", gpu=gpu,
                              pci=gpu, text=msg[msg.find("NVRM:") + 6:].strip()[:200])
            return
        index = _GPU_INDEX.search(msg)
        crash = "crash dump" in msg
        severity = "warning" if crash or _ERRORISH.search(msg) else "info"
        yield self._event(rec, "nvrm", "gpu", severity, gpu=gpu or (self._recent_gpu(rec) if crash else None),
                          pci=gpu, gpu_index=int(index.group(1)) if index else None, crash_dump=crash or None)

    def _recent_gpu(self, rec: Record) -> str | None:
        if self.last_xid and rec.line - self.last_xid[1] <= 10:
            return self.last_xid[0]
        return None

    def _new_fall(self, pci: str, line: int) -> bool:
        """One gpu_fell_off_bus per GPU and burst: the driver says it in two or three lines."""
        last = self.fob_seen.get(pci)
        self.fob_seen[pci] = line
        return last is None or line - last > 50

    def _xid(self, rec: Record, m: re.Match[str]) -> Iterator[Row]:
        from collectors.framework.xid_catalog import lookup

        loc = m.group("loc")
        pci = _pci(loc.split("GPU-I:")[0].replace("PCI:", ""))
        xid = int(m.group("xid"))
        rest = m.group("rest").strip()
        attrs: dict[str, Any] = {"xid": xid, "pci": pci, "pid": None, "process": None}
        if "GPU-I:" in loc:
            attrs["gpu_instance"] = loc.split("GPU-I:")[1].strip()
        if pm := _PIDNAME.match(rest):
            pid = pm.group("pid").strip("'")
            attrs["pid"] = int(pid) if pid.isdigit() else None
            name = (pm.group("name") or "").strip()
            attrs["process"] = name if name and name != "<unknown>" else None
            rest = rest[pm.end():]
        attrs["text"] = rest
        if pci and pci in self.uuid_by_pci:
            attrs["uuid"] = self.uuid_by_pci[pci]
        # Each optional part is searched for only when a literal it cannot match without is in the text.
        if "caused by" in rest and (cm := _CAUSED.search(rest)):
            attrs["caused_by_xid"] = int(cm.group(1))
        if ("Ch" in rest or "hannel" in rest) and (ch := _CHANNEL.search(rest)):
            attrs["channel"] = ch.group(1)
        info = lookup(xid)
        severity = info.severity
        if xid in NVLINK5 and (nm := _NVLINK5.search(rest)):
            regs = [int(r, 16) for r in nm.group("regs").split()]
            attrs.update(nvlink_unit=nm.group("unit"), nvlink_severity=nm.group("sev").replace("-", ""),
                         nvlink_link=int(nm.group("link")), cross_containment=nm.group("xc"),
                         injected=nm.group("inj"), registers=[f"0x{r:08x}" for r in regs],
                         intrinfo=f"0x{regs[0]:08x}", error_status=f"0x{regs[1]:08x}" if len(regs) > 1 else None,
                         nvlink_subcode=(regs[0] >> 20) & 0x3F)
            severity = "critical" if nm.group("sev") == "Fatal" else "warning"
        elif "NVLink: " in rest and (nm := _NVLINK74.search(rest)):
            attrs["nvlink_link"] = int(nm.group("link"))
            attrs["registers"] = [r.strip() for r in nm.group("regs").split(",") if r.strip()]
            if nm.group("what"):
                attrs["nvlink_severity"] = nm.group("what").strip()
        elif xid in (136, 137, 155, 74) and (lm := _LINKNO.search(rest)):
            attrs["nvlink_link"] = int(lm.group(1))
        if "Timeout after " in rest and (gm := _GSP_TIMEOUT.search(rest)):
            attrs.update(gsp_timeout_s=int(gm.group("secs")), gpu_index=int(gm.group("idx")),
                         gsp_function=gm.group("func"),
                         gsp_sequence=int(gm.group("seq")) if gm.group("seq") else None)
        if "GPU recovery action" in rest and (rm := _RECOVERY.search(rest)):
            attrs.update(recovery_action=rm.group("new"), previous_recovery_action=rm.group("old"))
            severity = _recovery_severity(rm.group("new"))
        if "ontained: " in rest and (km := _CONTAINED.search(rest)):
            attrs.update(contained=km.group("what") == "Contained", unit=km.group("unit"),
                         reset_required=km.group("rst") == "Yes",
                         drain_reset_required=(km.group("drst") == "Yes") if km.group("drst") else None)
        if "MMU Fault: " in rest and (mm := _MMU.search(rest)):
            attrs.update(mmu_engine=mm.group("engine"), mmu_client=mm.group("client"),
                         fault_address=mm.group("addr"), fault_type=mm.group("type"))
        if "Graphics " in rest and (gr := _GR.search(rest)):
            attrs.update(exception=gr.group("exc").strip(), gpc=int(gr.group("gpc")), tpc=int(gr.group("tpc")))
        if _HEXWORDS.match(rest):
            attrs["words"] = rest.split()
        attrs.update(name=info.name, meaning=info.meaning, action=info.action, follower=info.follower,
                     causes=list(info.causes))
        self.last_xid = (pci, rec.line)
        if pci:
            self.xid_gpus.add(pci)
        yield self._event(rec, "xid", info.layer, severity, gpu=pci, **attrs)
        if "gpu_fell_off_bus" in info.causes and pci and self._new_fall(pci, rec.line):
            yield self._event(rec, "gpu_fell_off_bus", "hardware", "critical", gpu=pci, pci=pci, xid=xid,
                              uuid=attrs.get("uuid"))

    def _sxid(self, rec: Record) -> Iterator[Row]:
        m = _SXID.search(rec.message)
        if not m:
            yield self._event(rec, "nvrm", "hardware", "warning")
            return
        rest = m.group("rest")
        low = rest.lower()
        fatal = None
        if "non-fatal" in low or "nonfatal" in low:
            fatal = False
        elif "fatal" in low:
            fatal = True
        link = _LINKNO.search(rest) or re.search(r"Engine instance (\d+)", rest)
        data = re.search(r"Data \{([^}]*)\}", rest)
        severity = "critical" if fatal else "warning" if fatal is False else "error"
        yield self._event(rec, "sxid", "hardware", severity, sxid=int(m.group("sxid")),
                          pci=_pci(m.group("pci")), nvswitch=m.group("dev"), fatal=fatal,
                          link=int(link.group(1)) if link else None,
                          data=[w.strip() for w in data.group(1).split(",")] if data else None, text=rest,
                          causes=["nvswitch_fault"])

    def _nvidia_module(self, rec: Record) -> Iterator[Row]:
        m = _NV_MODULE.search(rec.message)
        if not m or not _ERRORISH.search(m.group("rest")) or is_aer_detail(rec.message):
            return
        func = _NV_FUNC.match(m.group("rest"))
        module = m.group("mod")
        layer = "network_storage" if "peermem" in module else "gpu"
        yield self._event(rec, "nvidia_module", layer, "error", module=module,
                          func=func.group("func") if func else None)

    def _nvidia_bare(self, rec: Record) -> Iterator[Row]:
        """One of the module's messages printed without ``NVRM:`` (a literal of NV_BARE is in it)."""
        if family := _driver_family(rec.message):
            yield self._event(rec, family, "gpu", "error", text=rec.message.strip()[:200])


def _driver_family(msg: str) -> str | None:
    """The family of one of the NVIDIA module's own messages, or None (an RM line: kept as ``nvrm``). GSP
    RPC dumps and register tables (``NVRM:  0  103  GSP_RM_ALLOC  0x0000000000002081 ...``) are RM's, never a
    family's."""
    if "GSP" in msg or "RPC" in msg or len(_HEX_WORD.findall(msg)) >= 2:
        return None
    for kind, regex in _DRIVER_FAMILIES:
        if regex.search(msg):
            return kind
    return None
