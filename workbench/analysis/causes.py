"""The cause catalog (rules/causes.yaml): what each root cause id means and what to do about it.

The ids of docs/causes.md are a contract (the analyze JSON, the report, the TUI); the catalog is data so
a responder can read and extend it, and this module refuses a catalog that breaks the contract.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

import rules
from collectors.catalog import package_text
from collectors.framework.vocabulary import LAYERS, SYMPTOM_KINDS
from workbench.errors import GpuwbError

DESIGN_CAUSES: dict[str, tuple[str, ...]] = {
    "business": ("traffic_surge", "bad_change", "long_context_shift", "quantization_regression"),
    "scheduling": ("preemption", "gpu_contention", "insufficient_capacity", "job_time_limit", "node_drained",
                   "host_oom_kill", "pod_eviction"),
    "gpu": ("gpu_oom", "kv_cache_pressure", "app_gpu_fault", "numeric_instability", "driver_stack_mismatch",
            "gpu_hang", "ecc_uncorrectable"),
    "network_storage": ("network_fabric_errors", "storage_stall", "disk_full"),
    "hardware": ("gpu_fell_off_bus", "nvlink_error", "pcie_link_degraded", "row_remap_failure", "nvswitch_fault",
                 "thermal_throttling", "power_throttling", "psu_or_fan_failure", "host_hardware_error"),
}
"""Cause ids fixed by the first design, per layer (docs/causes.md); the catalog may add more, never drop these."""

SCOPES = ("gpu", "host", "global")
ACTION_KINDS = ("monitoring", "change_control", "isolation", "drills")
_REQUIRED = ("layer", "title", "scope", "description", "symptoms", "remediation", "action_items", "leads_to",
             "absorbs")
_OPTIONAL = ("unknown",)
"""``unknown: true``: the cause is 'an error no catalog entry knows' at a layer, not a failure of its own;
there is nothing specific to practise, so it has no drill (every other cause has one)."""


class CatalogError(GpuwbError, ValueError):
    """The cause catalog does not match its schema; the message names the cause and field."""


def validate_causes(data: Any) -> dict[str, dict[str, Any]]:
    """Check the catalog's shape and cross-references; returns it unchanged when valid."""
    if not isinstance(data, dict):
        raise CatalogError("causes.yaml: top level must be a mapping of cause id -> entry")
    for cid, entry in data.items():
        where = f"causes.yaml: {cid}"
        if not isinstance(entry, dict):
            raise CatalogError(f"{where}: must be a mapping")
        missing = [k for k in _REQUIRED if k not in entry]
        if missing:
            raise CatalogError(f"{where}: missing {', '.join(missing)}")
        unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL))
        if unknown:
            raise CatalogError(f"{where}: unknown field(s) {', '.join(unknown)}")
        if entry["layer"] not in LAYERS:
            raise CatalogError(f"{where}: layer {entry['layer']!r} is not one of {', '.join(LAYERS)}")
        if entry["scope"] not in SCOPES:
            raise CatalogError(f"{where}: scope {entry['scope']!r} is not one of {', '.join(SCOPES)}")
        for key in ("title", "description"):
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise CatalogError(f"{where}: {key} must be non-empty text")
        if not isinstance(entry["remediation"], list) or not entry["remediation"]:
            raise CatalogError(f"{where}: remediation must be a non-empty list")
        bad = [s for s in entry["symptoms"] if s not in SYMPTOM_KINDS]
        if bad:
            raise CatalogError(f"{where}: unknown symptom kind(s) {', '.join(bad)}")
        items = entry["action_items"]
        if not isinstance(items, dict) or set(items) != set(ACTION_KINDS):
            raise CatalogError(f"{where}: action_items needs exactly {', '.join(ACTION_KINDS)}")
        for kind, lines in items.items():
            if not isinstance(lines, list) or not all(isinstance(x, str) and x for x in lines):
                raise CatalogError(f"{where}: action_items.{kind} must be a list of text")
        for rel in ("leads_to", "absorbs"):
            bad = [c for c in entry[rel] if c not in data]
            if bad:
                raise CatalogError(f"{where}: {rel} names unknown cause(s) {', '.join(bad)}")
    for layer, ids in DESIGN_CAUSES.items():
        for cid in ids:
            if cid not in data:
                raise CatalogError(f"causes.yaml: DESIGN cause {cid} is missing")
            if data[cid]["layer"] != layer:
                raise CatalogError(f"causes.yaml: {cid} must be in layer {layer}")
    for cid, entry in data.items():
        for other in entry["absorbs"]:
            if cid in data[other]["absorbs"]:
                raise CatalogError(f"causes.yaml: {cid} and {other} absorb each other")
            if cid in data[other]["leads_to"]:
                raise CatalogError(f"causes.yaml: {cid} absorbs {other}, which also leads to it")
    return data


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, Any]]:
    text = package_text(rules, "causes.yaml")
    return validate_causes(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


def load_causes() -> dict[str, dict[str, Any]]:
    """cause id -> entry (layer, title, scope, description, symptoms, remediation, action_items,
    leads_to, absorbs); a fresh copy, so callers may annotate it."""
    return {cid: dict(entry) for cid, entry in _load().items()}
