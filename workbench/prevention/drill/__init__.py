"""``gpuwb drill``: a realistic incident for any cause of the catalog, to practise on.

A drill writes the raw evidence a responder would be handed (native formats, one folder per host
plus shared ones) under ``DIR/raw``, ingests it into ``DIR/bundle.duckdb`` exactly as ``gpuwb
ingest`` does, and keeps the truth in ``DIR/answer.json``, outside the evidence. Places, times and
noise come from the seed; the same cause, workload and seed write the same bytes. The responder
works the bundle in the cockpit; :mod:`workbench.prevention.drill.score` compares the journal with the truth.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.analysis.causes import load_causes
from workbench.errors import UsageError
from workbench.prevention.drill import distractors, serving, training
from workbench.prevention.drill.distractors import LEVELS
from workbench.prevention.drill.incident import Drill, Truth
from workbench.prevention.drill.registry import Fault, faults, workloads_of

MARKER = ".gpuwb-drill"
"""Marks a folder a drill wrote, so a second drill may replace it and never touches anything else."""
ANSWER = "answer.json"
BUNDLE = "bundle.duckdb"


class DrillError(UsageError):
    """An unknown cause or workload, or an output folder the drill may not use."""


@dataclass
class Written:
    """What one drill wrote."""

    raw: Path
    files: list[Path]
    truth: Truth
    bundle: Path | None


def pick(cause: str, workload: str | None) -> Fault:
    """The generator for ``cause`` (on ``workload``, or its first one); one-line error with close names."""
    known = load_causes()
    if cause not in known:
        from difflib import get_close_matches

        close = get_close_matches(cause, list(known), n=4, cutoff=0.5) or [c for c in known if cause in c][:4]
        hint = f"; did you mean {', '.join(close)}?" if close else "; see gpuwb drill --list"
        raise DrillError(f"unknown cause {cause!r}{hint}")
    offered = workloads_of(cause)
    if not offered:
        raise DrillError(f"cause {cause!r} has no drill generator yet; see gpuwb drill --list")
    chosen = workload or offered[0]
    if chosen not in offered:
        raise DrillError(f"cause {cause!r} is drilled on {', '.join(offered)}, not {chosen}")
    return faults()[(cause, chosen)]


def generate(cause: str, workload: str | None, seed: int, level: str = "default") -> Drill:
    """Build the incident in memory: places and times from the seed, the cause's evidence, the noise,
    then the level's distractors (:mod:`workbench.prevention.drill.distractors`), which know what the
    fault generator wrote so that no gap takes the culprit's own evidence away."""
    if level not in LEVELS:
        raise DrillError(f"unknown drill level {level!r}; choose one of {', '.join(LEVELS)}")
    chosen = pick(cause, workload)
    d = Drill.draw(cause, chosen.workload, seed)
    d.level = level
    module = training if chosen.workload == "training" else serving
    if level == "default":
        module.build(d, chosen.write)
        return d
    done: list[distractors.Touched] = []

    def traced(work: Any) -> None:
        before = distractors.snapshot(d, work)
        chosen.write(work)
        done.append(distractors.touched(before, d, work))

    work = module.build(d, traced)
    d.distractors = distractors.apply(d, work, done[0], level)
    return d


def write(cause: str, workload: str | None, seed: int, out: Path, *, ingest: bool = True,
          level: str = "default") -> Written:
    """Write the drill under ``out`` (raw evidence, answer, and unless told not to, the bundle) at
    ``level``; ``default`` writes what a drill wrote before levels existed, byte for byte."""
    d = generate(cause, workload, seed, level)
    _prepare(out)
    raw = out / "raw"
    module = training if d.workload == "training" else serving
    files = d.write(raw, module.capture(d))
    truth = d.truth(load_causes()[cause]["layer"])
    (out / ANSWER).write_text(json.dumps(truth.to_json(), indent=2) + "\n", encoding="utf-8")
    bundle = None
    if ingest:
        from workbench.ingest.session import ingest_paths
        from workbench.store.bundle import Bundle

        bundle = out / BUNDLE
        with Bundle.create(bundle, title=f"Drill: {d.title}") as b:
            ingest_paths(b, [str(raw)])
    return Written(raw, files, truth, bundle)


def _prepare(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise DrillError(f"-o {out} is a file; a drill writes a folder")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise DrillError(f"{out} exists and was not written by gpuwb drill; choose another -o")
    for old in ("raw", ANSWER, BUNDLE, BUNDLE + ".wal"):
        path = out / old
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by gpuwb drill; safe to delete\n")
