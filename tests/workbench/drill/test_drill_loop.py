"""The drill loop: every cause of the catalog, drilled with three seeds and analysed back by the same
engine ``gpuwb analyze`` runs, must come out as its own cause. This is the analyzer's self-consistency
across the catalog; run with ``pytest -s`` to see the count."""

from __future__ import annotations

from pathlib import Path

from workbench.analysis import analyze
from workbench.bundle import Bundle
from workbench.causes import load_causes
from workbench.drill import write
from workbench.drill.registry import faults

SEEDS = (1, 2, 3)
CAUSE_FLOOR = 99
"""Drills (of 33 causes x 3 seeds) whose first hypothesis is their own cause; a ratchet: raise it, never lower it."""
PLACE_FLOOR = 99
"""Of those, drills whose first hypothesis also names the truth's host (or no host, for a job/fleet-wide cause)."""


def test_every_cause_of_the_catalog_has_a_drill() -> None:
    assert {cause for cause, _ in faults()} == set(load_causes())


def test_every_drill_is_analysed_back_to_its_own_cause(tmp_path: Path) -> None:
    misses, wrong_place, hits, placed, total = [], [], 0, 0, 0
    for cause, workload in faults():
        for seed in SEEDS:
            written = write(cause, workload, seed, tmp_path / f"{cause}-{workload}-{seed}")
            with Bundle.open(written.bundle) as bundle:
                hypotheses = analyze(bundle)["hypotheses"]
            total += 1
            top = hypotheses[0] if hypotheses else {}
            if top.get("cause") != cause:
                misses.append(f"{cause}/{workload}/seed {seed} -> {top.get('cause')}")
                continue
            hits += 1
            if written.truth.host is None or top.get("host") == written.truth.host:
                placed += 1
            else:
                wrong_place.append(f"{cause}/{workload}/seed {seed} -> {top.get('host')} not {written.truth.host}")
    print(f"\ndrill loop: {hits} of {total} drills analysed back to their own cause "
          f"({placed} at the right place); misses: {misses or 'none'}; wrong place: {wrong_place or 'none'}")
    assert total == len(load_causes()) * len(SEEDS)
    assert hits >= CAUSE_FLOOR, misses
    assert placed >= PLACE_FLOOR, wrong_place
