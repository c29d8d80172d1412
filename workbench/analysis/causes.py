"""The cause catalog (rules/causes/<cause_id>.yaml, one file per cause): what each root cause id means
and what to do about it.

The ids of docs/causes.md are a contract (the analyze JSON, the report, the TUI); the catalog is data so
a responder can read and extend it, and this module refuses a catalog that breaks the contract. A
cause's file also holds what later stages read of it (its alert rules or why none measure it, its
isolation rule: ``SECTIONS``), so a new cause is one file plus its drill.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import yaml

import rules
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
_OPTIONAL = ("unknown", "accrues", "lasting")
"""``unknown: true``: the cause is 'an error no catalog entry knows' at a layer, not a failure of its own;
there is nothing specific to practise, so it has no drill (every other cause has one).
``accrues: true``: the cause builds up over the whole run (a time limit): whatever led to it may have
shown at any time since the job began, not only shortly before it (workbench/analysis/chains.py).
``lasting: true``: a state that stays true once it began (Fabric Manager not running): evidence of
it hours before a failure still explains the failure, so its timing does not decay."""
_FLAGS = ("unknown", "accrues", "lasting")


SECTIONS = ("alerts", "unmeasured", "isolation")
"""Fields of a cause's file that other stages validate and read (cause_sections): its Prometheus rules
(workbench/prevention/alert_rules.py), or why no time series shows it, and its isolation rule
(workbench/prevention/isolation.py). load_causes leaves them out."""

FOLDER = "causes"
"""The catalog's folder in the rules package: one <cause_id>.yaml per cause (format: FORMAT.md there)."""
_ID = re.compile(r"^[a-z][a-z0-9_]*$")


def cause_file(cid: str) -> str:
    """The file of a cause, as messages name it."""
    return f"rules/{FOLDER}/{cid}.yaml"


class CatalogError(GpuwbError, ValueError):
    """The cause catalog does not match its schema; the message names the cause and field."""


def validate_causes(data: Any) -> dict[str, dict[str, Any]]:
    """Check the catalog's shape and cross-references; returns it unchanged when valid."""
    if not isinstance(data, dict):
        raise CatalogError(f"rules/{FOLDER}/: the catalog must map cause id -> entry")
    for cid, entry in data.items():
        at = cause_file(cid)
        if not isinstance(cid, str) or not _ID.match(cid):
            raise CatalogError(f"{at}: a cause id is lower-case letters, digits and _")
        if not isinstance(entry, dict):
            raise CatalogError(f"{at}: must be a mapping")
        missing = [k for k in _REQUIRED if k not in entry]
        if missing:
            raise CatalogError(f"{at}: missing {', '.join(missing)}")
        unknown = sorted(set(entry) - set(_REQUIRED) - set(_OPTIONAL) - set(SECTIONS))
        if unknown:
            raise CatalogError(f"{at}: unknown field(s) {', '.join(unknown)}")
        if entry["layer"] not in LAYERS:
            raise CatalogError(f"{at}: layer {entry['layer']!r} is not one of {', '.join(LAYERS)}")
        if entry["scope"] not in SCOPES:
            raise CatalogError(f"{at}: scope {entry['scope']!r} is not one of {', '.join(SCOPES)}")
        for key in ("title", "description"):
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise CatalogError(f"{at}: {key} must be non-empty text")
        if not isinstance(entry["remediation"], list) or not entry["remediation"]:
            raise CatalogError(f"{at}: remediation must be a non-empty list")
        bad = [s for s in entry["symptoms"] if s not in SYMPTOM_KINDS]
        if bad:
            raise CatalogError(f"{at}: unknown symptom kind(s) {', '.join(bad)}")
        items = entry["action_items"]
        if not isinstance(items, dict) or set(items) != set(ACTION_KINDS):
            raise CatalogError(f"{at}: action_items needs exactly {', '.join(ACTION_KINDS)}")
        for kind, lines in items.items():
            if not isinstance(lines, list) or not all(isinstance(x, str) and x for x in lines):
                raise CatalogError(f"{at}: action_items.{kind} must be a list of text")
        for flag in _FLAGS:
            if flag in entry and not isinstance(entry[flag], bool):
                raise CatalogError(f"{at}: {flag} must be true or false")
        for rel in ("leads_to", "absorbs"):
            bad = [c for c in entry[rel] if c not in data]
            if bad:
                raise CatalogError(f"{at}: {rel} names unknown cause(s) {', '.join(bad)}")
    for layer, ids in DESIGN_CAUSES.items():
        for cid in ids:
            if cid not in data:
                raise CatalogError(f"{cause_file(cid)}: DESIGN cause {cid} is missing")
            if data[cid]["layer"] != layer:
                raise CatalogError(f"{cause_file(cid)}: {cid} must be in layer {layer}")
    for cid, entry in data.items():
        for other in entry["absorbs"]:
            if cid in data[other]["absorbs"]:
                raise CatalogError(f"{cause_file(cid)}: {cid} and {other} absorb each other")
            if cid in data[other]["leads_to"]:
                raise CatalogError(f"{cause_file(cid)}: {cid} absorbs {other}, which also leads to it")
    return data


def _order(item: tuple[str, Any]) -> tuple[int, str]:
    layer = item[1].get("layer") if isinstance(item[1], dict) else None
    return (LAYERS.index(layer) if layer in LAYERS else len(LAYERS), item[0])


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, dict[str, Any]]:
    folder = Path(next(iter(rules.__path__))) / FOLDER
    data: dict[str, Any] = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            data[path.stem] = yaml.load(path.read_text(encoding="utf-8"),
                                        Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except yaml.YAMLError as exc:
            raise CatalogError(f"{cause_file(path.stem)}: not valid YAML: {exc}") from None
    return validate_causes(dict(sorted(data.items(), key=_order)))


def causes_document() -> dict[str, dict[str, Any]]:
    """Every cause file as one mapping, cause id -> its whole entry (SECTIONS included), in catalog
    order (by layer, then id); a deep copy, for tools and tests that edit it and validate it again."""
    return copy.deepcopy(_load())


def cause_sections(key: str) -> dict[str, Any]:
    """cause id -> its ``key`` section (one of SECTIONS) for the causes that have one, in catalog order."""
    if key not in SECTIONS:
        raise ValueError(f"{key!r} is not a section of a cause file: {', '.join(SECTIONS)}")
    return {cid: copy.deepcopy(entry[key]) for cid, entry in _load().items() if key in entry}


def load_causes() -> dict[str, dict[str, Any]]:
    """cause id -> entry (layer, title, scope, description, symptoms, remediation, action_items,
    leads_to, absorbs, optional unknown) without the SECTIONS other stages read; a fresh copy, so
    callers may annotate it."""
    return {cid: {k: v for k, v in entry.items() if k not in SECTIONS} for cid, entry in _load().items()}
