"""The GPU tree of ``nvidia-smi -q`` text and of ``-q -x`` XML, read into the rows NVML gives.

Both formats are one tree per GPU whose node names differ only in spelling (``FB Memory Usage`` /
``fb_memory_usage``), so one :class:`Node` tree and one reader (:func:`gpu_rows`) serve both, across every
driver's layout: the paths tried in turn name each layout's spelling.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from collectors.base import Event, GpuInventory, GpuSample, Row, normalize_pci
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Clock, integer, number
from collectors.nvml.health import HealthTracker
from collectors.nvml.shared import gpu_key

NA = {"", "n/a", "[n/a]", "na", "not supported", "[not supported]", "none", "unknown", "[unknown]", "-"}
REASONS = {"gpu_idle": "gpu_idle", "idle": "gpu_idle", "applications_clocks_setting": "applications_clocks",
           "applications_clocks": "applications_clocks", "sw_power_cap": "sw_power_cap", "hw_slowdown": "hw_slowdown",
           "hw_thermal_slowdown": "hw_thermal", "hw_power_brake_slowdown": "hw_power_brake",
           "sync_boost": "sync_boost", "sw_thermal_slowdown": "sw_thermal", "display_clock_setting": "display_clocks",
           "display_clocks_setting": "display_clocks"}
"""Clock event/throttle reason names in -q text, XML tags and CSV columns -> the NVML names."""

CTIME = lazy_regex(r"^\s*(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d:\d\d:\d\d)\s+(\d{4})\s*$")


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


def norm(key: str) -> str:
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
    m = CTIME.match(text)
    if not m:
        return None
    month, day, clock, year = m.groups()
    try:
        return datetime.strptime(f"{year} {month} {day} {clock}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


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
    yield from _unreadable(gpu, key, bus, clock, host, source)


UNREADABLE = ("unknown error", "gpu is lost", "err!")
"""Values -q prints for a field the driver could not read from a GPU that is failing."""


def _unreadable(gpu: Node, key: str, bus: str | None, clock: Clock, host: str | None, source: str) -> Iterator[Row]:
    """One ``nvidia_smi_error`` naming the GPU and every field that read ``Unknown Error``/``GPU is lost``
    (a GPU falling off the bus answers some queries and not others)."""
    broken = [node for node in gpu.walk() if node.value and node.value.strip().strip("[]").lower() in UNREADABLE]
    if not broken:
        return
    reason = broken[0].value.strip().strip("[]") if broken[0].value else None
    pci = normalize_pci(bus)
    names = [node.name for node in broken][:50]
    yield Event(kind="nvidia_smi_error", message=f"{source} could not read {len(broken)} field(s) of GPU {key} "
                f"({reason}): {', '.join(names[:8])}", ts=clock.ts, ts_origin=clock.origin, ts_approx=clock.approx,
                ts_raw=clock.raw, host=host, layer="gpu", severity="error", gpu=pci, line=broken[0].line,
                attrs={"error": reason, "reason": reason, "pci": pci, "fields": names})


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

