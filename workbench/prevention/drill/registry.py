"""Which generator writes each cause of the catalog, for which workloads.

Each layer's module (:mod:`workbench.prevention.drill.faults_business` and its siblings) registers its
generators with :func:`fault`; :func:`faults` loads them all once and is what the command and the
tests read. A generator receives the training :class:`~workbench.prevention.drill.training.Job` or the
serving :class:`~workbench.prevention.drill.serving.Service` it breaks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WORKLOADS = ("training", "inference")
_MODULES = ("faults_business", "faults_scheduling", "faults_gpu", "faults_network_storage", "faults_hardware")


@dataclass(frozen=True)
class Fault:
    """One cause's generator for one workload."""

    cause: str
    workload: str
    write: Callable[[Any], None]
    doc: str


_FAULTS: dict[tuple[str, str], Fault] = {}


def fault(cause: str, workload: str) -> Callable[[Callable[[Any], None]], Callable[[Any], None]]:
    """Register the decorated function as ``cause``'s generator for ``workload``."""
    def register(func: Callable[[Any], None]) -> Callable[[Any], None]:
        _FAULTS[(cause, workload)] = Fault(cause, workload, func, (func.__doc__ or "").strip().split("\n")[0])
        return func
    return register


def faults() -> dict[tuple[str, str], Fault]:
    """Every registered generator, keyed by (cause, workload)."""
    for name in _MODULES:
        importlib.import_module(f"workbench.prevention.drill.{name}")
    return dict(sorted(_FAULTS.items()))


def workloads_of(cause: str) -> list[str]:
    """The workloads a cause can be drilled on, training first."""
    return [w for w in WORKLOADS if (cause, w) in faults()]
