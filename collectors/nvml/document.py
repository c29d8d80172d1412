"""The recorded NVML document read back: inventory, sample and event rows (the samples through the
HealthTracker, as every GPU source's are); a damaged document is a counted skip, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, BinaryIO

from collectors.base import Event, GpuInventory, GpuSample, ParseContext, Row, Skipped, normalize_pci
from collectors.framework.json_items import decoded
from collectors.nvml.health import HealthTracker
from collectors.nvml.shared import cuda_version, decode_reasons, gpu_key, xid_catalog_attrs

MAX_DOC_BYTES = 256 << 20


def rows(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
