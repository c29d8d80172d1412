"""Write the postmortem: timeline, root cause with quoted evidence, impact, layered findings,
action items and the evidence appendix (with a fresh verification), as Markdown, self-contained
HTML or JSON. The format follows -f, else the -o file's extension, else Markdown."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.commands._args import positive_float
from workbench.errors import UsageError
from workbench.postmortem.output import check_output, is_duckdb, write_atomically
from workbench.table import printable
from workbench.timespec import parse_instant

NAME = "report"
HELP = "write the postmortem (Markdown, HTML or JSON)"

_BY_SUFFIX = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".json": "json"}
FORMATS = tuple(dict.fromkeys(_BY_SUFFIX.values()))
APPLIED = ("slurm", "kubectl")
"""workbench.prevention.isolation.APPLIED, spelled here for the same reason."""
"""workbench.postmortem.report's formats, spelled here so that building the parser does not load the report."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("-f", "--format", choices=FORMATS, help="md, html or json (default: from -o, else md)")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of standard output")
    parser.add_argument("--generated-at", metavar="ISO", help="the report's 'generated' time (reproducible output)")
    parser.add_argument("--no-verify", action="store_true", help="skip re-hashing the evidence (large bundles)")
    parser.add_argument("--rules", metavar="FILE",
                        help="also write the Prometheus alert rules of the incident's causes (thresholds from its "
                             "own baseline) to FILE")
    parser.add_argument("--rules-test", metavar="DIR",
                        help="with --rules: also write a promtool unit test fed with the bundle's samples to DIR "
                             "(promtool test rules DIR/NAME_test.yaml)")
    parser.add_argument("--for-scale", type=positive_float, default=1.0, metavar="F",
                        help="with --rules: multiply every rule's for: by F in the rule file and its test (a fire "
                             "drill on a staging Prometheus: 0.01 makes 5m 3s); the report keeps the real ones")
    parser.add_argument("--history", metavar="DIR",
                        help="add what the incident history in DIR has seen of the culprits (default $GPUWB_HISTORY)")
    parser.add_argument("--baseline", metavar="FILE",
                        help="add the drift from the accepted baseline FILE (gpuwb baseline save)")
    parser.add_argument("--isolation", metavar="DIR",
                        help="also write the isolation and change rules (slurm.sh, kubectl.sh, k8s.yaml, "
                             "change-freeze.yaml) to DIR and add their section to the report")
    parser.add_argument("--apply", choices=APPLIED, metavar="slurm|kubectl",
                        help="with --isolation: also run that family's commands (scontrol, kubectl), each as its "
                             "argv, never through a shell; exit 1 if one fails")
    parser.add_argument("--dry-run", action="store_true", help="with --apply: print the commands, run none")


def output_format(fmt: str | None, output: str | None) -> str:
    if fmt:
        return fmt
    if output:
        return _BY_SUFFIX.get(Path(output).suffix.lower(), "md")
    return "md"


def run(args: argparse.Namespace) -> int:
    from workbench.fleet.history import History, history_dir
    from workbench.postmortem.render import render
    from workbench.postmortem.report import build
    from workbench.prevention import isolation
    from workbench.prevention.baseline import load as load_baseline
    from workbench.prevention.rules_test import rule_files, test_file_name
    from workbench.store.bundle import Bundle

    fmt = output_format(args.format, args.output)
    at = parse_instant(args.generated_at) if args.generated_at else None
    if args.output:
        check_output(Path(args.output))  # before the minutes a big report can take
    if args.rules or args.rules_test:
        check_rules_paths(args.rules, args.rules_test)
    if args.for_scale != 1 and not args.rules:
        raise UsageError("--for-scale goes with --rules FILE (it scales the rule file's for:)")
    if args.isolation and Path(args.isolation).exists() and not Path(args.isolation).is_dir():
        raise UsageError(f"--isolation {args.isolation} is a file; give a folder")
    if args.apply and not args.isolation:
        raise UsageError("--apply needs --isolation DIR (the commands are written there first)")
    if args.dry_run and not args.apply:
        raise UsageError("--dry-run goes with --apply slurm|kubectl")
    history = history_dir(args.history)
    if history:
        History.open(history)  # a bad folder is refused before the minutes a big report can take
    accepted = load_baseline(args.baseline) if args.baseline else None  # so is a bad baseline file
    with Bundle.open(args.bundle) as bundle:
        model = build(bundle, generated_at=at, verify=not args.no_verify, isolation=bool(args.isolation),
                      history=history, baseline=accepted)
        # printable: a log line's escape sequences must not drive the terminal of whoever cats the file
        text = printable(render(model, fmt))
        if args.rules:
            group = f"gpuwb-{model['header']['incident_id'] or Path(args.bundle).stem}"
            rules_text, test_text = rule_files(bundle, model["monitoring"], Path(args.rules),
                                               Path(args.rules_test) if args.rules_test else None, group,
                                               for_scale=args.for_scale)
    if args.rules:
        write_atomically(Path(args.rules), rules_text)
        print(f"wrote {args.rules} ({len(model['monitoring']['rules'])} alert rules)", file=sys.stderr)
    if args.rules and args.rules_test and test_text is not None:
        test_path = Path(args.rules_test) / test_file_name(Path(args.rules))
        write_atomically(test_path, test_text)
        print(f"wrote {test_path} (promtool test rules {test_path})", file=sys.stderr)
    failed = 0
    if args.isolation:
        written = isolation.write(model["isolation"], Path(args.isolation))
        print(f"wrote isolation rules: {', '.join(str(p) for p in written)}", file=sys.stderr)
        if args.apply:
            print(f"{'would run' if args.dry_run else 'running'} {isolation.FILES[args.apply]}:", file=sys.stderr)
            failed = isolation.apply(model["isolation"], args.apply, dry_run=args.dry_run)
    if args.output:
        replaced = write_atomically(Path(args.output), text)
        print(f"wrote {args.output} ({fmt}, {len(text.encode())} bytes{', replaced the old file' if replaced else ''})",
              file=sys.stderr)
    else:
        sys.stdout.write(text)
    if failed:
        print(f"gpuwb: {failed} isolation command(s) failed (see above); the others ran", file=sys.stderr)
        return 1
    return 0


def check_rules_paths(rules: str | None, test_dir: str | None) -> None:
    """--rules names a file beside the others (never evidence); --rules-test needs it and a folder,
    created when missing."""
    if not rules:
        raise UsageError("--rules-test needs --rules FILE (the test loads that rule file)")
    path = Path(rules)
    if path.is_dir() or not path.parent.is_dir() or is_duckdb(path):
        raise UsageError(f"--rules {rules}: give a file name in an existing folder, not a folder or a bundle")
    if test_dir:
        folder = Path(test_dir)
        if folder.exists() and not folder.is_dir():
            raise UsageError(f"--rules-test {test_dir} is a file; give a folder")
        folder.mkdir(parents=True, exist_ok=True)
