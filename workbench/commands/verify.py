"""Re-hash every artifact and the bundle's root digest: exit 0 intact, 1 altered."""

from __future__ import annotations

import argparse

from workbench.table import printable

NAME = "verify"
HELP = "check that no evidence changed since the bundle was sealed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")


def run(args: argparse.Namespace) -> int:
    from workbench.bundle import Bundle

    with Bundle.open(args.bundle) as bundle:
        problems = bundle.verify()
        seal = bundle.last_seal()
        count = len(bundle.artifacts())
    if problems:
        for line in problems:
            print(printable(line))
        print(f"ALTERED: {len(problems)} problem(s) in {args.bundle}")
        return 1
    note = "" if seal and seal["complete"] else " (capture or ingest was interrupted: bundle marked incomplete)"
    print(f"OK: {count} artifacts intact, root digest {seal['root_digest']}{note}")
    return 0
