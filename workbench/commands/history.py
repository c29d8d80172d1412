"""The fleet's incident history: `add` files bundles' incidents (summary, culprits with their GPU's
serial and UUID, causes, key events) as Parquet under --history DIR (or $GPUWB_HISTORY); `show`
lists the GPUs and hosts that keep coming back. --json prints the object of docs/cli.md.

  gpuwb history add BUNDLE... [--history DIR] [--json]
  gpuwb history show [--history DIR] [--host H] [--gpu ID] [--since 90d] [--min N] [--json]"""

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

    from workbench.fleet.history import History, Offender

NAME = "history"
HELP = "incident history across bundles: add incidents, list repeat offenders"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _history_option(parser)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser), required=True)
    add = actions.add_parser("add", help="file the incidents of these bundles",
                             description="File each bundle's incident (summary, culprits, causes, key events).")
    add.add_argument("bundles", nargs="+", metavar="BUNDLE", help="the bundles to file")
    _history_option(add, child=True)
    add.add_argument("--json", action="store_true", help="print one JSON object (see docs/cli.md)")
    show = actions.add_parser("show", help="list the GPUs and hosts that keep coming back",
                              description="List repeat offenders: GPUs and hosts named as culprits in --min "
                                          "incidents or more.")
    _history_option(show, child=True)
    show.add_argument("--host", metavar="H", help="only this host's incidents")
    show.add_argument("--gpu", metavar="ID", help="only this GPU (serial, UUID or PCI bus id)")
    show.add_argument("--since", metavar="T", help="incidents since a duration ago (90d) or an ISO time")
    show.add_argument("--min", type=positive_int, metavar="N", dest="min_incidents",
                      help="at least N incidents (default 2; 1 with --host or --gpu)")
    show.add_argument("--json", action="store_true", help="print one JSON object (see docs/cli.md)")


def _history_option(parser: argparse.ArgumentParser, child: bool = False) -> None:
    """--history before or after the action (an action's own default must not hide one given before it)."""
    parser.add_argument("--history", metavar="DIR", default=argparse.SUPPRESS if child else None,
                        help="the history folder (default $GPUWB_HISTORY)")


def run(args: argparse.Namespace) -> int:
    from workbench.fleet.history import History, history_dir, least_incidents

    directory = history_dir(args.history)
    if not directory:
        raise UsageError("no history folder: give --history DIR or set GPUWB_HISTORY")
    if args.action == "add":
        return _add(History.open(directory, create=True), args.bundles, as_json=args.json)
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


def _add(history: History, bundles: list[str], *, as_json: bool = False) -> int:
    """One line per bundle; a bundle that cannot be read is named and the others are still filed."""
    from workbench.fleet.history import date_of, record_of
    from workbench.store.bundle import Bundle, BundleError

    filed: list[dict[str, object]] = []
    failed: list[dict[str, str]] = []
    for path in bundles:
        try:
            with Bundle.open(path) as bundle:
                record = record_of(bundle)
        except BundleError as exc:
            print(printable(f"gpuwb: error: {exc}"), file=sys.stderr)
            failed.append({"bundle": str(path), "error": str(exc)})
            continue
        status = history.add(record)
        filed.append({"bundle": str(path), "status": status, "incident_id": record.incident_id,
                      "date": date_of(record.started_at) if record.started_at else None,
                      "causes": list(record.causes)})
        if not as_json:
            causes = ", ".join(record.causes) or "no culprit"
            print(printable(f"{status}: {path} [incident {record.incident_id}] {date_of(record.started_at)} {causes}"))
    if as_json:
        sys.stdout.write(json.dumps({"history": str(history.root), "filed": filed, "failed": failed}) + "\n")
    return 2 if failed else 0


def render(offenders: list[Offender], *, total: int, least: int, since: datetime | None = None) -> str:
    """Repeat offenders as a responder reads them: the GPU or host, then one line per incident."""
    from workbench.fleet.history import date_of, xid_text

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
