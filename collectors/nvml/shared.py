"""What the NVML, nvidia-smi and DCGM readers share: a GPU's key, the throttle-reason bits, NVML's CUDA
version number, an Xid's catalog attrs. One definition, so every source names a GPU and a reason alike."""

from __future__ import annotations

from typing import Any

from collectors.base import normalize_pci

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
