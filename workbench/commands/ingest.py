"""Add evidence handed over as files, folders, .gz/.tar.gz/.zip archives or nvidia-bug-report logs.

Each file's kind is sniffed from its content (--kind forces one); unknown files are kept as raw
artifacts of kind 'unknown'. The bundle is created if it does not exist."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.table import format_table, printable
from workbench.timespec import parse_instant

NAME = "ingest"
HELP = "add files, folders or archives to a bundle"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("paths", metavar="PATH", nargs="+")
    parser.add_argument("--kind", help="force the artifact kind instead of sniffing it")
    parser.add_argument("--host", help="host the files belong to (when their content does not say)")
    parser.add_argument("--boot-time", metavar="ISO", help="boot time for raw dmesg seconds (UTC)")
    parser.add_argument("--title", default="", help="incident title for a new bundle")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the totals")


def run(args: argparse.Namespace) -> int:
    from workbench.ingest.session import STORED, check_inputs, ingest_paths
    from workbench.store.bundle import Bundle, BundleWriteError
    from workbench.store.connection import remove_files

    boot = parse_instant(args.boot_time) if args.boot_time else None
    check_inputs(args.paths, args.kind)  # before open_or_create: a mistyped path leaves no empty bundle
    path = Path(args.bundle)
    created = not path.exists()
    try:
        with Bundle.open_or_create(path, title=args.title) as bundle:
            results = ingest_paths(bundle, args.paths, kind=args.kind, host=args.host, boot_time=boot)
    except BundleWriteError as exc:
        if not created:
            raise
        remove_files(path)  # a bundle this run began and could not write: none, rather than a part in a .wal
        raise BundleWriteError(f"bundle {path} could not be written ({exc.reason}): no bundle was written; free "
                               "space and run the ingest again", reason=exc.reason) from None
    if not args.quiet:
        print(format_table(["file", "kind", "host", "lines", "events", "rows", "skipped", "status"],
                           [(r.path, r.kind, r.host, r.lines, r.events, r.rows, r.skipped,
                             r.status) for r in results], max_width=70))
    for r in results:
        if r.error:
            print(printable(r.error if r.error.startswith(r.path) else f"{r.path}: {r.error}"))
    new = [r for r in results if r.status in STORED]
    skipped = sum(r.status == "skipped" for r in results)
    print(f"{len(results)} files: {len(new)} new, {sum(r.status == 'duplicate' for r in results)} duplicate, "
          f"{sum(r.status == 'error' for r in results)} unreadable"
          + (f", {skipped} not read" if skipped else "")
          + f"; {sum(r.events for r in new)} events, {sum(r.skipped for r in new)} skipped lines")
    if results and not any(r.status in STORED or r.status == "duplicate" for r in results):
        print("gpuwb: error: nothing was ingested (see the reasons above)", file=sys.stderr)
        return 2
    return 0
