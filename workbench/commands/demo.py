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
    parser.add_argument("--no-open", action="store_true",
                        help="only print the analysis and the report paths (the default until the TUI exists)")


def run(args: argparse.Namespace) -> int:
    # Deferred: the demo pulls in the engine and the report, which `gpuwb --help` need not load.
    from workbench.analysis import analyze
    from workbench.commands.analyze import render
    from workbench.demo import SCENARIOS, prepare, run_scenario

    out = Path(args.out)
    prepare(out)
    started = time.monotonic()
    for scenario in SCENARIOS:
        if args.only and scenario.name != args.only:
            continue
        print(f"== {scenario.name}: {scenario.module.TITLE}", flush=True)
        result = run_scenario(scenario, out, analyze=analyze)
        sys.stdout.write(render(result.analysis, top=3))
        print(f"  evidence:   {result.evidence}/")
        print(f"  bundle:     {result.bundle}")
        print(f"  postmortem: {result.markdown}")
        print(f"              {result.html}")
        print(f"  ({result.seconds:.1f} s)\n", flush=True)
    print(f"Done in {time.monotonic() - started:.1f} s. Next: gpuwb timeline {out}/training/incident.duckdb, "
          f"gpuwb report ... -f html, gpuwb export ... --parquet DIR")
    return 0
