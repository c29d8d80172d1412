"""Check every artifact, every seal and the bundle's storage: exit 0 intact, 1 altered or damaged.

Every table is read in full (a damaged block is named), every artifact re-hashed against its sha256, every
seal checked against the one before it (what a seal covered, the next one covers unchanged), and the bundle
now against its last seal. Artifacts an ingest stored but never sealed (it was killed, the disk filled) are
said to be an interrupted ingest's, not a tamper. ``--deep`` also re-parses every artifact from its sealed bytes
into a scratch bundle and compares the rows, which no seal covers."""

from __future__ import annotations

import argparse

from workbench.table import printable

NAME = "verify"
HELP = "check that no evidence changed since the bundle was sealed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("--deep", action="store_true",
                        help="also re-parse every artifact from its sealed bytes and compare the parsed rows")


def run(args: argparse.Namespace) -> int:
    from workbench.store.bundle import Bundle

    with Bundle.open(args.bundle) as bundle:
        found = bundle.verification()
        deep = args.deep and not found.problems  # rows from bytes or a seal that did not verify would prove nothing
        if deep:
            from workbench.ingest.rederive import compare_rederived

            found.altered += compare_rederived(bundle)
    for line in found.problems:
        print(printable(line))
    if args.deep and not deep:
        print("rows not re-derived: the sealed evidence itself did not verify")
    if found.interrupted:
        print(printable(found.interrupted))
    if found.damaged:
        print(f"DAMAGED: {len(found.problems)} problem(s) in {printable(args.bundle)}: its storage cannot be read "
              "in full")
        return 1
    if found.altered:
        print(f"ALTERED: {len(found.problems)} problem(s) in {printable(args.bundle)}")
        return 1
    if found.never_sealed:
        print(f"NOT SEALED: {printable(args.bundle)} was never sealed" + (
            " (the ingest that stored its artifacts did not finish; the next `gpuwb ingest` seals them)"
            if found.interrupted else ""))
        return 1
    seal = found.seal or {}
    note = "" if seal.get("complete") else " (capture or ingest was interrupted: bundle marked incomplete)"
    sealed = seal.get("artifacts")
    count = found.artifacts if not found.interrupted or sealed is None else sealed
    print(f"OK: {count} artifacts intact, root digest {seal.get('root_digest')}{note}"
          + ("; more stored after the last seal are not sealed yet (see above)" if found.interrupted else "")
          + ("; rows re-derived from the sealed bytes match" if args.deep else ""))
    return 0
