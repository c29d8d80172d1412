"""What the catalog does not know yet: `unknown` prints a bundle's unrecognised error lines grouped by
layer, program and template (numbers masked), most frequent first; `--yaml` prints each group as a
signature entry skeleton (collectors/catalog/signatures/FORMAT.md) to review and file.

  gpuwb catalog unknown BUNDLE [--json | --yaml] [--limit N]"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from workbench.commands._args import positive_int
from workbench.table import format_table, printable

NAME = "catalog"
HELP = "what the message catalog does not know yet: a bundle's unrecognised error lines, grouped"

_WORDS = re.compile(r"[A-Za-z][A-Za-z_ ./'-]{6,}[A-Za-z]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser), required=True)
    unknown = actions.add_parser("unknown", help="the bundle's error lines no catalog entry knows, grouped",
                                 description="Error-shaped lines no parser or catalog entry knows, grouped by "
                                             "layer, program and template, most frequent first.")
    unknown.add_argument("bundle", metavar="BUNDLE")
    shape = unknown.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="one JSON object per group, one per line")
    shape.add_argument("--yaml", action="store_true", help="each group as a signature entry skeleton to file")
    unknown.add_argument("--limit", type=positive_int, default=200, metavar="N", help="at most N groups (200)")


def run(args: argparse.Namespace) -> int:
    from workbench.query.events import unrecognised_groups
    from workbench.store.bundle import Bundle

    with Bundle.open(args.bundle) as bundle:
        groups = unrecognised_groups(bundle, args.limit)
    if args.json:
        for group in groups:
            print(json.dumps(group, default=str))
        return 0
    if args.yaml:
        print(skeletons(groups), end="")
        return 0
    if not groups:
        print("no unrecognised error lines: every error-shaped line is known to a parser or the catalog")
        return 0
    rows = [(g["lines"], g["hosts"], g["layer"], g["program"] or "-", printable(g["example"]),
             f"{printable(g['file'] or '?')}:{g['line']}") for g in groups]
    print(format_table(("lines", "hosts", "layer", "program", "example", "first at"), rows, max_width=70))
    print(f"{len(groups)} group(s); `--yaml` writes them as catalog entry skeletons")
    return 0


def skeletons(groups: list[dict[str, Any]]) -> str:
    """Signature entries to review: the example as sample, its longest word run as the anchor, the
    template turned into a regex. YAML quoting is JSON's, so no evidence text can break the document."""
    out = []
    for n, g in enumerate(groups, 1):
        example = str(g["example"])
        anchor = max(_WORDS.findall(example), key=len, default=example[:40]).strip()
        regex = re.escape(example)
        regex = re.sub(r"\d+", r"\\d+", regex)
        name = re.sub(r"\W", "_", g["program"] or g["layer"])
        out.append("\n".join([
            f"  - id: todo_{name}_{n}",
            "    kind: todo  # a kind of collectors/catalog/events.yaml",
            f"    layer: {g['layer']}",
            "    severity: error",
            "    cause: todo  # a cause id of rules/causes/, or remove",
            f"    meaning: {json.dumps('todo: what it means for the responder')}",
            f"    anchors: [{json.dumps(anchor)}]",
            f"    regex: {json.dumps(regex)}",
            "    samples:",
            f"      - line: {json.dumps(example)}",
            f"        source: {json.dumps('todo: the public thread or tests/ file (seen in ' + str(g['file']) + ')')}",
            f"    # {g['lines']} line(s) on {g['hosts']} host(s)", ""]))
    return "\n".join(out)
