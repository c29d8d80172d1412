"""Finds collector modules, so adding a source is adding one module and touching no other."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType

import collectors

_NOT_COLLECTORS = {"base", "framework", "catalog"}


@lru_cache(maxsize=1)
def all_collectors() -> tuple[ModuleType, ...]:
    """Every module of the ``collectors`` package that declares NAME, sorted by PRIORITY then NAME."""
    found = []
    for info in pkgutil.iter_modules(collectors.__path__):
        if info.name in _NOT_COLLECTORS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"collectors.{info.name}")
        if hasattr(module, "NAME"):
            found.append(module)
    return tuple(sorted(found, key=lambda m: (getattr(m, "PRIORITY", 50), m.NAME)))


def by_name(name: str) -> ModuleType:
    for module in all_collectors():
        if module.NAME == name:
            return module
    raise KeyError(name)


def collector_for_kind(kind: str) -> ModuleType | None:
    for module in all_collectors():
        if kind in getattr(module, "KINDS", ()):
            return module
    return None


def known_kinds() -> list[str]:
    return sorted({k for m in all_collectors() for k in getattr(m, "KINDS", ())})


def sniff(name: str, head: str, min_score: int = 1) -> tuple[str, ModuleType] | None:
    """The kind whose collector is most confident about this file's first bytes, if any scores
    at least ``min_score``."""
    best = sniff_scored(name, head)
    if best is None or best[0] < min_score:
        return None
    return best[1], best[2]


def sniff_scored(name: str, head: str) -> tuple[int, str, ModuleType] | None:
    """(score, kind, collector) of the most confident sniffer, or None when none recognises the head."""
    best: tuple[int, str, ModuleType] | None = None
    for module in all_collectors():
        sniffer = getattr(module, "sniff", None)
        if sniffer is None:
            continue
        for kind, score in (sniffer(name, head) or {}).items():
            if score > 0 and (best is None or score > best[0]):
                best = (score, kind, module)
    return best


def sniff_unwrapped(name: str, head: str) -> tuple[int, str, ModuleType] | None:
    """What the head is once the wrappers no collector reads are peeled off (a dmesg pasted in a Markdown
    quote, an NCCL log through CRI or kubectl --timestamps, ``dmesg -H``): :func:`sniff_scored` on the
    unwrapped lines, or None when there was nothing to peel or still no verdict."""
    from collectors.framework.framing import unframed_lines  # deferred: only files no sniffer took get here

    lines = head.splitlines()[:400]
    unwrapped = list(unframed_lines(lines))
    if unwrapped == lines:
        return None
    return sniff_scored(name, "\n".join(unwrapped))
