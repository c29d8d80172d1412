"""One kernel-log record -> timeline rows: the line's time prefix, then what the message says.

The block scanner in collectors/kernel.py hands over only the records that can be events; this
module knows the formats. Prefixes: dmesg raw seconds (``[  123.456789]``), dmesg -T ctime
(``[Mon Oct 16 09:50:06 2017]``), dmesg --time-format iso and -x (``kern  :err   : 2025-...,859532+00:00``),
journalctl short-iso / short-iso-precise / short-precise, syslog with or without the host field,
/dev/kmsg and pstore (``<6>[ ...]``), and bare messages with no time at all.

The event kinds it writes (xid, sxid, gpu_fell_off_bus, nvrm, pcie_aer, mce, oom_kill, link_down, nfs_not_responding,
lustre_error, ...) and their attrs are declared in collectors/catalog/events.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import Any

from collectors.base import (
    MONTHS,
    Event,
    GpuInventory,
    HostFact,
    ParseContext,
    Row,
    from_monotonic,
    infer_year,
    normalize_pci,
    to_utc,
)
from collectors.framework.lazy_re import lazy_regex

# -- the time prefix ----------------------------------------------------------------------------

_DECODE = lazy_regex(r"(?P<fac>kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
                     r"(?P<lvl>emerg|alert|crit|err|warn|notice|info|debug)\s*: ?")
_PRIO = lazy_regex(r"<(\d{1,3})>")
_DEVKMSG = lazy_regex(r"(\d{1,3}),(\d+),(\d+),[^;]*;")
_RAW = lazy_regex(r"\[\s*(\d{1,10}\.\d{1,9})\]\s?")
_CTIME = lazy_regex(r"\[(?:[A-Z][a-z]{2}\s+)?(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)"
                    r"\s+(?P<year>\d{4})\]\s?")
_ISO = lazy_regex(r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<clock>\d\d:\d\d:\d\d)(?:(?P<sep>[.,])(?P<frac>\d{1,9}))?"
                  r"(?P<tz>Z|[+-]\d\d:?\d\d)?\s+")
_SYSLOG = lazy_regex(r"(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)"
                     r"(?:\.(?P<frac>\d{1,9}))?\s+")
_IDENT = lazy_regex(r"(?:(?P<host>[^\s\[\]]*[^\s:\[\]])\s+)?(?P<ident>[\w./@-]+)(?:\[(?P<pid>\d+)\])?:\s?")
_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")

STAMPED = ("mono", "ctime", "iso", "journal", "syslog")
"""Prefix styles that carry a time; dmesg-style ones (mono, ctime, iso) print continuation lines indented."""


@dataclass
class Prefix:
    """What a line's prefix says, before any clock is applied."""

    style: str = "none"
    raw: str | None = None
    mono: float | None = None
    when: datetime | None = None
    month: int = 0
    day: int = 0
    clock: str = ""
    host: str | None = None
    ident: str | None = None
    level: str | None = None


def split_prefix(text: str) -> tuple[Prefix, str]:
    """The prefix of one kernel-log line and the message after it."""
    pre = Prefix()
    if m := _DECODE.match(text):
        pre.level = m.group("lvl")
        text = text[m.end():]
    if text.startswith("<") and (m := _PRIO.match(text)):
        pre.level = _LEVELS[int(m.group(1)) & 7]
        text = text[m.end():]
    elif text[:1].isdigit() and (m := _DEVKMSG.match(text)):
        pre.level = _LEVELS[int(m.group(1)) & 7]
        pre.style, pre.mono, pre.raw = "mono", int(m.group(3)) / 1e6, f"{int(m.group(3)) / 1e6:.6f}"
        return pre, text[m.end():]
    first = text[:1]
    if first == "[":
        if m := _RAW.match(text):
            pre.style, pre.raw, pre.mono = "mono", m.group(1), float(m.group(1))
            return pre, text[m.end():]
        if (m := _CTIME.match(text)) and m.group("mon").lower() in MONTHS:
            when = _ctime(m.group("year"), m.group("mon"), m.group("day"), m.group("clock"))
            if when is None:
                return pre, text
            pre.style, pre.raw, pre.when = "ctime", text[1:m.end()].rstrip().rstrip("]"), when
            return pre, text[m.end():]
        return pre, text
    if first.isdigit():
        m = _ISO.match(text)
        if not m:
            return pre, text
        when = _iso_time(m)
        if when is None:
            return pre, text
        rest = text[m.end():]
        if m.group("sep") == ",":
            if "T" not in text[:11] or not m.group("tz"):
                return pre, text  # Python logging's "2023-07-01 16:41:05,669", not a kernel line
            pre.raw, pre.when, pre.style = text[:m.end()].strip(), when, "iso"
            return pre, rest  # dmesg --time-format iso: the message follows directly
        pre.raw, pre.when = text[:m.end()].strip(), when
        pre.style = "journal"
        return pre, _ident(pre, rest)
    if first.isupper() and (m := _SYSLOG.match(text)) and m.group("mon").lower() in MONTHS:
        pre.style, pre.raw = "syslog", text[:m.end()].strip()
        pre.month, pre.day = MONTHS[m.group("mon").lower()], int(m.group("day"))
        pre.clock = m.group("clock") + (f".{m.group('frac')}" if m.group("frac") else "")
        return pre, _ident(pre, text[m.end():])
    if text.startswith("kernel: "):
        pre.ident = "kernel"
        return pre, _strip_inner_stamp(pre, text[8:])
    return pre, text


