"""The sample-to-event rules (``HealthTracker``): successive readings of each GPU become events only when
a condition starts or changes. They live with NVML because the offline nvidia-smi and DCGM parsers read
the same quantities and must raise the same events."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from collectors.base import Event, GpuSample, Row, normalize_pci
from collectors.nvml.counters import counter_points

BAD_THROTTLE = ("hw_thermal", "hw_power_brake", "sw_power_cap", "hw_slowdown", "sw_thermal")
"""Reasons that mean the clocks are held back by heat or power, not by idleness or a setting."""
SHARED_MIN_MIB = 1024.0
"""A compute process holding at least this much of a GPU is a workload of its own: the few hundred MiB
of a CUDA context that every rank opens on GPU 0 by mistake is not a second workload."""


class HealthTracker:
    """Turns successive readings of each GPU into events, only when a condition starts or changes,
    so a one-hour ``--query-gpu -l 1`` log of a throttled GPU is one event, not 3600."""

    def __init__(self, source: str | None = None) -> None:
        self.source = source
        self.state: dict[tuple[str, str], Any] = {}
        self.links: dict[str, set[int]] = {}

    def observe(self, sample: GpuSample, *, ts_origin: str = "none", ts_approx: bool = False,
                ts_raw: str | None = None, lines: dict[str, int] | None = None) -> list[Row]:
        """The reading's error counters as series points (collectors/nvml/counters.py: every GPU reader's
        samples pass here), then its events; ``sample.extra`` may carry pstate, gpu_idle, pcie_max_gen,
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
        out: list[Row] = list(counter_points(sample))
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
