"""Write the postmortem: timeline, root cause with quoted evidence, impact, layered findings,
action items and the evidence appendix (with a fresh verification), as Markdown, self-contained
HTML or JSON. The format follows -f, else the -o file's extension, else Markdown."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.bundle import Bundle
from workbench.report import FORMATS, build, render
from workbench.timespec import parse_instant

NAME = "report"
HELP = "write the postmortem (Markdown, HTML or JSON)"

_BY_SUFFIX = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".json": "json"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("-f", "--format", choices=FORMATS, help="md, html or json (default: from -o, else md)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    parser.add_argument("--generated-at", metavar="ISO", help="the report's 'generated' time (reproducible output)")
    parser.add_argument("--no-verify", action="store_true", help="skip re-hashing the evidence (large bundles)")


def output_format(fmt: str | None, output: str | None) -> str:
    if fmt:
        return fmt
    if output:
        return _BY_SUFFIX.get(Path(output).suffix.lower(), "md")
    return "md"


def run(args: argparse.Namespace) -> int:
    fmt = output_format(args.format, args.output)
    at = parse_instant(args.generated_at) if args.generated_at else None
    with Bundle.open(args.bundle) as bundle:
        text = render(build(bundle, generated_at=at, verify=not args.no_verify), fmt)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output} ({fmt}, {len(text.encode())} bytes)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