@lru_cache(maxsize=4096)
def _ctime(year: str, mon: str, day: str, clock: str) -> datetime | None:
    """A dmesg -T time as UTC, built once per distinct second (a busy log repeats each second) from the
    numbers themselves: strptime costs more than the rest of the line's prefix and depends on the locale."""
    try:
        return datetime(int(year), MONTHS[mon.lower()], int(day), int(clock[:2]), int(clock[3:5]), int(clock[6:]),
                        tzinfo=timezone.utc)
    except (KeyError, ValueError):
        return None


def _ident(pre: Prefix, rest: str) -> str:
    m = _IDENT.match(rest)
    if not m:
        return rest
    pre.host, pre.ident = m.group("host"), m.group("ident")
    return _strip_inner_stamp(pre, rest[m.end():])


def _strip_inner_stamp(pre: Prefix, rest: str) -> str:
    """``kernel: [ 1936.510073] NVRM: ...``: the syslog time wins, the monotonic one is kept as a note."""
    if pre.ident == "kernel" and rest.startswith("[") and (m := _RAW.match(rest)):
        pre.mono = float(m.group(1))
        return rest[m.end():]
    return rest


def _iso_time(m: re.Match[str]) -> datetime | None:
    frac = (m.group("frac") or "")[:6].ljust(6, "0")
    tz = m.group("tz") or "Z"
    if tz != "Z" and ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    try:
        when = datetime.fromisoformat(f"{m.group('date')}T{m.group('clock')}.{frac}{'+00:00' if tz == 'Z' else tz}")
    except ValueError:
        return None
    return when.astimezone(timezone.utc)


@dataclass
class Stamp:
    """A record's resolved time."""

    ts: datetime | None = None
    origin: str = "none"
    approx: bool = False
    raw: str | None = None


def resolve(pre: Prefix, ctx: ParseContext, use_boot: bool = True) -> Stamp:
    """UTC for a prefix: ISO and journal are exact; dmesg seconds need the host's boot time; ctime is
    local time that dmesg -T derived from the boot time (approximate); syslog has no year."""
    if pre.style in ("iso", "journal"):
        return Stamp(pre.when, "iso", False, pre.raw)
    if pre.style == "ctime":
        return Stamp(pre.when, "dmesg_ctime", True, pre.raw)
    if pre.style == "mono":
        boot = ctx.boot_time_for(pre.host) if use_boot else None
        ts = from_monotonic(pre.mono or 0.0, boot)
        return Stamp(ts, "kernel_monotonic", ts is None, pre.raw)
    if pre.style == "syslog":
        year, approx = infer_year(pre.month, pre.day, ctx.reference_for(pre.host))
        ts = _syslog_time(year, pre.month, pre.day, pre.clock)
        if ts is None:
            return Stamp(None, "syslog_noyear", True, pre.raw)
        return Stamp(ts, "syslog_noyear", approx, pre.raw)
    return Stamp()


@lru_cache(maxsize=4096)
def _syslog_time(year: int, month: int, day: int, clock: str) -> datetime | None:
    """A syslog time as UTC, built once per distinct clock (a busy log repeats each second)."""
    hms, _, frac = clock.partition(".")
    try:
        ts = datetime(year, month, day, *map(int, hms.split(":")), tzinfo=timezone.utc)
    except ValueError:
        return None
    return ts + timedelta(microseconds=int(frac[:6].ljust(6, "0"))) if frac else ts


# -- the message --------------------------------------------------------------------------------

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
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
ERROR_WORDS = r"error|fail|timeout|timed out|halt|exception|fault|fallen|lost|unable|invalid|not responding"
"""Words that make a driver's line worth an event (matched case-insensitively); the block prefilter of
collectors/kernel.py asks for them too, so it must see this same list."""
_ERRORISH = lazy_regex(ERROR_WORDS, re.IGNORECASE)

_SXID = lazy_regex(rf"(?P<dev>[\w-]*nvswitch\d*): SXid \(PCI:(?P<pci>{PCI})\):\s*(?P<sxid>\d+),?\s*(?P<rest>.*)")
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
_GHES_SEV = lazy_regex(r"\[Hardware Error\]:\s+event severity: (\w+)")
_GHES_SECTION = lazy_regex(r"\[Hardware Error\]:\s+section_type: (.+?)\s*$")
_GHES_DEVICE = lazy_regex(rf"\[Hardware Error\]:\s+device_id: (?P<dev>{PCI})")
_MCE_BANK = lazy_regex(r"CPU (?P<cpu>\d+): Machine Check(?: Exception)?: (?P<code>\w+) Bank (?P<bank>\d+): "
                       r"(?P<status>[0-9a-fA-F]+)")
_MCE_THERMAL = lazy_regex(r"CPU(?P<cpu>\d+): (?P<what>Core|Package) temperature above threshold")
_EDAC = lazy_regex(r"EDAC (?P<mc>[\w-]+)(?: MC\d+)?: (?P<count>\d+) (?P<type>CE|UE) (?P<rest>.*)")
_OOM_INVOKED = lazy_regex(r"^(?P<proc>.+?) invoked oom-killer: (?P<rest>.*)")
_OOM_INFO = lazy_regex(r"oom-kill:(?P<kv>.*)")
_OOM_KILLED = lazy_regex(r"(?:(?P<scope>Memory cgroup out of memory|Out of memory[^:]*):\s*)?"
                         r"Kill(?:ed)? process (?P<pid>\d+),? (?:UID (?P<uid>\d+), )?"
                         r"\((?P<proc>[^)]*)\)(?P<rest>.*)")
