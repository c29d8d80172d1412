"""The Xid catalog (collectors/catalog/xid.yaml) as typed entries: what an Xid means, where it points, what to do.

The catalog is data so that responders can correct it without touching code; this module only
loads and validates it, once, and only when a kernel log actually holds an Xid (YAML parsing is
not free on a capture's start-up path).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from collectors import catalog as catalogs
from collectors.framework.vocabulary import LAYERS, SEVERITIES

REQUIRED = ("name", "meaning", "layer", "severity", "action", "follower", "causes")


@dataclass(frozen=True)
class XidInfo:
    """One catalog entry; ``causes`` are ids of rules/causes/."""

    code: int
    name: str
    meaning: str
    layer: str
    severity: str
    action: str
    follower: bool
    causes: tuple[str, ...]
    mnemonic: str | None = None


class CatalogError(ValueError):
    """The YAML breaks the catalog's contract (a missing field, an unknown layer or action)."""


def catalog_source() -> str:
    """The text of collectors/catalog/xid.yaml."""
    return catalogs.package_text(catalogs, "xid.yaml")


def parse_catalog(text: str) -> tuple[dict[int, XidInfo], dict[str, str]]:
    """Validated entries and the action descriptions from the catalog's YAML text."""
    import yaml  # deferred: only needed once an Xid is seen

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc: dict[str, Any] = yaml.load(text, Loader=loader) or {}
    actions = {str(k): str(v) for k, v in (doc.get("actions") or {}).items()}
    entries: dict[int, XidInfo] = {}
    for code, raw in (doc.get("xids") or {}).items():
        if not isinstance(raw, dict):
            raise CatalogError(f"Xid {code}: entry is not a mapping")
        missing = [f for f in REQUIRED if f not in raw]
        if missing:
            raise CatalogError(f"Xid {code}: missing {', '.join(missing)}")
        if raw["layer"] not in LAYERS:
            raise CatalogError(f"Xid {code}: unknown layer {raw['layer']!r}")
        if raw["severity"] not in SEVERITIES:
            raise CatalogError(f"Xid {code}: unknown severity {raw['severity']!r}")
        if raw["action"] not in actions:
            raise CatalogError(f"Xid {code}: action {raw['action']!r} is not described under actions")
        entries[int(code)] = XidInfo(code=int(code), name=str(raw["name"]), meaning=str(raw["meaning"]),
                                     layer=raw["layer"], severity=raw["severity"], action=raw["action"],
                                     follower=bool(raw["follower"]), causes=tuple(raw["causes"] or ()),
                                     mnemonic=raw.get("mnemonic"))
    return entries, actions


@lru_cache(maxsize=1)
def catalog() -> dict[int, XidInfo]:
    """Every catalogued Xid by code."""
    return parse_catalog(catalog_source())[0]


@lru_cache(maxsize=1)
def actions() -> dict[str, str]:
    """Resolution bucket -> what a responder does."""
    return parse_catalog(catalog_source())[1]


def lookup(code: int) -> XidInfo:
    """The entry for ``code``; an Xid the catalog does not know yet still gets a usable default."""
    found = catalog().get(code)
    if found is not None:
        return found
    return XidInfo(code=code, name=f"Xid {code}", meaning="not in the Xid catalog; see NVIDIA's Xid documentation",
                   layer="gpu", severity="error", action="CONTACT_SUPPORT", follower=False, causes=())
