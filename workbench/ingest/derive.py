"""Runs every derivation after ingest or capture, replacing the previous derived events."""

from __future__ import annotations

from types import ModuleType

from collectors.base import Event, Skipped
from collectors.framework.plugins import discover
from workbench.store.bundle import Bundle
from workbench.store.gpu_identity import resolve


def derivations() -> list[ModuleType]:
    """Every module of :mod:`workbench.ingest.derivations` that declares NAME and ``derive``, by NAME."""
    found = discover("workbench.ingest.derivations", attr="NAME", kind=str, requires=("derive",))
    return sorted(found, key=lambda m: m.NAME)


def run_derivations(bundle: Bundle) -> dict[str, int]:
    """Recompute derived events; a failing derivation is reported, never fatal."""
    resolve(bundle.con)  # one key per GPU (the bus id) before anything reads the rows
    bundle.con.execute("DELETE FROM event WHERE ts_origin = 'derived'")
    counts: dict[str, int] = {}
    for module in derivations():
        writer = bundle.writer(None)
        try:
            for event in module.derive(bundle.con):
                if isinstance(event, Event):
                    event.ts_origin = "derived"
                    event.source = event.source or module.NAME
                writer.add(event)
            writer.flush()
            counts[module.NAME] = writer.counts.get("event", 0)
        except Exception as exc:  # a derivation bug must not lose an ingest
            writer.add(Skipped(None, str(exc)))
            counts[module.NAME] = -1
    return counts