"""Kernels before 4.x say ``Killed process 123, UID 48, (httpd)`` or ``Kill process 123 (httpd) score 0 or
sacrifice child``."""
_KV_KB = lazy_regex(r"(total-vm|anon-rss|file-rss|shmem-rss|pgtables):(\d+)kB")
_HUNG = lazy_regex(r"(?:INFO: )?task (?P<proc>.+?):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds")
_SOFT_LOCKUP = lazy_regex(r"BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s! "
                          r"\[(?P<proc>.+?):(?P<pid>\d+)\]")
_HARD_LOCKUP = lazy_regex(r"(?:Watchdog detected|NMI watchdog:) hard LOCKUP on cpu (?P<cpu>\d+)")
_RCU = lazy_regex(r"rcu: INFO: (?P<flavor>rcu_\w+) (?:self-)?detected stalls?")
_PANIC = lazy_regex(r"Kernel panic - not syncing: (?P<why>.*)")
_OOPS = lazy_regex(r"BUG: (?P<why>unable to handle (?:kernel )?(?:NULL pointer dereference|paging request|page fault)"
                   r"[^\n]*|kernel NULL pointer dereference[^\n]*)|kernel BUG at (?P<at>\S+)|"
                   r"Oops: (?P<code>[0-9a-fx]+)")
_MLX_LINK = lazy_regex(rf"(?P<drv>[\w-]+) (?P<pci>{PCI}) (?P<ifc>[\w.@-]+): Link (?P<st>up|down)\b")
_NIC_LINK = lazy_regex(rf"(?:(?P<drv>[\w-]+) (?P<pci>{PCI}) )?(?P<ifc>[\w.@-]+):? NIC Link is (?P<st>Up|Down)\b"
                       r"(?P<rest>.*)")
_ADDRCONF = lazy_regex(r"ADDRCONF\(NETDEV_\w+\): (?P<ifc>[\w.@-]+): link (?P<st>is not ready|becomes ready)")
_BOND = lazy_regex(r"(?P<bond>bond[\w.-]*): (?:\(slave (?P<slave>[\w.@-]+)\): )?link status definitely (?P<st>down|up)"
                   r"(?: for interface (?P<ifc>[\w.@-]+))?")
_BOND_RELEASE = lazy_regex(r"(?P<bond>bond[\w.-]*)(?: \(unregistering\))?: Releasing (?P<role>backup|active) interface "
                           r"(?P<ifc>[\w.@-]+)")
_BOND_NONE = lazy_regex(r"(?P<bond>bond[\w.-]*): now running without any active interface")
_IB_PORT = lazy_regex(r"infiniband (?P<dev>[\w.-]+): set (?P<st>active|down)")
_MODULE = lazy_regex(rf"(?:(?P<drv>[\w-]+) (?P<pci>{PCI}): )?(?:\w+:\d+:\(pid \d+\): )?Port module event"
                     r"(?:\[(?P<level>\w+)\])?(?::|\s+-)\s*(?:module (?P<module>\d+)[,:]\s*)?"
                     r"(?P<status>[^,\n]+)(?:, (?P<detail>.*))?")
"""mlx5's module events, with or without the device prefix (``mlx5_port_module_event:1131:(pid 0): Port module
event[error]: module 0, Cable error, High Temperature``)."""
_WATCHDOG = lazy_regex(rf"(?:NETDEV WATCHDOG: (?P<ifc>[\w.@-]+) \((?P<drv>[^)]+)\):|"
                       rf"(?P<drv2>[\w-]+) (?P<pci>{PCI}) (?P<ifc2>[\w.@-]+): NETDEV WATCHDOG:(?: CPU: \d+:)?) "
                       r"transmit (?:queue (?P<queue>\d+) )?timed out")
"""Both orders: linux 6.8 (and 6.6.47, 6.1.107) moved the driver and device before ``NETDEV WATCHDOG``; old
kernels print no queue number."""
_PORT_LINK = lazy_regex(rf"(?P<drv>[\w-]+) (?P<pci>{PCI}) (?P<ifc>[\w.@-]+): Port: (?P<port>\d+) Link "
                        r"(?P<st>DOWN|UP|ACTIVE|INIT)\b")
"""mlx5 IPoIB ports (``mlx5_core 0000:3b:00.0 ib0: Port: 1 Link DOWN``)."""
_NIC_HEALTH = lazy_regex(
    r"(?P<what>health_try_recover|print_health_info|Health issue observed|health compromised|health poll failed|"
    r"unrecoverable hardware error|Will cause a leak of a command resource|insufficient power on the PCIe slot|"
    r"ACCESS_REG\b.*?failed|TX timeout detected|RX timeout on channel|"
    r"cmd_work_handler.*?timeout|wait_func.*?timeout|firmware version mismatch|FW pages|"
    r"Detected insufficient power|PCI power is not sufficient|Timeout (?:reading|waiting) [^,]*|"
    r"Wait for completion \(polling\) timeout|didn't send any completion for admin cmd|Admin queue is closed|"
    r"Failed to (?:process|submit) command|Reset indication didn't turn (?:on|off)|Device isn't ready)", re.IGNORECASE)
"""The mlx5 driver's device-health messages (firmware health poller, command interface, slot power): the
NIC itself is failing or misconfigured, not one RDMA operation."""
_NIC_WHO = lazy_regex(rf"\b(?:(?P<drv>mlx5_core|mlx5_ib|mlx4_core|bnxt_en|ice|efa|ena|mlx5_\w+)(?: (?P<pci>{PCI}))?|"
                      r"infiniband (?P<ibdev>(?:rdmap|efa_)\w+))\b")
