"""The fleet's incident history: `add` files bundles' incidents (summary, culprits with their GPU's
serial and UUID, causes, key events) as Parquet under --history DIR (or $GPUWB_HISTORY); `show`
lists the GPUs and hosts that keep coming back. --json prints the object of docs/cli.md."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from workbench.commands._args import positive_int
from workbench.errors import UsageError
from workbench.table import printable
from workbench.timespec import parse_since

if TYPE_CHECKING:
    from datetime import datetime

    from workbench.history import History, Offender

NAME = "history"
HELP = "incident history across bundles: add incidents, list repeat offenders"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("add", "show"), metavar="ACTION", help="add BUNDLE... or show")
    parser.add_argument("bundles", nargs="*", metavar="BUNDLE", help="with add: the bundles to file")
    parser.add_argument("--history", metavar="DIR", help="the history folder (default $GPUWB_HISTORY)")
    parser.add_argument("--host", metavar="H", help="with show: only this host's incidents")
    parser.add_argument("--gpu", metavar="ID", help="with show: only this GPU (serial, UUID or PCI bus id)")
    parser.add_argument("--since", metavar="T", help="with show: incidents since a duration ago (90d) or an ISO time")
    parser.add_argument("--min", type=positive_int, metavar="N", dest="min_incidents",
                        help="with show: at least N incidents (default 2; 1 with --host or --gpu)")
    parser.add_argument("--json", action="store_true", help="with show: print one JSON object")


def run(args: argparse.Namespace) -> int:
    from workbench.history import History, history_dir, least_incidents

    directory = history_dir(args.history)
    if not directory:
        raise UsageError("no history folder: give --history DIR or set GPUWB_HISTORY")
    if args.action == "add":
        if not args.bundles:
            raise UsageError("history add needs at least one BUNDLE")
        return _add(History.open(directory, create=True), args.bundles)
    if args.bundles:
        raise UsageError("history show takes no BUNDLE (use history add)")
    history = History.open(directory)
    since = parse_since(args.since) if args.since else None
    least = least_incidents(args.min_incidents, host=args.host, gpu=args.gpu)
    offenders = history.offenders(host=args.host, gpu=args.gpu, since=since, min_incidents=least)
    total = len(history.incidents())
    if args.json:
        doc = {"history": str(history.root), "incidents": total,
               "since": since.isoformat(timespec="seconds").replace("+00:00", "Z") if since else None,
               "min_incidents": least, "offenders": [o.to_json() for o in offenders]}
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    sys.stdout.write(printable(render(offenders, total=total, least=least, since=since)))
    return 0


def _add(history: History, bundles: list[str]) -> int:
    """One line per bundle; a bundle that cannot be read is named and the others are still filed."""
    from workbench.bundle import Bundle, BundleError
    from workbench.history import date_of, record_of

    failed = 0
    for path in bundles:
        try:
            with Bundle.open(path) as bundle:
                record = record_of(bundle)
        except BundleError as exc:
            print(printable(f"gpuwb: error: {exc}"), file=sys.stderr)
            failed += 1
            continue
        status = history.add(record)
        causes = ", ".join(record.causes) or "no culprit"
        print(printable(f"{status}: {path} [incident {record.incident_id}] {date_of(record.started_at)} {causes}"))
    return 2 if failed else 0


def render(offenders: list[Offender], *, total: int, least: int, since: datetime | None = None) -> str:
    """Repeat offenders as a responder reads them: the GPU or host, then one line per incident."""
    from workbench.history import date_of, xid_text

    window = f" since {since:%Y-%m-%d %H:%M}" if since else ""
    if not offenders:
        return f"No GPU or host is a culprit in {least} or more incidents{window} ({total} in the history).\n"
    out = [f"{len(offenders)} GPU(s) or host(s) named in {least} or more incidents{window} ({total} in the history):"]
    for o in offenders:
        places = dict.fromkeys(" ".join(x for x in (i.host, i.gpu) if x) for i in o.incidents)
        where = f" on {', '.join(places)}" if o.what == "gpu" else ""
        if o.serial and o.uuid:
            where = f" ({o.uuid}){where}"
        out.append(f"{o.label}{where}: {len(o.incidents)} incident(s)")
        for inc in o.incidents:
            place = " ".join(x for x in (inc.host, inc.gpu) if x) or "-"
            why = ", ".join(inc.causes) + (f" ({xid_text(inc.xids)})" if inc.xids else "")
            out.append(f"  {date_of(inc.started_at)}  {place:<24} {why:<36} incident {inc.incident_id}  {inc.title}")
    return "\n".join(out) + "\n"
