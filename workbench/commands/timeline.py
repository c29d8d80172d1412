"""The merged events of all sources, oldest first; --json prints one JSON object per line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from collectors.framework.vocabulary import LAYERS
from workbench.commands._args import non_negative_int
from workbench.table import printable
from workbench.timespec import parse_instant

if TYPE_CHECKING:
    from workbench.query.events import EventFilter
    from workbench.store.bundle import Bundle

NAME = "timeline"
HELP = "print the merged event timeline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("--json", action="store_true", help="one JSON object per event")
    parser.add_argument("--host", action="append", default=[], metavar="H")
    parser.add_argument("--source", action="append", default=[], metavar="S")
    parser.add_argument("--layer", action="append", default=[], metavar="L", choices=LAYERS,
                        help=f"one of {', '.join(LAYERS)}")
    parser.add_argument("--kind", action="append", default=[], metavar="K")
    parser.add_argument("--severity", action="append", default=[], metavar="SEV")
    parser.add_argument("--grep", metavar="TEXT", help="only events whose message contains TEXT")
    parser.add_argument("--since", metavar="T", help="ISO time")
    parser.add_argument("--until", metavar="T", help="ISO time")
    parser.add_argument("--limit", type=non_negative_int, metavar="N")


def filter_from(args: argparse.Namespace) -> EventFilter:
    from workbench.query.events import EventFilter

    return EventFilter(hosts=tuple(args.host), sources=tuple(args.source), layers=tuple(args.layer),
                       kinds=tuple(args.kind), severities=tuple(args.severity), text=args.grep,
                       since=parse_instant(args.since) if args.since else None,
                       until=parse_instant(args.until) if args.until else None)


def run(args: argparse.Namespace) -> int:
    from workbench.query.events import event_json, iter_events
    from workbench.store.bundle import Bundle

    flt = filter_from(args)
    out = sys.stdout
    with Bundle.open(args.bundle) as bundle:
        printed = 0
        for n, row in enumerate(iter_events(bundle, flt)):
            if args.limit is not None and n >= args.limit:
                break
            printed += 1
            if args.json:
                out.write(json.dumps(event_json(row), default=str) + "\n")
            else:
                ts = row["ts"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if row["ts"] else "?" + (row["ts_raw"] or "")
                mark = "~" if row["ts_approx"] else " "
                where = row["host"] or "-"
                if row["gpu"]:
                    where += f" {row['gpu']}"
                if row["rank"] is not None:
                    where += f" r{row['rank']}"
                out.write(printable(f"{ts:<24}{mark} {row['layer'] or '-':<15} {row['kind']:<18} {where:<28} "
                                    f"{row['message']}".replace("\n", " ")) + "\n")
        if not printed and args.limit != 0:
            _explain_empty(bundle, args)
    return 0


def _explain_empty(bundle: Bundle, args: argparse.Namespace) -> None:
    """Nothing matched: say which --kind/--source/--host value this bundle never mentions (a typo
    such as ``--kind xdi`` looks exactly like a quiet incident otherwise)."""
    for option, column, wanted in (("kind", "kind", args.kind), ("source", "source", args.source),
                                   ("host", "host", args.host)):
        if not wanted:
            continue
        present = [r[0] for r in bundle.con.execute(
            f"SELECT DISTINCT {column} FROM event WHERE {column} IS NOT NULL ORDER BY 1").fetchall()]
        absent = [v for v in wanted if v not in present]
        if absent:
            shown = ", ".join(present[:30]) + (", ..." if len(present) > 30 else "")
            print(f"gpuwb: no event has {option} {', '.join(map(repr, absent))} in this bundle; "
                  f"{option}s here: {shown or 'none'}", file=sys.stderr)
            return
