"""The drill loop: every cause of the catalog, drilled with three seeds on every workload it has a
generator for, and analysed back by the engine ``gpuwb analyze`` runs, must come out as its own
cause. This is the analyzer's self-consistency across the catalog; ``pytest -s`` prints the count."""

from __future__ import annotations

from pathlib import Path

from collectors.base import normalize_pci
from workbench.analysis.causes import load_causes
from workbench.analysis.engine import analyze
from workbench.prevention.drill import write
from workbench.prevention.drill.registry import faults
from workbench.store.bundle import Bundle

SEEDS = (1, 2, 3)
DRILL_FLOOR = 183
"""Drills whose first hypothesis is their own cause (of 61 cause/workload pairs x 3 seeds); a ratchet:
raise it, never lower it."""
PLACE_FLOOR = 182
"""Of those, drills whose first hypothesis also names the truth's host (or any, for a job/fleet-wide cause)."""
CAUSE_FLOOR = 34
"""Causes of the catalog all of whose drills analyse back to them."""
GPU_FLOOR = 63
"""Of the drills whose truth names a GPU, those whose first hypothesis names the same PCI bus id."""
LAYER_FLOOR = 179
"""Drills whose analysis calls the truth's layer a fault (the layer verdict the scorecard expects)."""
OTHER_FAULT_CEILING = 0
"""Drills whose analysis also calls another layer a fault (what the scorecard judges wrong); a ratchet
the other way: lower it, never raise it."""


def test_every_cause_of_the_catalog_has_a_drill() -> None:
    """Every cause but the 'unknown error at a layer' ones (nothing specific to practise) has a drill."""
    known = {cid for cid, entry in load_causes().items() if not entry.get("unknown")}
    assert {cause for cause, _ in faults()} == known
    assert len(known) < len(load_causes())  # the unknown ones exist and are the only ones left out


def test_every_drill_is_analysed_back_to_its_own_cause(tmp_path: Path) -> None:
    misses, wrong_place, layer_off, wrong_gpu, hits, placed, layered, gpus, gpus_right = [], [], [], [], 0, 0, 0, 0, 0
    other_faults = []
    for cause, workload in faults():
        for seed in SEEDS:
            written = write(cause, workload, seed, tmp_path / f"{cause}-{workload}-{seed}")
            with Bundle.open(written.bundle) as bundle:
                result = analyze(bundle)
            hypotheses = result["hypotheses"]
            top = hypotheses[0] if hypotheses else {}
            verdict = result["layers"][written.truth.layer]["verdict"]
            if verdict == "fault":
                layered += 1
            else:
                layer_off.append(f"{cause}/{workload}/seed {seed}: {written.truth.layer} {verdict}")
            others = [layer for layer, v in result["layers"].items()
                      if v["verdict"] == "fault" and layer != written.truth.layer]
            if others:
                other_faults.append(f"{cause}/{workload}/seed {seed}: {', '.join(others)}")
            if top.get("cause") != cause:
                misses.append(f"{cause}/{workload}/seed {seed} -> {top.get('cause')}")
                continue
            hits += 1
            if written.truth.gpu:
                gpus += 1
                if normalize_pci(top.get("gpu")) == written.truth.gpu:
                    gpus_right += 1
                else:
                    wrong_gpu.append(f"{cause}/{workload}/seed {seed} -> {top.get('gpu')} not {written.truth.gpu}")
            if written.truth.host is None or top.get("host") == written.truth.host:
                placed += 1
            else:
                wrong_place.append(f"{cause}/{workload}/seed {seed} -> {top.get('host')} not {written.truth.host}")
    total = len(faults()) * len(SEEDS)
    missed_causes = {m.split("/")[0] for m in misses}
    drilled = {cause for cause, _ in faults()}
    solved = len(drilled) - len(missed_causes)
    print(f"\ndrill loop: {solved} of {len(drilled)} causes analyse back to themselves on every drill; "
          f"{hits} of {total} drills ({len(faults())} cause/workload pairs x {len(SEEDS)} seeds), {placed} at the "
          f"right place ({gpus_right} of {gpus} naming the truth's GPU), {layered} with the truth's layer called a "
          f"fault; misses: {misses or 'none'}; wrong place: {wrong_place or 'none'}; wrong GPU: {wrong_gpu or 'none'}; "
          f"layer not a fault: {layer_off or 'none'}; another layer also a fault: {other_faults or 'none'}")
    assert hits >= DRILL_FLOOR, misses
    assert placed >= PLACE_FLOOR, wrong_place
    assert solved >= CAUSE_FLOOR, sorted(missed_causes)
    assert layered >= LAYER_FLOOR, layer_off
    assert gpus_right >= GPU_FLOOR, wrong_gpu
    assert len(other_faults) <= OTHER_FAULT_CEILING, other_faults