"""The NIC a device-health message is about: the driver's own prefix, or the RDMA device an AWS EFA adapter
registered (``infiniband rdmap16s27:``)."""
_NVME = lazy_regex(r"nvme (?P<dev>nvme\d+): (?P<what>I/O (?:tag )?\d+ .*?timeout, (?:aborting|reset controller)|"
                   r"Disabling device after reset failure|controller is down; will reset|"
                   r"Device not ready; aborting (?:reset|initialisation)|Removing after probe failure|"
                   r"frozen state error detected, reset controller|Abort status: 0x\w+)")
"""NVMe controller failures; ``I/O ... timeout, completion polled`` is none (the command completed, its interrupt
was late)."""
_NVME_CMD = lazy_regex(r"(?P<dev>nvme\d+n\d+): (?P<what>[\w /]+?\(0x[0-9a-fA-F]+\) @ LBA \d+, \d+ blocks?, "
                       r"(?P<status>[^(\n]+?) \(sct (?P<sct>0x[0-9a-fA-F]+) / sc (?P<sc>0x[0-9a-fA-F]+)\))")
"""A failed NVMe command as linux 5.19+ logs it (``nvme0n1: I/O Cmd(0x2) @ LBA 1336320, 32 blocks, I/O Error
(sct 0x3 / sc 0x71)``)."""
_NVME_PATH = lazy_regex(r"block (?P<dev>nvme\w+): no available path - failing I/O")
_MD_FAIL = lazy_regex(r"md/(?P<level>raid\d*|linear|multipath):?(?P<dev>md\w*): Disk failure on (?P<disk>[\w-]+)"
                      r"(?:,| detected)")
_BEYOND = lazy_regex(r"attempt to access beyond end of device")
_FS_ERR = lazy_regex(r"(?P<fs>EXT[234]-fs|XFS|BTRFS|JBD2|F2FS-fs|NILFS|reiserfs)(?P<sev> error| critical| warning)?"
                     r"(?: \(device (?P<dev>[\w.-]+)\)| \((?P<dev2>[\w.-]+)\))?:?\s*(?P<what>.*)")
_FS_BAD = lazy_regex(r"Remounting filesystem read-only|I/O error while writing superblock|metadata I/O error|"
                     r"Corruption (?:of in-memory data|detected)|[Ss]hutting down filesystem|Log I/O Error|"
                     r"error \(device|Detected aborted journal|log I/O error|unable to read|bad extent|"
                     r"checksum|journal commit I/O error|previous I/O error to superblock|failed to|"
                     r"corrupt|errors=remount-ro.*?triggered|IO errors|has been shut down")
_GPFS = lazy_regex(r"(?P<tag>mmfs|mmfsd|GPFS)(?:\[\d+\])?: (?P<text>.*)")
_NFS_MISC = lazy_regex(r"(?:nfs4_reclaim_open_state: Lock reclaim failed|NFS: state manager: [^\n]*failed|"
                       r"nfs: RPC call returned error \d+|NFS: nfs4_discover_server_trunking unhandled error -?\d+|"
                       r"NFS: [^\n]*?(?:error|failed)[^\n]*)")
_FILE_MAX = lazy_regex(r"VFS: file-max limit (?P<limit>\d+) reached")
_RDMA_ERR = lazy_regex(rf"(?P<who>(?:mlx5_\w+|rdma_\w+|infiniband [\w-]+|ib_\w+)(?: (?P<pci>{PCI}))?):? (?P<rest>.*)")
_NFS = lazy_regex(r"(?P<svc>nfs|NFS|lockd): server (?P<server>\S+) (?P<state>not responding|OK)(?:, (?P<how>[\w ]+))?")
_LUSTRE = lazy_regex(r"(?P<tag>LustreError|Lustre|LNetError|LNet): (?:\d+:\d+:\((?P<src>\S*?)\)\s)?(?P<text>.*)")
_SUPPRESSED = lazy_regex(r"Skipped (\d+) previous similar messages?")
_NID = lazy_regex(r"\b(\d{1,3}(?:\.\d{1,3}){3}@\w+)")
_LUSTRE_RC = lazy_regex(r"rc = (-?\d+)")
_LUSTRE_TARGET = lazy_regex(r"\b([\w-]+-(?:MDT|OST|MGS|MGT)[0-9a-fA-F]*)")
_LNET_TX = lazy_regex(r"Timed out tx for (?P<nid>\S+): (?P<secs>\d+) seconds")
_IO_ERROR = lazy_regex(r"(?:I/O error,? (?:on )?dev(?:ice)? |Buffer I/O error on dev(?:ice)? )(?P<dev>[\w-]+)")
_SEGFAULT = lazy_regex(r"^(?:traps: )?(?:(?P<proc>.+?)\[(?P<pid>\d+)\]:? )?"
                       r"(?P<what>segfault|general protection fault|trap [^ ]+)"
                       r"(?: at (?P<addr>[0-9a-fA-F]+))?.*?\bip[: ](?P<ip>[0-9a-fA-F]+)(?:.*?\berror[: ](?P<err>\w+))?"
                       r"(?:.*? in (?P<lib>[^\[\s]+))?")
_NV_MODULE = lazy_regex(r"^(?P<mod>nvidia[-_](?:peermem|uvm|fs|modeset|drm|nvlink|nvswitch\d*)|nvidia)[: ]\s*"
                        r"(?P<rest>.*)")
