"""Combine per-node bundles into one incident bundle: artifacts keep their bytes and hashes, rows
come along once, derived events are recomputed, and the result is sealed with its own digest."""

from __future__ import annotations

import argparse

from workbench.merge import merge_bundles

NAME = "merge"
HELP = "combine per-node bundles into one incident"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="the merged bundle to create")
    parser.add_argument("bundles", metavar="BUNDLE", nargs="+", help="per-node bundles")
    parser.add_argument("--title", metavar="T", help="title of the merged incident")


def run(args: argparse.Namespace) -> int:
    result = merge_bundles(args.out, args.bundles, title=args.title)
    rows = ", ".join(f"{t} {n}" for t, n in result.rows.items() if n)
    print(f"Merged {len(result.inputs)} bundle(s) into {result.path}: {result.artifacts} artifacts "
          f"({result.duplicates} duplicate(s) kept once); rows: {rows or 'none'}")
    print(f"Root digest {result.root_digest}")
    return 0
