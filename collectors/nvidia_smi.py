"""nvidia-smi and DCGM text: the offline twin of the NVML collector, plus a live nvidia-smi capture.

Responders hand over whatever they ran: ``nvidia-smi -q`` (any driver's layout, or a pasted
excerpt), ``nvidia-smi -q -x`` (DTD nvsmi_device_v10 through v13, often cut short), the default
``nvidia-smi`` table, ``--query-gpu ... --format=csv[,noheader][,nounits]``, ``nvidia-smi nvlink
--status``/``-e``, ``nvidia-smi topo -m`` (a ``gpu_topology`` host fact), ``nv-fabricmanager
--version`` (``versions.fabricmanager``), and DCGM's ``dcgmi diag``/``dmon``/``health`` and
nvvs/hostengine logs, frequently several of them pasted into one file. So one line-driven parser
recognises each block as it comes and hands it to the reader of that format; every reader produces
the same rows as NVML (GpuInventory, GpuSample) and the same derived events through
``collectors.nvml.HealthTracker``. Lines that belong to no known block are counted as skipped,
never fatal. Live capture runs nvidia-smi itself (TOUCHES_GPU: ``gpuwb capture
--safe`` skips it, since on a GPU that fell off the bus it can hang the host).

Times: nvidia-smi prints local time without a zone (``Mon Jul  8 08:11:21 2024``); it is kept as
UTC with ts_origin ``localtime`` and ts_approx. Outputs with no clock of their own (nvlink, dmon)
take the capture time or the file's mtime (ParseContext.snapshot_time()).
"""

from __future__ import annotations

import abc
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, BinaryIO

from collectors.base import (
    Artifact,
    CaptureContext,
    Event,
    GpuInventory,
    GpuSample,
    HostFact,
    ParseContext,
    Row,
    Skipped,
    normalize_pci,
)
from collectors.framework.json_items import no_lone_surrogates
from collectors.nvml import HealthTracker, decode_reasons, gpu_key, xid_catalog_attrs

NAME = "nvidia_smi"
LAYER = "gpu"
KINDS = ("nvidia_smi_q", "nvidia_smi_xml", "nvidia_smi_table", "nvidia_smi_csv", "nvidia_smi_nvlink", "nvidia_smi_topo",
         "fabricmanager_version",
         "nvidia_smi", "dcgm_diag", "dcgm_dmon", "dcgm_health", "dcgm_log")
TIMEOUT = 45.0
TOUCHES_GPU = True
COMMAND_TIMEOUT = 15.0
MAX_XML_DEPTH = 32
"""nvidia-smi XML nests about 6 deep; anything far deeper is junk, refused before it costs recursion."""

NA = {"", "n/a", "[n/a]", "na", "not supported", "[not supported]", "none", "unknown", "[unknown]", "-"}
REASONS = {"gpu_idle": "gpu_idle", "idle": "gpu_idle", "applications_clocks_setting": "applications_clocks",
           "applications_clocks": "applications_clocks", "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
           "hw_thermal_slowdown": "hw_thermal", "hw_power_brake_slowdown": "hw_power_brake",
           "sync_boost": "sync_boost", "sw_thermal_slowdown": "sw_thermal", "display_clock_setting": "display_clocks",
           "display_clocks_setting": "display_clocks"}
"""Clock event/throttle reason names in -q text, XML tags and CSV columns -> the NVML names."""

DCGM_BLANKS = {9223372036854775792: "blank", 9223372036854775793: "not_found", 9223372036854775794: "not_supported",
               9223372036854775795: "not_permissioned", 2147483632: "blank", 2147483633: "not_found",
               2147483634: "not_supported", 2147483635: "not_permissioned"}
"""DCGM_INT64_BLANK / DCGM_INT32_BLANK and the sentinels after them: not values, reasons."""

DMON_COLUMNS = {"TMPTR": "temp_c", "POWER": "power_w", "GPUTL": "util_gpu", "MCUTL": "util_mem",
                "SMCLK": "sm_clock_mhz", "MMCLK": "mem_clock_mhz", "FBUSD": "mem_used_mib", "FBTTL": "mem_total_mib",
                "PCILG": "pcie_gen", "PCILW": "pcie_width"}

