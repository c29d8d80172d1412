"""NVML: GPU inventory, a short window of samples and Xid events, through pynvml.

Live capture goes through ``NvmlAdapter``, a thin wrapper over the ``pynvml`` module that turns
every NVML error into a null value plus a reason, so one unsupported field (ECC on a GeForce,
row remapping before Ampere) never costs the rest. ``pynvml`` is imported inside ``capture``,
never at module import: capture must start fast, and on a host without a driver the import
works but ``nvmlInit`` raises ``NVMLError_LibraryNotFound``, which becomes the coverage note
``unavailable: NVML library not found``. A GPU that fell off the bus makes NVML calls hang in the
driver; the framework's per-collector deadline (TIMEOUT) cuts such a capture off.

The raw artifact (kind ``nvml_json``) is one JSON document of everything recorded, with NVML's
own units (mW, bytes, bitmasks); ``parse`` turns it into inventory, sample and event rows.
The sample-to-event rules live here too (``HealthTracker``), because the offline nvidia-smi and
DCGM parsers read the same quantities and must raise the same events.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone
from types import ModuleType
from typing import Any, BinaryIO

from collectors.base import (
    Artifact,
    CaptureContext,
    Event,
    GpuInventory,
    GpuSample,
    ParseContext,
    Row,
    Skipped,
    normalize_pci,
)
from collectors.framework.json_items import decoded

NAME = "nvml"
LAYER = "gpu"
KINDS = ("nvml_json",)
TIMEOUT = 25.0
TOUCHES_GPU = True
FORMAT = "gpuwb.nvml/1"

THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
    0x200: "board_limit",
    0x400: "reliability",
}
"""nvmlClocksEventReason* bits, named as gpu_sample.throttle_reasons names them (docs/bundle.md)."""

BAD_THROTTLE = ("hw_thermal", "hw_power_brake", "sw_power_cap", "hw_slowdown", "sw_thermal")
"""Reasons that mean the clocks are held back by heat or power, not by idleness or a setting."""
SHARED_MIN_MIB = 1024.0
"""A compute process holding at least this much of a GPU is a workload of its own: the few hundred MiB
of a CUDA context that every rank opens on GPU 0 by mistake is not a second workload."""

NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"), ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                   ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
EVENT_POLL_MS = 200
MAX_DOC_BYTES = 256 << 20


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--nvml-samples", type=int, default=5, metavar="N",
                        help="NVML samples per GPU during capture (default 5)")
    parser.add_argument("--nvml-interval", type=float, default=1.0, metavar="S",
                        help="seconds between NVML samples; Xid events are polled meanwhile (default 1.0)")


# -- live capture --------------------------------------------------------------------------------

def load_nvml() -> ModuleType:
    """The pynvml module; deferred so that importing collectors stays fast on a bare node."""
    import pynvml

    return pynvml


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    try:
        nvml = load_nvml()
    except ImportError:
        ctx.missing("NVML", "unavailable: pynvml (nvidia-ml-py) is not installed")
        return
    adapter = NvmlAdapter(nvml)
    reason = adapter.init()
    if reason:
        ctx.missing("NVML", reason)
        return
    try:
        samples = max(1, int(ctx.options.get("nvml_samples") or 5))
        interval = max(0.0, float(ctx.options.get("nvml_interval") if ctx.options.get("nvml_interval")
                                  is not None else 1.0))
        doc = record(adapter, samples=samples, interval=interval, host=ctx.host)
    finally:
        adapter.shutdown()
    for err in doc["errors"]:
        ctx.missing(f"GPU {err.get('index')}", f"unavailable: {err.get('call')} failed: {err.get('error')}")
    yield Artifact(source="nvml", kind="nvml_json", data=json.dumps(doc, indent=1, default=str).encode(),
                   host=ctx.host, info={"gpus": len(doc["devices"]), "samples": len(doc["samples"]),
                                        "xid_events": len(doc["events"])})


class NvmlAdapter:
    """Every NVML call of the capture, made safe: errors become (None, reason in ``sink``).

    The wrapped module is injectable, so tests replay recorded values through a fake pynvml."""

    def __init__(self, nvml: ModuleType | Any) -> None:
        self.nvml = nvml

    def const(self, name: str, default: Any = None) -> Any:
        return getattr(self.nvml, name, default)

    def init(self) -> str | None:
        """None when NVML is up, else the coverage reason."""
        try:
            self.nvml.nvmlInit()
        except Exception as exc:
            name = error_name(exc)
            if name == "LibraryNotFound":
                return "unavailable: NVML library not found"
            if name == "DriverNotLoaded":
                return "unavailable: NVIDIA driver not loaded"
            if name == "NoPermission":
                return "denied: no permission to initialize NVML"
            return f"unavailable: nvmlInit failed: {name}"
        return None

    def shutdown(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down after a failure must not hide what was recorded
            return

    def raw(self, sink: dict[str, str], field: str, fn: str, *args: Any) -> Any:
        """Call ``fn``; on any error record why under ``field`` and return None."""
        func = getattr(self.nvml, fn, None)
        if func is None:
            sink[field] = "FunctionNotFound"
            return None
        try:
            return func(*args)
        except Exception as exc:
            sink[field] = error_name(exc)
            return None

    def call(self, sink: dict[str, str], field: str, fn: str, *args: Any) -> Any:
        """Like ``raw`` with the result turned into plain JSON values (structs become dicts)."""
        return plain(self.raw(sink, field, fn, *args))


def error_name(exc: BaseException) -> str:
    """NVMLError_NotSupported -> 'NotSupported'; anything else -> its type and text."""
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name.removeprefix("NVMLError_")
    if name == "NVMLError":
        return str(exc) or name
    return f"{name}: {exc}"[:200]


def plain(value: Any) -> Any:
    """NVML return values (ctypes structs, bytes, tuples) as JSON-ready values."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        return {name: plain(getattr(value, name, None)) for name, *_ in fields}
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def record(adapter: NvmlAdapter, *, samples: int, interval: float, host: str | None = None) -> dict[str, Any]:
    """Inventory, ``samples`` readings ``interval`` seconds apart, and Xid events seen meanwhile."""
    doc: dict[str, Any] = {"format": FORMAT, "host": host, "started_at": _now(), "unsupported": {},
                           "devices": [], "samples": [], "events": [], "errors": []}
    sink = doc["unsupported"]
    doc["driver"] = adapter.call(sink, "driver", "nvmlSystemGetDriverVersion")
    doc["nvml_version"] = adapter.call(sink, "nvml_version", "nvmlSystemGetNVMLVersion")
    doc["cuda_driver_version"] = adapter.call(sink, "cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    count = adapter.call(sink, "device_count", "nvmlDeviceGetCount") or 0
    handles: list[tuple[int, Any, dict[str, Any]]] = []
    for index in range(int(count)):
        why: dict[str, str] = {}
        handle = adapter.raw(why, "handle", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            doc["errors"].append({"index": index, "call": "nvmlDeviceGetHandleByIndex", "error": why.get("handle")})
            continue
        device = _inventory(adapter, handle, index)
        doc["devices"].append(device)
        handles.append((index, handle, device))
    event_set = _event_set(adapter, handles, sink)
    for k in range(samples):
        doc["samples"].append({"ts": _now(), "gpus": [_sample(adapter, h, dev) for _, h, dev in handles]})
        if k < samples - 1:
            _wait_events(adapter, event_set, interval, handles, doc)
    _wait_events(adapter, event_set, 0.0, handles, doc)
    if event_set is not None:
        adapter.raw({}, "event_set", "nvmlEventSetFree", event_set)
    doc["finished_at"] = _now()
    return doc


def _inventory(adapter: NvmlAdapter, handle: Any, index: int) -> dict[str, Any]:
    sink: dict[str, str] = {}
    c = adapter.call
    pci = c(sink, "pci", "nvmlDeviceGetPciInfo", handle) or {}
    memory = c(sink, "memory", "nvmlDeviceGetMemoryInfo", handle) or {}
    mig = c(sink, "mig_mode", "nvmlDeviceGetMigMode", handle)
    ecc = c(sink, "ecc_mode", "nvmlDeviceGetEccMode", handle)
    return {
        "index": index,
        "pci_bus_id": pci.get("busId") if isinstance(pci, dict) else None,
        "name": c(sink, "name", "nvmlDeviceGetName", handle),
        "uuid": c(sink, "uuid", "nvmlDeviceGetUUID", handle),
        "serial": c(sink, "serial", "nvmlDeviceGetSerial", handle),
        "vbios": c(sink, "vbios", "nvmlDeviceGetVbiosVersion", handle),
        "persistence_mode": c(sink, "persistence_mode", "nvmlDeviceGetPersistenceMode", handle),
        "mig_mode": mig[0] if isinstance(mig, list) and mig else mig,
        "ecc_mode": ecc[0] if isinstance(ecc, list) and ecc else ecc,
        "power_limit_mw": c(sink, "power_limit_mw", "nvmlDeviceGetPowerManagementLimit", handle),
        "enforced_power_limit_mw": c(sink, "enforced_power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", handle),
        "pcie_max_gen": c(sink, "pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        "pcie_max_width": c(sink, "pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", handle),
        "memory_total_bytes": memory.get("total") if isinstance(memory, dict) else None,
        "unsupported": sink,
    }


def _sample(adapter: NvmlAdapter, handle: Any, device: dict[str, Any]) -> dict[str, Any]:
    sink: dict[str, str] = {}
    c, k = adapter.call, adapter.const
    util = c(sink, "utilization", "nvmlDeviceGetUtilizationRates", handle) or {}
    memory = c(sink, "memory", "nvmlDeviceGetMemoryInfo", handle) or {}
    reasons = c(sink, "clocks_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if sink.get("clocks_event_reasons") == "FunctionNotFound":
        sink.pop("clocks_event_reasons")
        reasons = c(sink, "clocks_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    ecc = {}
    for name, err_type, counter in (("volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
                                    ("volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                                     "NVML_VOLATILE_ECC"),
                                    ("aggregate_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
                                    ("aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
                                     "NVML_AGGREGATE_ECC")):
        ecc[name] = c(sink, f"ecc_{name}", "nvmlDeviceGetTotalEccErrors", handle, k(err_type, 0), k(counter, 0))
    sbe = c(sink, "retired_sbe", "nvmlDeviceGetRetiredPages", handle,
            k("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0))
    dbe = c(sink, "retired_dbe", "nvmlDeviceGetRetiredPages", handle,
            k("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1))
    remap = c(sink, "remapped_rows", "nvmlDeviceGetRemappedRows", handle)
    return {
        "index": device["index"],
        "pci_bus_id": device.get("pci_bus_id"),
        "util_gpu": util.get("gpu") if isinstance(util, dict) else None,
        "util_mem": util.get("memory") if isinstance(util, dict) else None,
        "mem_used_bytes": memory.get("used") if isinstance(memory, dict) else None,
        "mem_total_bytes": memory.get("total") if isinstance(memory, dict) else None,
        "temp_c": c(sink, "temp_c", "nvmlDeviceGetTemperature", handle, k("NVML_TEMPERATURE_GPU", 0)),
        "power_mw": c(sink, "power_mw", "nvmlDeviceGetPowerUsage", handle),
        "power_limit_mw": c(sink, "power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", handle),
        "sm_clock_mhz": c(sink, "sm_clock_mhz", "nvmlDeviceGetClockInfo", handle, k("NVML_CLOCK_SM", 1)),
        "mem_clock_mhz": c(sink, "mem_clock_mhz", "nvmlDeviceGetClockInfo", handle, k("NVML_CLOCK_MEM", 2)),
        "clocks_event_reasons": reasons,
        "pstate": c(sink, "pstate", "nvmlDeviceGetPerformanceState", handle),
        "ecc": ecc,
        "retired_sbe": len(sbe) if isinstance(sbe, list) else None,
        "retired_dbe": len(dbe) if isinstance(dbe, list) else None,
        "retired_pending": c(sink, "retired_pending", "nvmlDeviceGetRetiredPagesPendingStatus", handle),
        "remapped_rows": dict(zip(("correctable", "uncorrectable", "pending", "failure"), remap))
        if isinstance(remap, list) else None,
        "pcie_gen": c(sink, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        "pcie_width": c(sink, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", handle),
        "pcie_replay": c(sink, "pcie_replay", "nvmlDeviceGetPcieReplayCounter", handle),
        "nvlink": _nvlinks(adapter, handle, sink),
        "processes": _processes(adapter, handle, sink),
        "unsupported": sink,
    }


def _nvlinks(adapter: NvmlAdapter, handle: Any, sink: dict[str, str]) -> list[dict[str, Any]] | None:
    """Per-link state and error counters; links past the GPU's last one answer an error, which ends the walk."""
    links: list[dict[str, Any]] = []
    for link in range(int(adapter.const("NVML_NVLINK_MAX_LINKS", 18))):
        why: dict[str, str] = {}
        state = adapter.call(why, "state", "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            if link == 0:
                sink["nvlink"] = why.get("state", "unknown")
                return None
            break
        errors: dict[str, Any] = {}
        for name, const in NVLINK_COUNTERS:
            errors[name] = adapter.call(why, name, "nvmlDeviceGetNvLinkErrorCounter", handle, link,
                                        adapter.const(const, 0))
        entry: dict[str, Any] = {"link": link, "active": bool(state), "errors": errors}
        if why:
            entry["unsupported"] = why
        links.append(entry)
    return links


def _processes(adapter: NvmlAdapter, handle: Any, sink: dict[str, str]) -> list[dict[str, Any]]:
    found: dict[int, dict[str, Any]] = {}
    for kind, fn in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                     ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        for proc in adapter.call(sink, f"processes_{kind}", fn, handle) or []:
            if not isinstance(proc, dict) or proc.get("pid") is None:
                continue
            pid = int(proc["pid"])
            if pid in found:
                continue
            name = adapter.call({}, "name", "nvmlSystemGetProcessName", pid)
            found[pid] = {"pid": pid, "name": name, "used_bytes": proc.get("usedGpuMemory"), "type": kind}
    return list(found.values())


def _event_set(adapter: NvmlAdapter, handles: list[tuple[int, Any, dict[str, Any]]], sink: dict[str, str]) -> Any:
    """An event set registered for Xid critical errors on every GPU that supports them."""
    if not handles:
        return None
    event_set = adapter.raw(sink, "xid_events", "nvmlEventSetCreate")
    if event_set is None:
        return None
    xid_type = adapter.const("nvmlEventTypeXidCriticalError", 8)
    registered = 0
    for index, handle, _ in handles:
        why: dict[str, str] = {}
        adapter.raw(why, "register", "nvmlDeviceRegisterEvents", handle, xid_type, event_set)
        if why:
            sink[f"xid_events_gpu{index}"] = why["register"]
        else:
            registered += 1
    if not registered:
        adapter.raw({}, "free", "nvmlEventSetFree", event_set)
        return None
    return event_set


def _wait_events(adapter: NvmlAdapter, event_set: Any, seconds: float,
                 handles: list[tuple[int, Any, dict[str, Any]]], doc: dict[str, Any]) -> None:
    """Spend ``seconds`` waiting on the event set in short slices, recording each Xid that arrives."""
    deadline = time.monotonic() + seconds
    if event_set is None:
        time.sleep(seconds)
        return
    while True:
        left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
        why: dict[str, str] = {}
        data = adapter.raw(why, "wait", "nvmlEventSetWait", event_set, min(left_ms, EVENT_POLL_MS))
        if data is not None:
            doc["events"].append(_event_record(adapter, data, handles))
        elif why.get("wait") not in (None, "Timeout"):
            doc["unsupported"]["xid_events_wait"] = why["wait"]
            time.sleep(max(0.0, deadline - time.monotonic()))
            return
        if time.monotonic() >= deadline:
            return


def _event_record(adapter: NvmlAdapter, data: Any, handles: list[tuple[int, Any, dict[str, Any]]]) -> dict[str, Any]:
    device = getattr(data, "device", None)
    pci = adapter.call({}, "pci", "nvmlDeviceGetPciInfo", device) if device is not None else None
    bus = pci.get("busId") if isinstance(pci, dict) else None
    index = next((i for i, h, dev in handles if h is device or (bus and dev.get("pci_bus_id") == bus)), None)
    return {"ts": _now(), "event_type": plain(getattr(data, "eventType", None)),
            "xid": plain(getattr(data, "eventData", None)), "pci_bus_id": bus, "index": index}


# -- shared sample semantics ---------------------------------------------------------------------

def decode_reasons(mask: int | None) -> list[str] | None:
    """An nvmlClocksEventReason bitmask as reason names; unknown bits keep their hex value."""
    if mask is None:
        return None
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_BITS)
    if rest:
        names.append(hex(rest))
    return names


def gpu_key(pci: str | None = None, index: int | str | None = None, uuid: str | None = None) -> str:
    """A GPU's key in gpu_sample/gpu_inventory: its PCI id where known (the join key across sources),
    else its UUID, else ``index:N`` as the tool numbered it."""
    return normalize_pci(pci) or (uuid or None) or (f"index:{index}" if index is not None else "unknown")


def cuda_version(value: int | None) -> str | None:
    """NVML's CUDA driver version integer (12020) as nvidia-smi prints it (12.2)."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


class HealthTracker:
    """Turns successive readings of each GPU into events, only when a condition starts or changes,
    so a one-hour ``--query-gpu -l 1`` log of a throttled GPU is one event, not 3600."""

    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.state: dict[tuple[str, str], Any] = {}
        self.links: dict[str, set[int]] = {}

    def observe(self, sample: GpuSample, *, ts_origin: str = "none", ts_approx: bool = False,
                ts_raw: str | None = None, lines: dict[str, int] | None = None) -> list[Event]:
        """Events for one reading; ``sample.extra`` may carry pstate, gpu_idle, pcie_max_gen,
        pcie_max_width, pcie_host_max_gen and recovery_action. ``lines`` maps a condition to its line.
        Messages and attrs are built only for a condition that starts or changes (long logs are cheap)."""
        extra = sample.extra
        reasons = sample.throttle_reasons or []
        bad = tuple(r for r in BAD_THROTTLE if r in reasons)
        idle = bool(extra.get("gpu_idle")) or "gpu_idle" in reasons
        pcie = _pcie_degraded(sample, idle)
        vol, agg = sample.ecc_volatile_uncorrected, sample.ecc_aggregate_uncorrected
        action = extra.get("recovery_action")
        shared = workloads(extra.get("processes"))
        signatures = {
            "gpu_throttle": bad or None,
            "pcie_link_degraded": (pcie["reason"], sample.pcie_gen, sample.pcie_width) if pcie else None,
            "ecc_uncorrectable": (vol, agg) if (vol or agg) else None,
            "row_remap_pending": True if sample.remap_pending else None,
            "row_remap_failure": True if sample.remap_failure else None,
            "retired_pages_pending": True if sample.retired_pending else None,
            "gpu_recovery_action": action if action and action.lower() not in ("none", "n/a") else None,
            "nvlink_error": sample.nvlink_errors or None,
            "gpu_contention": tuple(sorted(p["pid"] for p in shared)) if len(shared) >= 2 else None,
        }
        out: list[Event] = []
        for kind, signature in signatures.items():
            key = (sample.gpu, kind)
            if signature is None:
                self.state.pop(key, None)
                continue
            if self.state.get(key) == signature:
                continue
            self.state[key] = signature
            severity, layer, message, attrs = self._describe(kind, sample, bad, idle, pcie or {})
            out.append(Event(kind=kind, message=message, ts=sample.ts, ts_origin=ts_origin if sample.ts else "none",
                             ts_approx=ts_approx, ts_raw=ts_raw, host=sample.host, source=self.source, layer=layer,
                             severity=severity, gpu=event_gpu(sample.gpu), attrs=_with_key(attrs, sample.gpu),
                             line=(lines or {}).get(kind, sample.line)))
        return out

    @staticmethod
    def _describe(kind: str, sample: GpuSample, bad: tuple[str, ...], idle: bool,
                  pcie: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
        """(severity, layer, message, attrs) of one condition of one reading."""
        where = f"GPU {sample.gpu}" if sample.gpu != "unknown" else "GPU"
        extra = sample.extra
        remap = {"correctable": extra.get("remap_correctable"), "uncorrectable": extra.get("remap_uncorrectable")}
        if kind == "gpu_throttle":
            return ("warning", "hardware", f"{where} clocks held back: {', '.join(bad)}" + _load_note(sample),
                    {"reasons": list(bad), "all_reasons": sample.throttle_reasons or [], "util_gpu": sample.util_gpu,
                     "idle": idle, "power_w": sample.power_w, "power_limit_w": sample.power_limit_w,
                     "temp_c": sample.temp_c, "sm_clock_mhz": sample.sm_clock_mhz})
        if kind == "pcie_link_degraded":
            return ("warning", "hardware", f"{where} PCIe link at Gen{sample.pcie_gen} x{sample.pcie_width}, "
                    f"capable of Gen{pcie.get('max_gen')} x{pcie.get('max_width')}", pcie)
        if kind == "ecc_uncorrectable":
            vol, agg = sample.ecc_volatile_uncorrected, sample.ecc_aggregate_uncorrected
            return ("error", "gpu", f"{where} uncorrectable ECC errors: volatile {vol}, aggregate {agg}",
                    {"volatile": vol, "aggregate": agg})
        if kind == "row_remap_pending":
            return "warning", "hardware", f"{where} row remap pending: reset the GPU to apply it", remap
        if kind == "row_remap_failure":
            return "error", "hardware", f"{where} row remapping failed: the GPU needs service", remap
        if kind == "retired_pages_pending":
            return ("warning", "hardware", f"{where} retired pages pending a reset",
                    {"sbe": sample.retired_pages_sbe, "dbe": sample.retired_pages_dbe})
        if kind == "gpu_recovery_action":
            action = extra.get("recovery_action")
            return ("error", "gpu", f"{where} recovery action required: {action}",
                    {"action": action, "field": extra.get("recovery_field", "gpu_recovery_action")})
        if kind == "gpu_contention":
            shared = workloads(extra.get("processes"))
            held = ", ".join(f"pid {p['pid']} {p['name'] or '?'} ({p['used_mib']:g} MiB)" for p in shared)
            return ("warning", "scheduling", f"{where} shared by {len(shared)} compute processes: {held}",
                    {"processes": shared, "count": len(shared)})
        return ("warning", "hardware", f"{where} NVLink error counters: {sample.nvlink_errors}",
                {"total": sample.nvlink_errors, "links": extra.get("nvlink_errors") or {}})

    def nvlink_snapshot(self, readings: Iterable[tuple[GpuSample, list[int], list[int]]], *,
                        ts_origin: str = "none", ts_approx: bool = False) -> list[Event]:
        """``nvlink_down`` for GPUs whose active links are fewer than their peers' in the same
        snapshot, or that lost a link seen active in an earlier snapshot. Readings are
        (sample, active links, inactive links) for every GPU of one snapshot."""
        readings = list(readings)
        with_links = [len(active) for _, active, _ in readings if active]
        expected = max(with_links) if with_links else 0
        out: list[Event] = []
        for sample, active, inactive in readings:
            before = self.links.get(sample.gpu, set())
            lost = sorted(before - set(active))
            self.links[sample.gpu] = before | set(active)
            down = sorted(set(inactive) | set(lost)) if (lost or (inactive and len(active) < expected)) else []
            key = (sample.gpu, "nvlink_down")
            signature = tuple(down) or None
            if signature is None:
                self.state.pop(key, None)
                continue
            if self.state.get(key) == signature:
                continue
            self.state[key] = signature
            out.append(Event(kind="nvlink_down", ts=sample.ts, ts_origin=ts_origin if sample.ts else "none",
                             ts_approx=ts_approx, host=sample.host, source=self.source, layer="hardware",
                             severity="error", gpu=event_gpu(sample.gpu),
                             message=f"GPU {sample.gpu} NVLink links down: {', '.join(map(str, down))} "
                                     f"({len(active)} active, peers have {expected})",
                             attrs=_with_key({"links": down, "active": len(active), "expected": expected},
                                             sample.gpu),
                             line=sample.line))
        return out


def workloads(processes: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """The compute processes of one GPU's process list (nvidia-smi -q, the nvidia-smi table, NVML)
    that hold SHARED_MIN_MIB or more, biggest first, as {pid, name, type, used_mib}."""
    out = []
    for proc in processes or []:
        kind = str(proc.get("type") or "C").strip().upper()
        used = proc.get("used_mib")
        if used is None and proc.get("used_bytes") is not None:
            used = proc["used_bytes"] / (1 << 20)
        if proc.get("pid") is None or used is None or used < SHARED_MIN_MIB:
            continue
        if kind == "COMPUTE" or "C" in kind.split("+"):
            out.append({"pid": proc["pid"], "name": proc.get("name"), "type": proc.get("type"),
                        "used_mib": round(float(used), 1)})
    return sorted(out, key=lambda p: (-p["used_mib"], p["pid"]))


def event_gpu(key: str) -> str | None:
    """An event's ``gpu`` is a PCI id or null (docs/cli.md); other sample keys go to attrs.gpu_key."""
    return normalize_pci(key) if key and normalize_pci(key) == key else None


def _with_key(attrs: dict[str, Any], key: str) -> dict[str, Any]:
    if event_gpu(key) is None and key != "unknown":
        return {**attrs, "gpu_key": key}
    return attrs


def _load_note(sample: GpuSample) -> str:
    parts = []
    if sample.util_gpu is not None:
        parts.append(f"util {sample.util_gpu:g}%")
    if sample.power_w is not None:
        parts.append(f"{sample.power_w:g} W" + (f" of {sample.power_limit_w:g} W" if sample.power_limit_w else ""))
    if sample.temp_c is not None:
        parts.append(f"{sample.temp_c:g} C")
    return f" ({', '.join(parts)})" if parts else ""


def _pcie_degraded(sample: GpuSample, idle: bool) -> dict[str, Any] | None:
    """Width below max is always a fault; gen below max only counts under load, because an idle GPU
    drops its PCIe generation to save power."""
    extra = sample.extra
    max_gen, max_width = extra.get("pcie_max_gen"), extra.get("pcie_max_width")
    host_max = extra.get("pcie_host_max_gen")
    if max_gen and host_max:
        max_gen = min(max_gen, host_max)
    info = {"gen": sample.pcie_gen, "max_gen": max_gen, "width": sample.pcie_width, "max_width": max_width,
            "util_gpu": sample.util_gpu, "pstate": extra.get("pstate")}
    if sample.pcie_width and max_width and sample.pcie_width < max_width:
        return {**info, "reason": "width"}
    pstate = extra.get("pstate")
    busy_pstate = pstate is None or (isinstance(pstate, str) and pstate[1:].isdigit() and int(pstate[1:]) <= 4)
    loaded = not idle and busy_pstate and sample.util_gpu is not None and sample.util_gpu > 0
    if loaded and sample.pcie_gen and max_gen and sample.pcie_gen < max_gen:
        return {**info, "reason": "gen"}
    return None


# -- parse ---------------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    if head.lstrip().startswith("{") and f'"format": "{FORMAT}"' in head:
        return {"nvml_json": 95}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    data = stream.read(MAX_DOC_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_DOC_BYTES:
        yield Skipped(None, "NVML document larger than 256 MiB")
        return
    try:
        doc = json.loads(decoded(data))
    except ValueError as exc:
        yield Skipped(None, f"not an NVML JSON document: {str(exc)[:80]}")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("devices"), list):
        yield Skipped(None, "not an NVML JSON document (no devices list)")
        return
    try:
        yield from _rows(doc, ctx)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        yield Skipped(None, f"malformed NVML document: {type(exc).__name__}: {str(exc)[:80]}")


def _num(value: Any, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / scale


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _ts(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _rows(doc: dict[str, Any], ctx: ParseContext) -> Iterator[Row]:
    host = doc.get("host") or ctx.host
    driver = doc.get("driver") if isinstance(doc.get("driver"), str) else None
    cuda = cuda_version(doc.get("cuda_driver_version"))
    devices: dict[int | None, dict[str, Any]] = {}
    for dev in doc["devices"]:
        if not isinstance(dev, dict):
            yield Skipped(None, "device entry is not an object")
            continue
        devices[_int(dev.get("index"))] = dev
        key = gpu_key(dev.get("pci_bus_id"), dev.get("index"), dev.get("uuid"))
        yield GpuInventory(
            gpu=key, host=host, index=_int(dev.get("index")), uuid=dev.get("uuid"), name=dev.get("name"),
            serial=dev.get("serial"), vbios=dev.get("vbios"), driver=driver, cuda=cuda,
            persistence=_onoff(dev.get("persistence_mode")), mig_mode=_onoff(dev.get("mig_mode")),
            power_limit_w=_num(dev.get("power_limit_mw"), 1000), pcie_max_gen=_int(dev.get("pcie_max_gen")),
            pcie_max_width=_int(dev.get("pcie_max_width")),
            memory_total_mib=_num(dev.get("memory_total_bytes"), 1 << 20),
            extra={"source": "nvml", "ecc_mode": _onoff(dev.get("ecc_mode")),
                   "enforced_power_limit_w": _num(dev.get("enforced_power_limit_mw"), 1000),
                   "nvml_version": doc.get("nvml_version"), "unsupported": dev.get("unsupported") or {}})
    tracker = HealthTracker()
    for sample in doc.get("samples") or []:
        if not isinstance(sample, dict):
            yield Skipped(None, "sample entry is not an object")
            continue
        ts = _ts(sample.get("ts"))
        snapshot = []
        for reading in sample.get("gpus") or []:
            if not isinstance(reading, dict):
                yield Skipped(None, "GPU reading is not an object")
                continue
            row = _sample_row(reading, devices.get(_int(reading.get("index")), {}), ts, host)
            yield row
            yield from tracker.observe(row, ts_origin="iso")
            links = reading.get("nvlink") or []
            snapshot.append((row, [entry["link"] for entry in links if entry.get("active")],
                             [entry["link"] for entry in links if not entry.get("active")]))
        yield from tracker.nvlink_snapshot(snapshot, ts_origin="iso")
    for event in doc.get("events") or []:
        if isinstance(event, dict):
            yield _xid_event(event, devices, host)


def _onoff(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return "Enabled" if value else "Disabled"


def _sample_row(reading: dict[str, Any], dev: dict[str, Any], ts: datetime | None, host: str | None) -> GpuSample:
    ecc = reading.get("ecc") or {}
    remap = reading.get("remapped_rows") or {}
    links = reading.get("nvlink") or []
    link_errors = {str(e["link"]): {k: v for k, v in (e.get("errors") or {}).items() if v}
                   for e in links if any((e.get("errors") or {}).values())}
    totals = [v for e in links for v in (e.get("errors") or {}).values() if isinstance(v, int)]
    pstate = _int(reading.get("pstate"))
    return GpuSample(
        ts=ts, gpu=gpu_key(reading.get("pci_bus_id") or dev.get("pci_bus_id"), reading.get("index"), dev.get("uuid")),
        host=host, uuid=dev.get("uuid"),
        util_gpu=_num(reading.get("util_gpu")), util_mem=_num(reading.get("util_mem")),
        mem_used_mib=_num(reading.get("mem_used_bytes"), 1 << 20),
        mem_total_mib=_num(reading.get("mem_total_bytes"), 1 << 20),
        temp_c=_num(reading.get("temp_c")), power_w=_num(reading.get("power_mw"), 1000),
        power_limit_w=_num(reading.get("power_limit_mw"), 1000),
        sm_clock_mhz=_num(reading.get("sm_clock_mhz")), mem_clock_mhz=_num(reading.get("mem_clock_mhz")),
        throttle_reasons=decode_reasons(_int(reading.get("clocks_event_reasons"))),
        ecc_volatile_corrected=_int(ecc.get("volatile_corrected")),
        ecc_volatile_uncorrected=_int(ecc.get("volatile_uncorrected")),
        ecc_aggregate_corrected=_int(ecc.get("aggregate_corrected")),
        ecc_aggregate_uncorrected=_int(ecc.get("aggregate_uncorrected")),
        retired_pages_sbe=_int(reading.get("retired_sbe")), retired_pages_dbe=_int(reading.get("retired_dbe")),
        retired_pending=bool(reading["retired_pending"]) if _int(reading.get("retired_pending")) is not None else None,
        remap_pending=bool(remap["pending"]) if _int(remap.get("pending")) is not None else None,
        remap_failure=bool(remap["failure"]) if _int(remap.get("failure")) is not None else None,
        pcie_gen=_int(reading.get("pcie_gen")), pcie_width=_int(reading.get("pcie_width")),
        pcie_replay=_int(reading.get("pcie_replay")), nvlink_errors=sum(totals) if totals else None,
        extra={"source": "nvml", "pstate": f"P{pstate}" if pstate is not None and pstate < 32 else None,
               "pcie_max_gen": _int(dev.get("pcie_max_gen")), "pcie_max_width": _int(dev.get("pcie_max_width")),
               "remap_correctable": _int(remap.get("correctable")),
               "remap_uncorrectable": _int(remap.get("uncorrectable")),
               "nvlink_links": len(links) if links else None, "nvlink_errors": link_errors,
               "nvlink_active": sum(1 for e in links if e.get("active")) if links else None,
               "processes": reading.get("processes") or [], "unsupported": reading.get("unsupported") or {}})


def _xid_event(event: dict[str, Any], devices: dict[int | None, dict[str, Any]], host: str | None) -> Event:
    index = _int(event.get("index"))
    dev = devices.get(index, {}) if index is not None else {}
    pci = normalize_pci(event.get("pci_bus_id") or dev.get("pci_bus_id"))
    xid = _int(event.get("xid"))
    attrs = {"xid": xid, "pci": pci, "pid": None, "process": None, "gpu_index": index, "via": "nvml_event_set",
             "event_type": event.get("event_type")}
    attrs.update(xid_catalog_attrs(xid))
    layer = attrs.pop("layer", None) or "gpu"
    severity = attrs.pop("severity", None) or "error"
    return Event(kind="xid", message=f"NVML event: Xid {xid} on GPU {pci or index}", ts=_ts(event.get("ts")),
                 ts_origin="iso" if _ts(event.get("ts")) else "none", host=host, layer=layer, severity=severity,
                 gpu=pci, attrs=attrs)


def xid_catalog_attrs(xid: int | None) -> dict[str, Any]:
    """Name, meaning, action, layer and severity of an Xid from the kernel collector's catalog
    (collectors/framework/xid_catalog.py), so an Xid seen by NVML or DCGM reads like one from the kernel log."""
    if xid is None:
        return {}
    from collectors.framework.xid_catalog import lookup

    try:
        info = lookup(xid)
    except Exception:  # a broken catalog must not cost the event itself
        return {}
    return {"name": info.name, "meaning": info.meaning, "action": info.action, "follower": info.follower,
            "causes": list(info.causes), "layer": info.layer, "severity": info.severity}
