"""Live recording through the adapter: inventory, a few samples and the Xid events NVML delivers
meanwhile, as one JSON document (kind ``nvml_json``, format FORMAT) in NVML's own units (mW, bytes, bitmasks)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from collectors.nvml.adapter import NvmlAdapter, plain

FORMAT = "gpuwb.nvml/1"
NVLINK_COUNTERS = (("replay", "NVML_NVLINK_ERROR_DL_REPLAY"), ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
                   ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"), ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"))
EVENT_POLL_MS = 200


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
