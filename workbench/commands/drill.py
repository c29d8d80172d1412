"""Practise on a realistic incident of any cause in the catalog.

`gpuwb drill --list` prints the causes with the workloads they can be drilled on.
`gpuwb drill CAUSE [--workload training|inference] [--seed N] [--level default|hard|hardest] -o DIR`
writes the raw evidence in its tools' native formats under DIR/raw, ingests it into
DIR/bundle.duckdb, and keeps the truth in DIR/answer.json (outside the evidence). Work it with
`gpuwb open DIR/bundle.duckdb`, then `gpuwb drill score DIR/bundle.duckdb --answer DIR` compares
the journal (root cause marked, layer verdicts, time to mark) with the truth and prints a scorecard.
`--level hard|hardest` adds distractors and gaps (docs/drills.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.commands._args import non_negative_int
from workbench.errors import UsageError

NAME = "drill"
HELP = "write a practice incident for any cause, or score a responder's journal against its truth"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", metavar="CAUSE|score",
                        help="a cause id of the catalog, or 'score' followed by the drill's bundle")
    parser.add_argument("bundle", nargs="?", metavar="BUNDLE", help="with 'score': the bundle the responders worked")
    parser.add_argument("--list", action="store_true", help="print the causes and the workloads they are drilled on")
    parser.add_argument("--workload", choices=("training", "inference"),
                        help="the workload the incident happens to (default: the cause's first)")
    parser.add_argument("--seed", type=non_negative_int, default=1, metavar="N",
                        help="varies hosts, GPUs, times and noise (default 1); the same seed writes the same bytes")
    parser.add_argument("--level", choices=("default", "hard", "hardest"), default="default",
                        help="distractors and gaps: hard adds other jobs' old failures and one missing source, hardest "
                             "also a second fault, clock skew and an srun -l .out (default: none; see docs/drills.md)")
    parser.add_argument("-o", "--out", metavar="DIR", help="the drill's folder (raw/, answer.json, bundle.duckdb)")
    parser.add_argument("--no-ingest", action="store_true",
                        help="only write the raw evidence and the answer; ingest later with gpuwb ingest")
    parser.add_argument("--answer", metavar="DIR", help="with 'score': the drill's folder (or its answer.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (see docs/cli.md)")


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    if args.target == "score":
        return _score(args)
    if not args.target:
        raise UsageError("name a cause (gpuwb drill --list), or: gpuwb drill score BUNDLE --answer DIR")
    if args.bundle:
        raise UsageError(f"unexpected argument {args.bundle!r}; a drill takes one cause and -o DIR")
    if not args.out:
        raise UsageError("a drill needs -o DIR, the folder to write it to")
    from workbench.prevention.drill import write  # deferred: keeps `gpuwb --help` fast

    written = write(args.target, args.workload, args.seed, Path(args.out), ingest=not args.no_ingest, level=args.level)
    out = Path(args.out)
    if args.json:
        sys.stdout.write(json.dumps({"cause": args.target, "workload": written.truth.workload, "seed": args.seed,
                                     "level": args.level, "distractors": [x["name"] for x in written.truth.distractors],
                                     "raw": str(written.raw), "files": len(written.files),
                                     "answer": str(out / "answer.json"),
                                     "bundle": str(written.bundle) if written.bundle else None}) + "\n")
        return 0
    level = "" if args.level == "default" else f", level {args.level}"
    print(f"Drill {args.target} ({written.truth.workload}, seed {args.seed}{level}): {written.truth.title}")
    print(f"  evidence: {written.raw}/ ({len(written.files)} files)")
    if written.bundle:
        print(f"  bundle:   {written.bundle}")
        print(f"Work it:    gpuwb open {written.bundle}")
        print(f"Score it:   gpuwb drill score {written.bundle} --answer {out}")
    else:
        print(f"Ingest it:  gpuwb ingest {out / 'bundle.duckdb'} {written.raw}")
        print(f"Score it:   gpuwb drill score {out / 'bundle.duckdb'} --answer {out}")
    print(f"  (the truth is in {out / 'answer.json'}: do not read it before scoring)")
    return 0


def _list(args: argparse.Namespace) -> int:
    from workbench.analysis.causes import load_causes
    from workbench.prevention.drill.registry import faults

    known = faults()
    rows = [{"cause": cause, "layer": entry["layer"], "title": entry["title"],
             "workloads": [w for (c, w) in known if c == cause]} for cause, entry in load_causes().items()
            if not entry.get("unknown")]  # 'an error nobody catalogued' has nothing to practise
    if args.json:
        sys.stdout.write(json.dumps({"causes": rows}) + "\n")
        return 0
    width = max(len(r["cause"]) for r in rows)
    for r in rows:
        print(f"{r['cause']:<{width}}  {r['layer']:<16} {','.join(r['workloads']) or '-':<19} {r['title']}")
    return 0


def _score(args: argparse.Namespace) -> int:
    if not args.bundle or not args.answer:
        raise UsageError("usage: gpuwb drill score BUNDLE --answer DIR")
    from workbench.prevention.drill.score import load_answer, render, score
    from workbench.store.bundle import Bundle

    truth = load_answer(Path(args.answer))
    with Bundle.open(args.bundle) as bundle:
        card = score(bundle, truth)
    sys.stdout.write(json.dumps(card.to_json()) + "\n" if args.json else render(card))
    return 0
