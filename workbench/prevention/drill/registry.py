"""Which generator writes each cause of the catalog, for which workloads.

Each layer's module (:mod:`workbench.prevention.drill.faults_business` and its siblings, every
``faults_<layer>`` module of this package) declares its generators with :func:`fault`, which files each in
its own module's ``FAULTS`` list; :func:`faults` finds those modules the way every plugin is found
(:func:`collectors.framework.plugins.discover`, marker ``FAULTS``), so a new layer's module is found without
a list naming it, and is what the command and the tests read. A generator receives the training
:class:`~workbench.prevention.drill.training.Job` or the serving
:class:`~workbench.prevention.drill.serving.Service` it breaks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from collectors.framework.plugins import PluginError, discover

WORKLOADS = ("training", "inference")


@dataclass(frozen=True)
class Fault:
    """One cause's generator for one workload."""

    cause: str
    workload: str
    write: Callable[[Any], None]
    doc: str


def fault(cause: str, workload: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Declare the decorated function as ``cause``'s generator for ``workload``: it joins the ``FAULTS`` list
    of the module that defines it, the plugin marker :func:`faults` looks for."""
    def register(func: Callable[[Any], None]) -> Callable[[Any], None]:
        declared = func.__globals__.setdefault("FAULTS", [])
        declared.append(Fault(cause, workload, func, (func.__doc__ or "").strip().split("\n")[0]))
        return func
    return register


def collect(package: str) -> dict[tuple[str, str], Fault]:
    """The generators the ``faults_*`` modules of ``package`` declare, keyed by (cause, workload) in key
    order; two generators for one key are refused, naming both, rather than one silently shadowing the
    other by import order."""
    by_key: dict[tuple[str, str], Fault] = {}
    for module in discover(package, attr="FAULTS", kind=list, prefix="faults_"):
        for entry in module.FAULTS:
            key = (entry.cause, entry.workload)
            if key in by_key:
                first = by_key[key].write
                raise PluginError(f"plugin {module.__name__}: {entry.write.__name__} drills {key}, "
                                  f"which {first.__module__}.{first.__name__} already does")
            by_key[key] = entry
    return dict(sorted(by_key.items()))


@lru_cache(maxsize=1)
def _found() -> tuple[tuple[tuple[str, str], Fault], ...]:
    return tuple(collect("workbench.prevention.drill").items())


def faults() -> dict[tuple[str, str], Fault]:
    """Every generator of this package's ``faults_*`` modules, keyed by (cause, workload), in key order."""
    return dict(_found())


def workloads_of(cause: str) -> list[str]:
    """The workloads a cause can be drilled on, training first."""
    return [w for w in WORKLOADS if (cause, w) in faults()]