_NV_FUNC = lazy_regex(r"^(?P<func>\w+:\d+)\s")
_LINUX = lazy_regex(r"^Linux version (?P<ver>\S+)")
_GPU_LIBS = ("nccl", "cuda", "cudnn", "cublas", "nvidia", "libnv", "torch", "triton")
_STORAGE_TRACE = ("nfs", "rpc_", "io_schedule", "ext4", "xfs", "jbd2", "lustre", "ptlrpc", "blk_", "filemap",
                  "wait_on_page", "fsync", "folio_wait")
_GPU_TRACE = ("[nvidia", "nvidia_", "nv_", "_nv0", "uvm_")
_STORAGE_WORDS = ("I/O error", "nvme", "md/", "-fs", "XFS", "BTRFS", "JBD2", "Remounting filesystem",
                  "beyond end of device", "superblock")
"""Literals one of which every block-device or file-system message of _storage holds."""

_pci = lru_cache(maxsize=4096)(normalize_pci)
"""normalize_pci, once per distinct spelling: a log names the same few devices on every line."""

NVLINK5 = range(144, 151)
CONTAINER_INTERFACES = ("veth", "cni", "docker", "flannel", "cali", "lxc")
"""Name prefixes of interfaces that are container plumbing: their link changes make no events."""


def _recovery_severity(action: str) -> str:
    code = action.split()[0].lower()
    return {"0x0": "info", "0x1": "error", "0x2": "critical", "0x3": "error", "0x4": "error"}.get(code, "critical")


def _aer_severity(text: str) -> str:
    low = text.lower()
    if low.startswith("corrected"):
        return "corrected"
    if "non-fatal" in low or "nonfatal" in low:
        return "uncorrected_nonfatal"
    if "fatal" in low:
        return "uncorrected_fatal"
    return "uncorrected_nonfatal"


@dataclass
class Record:
    """One kernel-log record (a line plus its indented continuation lines), its time and place."""

    message: str
    stamp: Stamp
    host: str | None
    line: int
    level: str | None = None
    following: Callable[[], str] = field(default=lambda: "")


