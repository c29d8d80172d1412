"""Combine per-node bundles into one incident bundle: artifacts keep their bytes and hashes, rows
come along once, derived events are recomputed, and the result is sealed with its own digest.
``--into`` adds late nodes to a merged bundle without redoing the merge."""

from __future__ import annotations

import argparse
from collections import Counter
from typing import TYPE_CHECKING

from workbench.errors import UsageError

if TYPE_CHECKING:
    from workbench.ingest.merge import MergeResult

NAME = "merge"
HELP = "combine per-node bundles into one incident"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", nargs="?",
                        help="the merged bundle to create (not with --into)")
    parser.add_argument("bundles", metavar="BUNDLE", nargs="+", help="per-node bundles, or folders of them")
    parser.add_argument("--into", metavar="MERGED", help="add the bundles to this merged bundle instead")
    parser.add_argument("--title", metavar="T", help="title of the merged incident")


def run(args: argparse.Namespace) -> int:
    from workbench.ingest.merge import merge_bundles, merge_into

    bundles = ([args.out] if args.out else []) + args.bundles
    if args.into:
        if args.title:
            raise UsageError("--title names a new merged incident; not with --into")
        result = merge_into(args.into, bundles)
        verb = "Added"
    else:
        if not args.out:
            raise UsageError("give OUT and at least one BUNDLE, or --into MERGED")
        result = merge_bundles(args.out, args.bundles, title=args.title)
        verb = "Merged"
    _summary(verb, result)
    return 0


SKIPS_SHOWN = 5
"""Skipped inputs named one by one; a folder of a thousand nodes added again prints a count instead."""


def _summary(verb: str, result: MergeResult) -> None:
    for path, why in result.skipped[:SKIPS_SHOWN]:
        print(f"Skipped {path}: {why}")
    for why, count in Counter(why for _, why in result.skipped[SKIPS_SHOWN:]).items():
        print(f"Skipped {count} more: {why}")
    rows = ", ".join(f"{t} {n}" for t, n in result.rows.items() if n)
    print(f"{verb} {len(result.inputs)} bundle(s) into {result.path}: {result.artifacts} artifacts "
          f"({result.duplicates} duplicate(s) kept once); rows: {rows or 'none'}"
          + (f"; {len(result.skipped)} skipped" if result.skipped else ""))
    print(f"Root digest {result.root_digest}")
