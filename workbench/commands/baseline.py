"""Keep a node's accepted state (``save``) and show how a later bundle differs from it (``diff``):
PCIe links, NVLink links, ECC mode, power limits, clocks, VBIOS, driver/CUDA/NCCL/Fabric Manager
versions, DCGM diag results, and GPUs missing, added or swapped."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from workbench.table import printable

if TYPE_CHECKING:
    from workbench.prevention.baseline import Comparison

NAME = "baseline"
HELP = "save a node's accepted state; show drift from it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser), required=True)
    save = actions.add_parser("save", help="write the accepted state of an acceptance-time bundle to FILE",
                              description="Write the accepted state of an acceptance-time bundle to FILE (JSON).")
    save.add_argument("bundle", metavar="BUNDLE")
    save.add_argument("-o", "--output", required=True, metavar="FILE", help="the baseline file to write")
    save.add_argument("--host", metavar="H", help="keep only this host (default: every host in the bundle)")
    diff = actions.add_parser("diff", help="list how BUNDLE differs from the baseline FILE",
                              description="List how BUNDLE differs from the baseline FILE: exit 0 no drift, "
                                          "1 drift found.")
    diff.add_argument("bundle", metavar="BUNDLE")
    diff.add_argument("baseline", metavar="FILE")
    diff.add_argument("--host", metavar="H", help="compare only this host")
    diff.add_argument("--json", action="store_true", help="print the comparison as one JSON object")


def run(args: argparse.Namespace) -> int:
    from workbench.prevention import baseline
    from workbench.store.bundle import Bundle

    if args.action == "save":
        with Bundle.open(args.bundle) as bundle:
            doc = baseline.save(bundle, args.output, host=args.host, source=str(args.bundle))
        gpus = sum(len(h["gpus"]) for h in doc["hosts"].values())
        print(printable(f"baseline of {len(doc['hosts'])} host(s), {gpus} GPU(s) written to {args.output} "
                        f"(format {baseline.FORMAT} version {baseline.VERSION})"))
        return 0
    doc = baseline.load(args.baseline)
    with Bundle.open(args.bundle) as bundle:
        result = baseline.compare(bundle, doc, host=args.host)
    if args.json:
        sys.stdout.write(json.dumps(result.to_json(), default=str) + "\n")
    else:
        sys.stdout.write(printable(render(result)))
    return 1 if result.drift else 0


def render(result: Comparison) -> str:
    """The comparison as a responder reads it: one line per drift, worst first, then what went unchecked."""
    out = [f"Baseline accepted {result.accepted_at or '?'} (bundle {result.source.get('bundle') or '?'}); "
           f"compared: {', '.join(h or '(no host)' for h in result.hosts) or 'no host in common'}"]
    for d in result.drift:
        out.append(f"  {d.severity:<7} {d.host or '-':<12} {d.kind:<20} {d.message}")
    for line in result.unchecked:
        out.append(f"  unchecked {line}")
    counts = {s: sum(1 for d in result.drift if d.severity == s) for s in ("error", "warning", "info")}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    out.append(f"{len(result.drift)} drift(s){': ' + summary if summary else ''}")
    return "\n".join(out) + "\n"