class Classifier:
    """Turns records into rows, remembering what a log says across lines: which PCI id is which GPU
    UUID, the oom-kill summary that precedes its kill line, a multi-line "fallen off the bus"."""

    def __init__(self) -> None:
        self.uuid_by_pci: dict[str, str] = {}
        self.pending_gpu: dict[str, Any] | None = None
        self.fob_head: tuple[str, str | None, int] | None = None
        self.fob_seen: dict[str, int] = {}
        self.oom_info: dict[str, Any] = {}
        self.oom_invoker: str | None = None
        self.aer_source: dict[str, str] = {}
        self.xid_gpus: set[str] = set()
        self.ghes: dict[str, Any] = {}
        self.last_xid: tuple[str | None, int] | None = None
        self.kernel_seen = False
        self.last_oops = -10
        self.oom_summary: Event | None = None

    # -- helpers ----------------------------------------------------------------------------
    def _event(self, rec: Record, kind: str, layer: str, level: str, gpu: str | None = None,
               **attrs: Any) -> Event:
        """An event of ``rec``; ``level`` is the event's severity (attrs may have their own ``severity``)."""
        return Event(kind=kind, message=rec.message, ts=rec.stamp.ts, ts_origin=rec.stamp.origin,
                     ts_approx=rec.stamp.approx, ts_raw=rec.stamp.raw, host=rec.host, layer=layer,
                     severity=level, gpu=gpu, attrs={k: v for k, v in attrs.items() if v is not None},
                     line=rec.line)

    def finish(self) -> Iterator[Row]:
        """At the end of the log: every row still held back."""
        yield from self.flush()
        yield from self._unkilled()

    def flush(self) -> Iterator[Row]:
        """Rows held back for a following line that never came."""
        if self.pending_gpu is not None:
            info, self.pending_gpu = self.pending_gpu, None
            yield GpuInventory(gpu=info["pci"], host=info["host"], uuid=info["uuid"], serial=info.get("serial"))

    # -- dispatch ---------------------------------------------------------------------------
    def handle(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if self.pending_gpu is not None and "Board Serial" not in msg:
            yield from self.flush()
        if "NVRM" in msg:
            yield from self._nvrm(rec)
        elif "SXid" in msg:
            yield from self._sxid(rec)
        elif "[Hardware Error]" in msg:
            yield from self._hardware_error(rec)
        elif "AER" in msg or "PCIe Bus Error" in msg or "DPC:" in msg or "pciehp" in msg or "PCIe bandwidth" in msg:
            yield from self._pcie(rec)
        elif "EDAC" in msg or "temperature above threshold" in msg:
            yield from self._mce(rec)
        elif "oom" in msg or "Killed process" in msg or "Kill process" in msg:
            yield from self._oom(rec)
        elif ("INFO: " in msg or "BUG" in msg or "LOCKUP" in msg or "Kernel panic" in msg or "blocked for more" in msg
              or "Oops: " in msg):
            yield from self._stall(rec)
        elif ": server " in msg or "NFS" in msg or "nfs4_" in msg:
            yield from self._nfs(rec)
        elif "Lustre" in msg or "LNet" in msg:
            yield from self._lustre(rec)
        elif "segfault" in msg or "general protection" in msg or "traps:" in msg:
            yield from self._segfault(rec)
        elif "nvidia" in msg:
            yield from self._nvidia_module(rec)
        elif any(t in msg for t in NV_BARE):
            if family := _driver_family(msg):
                yield self._event(rec, family, "gpu", "error", text=msg.strip()[:200])
        elif "Linux version" in msg:
            yield from self._boot(rec)
        elif any(t in msg for t in _STORAGE_WORDS):
            yield from self._storage(rec)
        elif "mmfs" in msg or "GPFS" in msg:
            yield from self._gpfs(rec)
        elif "VFS: file-max" in msg:
            if m := _FILE_MAX.search(msg):
                yield self._event(rec, "file_table_full", "scheduling", "error", limit=int(m.group("limit")))
        else:
            yield from self._network(rec)

    # -- NVIDIA driver ----------------------------------------------------------------------
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

    # -- PCIe, MCE ------------------------------------------------------------------------------
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

    def _gpu_of(self, dev: str | None) -> str | None:
        return dev if dev and (dev in self.uuid_by_pci or dev in self.xid_gpus) else None

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

    # -- memory, stalls -------------------------------------------------------------------------
    def _oom(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _OOM_INVOKED.search(msg):
            yield from self._unkilled()
            proc = m.group("proc").strip()
            self.oom_invoker = proc
            kv = dict(re.findall(r"(\w+)=([^,\s]+)", m.group("rest")))
            yield self._event(rec, "oom_invoked", "scheduling", "warning", process=proc,
                              gfp_mask=kv.get("gfp_mask"), order=_int(kv.get("order")),
                              oom_score_adj=_int(kv.get("oom_score_adj")))
            return
        if m := _OOM_KILLED.search(msg):
            pid = int(m.group("pid"))
            if self.oom_summary is not None and self.oom_summary.attrs.get("pid") != pid:
                yield from self._unkilled()  # the summary was of another kill, whose own line is missing
            self.oom_summary = None
            sizes = {k.replace("-", "_") + "_kb": int(v) for k, v in _KV_KB.findall(m.group("rest"))}
            info = self.oom_info if self.oom_info.get("pid") in (None, pid) else {}
            uid = re.search(r"UID:(\d+)", m.group("rest")) or (m if m.group("uid") else None)
            adj = re.search(r"oom_score_adj:(-?\d+)", m.group("rest"))
            constraint = info.get("constraint")
            if constraint is None and m.group("scope") and m.group("scope").startswith("Memory cgroup"):
                constraint = "CONSTRAINT_MEMCG"
            yield self._event(rec, "oom_kill", "scheduling", "error", pid=pid, process=m.group("proc"),
                              constraint=constraint, cgroup=info.get("task_memcg"), oom_cgroup=info.get("oom_memcg"),
                              global_oom=info.get("global_oom"),
                              uid=int(uid.group("uid") if uid is m else uid.group(1)) if uid else info.get("uid"),
                              oom_score_adj=int(adj.group(1)) if adj else None, invoker=self.oom_invoker,
                              causes=["host_oom_kill"], **sizes)
            self.oom_info = {}
            self.oom_invoker = None
            return
        if m := _OOM_INFO.search(msg):
            kv = m.group("kv")
            info: dict[str, Any] = {"global_oom": "global_oom" in kv.split(",")}
            for key in ("constraint", "task_memcg", "oom_memcg", "task", "cpuset"):
                if km := re.search(rf"(?:^|,){key}=([^,]*)", kv):
                    info[key] = km.group(1)
            for key in ("pid", "uid"):
                if km := re.search(rf"(?:^|,){key}=(\d+)", kv):
                    info[key] = int(km.group(1))
            yield from self._unkilled()
            self.oom_info = info
            if info.get("pid") is not None:
                # held until the kill line: a cut or rate-limited log may have none, and then this is the kill
                self.oom_summary = self._event(rec, "oom_kill", "scheduling", "error", pid=info["pid"],
                                               process=info.get("task"), constraint=info.get("constraint"),
                                               cgroup=info.get("task_memcg"), oom_cgroup=info.get("oom_memcg"),
                                               global_oom=info["global_oom"], uid=info.get("uid"),
                                               invoker=self.oom_invoker, causes=["host_oom_kill"])

    def _unkilled(self) -> Iterator[Row]:
        """The held oom-kill summary whose ``Killed process`` line never came (a new OOM began, or the log ended)."""
        if self.oom_summary is not None:
            held, self.oom_summary = self.oom_summary, None
            yield held

    def _stall(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _HUNG.search(msg):
            trace = rec.following().lower()
            layer = "network_storage" if any(t in trace for t in _STORAGE_TRACE) else \
                "gpu" if any(t in trace for t in _GPU_TRACE) else "hardware"
            yield self._event(rec, "hung_task", layer, "warning", process=m.group("proc"), pid=int(m.group("pid")),
                              seconds=int(m.group("secs")))
        elif m := _SOFT_LOCKUP.search(msg):
            yield self._event(rec, "soft_lockup", "hardware", "error", cpu=int(m.group("cpu")),
                              seconds=int(m.group("secs")), process=m.group("proc"), pid=int(m.group("pid")))
        elif m := _HARD_LOCKUP.search(msg):
            yield self._event(rec, "soft_lockup", "hardware", "critical", cpu=int(m.group("cpu")), hard=True)
        elif m := _RCU.search(msg):
            yield self._event(rec, "rcu_stall", "hardware", "error", flavor=m.group("flavor"))
        elif m := _PANIC.search(msg):
            yield self._event(rec, "kernel_panic", "hardware", "critical", reason=m.group("why").strip())
        elif m := _OOPS.search(msg):
            last, self.last_oops = self.last_oops, rec.line
            if rec.line - last <= 8:  # "BUG: unable to handle ..." then "Oops: 0002 [#1]": one oops
                return
            gpu = bool(re.search(r"\[nvidia|nvidia_|_nv\d|uvm_", rec.following()[:1500]))
            yield self._event(rec, "kernel_oops", "gpu" if gpu else "hardware", "critical",
                              reason=(m.group("why") or m.group("at") or f"Oops {m.group('code')}").strip())

    # -- storage and network ----------------------------------------------------------------------
    def _nfs(self, rec: Record) -> Iterator[Row]:
        m = _NFS.search(rec.message)
        if not m:
            if om := _NFS_MISC.search(rec.message):
                yield self._event(rec, "nfs_error", "network_storage", "error", what=om.group(0).strip())
            return
        down = m.group("state") == "not responding"
        yield self._event(rec, "nfs_not_responding" if down else "nfs_ok", "network_storage",
                          "error" if down else "info", server=m.group("server"), service=m.group("svc").lower(),
                          state=(m.group("how") or "").strip() or None)

    def _lustre(self, rec: Record) -> Iterator[Row]:
        m = _LUSTRE.search(rec.message)
        if not m:
            return
        tag, text = m.group("tag"), m.group("text")
        if sm := _SUPPRESSED.search(text):  # the client hid N more errors of the same call site
            kind = "lnet_error" if tag.startswith("LNet") else "lustre_error"
            yield self._event(rec, kind, "network_storage", "warning", where=m.group("src"),
                              suppressed=int(sm.group(1)))
            return
        nid = _NID.search(text)
        rc = _LUSTRE_RC.search(text)
        target = _LUSTRE_TARGET.search(text)
        common = {"nid": nid.group(1) if nid else None, "rc": int(rc.group(1)) if rc else None,
                  "target": target.group(1) if target else None,
                  "fsname": target.group(1).split("-")[0] if target else None, "where": m.group("src")}
        if tag.startswith("LNet"):
            tx = _LNET_TX.search(text)
            if tx or tag == "LNetError":
                yield self._event(rec, "lnet_error", "network_storage", "error",
                                  seconds=int(tx.group("secs")) if tx else None,
                                  **{**common, "nid": tx.group("nid") if tx else common["nid"]})
            return
        if tag == "LustreError" or re.search(r"network error|failed|timed out|evict|was lost|error", text, re.I):
            yield self._event(rec, "lustre_error", "network_storage", "error", **common)
        elif re.search(r"Connection restored|recovery complete", text, re.I):
            yield self._event(rec, "lustre_recovered", "network_storage", "info", **common)

    def _storage(self, rec: Record) -> Iterator[Row]:
        """Block devices (the block layer, NVMe, md RAID), then file systems: a device error first, since a
        file system names the device it failed on (``EXT4-fs (dm-0): I/O error while writing superblock``)."""
        msg = rec.message
        if "nvme" in msg and (m := _NVME.search(msg)):
            what = m.group("what").strip()
            level = "critical" if what.startswith(("Disabling", "Removing", "Device not ready")) else "error"
            yield self._event(rec, "io_error", "network_storage", level, device=m.group("dev"), subsystem="nvme",
                              what=what)
        elif " @ LBA " in msg and (m := _NVME_CMD.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "error", device=m.group("dev"), subsystem="nvme",
                              what=m.group("what"))
        elif "no available path" in msg and (m := _NVME_PATH.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "critical", device=m.group("dev"),
                              subsystem="nvme", what="no available path")
        elif "Disk failure" in msg and (m := _MD_FAIL.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "critical", device=m.group("disk"),
                              subsystem="md", array=m.group("dev"), raid_level=m.group("level"),
                              what="disk failure")
        elif (fm := _FS_ERR.search(msg)) and (fm.group("sev") in (" error", " critical")
                                              or _FS_BAD.search(fm.group("what") or "")):
            dev = fm.group("dev") or fm.group("dev2")
            what = fm.group("what").strip()
            level = "critical" if "read-only" in what or "hutting down" in what else "error"
            yield self._event(rec, "filesystem_error", "network_storage", level, filesystem=fm.group("fs"),
                              device=dev, what=what[:200])
        elif m := _IO_ERROR.search(msg):
            yield self._event(rec, "io_error", "network_storage", "error", device=m.group("dev"), subsystem="block")
        elif _BEYOND.search(msg):
            yield self._event(rec, "io_error", "network_storage", "error", subsystem="block",
                              what="access beyond end of device")
        elif "Remounting filesystem read-only" in msg or "I/O error while writing superblock" in msg:
            yield self._event(rec, "filesystem_error", "network_storage", "critical", what=msg.strip()[:200])

    def _gpfs(self, rec: Record) -> Iterator[Row]:
        """IBM Storage Scale (GPFS) daemon lines in the kernel log: ``[E]`` errors, expels, lost quorum."""
        m = _GPFS.search(rec.message)
        if m and (m.group("text").startswith(("[E]", "[X]")) or _ERRORISH.search(m.group("text"))
                  or re.search(r"expel|quorum|unmount", m.group("text"), re.I)):
            yield self._event(rec, "gpfs_error", "network_storage", "error", text=m.group("text").strip()[:200])

    def _network(self, rec: Record) -> Iterator[Row]:
        """Each pattern is tried only when a literal it cannot match without is in the line: most
        lines that reach here (mlx5 firmware tracer, interfaces becoming ready) match none of them."""
        msg = rec.message
        if ": Link " in msg and (m := _MLX_LINK.search(msg)):
            up = m.group("st") == "up"
            yield from self._link(rec, up, device=m.group("ifc"), port=m.group("ifc"),
                                  pci=_pci(m.group("pci")), driver=m.group("drv"))
        elif "NIC Link is " in msg and (m := _NIC_LINK.search(msg)):
            up = m.group("st") == "Up"
            speed = re.search(r"(\d+ [GM]bps)", m.group("rest") or "")
            yield from self._link(rec, up, device=m.group("ifc"), port=m.group("ifc"), driver=m.group("drv"),
                                  pci=_pci(m.group("pci")), speed=speed.group(1) if speed else None)
        elif "ADDRCONF(NETDEV_" in msg and (m := _ADDRCONF.search(msg)):
            yield from self._link(rec, m.group("st") == "becomes ready", device=m.group("ifc"), port=m.group("ifc"))
        elif "link status definitely " in msg and (m := _BOND.search(msg)):
            port = m.group("slave") or m.group("ifc")
            yield from self._link(rec, m.group("st") == "up", device=m.group("bond"), port=port)
        elif ": Releasing " in msg and (m := _BOND_RELEASE.search(msg)):
            yield from self._link(rec, False, device=m.group("bond"), port=m.group("ifc"), reason="released",
                                  role=m.group("role"))
        elif "without any active interface" in msg and (m := _BOND_NONE.search(msg)):
            yield from self._link(rec, False, device=m.group("bond"), port=None, reason="no active interface")
        elif "infiniband " in msg and (m := _IB_PORT.search(msg)):
            yield from self._link(rec, m.group("st") == "active", device=m.group("dev"), port=m.group("dev"))
        elif "Port module event" in msg and (m := _MODULE.search(msg)):
            status = m.group("status").strip()
            bad = not re.match(r"Cable plugged", status)
            module = m.group("module")
            yield self._event(rec, "port_module_event", "network_storage", "warning" if bad else "info",
                              device=_pci(m.group("pci")), driver=m.group("drv"),
                              module=int(module) if module else None, status=status, detail=m.group("detail"),
                              high_temperature=True if re.search("high temperature", msg, re.I) else None)
        elif "NETDEV WATCHDOG: " in msg and (m := _WATCHDOG.search(msg)):
            queue = m.group("queue")
            yield self._event(rec, "nic_tx_timeout", "network_storage", "error",
                              device=m.group("ifc") or m.group("ifc2"),
                              driver=m.group("drv") or m.group("drv2"), pci=_pci(m.group("pci")),
                              queue=int(queue) if queue else None)
        elif "Port: " in msg and (m := _PORT_LINK.search(msg)):
            yield from self._link(rec, m.group("st") in ("UP", "ACTIVE"), device=m.group("ifc"), port=m.group("port"),
                                  pci=_pci(m.group("pci")), driver=m.group("drv"))
        elif (m := _NIC_HEALTH.search(msg)) and (who := _NIC_WHO.search(msg)):
            yield self._event(rec, "nic_device_error", "network_storage", "error", driver=who.group("drv") or "efa",
                              pci=_pci(who.group("pci")), device=who.group("ibdev"), what=m.group("what"))
        elif _ERRORISH.search(msg) and (m := _RDMA_ERR.search(msg)) and _ERRORISH.search(m.group("rest")):
            who = m.group("who")
            device = who.split()[-1] if who.startswith("infiniband") else who.split()[0]
            yield self._event(rec, "rdma_error", "network_storage", "error", device=device,
                              pci=_pci(m.group("pci")))

    def _link(self, rec: Record, up: bool, **attrs: Any) -> Iterator[Row]:
        """A link event, except for container plumbing (veth pairs, CNI and Docker bridges): a Kubernetes
        node makes thousands a day as pods come and go, and nobody diagnoses them."""
        if (attrs.get("device") or "").startswith(CONTAINER_INTERFACES):
            return
        yield self._event(rec, "link_up" if up else "link_down", "network_storage", "info" if up else "warning",
                          **attrs)

    # -- processes, modules, boots ---------------------------------------------------------------
    def _segfault(self, rec: Record) -> Iterator[Row]:
        m = _SEGFAULT.search(rec.message)
        if not m:
            return
        lib = m.group("lib")
        gpu_lib = bool(lib) and any(t in lib.lower() for t in _GPU_LIBS)
        if not m.group("pid") and "segfault at" not in rec.message:
            return
        yield self._event(rec, "segfault", "gpu" if gpu_lib else "business", "error",
                          pid=int(m.group("pid")) if m.group("pid") else None,
                          process=(m.group("proc") or "").strip() or None, type=m.group("what"),
                          address=m.group("addr"),
                          ip=m.group("ip"), error=m.group("err"), lib=lib)

    def _nvidia_module(self, rec: Record) -> Iterator[Row]:
        m = _NV_MODULE.search(rec.message)
        if not m or not _ERRORISH.search(m.group("rest")) or _AER_DETAIL.search(rec.message):
            return
        func = _NV_FUNC.match(m.group("rest"))
        module = m.group("mod")
        layer = "network_storage" if "peermem" in module else "gpu"
        yield self._event(rec, "nvidia_module", layer, "error", module=module,
                          func=func.group("func") if func else None)

    def _boot(self, rec: Record) -> Iterator[Row]:
        if m := _LINUX.search(rec.message):
            if not self.kernel_seen:
                self.kernel_seen = True
                yield HostFact("kernel", m.group("ver"), host=rec.host)
            yield self._event(rec, "boot", "hardware", "info", kernel=m.group("ver"))


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


def _ghes_level(severity: str | None) -> str:
    return {"corrected": "warning", "recoverable": "error", "fatal": "critical"}.get(severity or "", "error")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def exact(stamp: Stamp) -> datetime | None:
    """A time good enough to date other evidence of the same host (never an inferred one)."""
    if stamp.ts is None or stamp.approx:
        return None
    return to_utc(stamp.ts)
