"""Freeze this host's evidence into one DuckDB bundle before anyone restarts anything.

Every collector runs in its own process with a hard timeout; the coverage table at the end
says what was collected and what was not, and why."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from collectors.framework import registry
from workbench.commands._args import positive_float
from workbench.errors import UsageError
from workbench.table import format_table
from workbench.timespec import parse_since

if TYPE_CHECKING:
    from workbench.capture.live import CollectorOutcome

NAME = "capture"
HELP = "capture evidence on this host into a bundle"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", metavar="BUNDLE", help="bundle file (default: incident-HOST-TIME.duckdb)")
    parser.add_argument("--since", metavar="DURATION", default="24h",
                        help="how far back to collect logs: 30m, 6h, 2d or an ISO time (default 24h)")
    parser.add_argument("--title", metavar="T", default="", help="incident title")
    parser.add_argument("--only", metavar="COLLECTOR", action="append", help="run only these collectors")
    parser.add_argument("--skip", metavar="COLLECTOR", action="append", default=[], help="skip these collectors")
    parser.add_argument("--safe", action="store_true",
                        help="skip NVML and nvidia-smi entirely (for a node whose GPU fell off the bus)")
    parser.add_argument("--no-redact", action="store_true", help="keep secret values (default: redacted)")
    parser.add_argument("--timeout-scale", type=positive_float, default=1.0, metavar="X",
                        help="multiply every collector's timeout by X")
    parser.add_argument("--list", action="store_true",
                        help="run nothing: print which collector runs which command and parses which kinds")
    parser.add_argument("--json", action="store_true", help="with --list: one JSON object per collector")
    for module in registry.all_collectors():
        hook = getattr(module, "add_capture_arguments", None)
        if hook:
            hook(parser)


def run(args: argparse.Namespace) -> int:
    from workbench.capture.live import capture

    if args.list:
        _list(args.json)
        return 0
    if args.json:
        raise UsageError("--json goes with --list")
    since = parse_since(args.since)
    output = Path(args.output or f"incident-{_hostname()}-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.duckdb")
    if output.exists():
        raise UsageError(f"{output} already exists; choose another -o")
    if not output.parent.is_dir():  # found out now, not after every collector has run
        raise UsageError(f"-o {output}: folder {output.parent} does not exist")
    if not os.access(output.parent, os.W_OK):
        raise UsageError(f"-o {output}: folder {output.parent} is not writable")
    skip = list(args.skip)
    if args.safe:
        skip += [m.NAME for m in registry.all_collectors() if getattr(m, "TOUCHES_GPU", False)]
    options = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    known = {m.NAME for m in registry.all_collectors()}
    for name in (args.only or []) + args.skip:
        if name not in known:
            raise UsageError(f"unknown collector {name!r}; known: {', '.join(sorted(known))}")
    print(f"gpuwb capture: {len([m for m in registry.all_collectors() if hasattr(m, 'capture')])} collectors, "
          f"window since {since:%Y-%m-%d %H:%M:%S}Z -> {output}", file=sys.stderr)
    result = capture(output, since=since, options=options, only=args.only, skip=skip, title=args.title,
                     redact=not args.no_redact, timeout_scale=args.timeout_scale, progress=_progress)
    try:
        _report(result.path, result.outcomes, skip)
    except OSError:
        if result.stopped_by is None:
            raise
        # SIGHUP: the terminal is gone; the bundle is written, the exit status says why it is incomplete
    if result.stopped_by is not None:
        name = "interrupted" if result.stopped_by == signal.SIGINT else signal.Signals(result.stopped_by).name
        with contextlib.suppress(OSError):
            print(f"bundle {result.path} is INCOMPLETE ({name})", file=sys.stderr)
        return 128 + result.stopped_by
    return 0


def _list(as_json: bool) -> None:
    """What capture would do, from each collector's declared COMMANDS or a dry run of its capture that
    runs nothing; TOUCHES_GPU collectors are never dry-run (``--safe`` skips them)."""
    plans = [registry.capture_plan(m) for m in registry.all_collectors()]
    if as_json:
        structured = registry.structured_kinds()
        for plan in plans:
            print(json.dumps({"collector": plan.collector, "touches_gpu": plan.touches_gpu, "how": plan.how,
                              "steps": [{"what": s.what, "kind": s.kind} for s in plan.steps],
                              "kinds": list(plan.kinds),
                              "structured_kinds": [k for k in plan.kinds if k in structured]}))
        return
    rows = [(p.collector, "yes" if p.touches_gpu else "", s.what, s.kind) for p in plans for s in p.steps]
    rows += [(p.collector, "yes" if p.touches_gpu else "", _nothing(p.how), "") for p in plans if not p.steps]
    order = {p.collector: i for i, p in enumerate(plans)}
    rows.sort(key=lambda r: order[r[0]])
    print(format_table(["collector", "gpu", "runs or reads", "stored as"], rows, max_width=110))
    print()
    print(format_table(["collector", "parses kinds"], [(p.collector, ", ".join(p.kinds)) for p in plans],
                       max_width=110))


def _nothing(how: str) -> str:
    if how == "dry run":
        return "(a dry run found no command or file to read; it may read /proc or files named by options)"
    return f"({how})"


def _report(path: Path, outcomes: list[CollectorOutcome], skip: list[str]) -> None:
    from workbench.commands._summary import print_summary

    print()
    print("Coverage")
    print(format_table(["collector", "status", "artifacts", "events", "seconds", "reason"],
                       [(o.name, o.status, len(o.results), sum(r.events for r in o.results), f"{o.duration_s:.1f}",
                         o.reason) for o in outcomes], max_width=100))
    for name in skip:
        print(f"{name}: skipped by request")
    print()
    print_summary(path)


def _progress(outcome: CollectorOutcome) -> None:
    """While collectors run only their process state is known; what they got is in the coverage table.
    A closed terminal (SIGHUP) must not stop the capture here."""
    state = "cut off" if outcome.status == "timeout" else "finished"
    with contextlib.suppress(OSError):
        print(f"  {outcome.name:<12} {state:<8} {outcome.duration_s:5.1f}s", file=sys.stderr)


def _hostname() -> str:
    import socket

    return socket.gethostname()
