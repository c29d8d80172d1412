"""NIC counters and link state: ``ethtool -S`` / ``-i`` / plain ``ethtool IFACE``, ``ip -s link``,
``ifconfig``.

RoCE fabrics and the front-end network of an inference fleet lose packets at the NIC long before
anything logs an error: ring exhaustion (rx_missed_errors, rx_out_of_buffer), physical-layer
discards (rx_discards_phy), CRC/symbol errors of a bad cable. Responders usually hand these over
as one text file with several commands' output pasted together, so one parser reads all of them
in any order, section by section; the interface a section belongs to comes from its own header
(ifconfig, ip link, ``Settings for``), else the command line the capture ran, else the last
interface or ``bus-info`` seen.

Counters become ``series`` rows ``nic.<counter>`` (labels device, class error/congestion/traffic)
so ``workbench/ingest/derivations/counter_deltas.py`` can flag counters that rose between captures.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, Event, HostFact, ParseContext, Row, SeriesPoint, Skipped
from collectors.framework.lazy_re import lazy_regex

NAME = "ethtool"
LAYER = "network_storage"
KINDS = ("ethtool", "ip_link", "ifconfig")
TIMEOUT = 20.0

MAX_INTERFACES = 64
MAX_COUNTERS = 50_000
"""A ConnectX port prints about 1,500 counters; far more means the file is not ethtool output."""

_ERROR_NAME = lazy_regex(r"drop|discard|miss|err|crc|fifo|overrun|over_errors|no_buffer|out_of_buffer|frame"
                         r"|carrier|collision|abort|timeout|jabber|oversize|undersize|fragment|illegal"
                         r"|alloc_fail|link_down")
_NOT_ERROR = lazy_regex(r"xdp|_ok$|csum|_bytes$|^multicast$|wake|stopped|_packets$|_pkts$")
_CONGESTION = lazy_regex(r"pause|ecn|cnp")

_INFO_KEYS = {"driver": "driver", "version": "driver_version", "firmware-version": "firmware",
              "bus-info": "bus", "expansion-rom-version": "expansion_rom"}
_INFO_LINE = lazy_regex(r"^(driver|version|firmware-version|expansion-rom-version|bus-info|supports-[\w-]+):\s*(.*)$")
_STAT_LINE = lazy_regex(r"^\s+([^:]+?):\s+(-?\d+)\s*$")
_IFCONFIG_OLD = lazy_regex(r"^(\S+?)\s+Link encap:")
_IFCONFIG_NEW = lazy_regex(r"^(\S+?):\s+flags=\d+<([^>]*)>")
_IP_LINK = lazy_regex(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>(.*)$")
_SETTINGS = lazy_regex(r"^Settings for (\S+?):\s*$")
_ARGV_IFACE = lazy_regex(r"ethtool\s+(?:-[SiSk]+\s+|--statistics\s+|--driver\s+)?([A-Za-z][\w.-]*)\s*$")
_HEADING_IFACE = lazy_regex(r"ethtool\s+(?:-\w+\s+)*([A-Za-z][\w.-]*\d[\w.-]*)")


# -- live capture -------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """``ip -s -s link`` once, then ``ethtool -i`` and ``ethtool -S`` for each physical interface."""
    if ctx.which("ip"):
        yield ctx.run(["ip", "-s", "-s", "link"], kind="ip_link", timeout=5)
    else:
        ctx.missing("ip", "unavailable: iproute2 not installed")
    ifaces = physical_interfaces()
    if not ifaces:
        ctx.missing("/sys/class/net/*/device", "unavailable: no physical network interfaces")
        return
    if not ctx.which("ethtool"):
        ctx.missing("ethtool", "unavailable: ethtool not installed")
        return
    for iface in ifaces:
        yield ctx.run(["ethtool", "-i", iface], kind="ethtool", timeout=5)
        yield ctx.run(["ethtool", "-S", iface], kind="ethtool", timeout=5)


def physical_interfaces(root: str = "/sys/class/net") -> list[str]:
    """Interfaces backed by a device (NICs, IPoIB), not bridges, veths or loopback."""
    base = Path(root)
    if not base.is_dir():
        return []
    names = [p.name for p in sorted(base.iterdir()) if (p / "device").exists()]
    return names[:MAX_INTERFACES]


# -- sniffing -----------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    # a plain substring test before each pattern that needs it: 512 rank logs are sniffed by every collector
    if "NIC statistics:" in head and re.search(r"^NIC statistics:\s*$", head, re.MULTILINE):
        return {"ethtool": 95}
    if "bus-info:" in head and re.search(r"^driver: \S+", head, re.MULTILINE) \
            and re.search(r"^bus-info:", head, re.MULTILINE):
        return {"ethtool": 90}
    if "Link detected:" in head and re.search(r"^Settings for \S+:\s*$", head, re.MULTILINE):
        return {"ethtool": 90}
    if "mtu " in head and re.search(r"^\d+:\s+\S+:\s+<[^>]*>\s+mtu \d+", head, re.MULTILINE) \
            and re.search(r"^\s+RX:?\s", head, re.MULTILINE):
        return {"ip_link": 90}
    if ("Link encap:" in head and re.search(r"^\S+\s+Link encap:", head, re.MULTILINE)) or (
            "flags=" in head and re.search(r"^\S+:\s+flags=\d+<", head, re.MULTILINE)
            and re.search(r"^\s+RX packets", head, re.MULTILINE)):
        return {"ifconfig": 90}
    return {}


# -- parsing ------------------------------------------------------------------------------------

def counter_class(name: str) -> str:
    """error / congestion / traffic for one NIC counter name, as the drivers spell them."""
    lowered = name.lower()
    if _CONGESTION.search(lowered):
        return "congestion"
    if _ERROR_NAME.search(lowered) and not _NOT_ERROR.search(lowered):
        return "error"
    return "traffic"


class _Block:
    """One section of output about one interface."""

    def __init__(self, section: str, device: str | None, line: int) -> None:
        self.section = section
        self.device = device
        self.line = line
        self.counters: dict[str, int] = {}
        self.flags: set[str] = set()
        self.state: str | None = None
        self.link_detected: bool | None = None
        self.facts: dict[str, str] = {}


class _Parser:
    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.ts, self.origin = ctx.snapshot_time()
        argv = _ARGV_IFACE.search(ctx.source_name or "")
        self.hint = argv.group(1) if argv else None
        self.last_device: str | None = self.hint
        self.bus: str | None = None
        self.block: _Block | None = None
        self.pending_header: tuple[str, list[str]] | None = None

    def device(self) -> str:
        return self.last_device or self.bus or "unknown"

    def start(self, section: str, device: str | None, line: int) -> Iterator[Row]:
        yield from self.flush()
        if device:
            self.last_device = device
        self.block = _Block(section, device or self.last_device, line)

    def flush(self) -> Iterator[Row]:
        block, self.block = self.block, None
        self.pending_header = None
        if block is None:
            return
        device = block.device or self.device()
        for key, value in block.facts.items():
            yield HostFact(f"nic.{device}.{key}", value)
        if self.ts is not None:
            for name, value in block.counters.items():
                yield SeriesPoint(ts=self.ts, name=f"nic.{name}", value=float(value),
                                  labels={"device": device, "class": counter_class(name), "section": block.section})
        bad = {n: v for n, v in block.counters.items() if v > 0 and counter_class(n) == "error"}
        if bad:
            text = ", ".join(f"{n}={v}" for n, v in sorted(bad.items()))
            yield self._event("nic_drops", f"{device}: {text} ({block.section})", "warning", block,
                              {"device": device, "counters": bad, "section": block.section})
        down_reason = self._down(block)
        if down_reason:
            yield self._event("link_down", f"{device}: {down_reason}", "error", block,
                              {"device": device, "port": None, "state": down_reason})

    @staticmethod
    def _down(block: _Block) -> str | None:
        if block.link_detected is False:
            return "link not detected"
        if "NO-CARRIER" in block.flags:
            return "NO-CARRIER"
        if block.section == "ip -s link" and "UP" in block.flags and "LOWER_UP" not in block.flags:
            return f"up without carrier (state {block.state or 'unknown'})"
        if block.section == "ifconfig" and "UP" in block.flags and block.flags and "RUNNING" not in block.flags:
            return "up but not RUNNING (no carrier)"
        return None

    def _event(self, kind: str, message: str, severity: str, block: _Block, attrs: dict) -> Event:
        return Event(kind=kind, message=message, ts=self.ts, ts_origin=self.origin if self.ts else "none",
                     ts_approx=self.origin == "mtime", severity=severity, attrs=attrs, line=block.line)

    def feed(self, n: int, line: str) -> Iterator[Row]:
        stripped = line.strip()
        if not stripped:
            if self.block and self.block.section in ("ifconfig", "ethtool -i"):
                yield from self.flush()
            return
        if stripped.startswith("#"):
            if m := _HEADING_IFACE.search(stripped):
                self.last_device = m.group(1)
            return
        if stripped == "NIC statistics:":
            yield from self.start("ethtool -S", None, n)
            return
        if m := _SETTINGS.match(line):
            yield from self.start("ethtool", m.group(1), n)
            return
        if m := _IP_LINK.match(line):
            yield from self.start("ip -s link", m.group(1), n)
            assert self.block is not None
            self.block.flags = set(m.group(2).split(","))
            if sm := re.search(r"\bstate (\S+)", m.group(3)):
                self.block.state = sm.group(1)
            if mm := re.search(r"\bmtu (\d+)", m.group(3)):
                self.block.facts["mtu"] = mm.group(1)
            return
        if m := _IFCONFIG_NEW.match(line):
            yield from self.start("ifconfig", m.group(1), n)
            assert self.block is not None
            self.block.flags = set(m.group(2).split(","))
            return
        if m := _IFCONFIG_OLD.match(line):
            yield from self.start("ifconfig", m.group(1), n)
            return
        if m := _INFO_LINE.match(line):
            if self.block is None or self.block.section != "ethtool -i":
                yield from self.start("ethtool -i", self.hint, n)
            key, value = m.group(1), m.group(2).strip()
            if key == "bus-info" and value:
                self.bus = value
            if key in _INFO_KEYS and value:
                assert self.block is not None
                self.block.facts[_INFO_KEYS[key]] = value
            return
        block = self.block
        if block is None:
            yield Skipped(n, "not a NIC statistics line")
            return
        if block.section == "ethtool -S":
            if m := _STAT_LINE.match(line):
                if len(block.counters) >= MAX_COUNTERS:
                    yield Skipped(n, f"more than {MAX_COUNTERS} counters in one section")
                    return
                block.counters[m.group(1).strip()] = int(m.group(2))
            else:
                yield Skipped(n, "not an 'ethtool -S' counter line")
        elif block.section == "ethtool":
            if m := re.match(r"^\s+Link detected:\s*(yes|no)", line):
                block.link_detected = m.group(1) == "yes"
            elif m := re.match(r"^\s+Speed:\s*(\S+)", line):
                block.facts["speed"] = m.group(1)
        elif block.section == "ifconfig":
            self._ifconfig_line(block, stripped)
        elif block.section == "ip -s link":
            yield from self._ip_line(n, block, stripped)

    @staticmethod
    def _ifconfig_line(block: _Block, text: str) -> None:
        if re.match(r"^(UP|BROADCAST|LOOPBACK|POINTOPOINT|RUNNING|MULTICAST|NOARP)\b", text):
            block.flags = set(re.findall(r"\b([A-Z][A-Z-]+)\b(?!:)", text.split("MTU")[0]))
            if m := re.search(r"MTU:(\d+)", text):
                block.facts["mtu"] = m.group(1)
            return
        if re.match(r"^(RX|TX)\s", text):
            for segment in re.split(r"\s+(?=(?:RX|TX)\s)", text):
                direction, _, rest = segment.partition(" ")
                for name, value in re.findall(r"([a-z]+)[:\s]\s*(\d+)", rest):
                    block.counters[f"{direction.lower()}_{name}"] = int(value)
        elif text.startswith("collisions"):
            if cm := re.match(r"collisions[:\s]\s*(\d+)", text):
                block.counters["collisions"] = int(cm.group(1))
        elif m := re.search(r"\bmtu (\d+)", text):
            block.facts["mtu"] = m.group(1)

    def _ip_line(self, n: int, block: _Block, text: str) -> Iterator[Row]:
        m = re.match(r"^(RX|TX)(?: errors)?:\s+(.*)$", text)
        if m and not re.search(r"\d", m.group(2)):
            prefix = m.group(1).lower()
            self.pending_header = (prefix, m.group(2).split())
            return
        if self.pending_header and re.fullmatch(r"[\d\s]+", text):
            prefix, names = self.pending_header
            self.pending_header = None
            for name, value in zip(names, text.split()):
                key = f"{prefix}_{name}"
                block.counters[key if key not in block.counters else f"{key}_detail"] = int(value)
            return
        if text.startswith(("link/", "alias", "altname", "vf ", "prop", "inet")):
            return
        yield Skipped(n, "not an 'ip -s link' line")


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = _Parser(ctx)
    for n, line in ctx.lines(stream):
        yield from parser.feed(n, line)
    yield from parser.flush()
