"""Build two realistic incidents from raw files and walk them end to end: a training job that lost a
GPU (PCIe errors, Xid 79, NCCL timeouts on every rank, job failed, node drained) and an inference
service overwhelmed by a traffic surge (KV cache full, queue and p99 up, OOM restarts).

The raw files are written in their tools' native formats, ingested exactly as `gpuwb ingest`
does, analyzed, and written up as Markdown and HTML postmortems. No GPU and no network needed."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

NAME = "demo"
HELP = "build realistic built-in incidents, analyze them and write their postmortems"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default="gpuwb-demo", help="output folder (default ./gpuwb-demo)")
    parser.add_argument("--only", choices=("training", "inference"), help="build just one of the incidents")
    parser.add_argument("--no-tui", "--no-open", dest="no_tui", action="store_true",
                        help="only print the analysis and the report paths; without it, the cockpit opens on the "
                        "training incident when stdin and stdout are terminals")
    parser.add_argument("--author", help="who signs journal entries made in the cockpit (default $USER)")


def run(args: argparse.Namespace) -> int:
    # Deferred: the demo pulls in the engine and the report, which `gpuwb --help` need not load.
    from workbench.analysis.engine import analyze
    from workbench.analysis.findings import Analysis
    from workbench.commands.analyze import render
    from workbench.demo import SCENARIOS, prepare, run_scenario

    out = Path(args.out)
    prepare(out)
    started = time.monotonic()
    opened = None
    for scenario in SCENARIOS:
        if args.only and scenario.name != args.only:
            continue
        print(f"== {scenario.name}: {scenario.module.TITLE}", flush=True)
        result = run_scenario(scenario, out, analyze=analyze)
        sys.stdout.write(render(Analysis.from_json(result.analysis), top=3))
        print(f"  evidence:   {result.evidence}/")
        print(f"  bundle:     {result.bundle}")
        print(f"  postmortem: {result.markdown}")
        print(f"              {result.html}")
        print(f"  ({result.seconds:.1f} s)\n", flush=True)
        if opened is None:
            opened = result
    print(f"Done in {time.monotonic() - started:.1f} s. Next: gpuwb open {out}/training/incident.duckdb, "
          f"gpuwb timeline ..., gpuwb report ... -f html, gpuwb export ... --parquet DIR")
    if opened is not None and not args.no_tui and sys.stdin.isatty() and sys.stdout.isatty():
        return _open_cockpit(opened, args.author)
    return 0


def _open_cockpit(result, author: str | None) -> int:
    """The first incident built, in the cockpit, with the analysis the demo already made."""
    from workbench.analysis.findings import Analysis
    from workbench.commands.open import run_cockpit
    from workbench.store.shared_bundle import SharedBundle
    from workbench.tui.app import Cockpit, default_author

    store = SharedBundle(result.bundle, author or default_author())
    return run_cockpit(Cockpit(store, analysis=Analysis.from_json(result.analysis)))