_CTIME = re.compile(r"^\s*(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d:\d\d:\d\d)\s+(\d{4})\s*$")
_BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$")
_Q_GPU = re.compile(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
_KV = re.compile(r"^(\s*)([A-Za-z0-9][^:]*?)\s+:(?:\s(.*))?$")
_HEADER = re.compile(r"^(\s*)([A-Za-z][\w .()/+,-]*?)\s*$")
_XML_START = re.compile(r"^\s*<(?:\?xml|!DOCTYPE\s+nvidia_smi_log|nvidia_smi_log)")
_XML_GPU = re.compile(r"^\s*<gpu[\s>]")
"""A <gpu> element starting its line: where reading resumes after a damaged one."""
_TABLE_HEAD = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_TABLE_GPU1 = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(On|Off)\s*\|\s*([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)"
                         r"\s+(On|Off)\s*\|\s*(\S+)\s*\|")
_TABLE_GPU2 = re.compile(r"^\|\s*(\S+)\s+(\d+C|N/A|ERR!)\s+(P\d+|ERR!|N/A)\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s*/\s*(\S+)"
                         r"\s*\|\s*(\S+)\s+(\S+)\s*\|")
_TABLE_PROC = re.compile(r"^\|\s+(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+([CG+]+)\s+(.+?)\s+(\d+MiB|N/A)\s*\|")
_NVLINK_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: (GPU-[0-9A-Fa-f-]+)\))?\s*$")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")
_TOPO_HEAD = re.compile(r"^\s+GPU0(?:\s+\S+)*?\s+CPU Affinity\b")
_TOPO_ROW = re.compile(r"^(GPU\d+|NIC\d+|mlx\S+)\s")
_TOPO_LEGEND = re.compile(r"^(?:\s*(?:NIC\s+)?Legend:\s*$|\s+\S+\s+=\s|\s+NIC\d+:\s)")
_TOPO_SPLIT = re.compile(r"\t|\s{2,}")
_FM_VERSION = re.compile(r"Fabric Manager version is\s*:\s*(\d[\w.-]*)")
_CSV_FIELD = re.compile(r"^[a-z_][a-z0-9_.]*(?: \[[^\]]+\])?$")
_QUERY_CMD = re.compile(r"--query-gpu[= ]([\w.,]+).*?--format[= ](\S+)")
_ANNOTATION = re.compile(r"\s+(?:<=|<-|#)\s.*$")
_ERRORS = (
    (re.compile(r"Unable to determine the device handle for (?:GPU|gpu)\s*([0-9A-Fa-f:.]+):\s*(.*)$"),
     "Unable to determine the device handle"),
    (re.compile(r"NVIDIA-SMI has failed because (.*)$"), "NVIDIA-SMI has failed"),
    (re.compile(r"Failed to initialize NVML:\s*(.*)$"), "Failed to initialize NVML"),
    (re.compile(r"^\s*(No devices were found)\s*$"), "No devices were found"),
    (re.compile(r"Unable to query number of GPUs:?\s*(.*)$"), "Unable to query number of GPUs"),
)
_DIAG_ROW = re.compile(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")
_DIAG_CATEGORY = re.compile(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_DIAG_RESULT = re.compile(r"^(?:GPU(\d+):\s*)?(Pass|Fail|Warn|Skip|Warning)\b(?:\s*-\s*(.*))?$", re.IGNORECASE)
_POD = re.compile(r"Executing in Pod (\S+) on Host (\S+)")
_DMON_HEAD = re.compile(r"^#\s*Entity\s+(.+?)\s*$")
_DMON_ROW = re.compile(r"^(GPU|GPU-I|GPU-CI|Switch|Link|CPU|Core)\s+(\d+)\s+(.*?)\s*$")
_DCGM_LOG = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)\s+(ERROR|WARN|WARNING|INFO|DEBUG|VERB\w*|"
                       r"FATAL|CRIT\w*)\s+\[(\d+):(\d+)\]\s+(.*?)\s*$")
_DCGM_WHERE = re.compile(r"\s*\[([^\]\s]+:\d+)\]\s*(?:\[([^\]]+)\])?\s*$")


# -- live capture --------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """``nvidia-smi -q -x`` (the structured form), ``-q`` text only when the XML run fails (the same
    facts twice would double every event), and the NVLink status and error counters."""
    if ctx.which("nvidia-smi") is None:
        ctx.missing("nvidia-smi", "unavailable: command not found")
        return
    xml = ctx.run(["nvidia-smi", "-q", "-x"], kind="nvidia_smi_xml", timeout=COMMAND_TIMEOUT)
    yield xml
    if xml.info.get("exit_code") != 0 or xml.info.get("timed_out"):
        yield ctx.run(["nvidia-smi", "-q"], kind="nvidia_smi_q", timeout=COMMAND_TIMEOUT)
    yield ctx.run(["nvidia-smi", "nvlink", "--status"], kind="nvidia_smi_nvlink", timeout=COMMAND_TIMEOUT)
    yield ctx.run(["nvidia-smi", "nvlink", "-e"], kind="nvidia_smi_nvlink", timeout=COMMAND_TIMEOUT)
    yield ctx.run(["nvidia-smi", "topo", "-m"], kind="nvidia_smi_topo", timeout=COMMAND_TIMEOUT)
    if ctx.which("nv-fabricmanager") is not None:
        yield ctx.run(["nv-fabricmanager", "--version"], kind="fabricmanager_version", timeout=COMMAND_TIMEOUT)


# -- sniff ---------------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    """Confident only for nvidia-smi and DCGM output; other formats are left to their collectors."""
    if "<nvidia_smi_log" in head or "nvsmi_device_v" in head:
        return {"nvidia_smi_xml": 95}
    lines = [ln for ln in head.splitlines()[:400] if ln.strip()]
    if "NVSMI LOG" in head and any(_BANNER.match(ln) for ln in lines):
        return {"nvidia_smi_q": 95}
    if "Driver Version:" in head and any(_TABLE_HEAD.search(ln) for ln in lines[:60]):
        return {"nvidia_smi_table": 95}
    if "| Diagnostic" in head and ("| Result" in head or "DCGM Version" in head):
        return {"dcgm_diag": 90}
    if sum(1 for ln in lines[:200] if _DCGM_LOG.match(ln) and _DCGM_WHERE.search(ln)) >= 1:
        return {"dcgm_log": 85}
    if ("--query-gpu" in head and any(_QUERY_CMD.search(ln) for ln in lines[:40])) or (
            lines and _is_csv_header(lines[0])):
        return {"nvidia_smi_csv": 90}
    if "Fabric Manager version is" in head and any(_FM_VERSION.search(ln) for ln in lines[:5]):
        return {"fabricmanager_version": 85}
    if "CPU Affinity" in head and any(_TOPO_HEAD.match(ln) for ln in lines[:5]):
        return {"nvidia_smi_topo": 90}
    if len(lines) > 1 and _NVLINK_GPU.match(lines[0]) and _NVLINK_LINK.match(lines[1]):
        return {"nvidia_smi_nvlink": 90}
    if "Entity" in head and any(_DMON_HEAD.match(ln) for ln in lines[:40]):
        return {"dcgm_dmon": 85}
    if "Health Monitor Report" in head:
        return {"dcgm_health": 85}
    if any(pattern.search(ln) for pattern, needle in _ERRORS if needle in head for ln in lines[:20]):
        return {"nvidia_smi": 80}
    q_lines = sum(1 for ln in lines[:200] if (m := _KV.match(ln) or _HEADER.match(ln)) and _norm(m.group(2)) in Q_HINTS)
    if q_lines >= 3:
        return {"nvidia_smi_q": 70}
    return {}


def _is_csv_header(line: str) -> bool:
    """A ``--query-gpu`` header: every column a query field name, at least two of them known, one of
    those specific to nvidia-smi (``timestamp, name, value`` from another tool does not qualify)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 2 or not all(_CSV_FIELD.match(f) for f in fields):
        return False
    known = [_csv_name(f) for f in fields if _csv_name(f) in CSV_KNOWN]
    specific = [k for k in known if k not in CSV_GENERIC]
    return len(known) >= max(2, len(fields) // 2) and bool(specific)


# -- parse ---------------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = TextParser(ctx)
    for n, line in ctx.lines(stream):
        yield from parser.feed(n, line)
    yield from parser.close()


@dataclass
class Node:
    """One line of ``-q`` text or one XML element: a name, an optional value, children, its line."""

    name: str
    value: str | None = None
    line: int | None = None
    children: list[Node] = field(default_factory=list)

    def child(self, name: str) -> Node | None:
        return next((c for c in self.children if c.name == name), None)

    def descendant(self, name: str) -> Node | None:
        queue = list(self.children)
        while queue:
            node = queue.pop(0)
            if node.name == name:
                return node
            queue.extend(node.children)
        return None

    def walk(self) -> Iterator[Node]:
        for c in self.children:
            yield c
            yield from c.walk()


def _norm(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


def find(node: Node | None, *paths: str) -> Node | None:
    """The first path that resolves: its first segment anywhere below ``node`` (excerpts lack the
    outer sections), the rest as direct children."""
    if node is None:
        return None
    for path in paths:
        first, *rest = path.split("/")
        cur = node.descendant(first)
        for part in rest:
            cur = cur.child(part) if cur is not None else None
        if cur is not None:
            return cur
    return None


def value(node: Node | None, *paths: str) -> str | None:
    found = find(node, *paths)
    if found is None or found.value is None or found.value.strip().lower() in NA:
        return None
    return found.value.strip()


_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)")
_HEX = re.compile(r"0x[0-9a-fA-F]+")
_LOCAL = re.compile(r"(\d{4})[/-](\d\d)[/-](\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?\s*$")


def number(text: str | None) -> float | None:
    """The leading number of ``445.38 W``, ``97 %``, ``16x``; None for N/A and words."""
    if text is None:
        return None
    m = _NUMBER.match(text)
    return float(m.group(1)) if m else None


def integer(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if _HEX.fullmatch(text):
        return int(text, 16)
    n = number(text)
    return int(n) if n is not None else None


def yes(text: str | None) -> bool | None:
    if text is None:
        return None
    low = text.strip().lower()
    if low in ("yes", "active", "enabled", "true", "1"):
        return True
    if low in ("no", "not active", "disabled", "false", "0"):
        return False
    return None


def parse_ctime(text: str | None) -> datetime | None:
    """``Mon Jul  8 08:11:21 2024`` (nvidia-smi, local time) as a naive-UTC datetime."""
    if not text:
        return None
    m = _CTIME.match(text)
    if not m:
        return None
    month, day, clock, year = m.groups()
    try:
        return datetime.strptime(f"{year} {month} {day} {clock}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def parse_local(text: str) -> datetime | None:
    """``2024/07/08 08:11:21.123`` (--query-gpu timestamp) or ``2026-01-16 09:50:03.010`` (DCGM logs)."""
    m = _LOCAL.match(text.strip())
    if not m:
        return None
    frac = m.group(7) or "0"
    try:
        return datetime(*(int(g) for g in m.groups()[:6]), int(frac.ljust(6, "0")), tzinfo=timezone.utc)
    except ValueError:
        return None


@dataclass
class Clock:
    """Where a block's readings got their time."""

    ts: datetime | None = None
    origin: str = "none"
    approx: bool = False
    raw: str | None = None


Q_HINTS = {"product_name", "performance_state", "gpu_uuid", "driver_version", "cuda_version", "attached_gpus",
           "persistence_mode", "bus_id", "replays_since_reset", "clocks_throttle_reasons", "clocks_event_reasons",
           "fb_memory_usage", "bar1_memory_usage", "ecc_errors", "ecc_mode", "retired_pages", "remapped_rows",
           "utilization", "temperature", "gpu_link_info", "pcie_generation", "link_width", "power_readings",
           "gpu_power_readings", "vbios_version", "minor_number", "gpu_current_temp", "power_draw", "hw_slowdown",
           "sw_power_cap", "hw_power_brake_slowdown", "hw_thermal_slowdown", "compute_mode", "fan_speed",
           "multigpu_board", "gpu_operation_mode", "inforom_version", "max_clocks", "applications_clocks"}
"""Keys and sections of ``nvidia-smi -q`` that open a -q block even without its banner (excerpts)."""


# -- GPU rows from a -q tree or an XML tree ------------------------------------------------------

def gpu_rows(gpu: Node, *, bus: str | None, clock: Clock, host: str | None, driver: str | None,
             cuda: str | None, tracker: HealthTracker, source: str, extra: dict[str, Any] | None = None,
             line: int | None = None) -> Iterator[Row]:
    """Inventory, one sample and the derived events of one GPU block (text and XML alike)."""
    bus = bus or value(gpu, "pci/bus_id", "pci/pci_bus_id", "bus_id")
    uuid = value(gpu, "gpu_uuid", "uuid")
    key = gpu_key(bus, None, uuid)
    max_gen = integer(value(gpu, "pcie_generation/max", "pcie_gen/max_link_gen"))
    host_max = integer(value(gpu, "pcie_generation/host_max", "pcie_gen/max_host_link_gen"))
    max_width = integer(value(gpu, "link_width/max", "link_widths/max_link_width"))
    power_limit = number(value(gpu, "gpu_power_readings/current_power_limit", "gpu_power_readings/power_limit",
                               "gpu_power_readings/enforced_power_limit", "power_readings/current_power_limit",
                               "power_readings/power_limit", "power_readings/enforced_power_limit"))
    name = value(gpu, "product_name")
    if name or uuid or bus:
        yield GpuInventory(
            gpu=key, host=host, uuid=uuid, name=name, serial=value(gpu, "serial_number", "serial"),
            vbios=value(gpu, "vbios_version"), driver=driver, cuda=cuda,
            persistence=value(gpu, "persistence_mode"), mig_mode=value(gpu, "mig_mode/current", "mig_mode/current_mig"),
            power_limit_w=power_limit, pcie_max_gen=max_gen, pcie_max_width=max_width,
            memory_total_mib=number(value(gpu, "fb_memory_usage/total")),
            extra={"source": source, "brand": value(gpu, "product_brand"),
                   "architecture": value(gpu, "product_architecture"),
                   "ecc_mode": value(gpu, "ecc_mode/current", "ecc_mode/current_ecc"),
                   "virtualization": value(gpu, "gpu_virtualization_mode/virtualization_mode"),
                   "minor_number": value(gpu, "minor_number"), "board_part_number": value(gpu, "board_part_number"),
                   "gsp_firmware": value(gpu, "gsp_firmware_version"),
                   "applications_clocks_mhz": _clocks(gpu), **(extra or {})})
    reasons, reason_line, reasons_na, counters = _reasons(gpu)
    ecc = _ecc(gpu)
    remap = find(gpu, "remapped_rows")
    retired = find(gpu, "retired_pages")
    pstate = value(gpu, "performance_state")
    recovery = value(gpu, "gpu_recovery_action")
    recovery_field = "gpu_recovery_action"
    if yes(value(gpu, "gpu_reset_status/reset_required")):
        recovery, recovery_field = recovery if recovery and recovery.lower() != "none" else "Reset", "reset_required"
    sample = GpuSample(
        ts=clock.ts, gpu=key, host=host, uuid=uuid,
        util_gpu=number(value(gpu, "utilization/gpu", "utilization/gpu_util")),
        util_mem=number(value(gpu, "utilization/memory", "utilization/memory_util")),
        mem_used_mib=number(value(gpu, "fb_memory_usage/used")),
        mem_total_mib=number(value(gpu, "fb_memory_usage/total")),
        temp_c=number(value(gpu, "temperature/gpu_current_temp", "temperature/gpu_temp")),
        power_w=number(value(gpu, "gpu_power_readings/power_draw", "gpu_power_readings/instantaneous_power_draw",
                             "gpu_power_readings/instant_power_draw", "gpu_power_readings/average_power_draw",
                             "power_readings/power_draw", "power_readings/instant_power_draw",
                             "power_readings/average_power_draw")),
        power_limit_w=power_limit,
        sm_clock_mhz=number(value(gpu, "clocks/sm", "clocks/sm_clock")),
        mem_clock_mhz=number(value(gpu, "clocks/memory", "clocks/mem_clock")),
        throttle_reasons=reasons,
        ecc_volatile_corrected=ecc["volatile"][0], ecc_volatile_uncorrected=ecc["volatile"][1],
        ecc_aggregate_corrected=ecc["aggregate"][0], ecc_aggregate_uncorrected=ecc["aggregate"][1],
        retired_pages_sbe=integer(value(retired, "single_bit_ecc", "multiple_single_bit_retirement/retired_count")),
        retired_pages_dbe=integer(value(retired, "double_bit_ecc", "double_bit_retirement/retired_count")),
        retired_pending=yes(value(retired, "pending_page_blacklist", "pending_page_retirement", "pending_blacklist",
                                  "pending_retirement", "pending")),
        remap_pending=yes(value(remap, "pending", "remapped_row_pending")),
        remap_failure=yes(value(remap, "remapping_failure_occurred", "remapped_row_failure")),
        pcie_gen=integer(value(gpu, "pcie_generation/current", "pcie_gen/current_link_gen")),
        pcie_width=integer(value(gpu, "link_width/current", "link_widths/current_link_width")),
        pcie_replay=integer(value(gpu, "replays_since_reset", "replay_counter", "replays")),
        extra={"source": source, "pstate": pstate, "pcie_max_gen": max_gen, "pcie_max_width": max_width,
               "pcie_host_max_gen": host_max, "gpu_idle": "gpu_idle" in (reasons or []),
               "throttle_not_available": reasons_na, "throttle_counters_us": counters,
               "ecc": ecc["detail"],
               "remap_correctable": integer(value(remap, "correctable_error", "remapped_row_corr")),
               "remap_uncorrectable": integer(value(remap, "uncorrectable_error", "remapped_row_unc")),
               "recovery_action": recovery, "recovery_field": recovery_field,
               "fabric_state": value(gpu, "fabric/state"), "fabric_status": value(gpu, "fabric/status"),
               "processes": _processes(gpu), **(extra or {})},
        line=line)
    yield sample
    lines = {"gpu_throttle": reason_line, "ecc_uncorrectable": ecc["line"], "row_remap_pending": remap and remap.line,
             "row_remap_failure": remap and remap.line, "retired_pages_pending": retired and retired.line,
             "pcie_link_degraded": (find(gpu, "link_width", "link_widths", "pcie_generation") or Node("")).line,
             "gpu_contention": (find(gpu, "processes") or Node("")).line}
    yield from tracker.observe(sample, ts_origin=clock.origin, ts_approx=clock.approx, ts_raw=clock.raw,
                               lines={k: v for k, v in lines.items() if v})


def _clocks(gpu: Node) -> dict[str, float] | None:
    """The application clocks an operator set (``nvidia-smi -ac``), what acceptance pins and drift compares."""
    clocks = {"graphics": number(value(gpu, "applications_clocks/graphics", "applications_clocks/graphics_clock")),
              "memory": number(value(gpu, "applications_clocks/memory", "applications_clocks/mem_clock"))}
    return {k: v for k, v in clocks.items() if v is not None} or None


def _reasons(gpu: Node) -> tuple[list[str] | None, int | None, list[str], dict[str, int]]:
    """Active clock event reasons (NVML names), the line of the first bad one, the reasons that
    read N/A, and the driver-570+ time counters in microseconds."""
    section = find(gpu, "clocks_event_reasons", "clocks_throttle_reasons")
    counters: dict[str, int] = {}
    counter_section = find(gpu, "clocks_event_reasons_counters", "clocks_throttle_reasons_counters")
    for node in counter_section.walk() if counter_section else ():
        name = node.name
        for needle, reason in (("power_cap", "sw_power_cap"), ("sync_boost", "sync_boost"), ("sw_therm", "sw_thermal"),
                               ("hw_therm", "hw_thermal"), ("power_brak", "hw_power_brake")):
            if needle in name and (n := integer(node.value)) is not None:
                counters[reason] = n
    if section is None:
        return None, None, [], counters
    active: list[str] = []
    not_available: list[str] = []
    bad_line = None
    for node in section.walk():
        name = REASONS.get(re.sub(r"^clocks_(?:event|throttle)_reason_", "", node.name))
        if name is None or node.value is None:
            continue
        state = node.value.strip().lower()
        if state == "active":
            active.append(name)
            if bad_line is None and name in ("hw_thermal", "hw_power_brake", "sw_power_cap", "hw_slowdown",
                                             "sw_thermal"):
                bad_line = node.line
        elif state in NA:
            not_available.append(name)
    return active, bad_line or section.line, not_available, counters


def _ecc(gpu: Node) -> dict[str, Any]:
    """(corrected, uncorrected) volatile and aggregate totals across the layouts of every driver:
    Single/Double Bit totals (pre-A100), SRAM/DRAM split (r450+), SRAM parity/SEC-DED (r550+)."""
    section = find(gpu, "ecc_errors")
    out: dict[str, Any] = {"volatile": (None, None), "aggregate": (None, None), "detail": {}, "line": None}
    if section is None:
        return out
    for scope in ("volatile", "aggregate"):
        node = section.child(scope)
        if node is None:
            continue
        detail = {c.name: integer(c.value) for c in node.children if c.value is not None and c.name != "total"}
        corrected = _sum([integer(value(node, "single_bit/total"))] +
                         [integer(c.value) for c in node.children if c.name.endswith("_correctable")])
        uncorrected = _sum([integer(value(node, "double_bit/total"))] +
                           [integer(c.value) for c in node.children if "_uncorrectable" in c.name])
        out[scope] = (corrected, uncorrected)
        out["detail"][scope] = detail
        if uncorrected:
            out["line"] = out["line"] or next(
                (c.line for c in node.walk() if ("_uncorrectable" in c.name or (c.name == "total" and c in
                                                 (find(node, "double_bit") or Node("")).children))
                 and integer(c.value)), node.line)
    return out


def _sum(values: list[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _processes(gpu: Node) -> list[dict[str, Any]]:
    section = find(gpu, "processes")
    procs: list[dict[str, Any]] = []
    for node in section.children if section else ():
        if node.name == "process_info":
            procs.append({"pid": integer(value(node, "pid")), "name": value(node, "process_name"),
                          "type": value(node, "type"), "used_mib": number(value(node, "used_memory"))})
        elif node.name == "process_id":
            procs.append({"pid": integer(node.value), "name": value(node, "name"), "type": value(node, "type"),
                          "used_mib": number(value(node, "used_gpu_memory"))})
        elif procs and node.name in ("name", "type", "used_gpu_memory") and node.value:
            key = "used_mib" if node.name == "used_gpu_memory" else node.name
            procs[-1][key] = number(node.value) if key == "used_mib" else node.value
    return procs[:256]


# -- the line-driven dispatcher ------------------------------------------------------------------

class TextParser:
    """Feeds each line to the block that is open, or opens the block the line starts. Shared with
    the nvidia-bug-report parser, which hands it the lines of its nvidia-smi section."""

    def __init__(self, ctx: ParseContext, *, host: str | None = None,
                 snapshot: tuple[datetime, str] | None = None) -> None:
        """``snapshot``: the time and origin for outputs without a clock, when the caller knows better
        than the file's capture time or mtime (the bug report's ``date`` line)."""
        self.ctx = ctx
        self.host = host
        self.tracker = HealthTracker()
        self.block: Block | None = None
        self.pending_date: tuple[datetime, str] | None = None
        self.dcgm_host: str | None = None
        self.dcgm_pod: str | None = None
        self.snapshot = snapshot or ctx.snapshot_time()

    def clock(self, ts: datetime | None = None, raw: str | None = None) -> Clock:
        if ts is not None:
            return Clock(ts, "localtime", True, raw)
        when, origin = self.snapshot
        return Clock(when, origin, when is not None and origin != "captured", None) if when else Clock()

    def feed(self, n: int, line: str) -> Iterator[Row]:
        if "\x00" in line:
            line = line.replace("\x00", "")
        if self.block is not None:
            rows, taken = self.block.feed(n, line)
            yield from rows
            if taken:
                return
            yield from self.block.close()
            self.block = None
        yield from self._start(n, line)

    def close(self) -> Iterator[Row]:
        if self.block is not None:
            yield from self.block.close()
            self.block = None

    def _open(self, block: Block, n: int, line: str) -> Iterator[Row]:
        self.block = block
        rows, _ = block.feed(n, line)
        yield from rows

    def _start(self, n: int, line: str) -> Iterator[Row]:
        stripped = line.strip()
        if not stripped or re.fullmatch(r"[+|][-=+| ]*[+|]?", stripped):
            return
        if _XML_START.match(line):
            yield from self._open(XmlBlock(self), n, line)
        elif _BANNER.match(stripped) or _Q_GPU.match(line):
            yield from self._open(QBlock(self), n, line)
        elif m := _TABLE_HEAD.search(line):
            yield from self._open(TableBlock(self, m), n, line)
        elif any(p.search(line) for p, _ in _ERRORS):
            yield from self._error(n, line)
        elif (m := _CTIME.match(line)) and parse_ctime(stripped):
            self.pending_date = (parse_ctime(stripped), stripped)
        elif _NVLINK_GPU.match(line):
            yield from self._open(NvlinkBlock(self), n, line)
        elif _TOPO_HEAD.match(line):
            yield from self._open(TopoBlock(self), n, line)
        elif m := _FM_VERSION.search(line):
            yield HostFact("versions.fabricmanager", m.group(1), host=self.host)
        elif (m := _QUERY_CMD.search(line)) or _is_csv_header(stripped):
            yield from self._open(CsvBlock(self, m), n, line)
        elif m := _POD.search(line):
            self.dcgm_pod, self.dcgm_host = m.group(1), m.group(2)
        elif stripped.startswith("Successfully ran diagnostic") or _DIAG_CATEGORY.match(stripped) or \
                (stripped.startswith("|") and re.match(r"^\|\s*Diagnostic\s*\|\s*Result", stripped)):
            yield from self._open(DiagBlock(self), n, line)
        elif "Health Monitor Report" in line and stripped.startswith("|"):
            yield from self._open(HealthBlock(self), n, line)
        elif _DMON_HEAD.match(stripped):
            yield from self._open(DmonBlock(self), n, line)
        elif m := _DCGM_LOG.match(stripped):
            yield from self._dcgm_log(n, m)
        elif stripped.startswith("{"):
            yield from self._open(JsonBlock(self), n, line)
        elif (m := _KV.match(line) or _HEADER.match(line)) and _norm(m.group(2)) in Q_HINTS:
            yield from self._open(QBlock(self), n, line)
        else:
            yield Skipped(n, "not nvidia-smi or DCGM output")

    def _error(self, n: int, line: str) -> Iterator[Row]:
        for pattern, label in _ERRORS:
            m = pattern.search(line)
            if not m:
                continue
            pci = normalize_pci(m.group(1)) if m.re.groups >= 2 else None
            detail = (m.group(m.re.groups) or "").strip() if m.re.groups else ""
            reason = re.split(r"\.\s", detail)[0].rstrip(". ") if detail else None
            if label == "No devices were found":
                reason = None
            clock = self.clock()
            yield Event(kind="nvidia_smi_error", message=line.strip(), ts=clock.ts, ts_origin=clock.origin,
                        ts_approx=clock.approx, host=self.host, layer="gpu", severity="error", gpu=pci,
                        attrs={"error": label, "reason": reason, "pci": pci}, line=n)
            return

    def _dcgm_log(self, n: int, m: re.Match[str]) -> Iterator[Row]:
        stamp, level, _pid, _tid, text = m.groups()
        level = level.upper()
        if level not in ("WARN", "WARNING", "ERROR", "FATAL") and not level.startswith("CRIT"):
            return
        where = _DCGM_WHERE.search(text)
        message = text[:where.start()].strip() if where else text
        gpu = re.search(r"\b(?:gpuId|GPU|gpu)\s*(\d+)\b", message)
        field_id = re.search(r"\b(DCGM_FI_\w+)", message)
        val = re.search(r"\bvalue\s+(-?\d+)", message)
        value_int = int(val.group(1)) if val else None
        attrs = {"level": "WARN" if level == "WARNING" else level, "gpu_index": int(gpu.group(1)) if gpu else None,
                 "field": field_id.group(1) if field_id else None, "value": value_int,
                 "blank": DCGM_BLANKS.get(value_int) if value_int is not None else None,
                 "where": where.group(1) if where else None, "function": where.group(2) if where else None}
        yield Event(kind="dcgm_log", message=message, ts=parse_local(stamp), ts_origin="localtime", ts_approx=True,
                    ts_raw=stamp, host=self.dcgm_host or self.host, source="dcgm", layer="gpu",
                    severity="warning" if attrs["level"] == "WARN" else "error", attrs=attrs, line=n)


class Block(abc.ABC):
    """A run of lines in one format. ``feed`` returns (rows, whether the line belonged here)."""

    def __init__(self, parser: TextParser) -> None:
        self.p = parser

    @abc.abstractmethod
    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        """Rows for this line, and False when the line starts something else."""

    def close(self) -> list[Row]:
        return []


class QBlock(Block):
    """``nvidia-smi -q`` text: an indented key/value tree, one subtree per ``GPU <bus id>``.
    Each GPU is turned into rows as soon as the next one starts, so memory stays bounded."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.root = Node("root")
        self.gpu: Node | None = None
        self.gpu_bus: str | None = None
        self.gpu_line: int | None = None
        self.stack: list[tuple[int, Node]] = []
        self.clock = Clock()
        self.pending_header: tuple[int, str, int] | None = None
        self.nodes = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        rows: list[Row] = []
        stripped = line.strip()
        if not stripped:
            return rows, True
        if _BANNER.match(stripped):
            if self.gpu is not None or self.root.children:
                return rows, False
            return rows, True
        if m := _Q_GPU.match(line):
            rows.extend(self._flush())
            self.gpu, self.gpu_bus, self.gpu_line = Node("gpu", line=n), m.group(1), n
            self.stack = [(-1, self.gpu)]
            return rows, True
        kv = _KV.match(line)
        header = None if kv else _HEADER.match(line)
        if kv is None and header is None:
            return rows, False
        m = kv or header
        assert m is not None
        indent = len(m.group(1).expandtabs(4))
        if indent == 0 and header is not None and self.gpu is not None and _norm(m.group(2)) not in Q_HINTS:
            return rows, False
        if self.nodes > 20_000:
            rows.append(Skipped(n, "nvidia-smi -q block too large; rest of block ignored"))
            return rows, True
        self.nodes += 1
        node = Node(_norm(m.group(2)), (kv.group(3) or "").strip() if kv else None, n)
        if not self.stack:
            self.stack = [(-1, self.gpu or self.root)]
        while len(self.stack) > 1 and self.stack[-1][0] >= indent:
            self.stack.pop()
        self.stack[-1][1].children.append(node)
        self.stack.append((indent, node))
        if self.gpu is None and indent == 0 and kv is not None and node.name == "timestamp":
            when = parse_ctime(node.value)
            if when is not None:
                self.clock = Clock(when, "localtime", True, node.value)
                self.p.ctx.learn_reference_time(self.p.host or self.p.ctx.host, when)
        return rows, True

    def _flush(self) -> list[Row]:
        target = self.gpu
        if target is None:
            target = self.root
            if not any(c.name not in ("timestamp", "driver_version", "cuda_version", "attached_gpus")
                       for c in target.children):
                return []
        clock = self.clock if self.clock.ts else self.p.clock()
        rows = list(gpu_rows(target, bus=self.gpu_bus, clock=clock, host=self.p.host,
                             driver=value(self.root, "driver_version"), cuda=value(self.root, "cuda_version"),
                             tracker=self.p.tracker, source="nvidia-smi -q",
                             line=self.gpu_line or (target.children[0].line if target.children else None),
                             extra={"attached_gpus": integer(value(self.root, "attached_gpus"))}))
        self.gpu = None
        self.stack = []
        return rows

    def close(self) -> list[Row]:
        return self._flush()


class XmlBlock(Block):
    """``nvidia-smi -q -x``: parsed incrementally, each <gpu> turned into rows when it closes. A
    document cut short (pasted excerpts often are, and so is the output of an nvidia-smi killed at its
    deadline) still yields the GPU it was inside. A well-formedness error is one counted skip: the GPU it
    is in yields what was read of it, its other lines are passed over, and the next ``<gpu`` line starts
    a fresh parser, so one damaged GPU costs no other."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.xml = ET.XMLPullParser(events=("start", "end"))
        self.lines: dict[int, int] = {}
        self.depth = 0
        self.open_gpu: ET.Element | None = None
        self.header: dict[str, str] = {}
        self.dtd: str | None = None
        self.broken = False
        self.done = False
        self.clock = Clock()

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if self.done:
            return [], False
        if self.broken:
            if _XML_GPU.match(line):
                self._resume()
            elif line.strip() == "</nvidia_smi_log>":
                self.done = True
                return [], True
            elif line.strip().startswith("<") or not line.strip() or line[:1].isspace():
                return [], True  # the damaged GPU's lines: markup, or text indented inside an element
            else:
                return [], False
        if (m := re.search(r'SYSTEM\s+"([\w.]+)\.dtd"', line)) and self.dtd is None:
            self.dtd = m.group(1)
        rows: list[Row] = []
        try:
            self.xml.feed(line + "\n")
            rows.extend(self._events(n))
        except ET.ParseError as exc:
            self.broken = True
            rows.append(Skipped(n, "XML not well-formed: " + re.sub(r": line \d+, column \d+", "", str(exc))[:60]))
            rows.extend(self._partial())
        return rows, True

    def _resume(self) -> None:
        """A fresh parser for the rest of the document, as if inside its root again: entities the damaged
        part declared are not known to it (an undefined one is one more well-formedness error)."""
        self.xml = ET.XMLPullParser(events=("start", "end"))
        self.xml.feed("<nvidia_smi_log>\n")
        self.depth, self.broken, self.open_gpu, self.lines = 0, False, None, {}
        list(self._events(0))

    def _events(self, n: int) -> Iterator[Row]:
        for event, elem in self.xml.read_events():
            if event == "start":
                self.depth += 1
                if self.depth > MAX_XML_DEPTH:
                    raise ET.ParseError(f"nesting deeper than {MAX_XML_DEPTH}")
                self.lines[id(elem)] = n
                if elem.tag == "gpu" and self.depth == 2:
                    self.open_gpu = elem
                continue
            self.depth -= 1
            if self.depth == 1 and elem.tag in ("timestamp", "driver_version", "cuda_version", "attached_gpus"):
                self.header[elem.tag] = (elem.text or "").strip()
                if elem.tag == "timestamp" and (when := parse_ctime(self.header["timestamp"])):
                    self.clock = Clock(when, "localtime", True, self.header["timestamp"])
                    self.p.ctx.learn_reference_time(self.p.host or self.p.ctx.host, when)
            elif self.depth == 1 and elem.tag == "gpu":
                yield from self._gpu(elem)
                self.open_gpu = None
                elem.clear()
                self.lines = {k: v for k, v in self.lines.items() if v >= n - 1}
            elif self.depth == 0:
                self.done = True

    def _gpu(self, elem: ET.Element) -> Iterator[Row]:
        tree = self._node(elem)
        clock = self.clock if self.clock.ts else self.p.clock()
        driver = self.header.get("driver_version") or None
        cuda = self.header.get("cuda_version") or None
        yield from gpu_rows(tree, bus=elem.get("id"), clock=clock, host=self.p.host, driver=driver, cuda=cuda,
                            tracker=self.p.tracker, source="nvidia-smi -q -x", line=self.lines.get(id(elem)),
                            extra={"dtd": self.dtd, "attached_gpus": integer(self.header.get("attached_gpus"))})

    def _node(self, elem: ET.Element, depth: int = 0) -> Node:
        text = (elem.text or "").strip()
        children = [self._node(c, depth + 1) for c in elem] if depth < MAX_XML_DEPTH else []
        return Node(elem.tag.lower(), text or None, self.lines.get(id(elem)), children)

    def _partial(self) -> list[Row]:
        if self.open_gpu is None:
            return []
        rows = list(self._gpu(self.open_gpu))
        self.open_gpu = None
        return rows

    def close(self) -> list[Row]:
        if self.done or self.broken:
            return []
        return self._partial()


class TableBlock(Block):
    """The default ``nvidia-smi`` table (every layout since r4xx): GPU rows of two or three lines,
    then the process table. Rows are emitted at the end, once processes are known."""

    def __init__(self, parser: TextParser, head: re.Match[str]) -> None:
        super().__init__(parser)
        self.driver, self.cuda = head.group(2), head.group(3)
        self.gpus: list[dict[str, Any]] = []
        self.procs: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        date = parser.pending_date
        self.clock = Clock(date[0], "localtime", True, date[1]) if date else parser.clock()
        parser.pending_date = None
        self.blank_run = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if not stripped:
            self.blank_run += 1
            return [], self.blank_run < 3
        self.blank_run = 0
        if not stripped.startswith(("|", "+")):
            return [], False
        if _TABLE_HEAD.search(line):
            return [], True
        if m := _TABLE_GPU1.match(stripped):
            self.pending = {"index": int(m.group(1)), "name": m.group(2).strip(), "persistence": m.group(3),
                            "bus": m.group(4), "ecc": m.group(6), "line": n}
        elif (m := _TABLE_GPU2.match(stripped)) and self.pending is not None:
            self.pending.update(fan=m.group(1), temp=m.group(2), pstate=m.group(3), power=m.group(4),
                                cap=m.group(5), used=m.group(6), total=m.group(7), util=m.group(8),
                                compute=m.group(9))
            self.gpus.append(self.pending)
            self.pending = None
        elif m := _TABLE_PROC.match(stripped):
            self.procs.append({"gpu": int(m.group(1)), "pid": int(m.group(4)), "type": m.group(5),
                               "name": m.group(6).strip(), "used_mib": number(m.group(7))})
        return [], True

    def close(self) -> list[Row]:
        rows: list[Row] = []
        for g in self.gpus:
            key = gpu_key(g["bus"], g["index"])
            errs = [name for name in ("fan", "temp", "pstate", "power", "cap", "used", "total", "util", "ecc")
                    if str(g.get(name, "")).upper().startswith("ERR")]
            rows.append(GpuInventory(gpu=key, host=self.p.host, index=g["index"], name=g["name"], driver=self.driver,
                                     cuda=None if (self.cuda or "").upper() == "N/A" else self.cuda,
                                     persistence="Enabled" if g["persistence"] == "On" else "Disabled",
                                     power_limit_w=number(g["cap"]), memory_total_mib=number(g["total"]),
                                     extra={"source": "nvidia-smi", "compute_mode": g["compute"]}))
            sample = GpuSample(ts=self.clock.ts, gpu=key, host=self.p.host, util_gpu=number(g["util"]),
                               mem_used_mib=number(g["used"]), mem_total_mib=number(g["total"]),
                               temp_c=number(g["temp"]), power_w=number(g["power"]), power_limit_w=number(g["cap"]),
                               ecc_volatile_uncorrected=integer(g["ecc"]),
                               extra={"source": "nvidia-smi", "pstate": g["pstate"], "fan": g["fan"],
                                      "processes": [p for p in self.procs if p["gpu"] == g["index"]]},
                               line=g["line"])
            rows.append(sample)
            rows.extend(self.p.tracker.observe(sample, ts_origin=self.clock.origin, ts_approx=self.clock.approx,
                                               ts_raw=self.clock.raw))
            if errs:
                rows.append(Event(kind="nvidia_smi_error", ts=self.clock.ts, ts_origin=self.clock.origin,
                                  ts_approx=self.clock.approx, host=self.p.host, layer="gpu", severity="error",
                                  gpu=normalize_pci(g["bus"]), line=g["line"],
                                  message=f"nvidia-smi shows ERR! for {', '.join(errs)} of GPU {g['index']}",
                                  attrs={"error": "ERR!", "reason": None, "pci": normalize_pci(g["bus"]),
                                         "fields": errs}))
        return rows


def _csv_name(column: str) -> str:
    return re.sub(r"\s*\[[^\]]*\]$", "", column.strip())


CSV_KNOWN = {"index", "name", "gpu_name", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "serial", "gpu_serial",
             "vbios_version", "driver_version", "persistence_mode", "mig.mode.current", "pstate", "temperature.gpu",
             "utilization.gpu", "utilization.memory", "memory.total", "memory.used", "memory.free", "power.draw",
             "power.draw.instant", "power.draw.average", "power.limit", "enforced.power.limit", "clocks.sm",
             "clocks.current.sm", "clocks.mem", "clocks.current.memory", "clocks_throttle_reasons.active",
             "clocks_event_reasons.active", "ecc.errors.corrected.volatile.total",
             "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.aggregate.total",
             "ecc.errors.uncorrected.aggregate.total", "retired_pages.single_bit_ecc.count", "retired_pages.sbe",
             "retired_pages.double_bit.count", "retired_pages.dbe", "retired_pages.pending",
             "remapped_rows.correctable",
             "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure", "pcie.link.gen.current",
             "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.gen.gpumax", "pcie.link.gen.hostmax",
             "pcie.link.width.current", "pcie.link.width.max", "timestamp", "gpu_recovery_action", "fan.speed",
             "count", "ecc.mode.current", "pid", "process_name", "used_memory", "used_gpu_memory", "clocks.gr",
             "clocks.max.sm", "temperature.memory", "compute_mode"}
"""``--query-gpu`` fields read here (``nvidia-smi --help-query-gpu``); any other column is kept in extra."""
CSV_GENERIC = {"index", "name", "uuid", "serial", "timestamp", "count", "pid", "process_name", "used_memory",
               "compute_mode"}
"""Column names other tools' CSV files use too; alone they do not make a file nvidia-smi output."""


class CsvBlock(Block):
    """``--query-gpu=... --format=csv`` with or without header and units; a pasted command line
    gives the columns of headerless output. Human annotations after the values (``<= note``) go."""

    def __init__(self, parser: TextParser, command: re.Match[str] | None) -> None:
        super().__init__(parser)
        self.columns: list[str] | None = None
        self.noheader = False
        if command is not None:
            fmt = command.group(2).lower()
            self.noheader = "noheader" in fmt
            if self.noheader:
                self.columns = [c.strip() for c in command.group(1).split(",") if c.strip()]
        self.seen_inventory: set[str] = set()
        self.rows = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = _ANNOTATION.sub("", line).strip()
        if _QUERY_CMD.search(line):
            return [], self.rows == 0
        if not stripped:
            return [], False
        if self.columns is None:
            if _is_csv_header(stripped):
                self.columns = [_csv_name(c) for c in stripped.split(",")]
                return [], True
            return [], False
        if _is_csv_header(stripped):
            self.columns = [_csv_name(c) for c in stripped.split(",")]
            return [], True
        values = [v.strip() for v in stripped.split(",")]
        if len(values) != len(self.columns):
            return [], False
        self.rows += 1
        return self._row(n, dict(zip(self.columns, values))), True

    def _row(self, n: int, row: dict[str, str]) -> list[Row]:
        if "pid" in row and not any(k in row for k in ("utilization.gpu", "temperature.gpu", "pstate")):
            return [Skipped(n, "process query row (no GPU reading)")]
        out: list[Row] = []
        values = {k: None if v.lower() in NA else v for k, v in row.items()}
        clean = values.get

        errors = {k: v for k, v in row.items() if v.startswith("[") and v.strip("[]").lower() not in NA}
        index = integer(clean("index"))
        bus = clean("pci.bus_id") or clean("gpu_bus_id")
        uuid = clean("uuid") or clean("gpu_uuid")
        key = gpu_key(bus, index, uuid)
        stamp = clean("timestamp")
        ts = parse_local(stamp) if stamp else None
        clock = Clock(ts, "localtime", True, stamp) if ts else self.p.clock()
        mask = integer(clean("clocks_event_reasons.active") or clean("clocks_throttle_reasons.active"))
        reasons = decode_reasons(mask) if mask is not None else None
        for name, text in row.items():
            prefix, _, reason = name.partition(".")
            if prefix in ("clocks_throttle_reasons", "clocks_event_reasons") and reason in REASONS:
                reasons = reasons if reasons is not None else []
                if yes(text) and REASONS[reason] not in reasons:
                    reasons.append(REASONS[reason])
        max_gen = integer(clean("pcie.link.gen.max") or clean("pcie.link.gen.gpumax"))
        max_width = integer(clean("pcie.link.width.max"))
        name = clean("name") or clean("gpu_name")
        if key not in self.seen_inventory and (name or uuid or clean("driver_version") or clean("serial")):
            self.seen_inventory.add(key)
            out.append(GpuInventory(gpu=key, host=self.p.host, index=index, uuid=uuid, name=name,
                                    serial=clean("serial") or clean("gpu_serial"), vbios=clean("vbios_version"),
                                    driver=clean("driver_version"), persistence=clean("persistence_mode"),
                                    mig_mode=clean("mig.mode.current"),
                                    power_limit_w=number(clean("enforced.power.limit") or clean("power.limit")),
                                    pcie_max_gen=max_gen, pcie_max_width=max_width,
                                    memory_total_mib=number(clean("memory.total")),
                                    extra={"source": "nvidia-smi --query-gpu"}))
        other = [c for c in row if c not in CSV_KNOWN and not c.startswith(("clocks_throttle_reasons.",
                                                                               "clocks_event_reasons."))]
        sample = GpuSample(
            ts=clock.ts, gpu=key, host=self.p.host, uuid=uuid,
            util_gpu=number(clean("utilization.gpu")), util_mem=number(clean("utilization.memory")),
            mem_used_mib=number(clean("memory.used")), mem_total_mib=number(clean("memory.total")),
            temp_c=number(clean("temperature.gpu")),
            power_w=number(clean("power.draw") or clean("power.draw.instant") or clean("power.draw.average")),
            power_limit_w=number(clean("enforced.power.limit") or clean("power.limit")),
            sm_clock_mhz=number(clean("clocks.sm") or clean("clocks.current.sm")),
            mem_clock_mhz=number(clean("clocks.mem") or clean("clocks.current.memory")),
            throttle_reasons=reasons,
            ecc_volatile_corrected=integer(clean("ecc.errors.corrected.volatile.total")),
            ecc_volatile_uncorrected=integer(clean("ecc.errors.uncorrected.volatile.total")),
            ecc_aggregate_corrected=integer(clean("ecc.errors.corrected.aggregate.total")),
            ecc_aggregate_uncorrected=integer(clean("ecc.errors.uncorrected.aggregate.total")),
            retired_pages_sbe=integer(clean("retired_pages.single_bit_ecc.count") or clean("retired_pages.sbe")),
            retired_pages_dbe=integer(clean("retired_pages.double_bit.count") or clean("retired_pages.dbe")),
            retired_pending=yes(clean("retired_pages.pending")), remap_pending=yes(clean("remapped_rows.pending")),
            remap_failure=yes(clean("remapped_rows.failure")),
            pcie_gen=integer(clean("pcie.link.gen.current") or clean("pcie.link.gen.gpucurrent")),
            pcie_width=integer(clean("pcie.link.width.current")),
            extra={"source": "nvidia-smi --query-gpu", "index": index, "pstate": clean("pstate"),
                   "pcie_max_gen": max_gen, "pcie_max_width": max_width,
                   "pcie_host_max_gen": integer(clean("pcie.link.gen.hostmax")),
                   "remap_correctable": integer(clean("remapped_rows.correctable")),
                   "remap_uncorrectable": integer(clean("remapped_rows.uncorrectable")),
                   "recovery_action": clean("gpu_recovery_action"),
                   "other": {k: row[k] for k in other}},
            line=n)
        out.append(sample)
        out.extend(self.p.tracker.observe(sample, ts_origin=clock.origin, ts_approx=clock.approx, ts_raw=clock.raw))
        for column, text in errors.items():
            reason = text.strip("[] ")
            out.append(Event(kind="nvidia_smi_error", message=f"nvidia-smi {column} of GPU {index}: {reason}",
                             ts=clock.ts, ts_origin=clock.origin, ts_approx=clock.approx, host=self.p.host,
                             layer="gpu", severity="error", gpu=normalize_pci(bus),
                             attrs={"error": f"query {column}", "reason": reason, "pci": normalize_pci(bus)}, line=n))
        return out


class TopoBlock(Block):
    """``nvidia-smi topo -m``: how each GPU reaches each other GPU (``NV18``: 18 bonded NVLinks; ``SYS``,
    ``NODE``, ``PHB``, ``PXB``, ``PIX``: PCIe paths), as one ``gpu_topology`` host fact, JSON
    ``{"GPU0": {"GPU1": "NV18", ...}, ...}``; NIC columns and the affinities are left out."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.columns: list[str] = []
        self.matrix: dict[str, dict[str, str]] = {}
        self.blank_run = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if not line.strip():
            self.blank_run += 1
            return [], self.blank_run < 3
        self.blank_run = 0
        if not self.columns and _TOPO_HEAD.match(line):
            self.columns = [c.strip() for c in _TOPO_SPLIT.split(line.strip()) if c.strip()]
            return [], True
        if m := _TOPO_ROW.match(line):
            cells = [c.strip() for c in _TOPO_SPLIT.split(line.strip())][1:]
            if m.group(1).startswith("GPU"):
                self.matrix[m.group(1)] = {peer: cell for peer, cell in zip(self.columns, cells)
                                           if peer.startswith("GPU") and peer != m.group(1) and cell}
            return [], True
        return [], bool(_TOPO_LEGEND.match(line))

    def close(self) -> list[Row]:
        if not self.matrix:
            return []
        return [HostFact("gpu_topology", json.dumps(self.matrix, sort_keys=True), host=self.p.host)]


class NvlinkBlock(Block):
    """``nvidia-smi nvlink --status`` (link speeds or ``<inactive>``) and ``nvlink -e`` (per-link error
    counters). The snapshot is judged as a whole at the end: a GPU with fewer active links than its
    peers has links down."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.gpus: list[dict[str, Any]] = []

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if m := _NVLINK_GPU.match(line):
            self.gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3), "line": n,
                              "active": [], "inactive": [], "speeds": [], "errors": {}, "notes": []})
            return [], True
        if not self.gpus:
            return [], False
        gpu = self.gpus[-1]
        if m := _NVLINK_LINK.match(line):
            link, text = int(m.group(1)), m.group(2)
            if em := re.match(r"^([A-Za-z][\w /-]*?)(?: Errors)?:\s*(\d+)$", text):
                counter = _norm(em.group(1))
                gpu["errors"].setdefault(str(link), {})[counter] = int(em.group(2))
            elif "inactive" in text.lower() or "down" in text.lower():
                gpu["inactive"].append(link)
            elif sm := re.match(r"^([\d.]+)\s*GB/s", text):
                gpu["active"].append(link)
                gpu["speeds"].append(float(sm.group(1)))
            else:
                gpu["notes"].append(text)
            return [], True
        if line.startswith((" ", "\t")) and line.strip():
            gpu["notes"].append(line.strip()[:200])
            return [], True
        return [], False

    def close(self) -> list[Row]:
        rows: list[Row] = []
        clock = self.p.clock()
        snapshot = []
        for g in self.gpus:
            key = gpu_key(None, g["index"], g["uuid"])
            rows.append(GpuInventory(gpu=key, host=self.p.host, index=g["index"], uuid=g["uuid"], name=g["name"],
                                     extra={"source": "nvidia-smi nvlink"}))
            links = len(g["active"]) + len(g["inactive"])
            counts = [v for per in g["errors"].values() for v in per.values()]
            sample = GpuSample(ts=clock.ts, gpu=key, host=self.p.host, uuid=g["uuid"],
                               nvlink_errors=sum(counts) if counts else None,
                               extra={"source": "nvidia-smi nvlink", "index": g["index"],
                                      "nvlink_links": links or None, "nvlink_active": len(g["active"]),
                                      "nvlink_inactive": g["inactive"], "nvlink_speeds_gbps": sorted(set(g["speeds"])),
                                      "nvlink_errors": {k: {c: v for c, v in per.items() if v}
                                                        for k, per in g["errors"].items() if any(per.values())},
                                      "notes": g["notes"][:20]},
                               line=g["line"])
            rows.append(sample)
            rows.extend(self.p.tracker.observe(sample, ts_origin=clock.origin, ts_approx=clock.approx))
            if links:
                snapshot.append((sample, g["active"], g["inactive"]))
        rows.extend(self.p.tracker.nvlink_snapshot(snapshot, ts_origin=clock.origin, ts_approx=clock.approx))
        return rows


class DiagBlock(Block):
    """``dcgmi diag`` tables, DCGM 2.x/3.x (``Pass - All``, ``Fail - GPU: 0, 1``, ``Warning`` rows) and
    4.x (lower-case plugin names, ``GPU0: Pass`` sub-rows)."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.meta: dict[str, str] = {}
        self.meta_line: int | None = None
        self.category: str | None = None
        self.tests: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None
        self.in_warning = False

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if stripped.startswith("Successfully ran diagnostic"):
            return [], True
        if not stripped.startswith(("|", "+")):
            return [], False
        if m := _DIAG_CATEGORY.match(stripped):
            self.category = m.group(1).strip()
            self.current, self.in_warning = None, False
            return [], True
        m = _DIAG_ROW.match(stripped)
        if not m:
            return [], True
        left, right = m.group(1), m.group(2)
        if left == "Diagnostic" and right == "Result":
            return [], True
        if self.category == "Metadata" and left:
            self.meta[left] = right
            self.meta_line = self.meta_line or n
            return [], True
        if left.lower().startswith(("warning", "info", "error")):
            self.in_warning = True
            if self.current is not None:
                self.current["warnings"].append(right)
            return [], True
        if left:
            self.in_warning = False
            self.current = {"test": left, "category": self.category, "results": [], "warnings": [], "line": n}
            self.tests.append(self.current)
        if self.current is None:
            return [], True
        rm = _DIAG_RESULT.match(right)
        if rm and not self.in_warning:
            result = rm.group(2).lower().replace("warning", "warn")
            gpus: Any = int(rm.group(1)) if rm.group(1) is not None else (rm.group(3) or "all")
            self.current["results"].append((result, gpus, n))
        elif right and self.current["warnings"] and self.in_warning:
            self.current["warnings"][-1] += " " + right
        elif right:
            self.current["warnings"].append(right)
        return [], True

    def close(self) -> list[Row]:
        rows: list[Row] = []
        clock = self.p.clock()
        host = self.p.dcgm_host or self.p.host
        common = {"ts": clock.ts, "ts_origin": clock.origin, "ts_approx": clock.approx, "host": host, "source": "dcgm"}
        if self.meta:
            ids = [i.strip() for i in self.meta.get("GPU Device IDs Detected", "").split(",") if i.strip()]
            attrs = {"dcgm_version": self.meta.get("DCGM Version"), "driver": self.meta.get("Driver Version Detected"),
                     "device_ids": ids, "pod": self.p.dcgm_pod, "host": self.p.dcgm_host}
            rows.append(Event(kind="dcgm_diag_run", layer="gpu", severity="info", line=self.meta_line, attrs=attrs,
                              message=f"dcgmi diag: DCGM {attrs['dcgm_version']}, driver {attrs['driver']}, "
                                      f"{len(ids)} GPU(s)", **common))
            if attrs["dcgm_version"]:
                rows.append(HostFact("versions.dcgm", attrs["dcgm_version"], host=host))
            if attrs["driver"]:
                rows.append(HostFact("versions.driver", attrs["driver"], host=host))
        for test in self.tests:
            by_result: dict[str, list[Any]] = {}
            first_line: dict[str, int] = {}
            for result, gpus, n in test["results"]:
                by_result.setdefault(result, []).append(gpus)
                first_line.setdefault(result, n)
            if not by_result and test["warnings"]:
                by_result["warn"] = ["all"]
            for result, gpus in by_result.items():
                per_gpu = [g for g in gpus if isinstance(g, int)]
                listed = per_gpu or [_gpu_list(g) for g in gpus if not isinstance(g, int)]
                severity = {"fail": "error", "warn": "warning"}.get(result, "info")
                layer = "gpu" if (test["category"] or "").lower() in ("deployment", "software") else "hardware"
                rows.append(Event(kind="dcgm_diag", layer=layer, severity=severity,
                                  line=first_line.get(result, test["line"]),
                                  message=f"dcgmi diag {test['test']}: {result}"
                                          + (f" ({'; '.join(test['warnings'])[:300]})" if result != "pass"
                                             and test["warnings"] else ""),
                                  attrs={"test": test["test"], "category": test["category"], "result": result,
                                         "gpus": _flatten(listed), "warnings": test["warnings"][:20]}, **common))
        return rows


def _gpu_list(text: str) -> Any:
    """``GPU: 0, 1`` -> [0, 1]; ``All`` -> "all"."""
    nums = [int(x) for x in re.findall(r"\d+", text or "")]
    return nums or "all"


def _flatten(values: list[Any]) -> Any:
    if any(v == "all" for v in values):
        return "all"
    out: list[int] = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return sorted(set(out))


class HealthBlock(Block):
    """``dcgmi health -c`` as a table: Overall Health, then per GPU its status and incidents."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.overall: str | None = None
        self.gpus: dict[str, str] = {}
        self.incidents: list[dict[str, Any]] = []
        self.gpu: str | None = None
        self.line: int | None = None

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if not stripped.startswith(("|", "+")):
            return [], False
        self.line = self.line or n
        m = _DIAG_ROW.match(stripped)
        if not m:
            return [], True
        left, right = m.group(1), m.group(2)
        if left == "Overall Health":
            self.overall = right
        elif gm := re.match(r"GPU ID:\s*(\d+)", left):
            self.gpu = gm.group(1)
            self.gpus[self.gpu] = right
        elif not left and right and (im := re.match(r"^(.+?):\s*(Healthy|Warning|Failure|Error)\b\s*-?\s*(.*)$",
                                                    right)):
            self.incidents.append({"gpu": self.gpu, "system": im.group(1), "health": im.group(2),
                                   "message": im.group(3)})
        elif not left and right and self.incidents:
            self.incidents[-1]["message"] = (self.incidents[-1]["message"] + " " + right).strip()
        return [], True

    def close(self) -> list[Row]:
        if self.overall is None and not self.gpus:
            return []
        return [_health_event(self.p, self.overall, self.gpus, self.incidents, self.line)]


def _health_event(parser: TextParser, overall: str | None, gpus: dict[str, str], incidents: list[dict[str, Any]],
                  line: int | None) -> Event:
    states = [s.lower() for s in [overall or "", *gpus.values()]]
    severity = "error" if any(s.startswith(("fail", "error")) for s in states) else \
        "warning" if any(s.startswith("warn") for s in states) else "info"
    clock = parser.clock()
    return Event(kind="dcgm_health", message=f"dcgmi health: overall {overall}"
                 + (f"; {len(incidents)} incident(s)" if incidents else ""),
                 ts=clock.ts, ts_origin=clock.origin, ts_approx=clock.approx, host=parser.dcgm_host or parser.host,
                 source="dcgm", layer="gpu", severity=severity, line=line,
                 attrs={"overall": overall, "gpus": gpus, "incidents": incidents[:50]})


class DmonBlock(Block):
    """``dcgmi dmon``: a ``#Entity`` header of field short names, then one row per entity per tick.
    Field 230 (XIDER) is the last Xid DCGM saw on that GPU."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.columns: list[str] = []

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if m := _DMON_HEAD.match(stripped):
            self.columns = m.group(1).split()
            return [], True
        if not stripped:
            return [], False
        if stripped in ("ID",) or stripped.startswith("ID ") or stripped.startswith("#"):
            return [], True
        m = _DMON_ROW.match(stripped)
        if not m or not self.columns:
            return [], False
        values = m.group(3).split()
        if m.group(1) != "GPU":
            return [], True
        return self._row(n, int(m.group(2)), dict(zip(self.columns, values))), True

    def _row(self, n: int, index: int, fields: dict[str, str]) -> list[Row]:
        clock = self.p.clock()
        host = self.p.dcgm_host or self.p.host
        sample = GpuSample(ts=clock.ts, gpu=gpu_key(None, index), host=host, line=n,
                           extra={"source": "dcgmi dmon", "index": index, "dcgm": fields})
        for column, attr in DMON_COLUMNS.items():
            text = fields.get(column)
            if text is not None and text.upper() != "N/A" and (v := number(text)) is not None:
                setattr(sample, attr, int(v) if attr in ("pcie_gen", "pcie_width") else v)
        rows: list[Row] = [sample]
        xid = integer(fields.get("XIDER"))
        if xid:
            attrs = {"xid": xid, "pci": None, "pid": None, "process": None, "gpu_index": index,
                     "via": "dcgm field 230 (XIDER)"}
            attrs.update(xid_catalog_attrs(xid))
            layer = attrs.pop("layer", None) or "gpu"
            severity = attrs.pop("severity", None) or "error"
            rows.append(Event(kind="xid", message=f"DCGM: last Xid on GPU {index} is {xid}", ts=clock.ts,
                              ts_origin=clock.origin, ts_approx=True, host=host, source="dcgm", layer=layer,
                              severity=severity, attrs=attrs, line=n))
        return rows


class JsonBlock(Block):
    """A JSON document (``dcgmi health -c -j``, ``dcgmi diag -j``) collected until its braces balance."""

    LIMIT = 1 << 20

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.parts: list[str] = []
        self.size = 0
        self.depth = 0
        self.first: int | None = None
        self.finished = False

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if self.finished:
            return [], False
        self.first = self.first or n
        self.parts.append(line)
        self.size += len(line)
        self.depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        if self.size > self.LIMIT:
            self.finished = True
            return [Skipped(n, "JSON block larger than 1 MiB")], True
        if self.depth <= 0:
            self.finished = True
        return [], True

    def close(self) -> list[Row]:
        try:
            doc = json.loads(no_lone_surrogates("\n".join(self.parts)))
        except ValueError:
            return [Skipped(self.first, "JSON block is not valid JSON")]
        body = doc.get("body") if isinstance(doc, dict) else None
        if not isinstance(body, dict):
            return [Skipped(self.first, "JSON document of an unknown tool")]
        overall = (body.get("Overall Health") or {}).get("value") if isinstance(body.get("Overall Health"), dict) \
            else None
        gpus: dict[str, str] = {}
        incidents: list[dict[str, Any]] = []
        for key, entry in body.items():
            gm = re.match(r"GPU ID:\s*(\d+)", key)
            if not gm or not isinstance(entry, dict):
                continue
            gpus[gm.group(1)] = str(entry.get("value"))
            for system, info in (entry.get("children") or {}).items():
                if isinstance(info, dict):
                    texts = [str(v.get("value")) for v in (info.get("children") or {}).values() if isinstance(v, dict)]
                    incidents.append({"gpu": gm.group(1), "system": system, "health": info.get("value"),
                                      "message": " ".join(texts)})
        if overall is None and not gpus:
            return [Skipped(self.first, "JSON document without a health report")]
        return [_health_event(self.p, overall, gpus, incidents, self.first)]
