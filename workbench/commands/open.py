"""Open the incident cockpit: the Overview names the culprit, every other screen is one key away.

Given a bundle, opens it. Given raw evidence (files, folders, archives), ingests it into a new
bundle beside the first path (``incident/`` -> ``incident.duckdb``) and opens that; an existing
bundle of that name is opened as it is. Responder work (notes, verdicts, action items) is written
to the bundle's journal, signed with --author (default $USER). A bundle that cannot be read at all
is one line and exit 2; SIGTERM and SIGHUP close the cockpit as q does and exit 143 and 129,
naming on stderr any journal entry that was still waiting for a busy bundle."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.errors import Terminated, UsageError
from workbench.table import printable

EX_SOFTWARE = 70
"""The exit status of a bug, as the command line gives it (workbench/cli.py)."""

if TYPE_CHECKING:
    from workbench.store.shared_bundle import SharedBundle
    from workbench.tui.app import Cockpit

NAME = "open"
HELP = "open the incident cockpit (terminal UI) on a bundle or on raw evidence"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", metavar="BUNDLE|PATH", nargs="+",
                        help="a bundle, or raw evidence files/folders/archives to ingest first")
    parser.add_argument("--author", help="who signs journal entries (default $USER)")
    parser.add_argument("--theme", choices=("dark", "light"), default="dark")
    parser.add_argument("--workload", choices=("training", "inference", "mixed", "unknown"),
                        help="use this playbook instead of the detected one")
    parser.add_argument("--bundle", metavar="OUT", help="where to write the bundle made from raw evidence")
    parser.add_argument("--baseline", metavar="FILE",
                        help="mark drift from the accepted baseline FILE (gpuwb baseline save) on the GPUs screen")


def bundle_for(paths: list[str], out: str | None) -> tuple[Path, bool]:
    """The bundle to open and whether raw evidence must be ingested into it first."""
    first = Path(paths[0])
    if len(paths) == 1 and out is None and first.is_file() and _is_bundle(first):
        return first, False
    target = Path(out) if out else first.parent / (first.name.rstrip("/").split(".")[0] + ".duckdb")
    if target.resolve() == first.resolve():
        raise UsageError(f"{first} would be overwritten by its own bundle; give --bundle OUT")
    return target, not target.exists()


def _is_bundle(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(16)
    return len(head) >= 12 and head[8:12] == b"DUCK"


def run(args: argparse.Namespace) -> int:
    from workbench.prevention.baseline import load as load_baseline
    from workbench.tui.app import Cockpit, default_author

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("gpuwb open needs a terminal (stdin and stdout); use gpuwb analyze or report in scripts")
    path, ingest = bundle_for(args.paths, args.bundle)
    accepted = load_baseline(args.baseline) if args.baseline else None  # a bad file is refused before any ingest
    if ingest:
        from workbench.ingest.session import check_inputs, ingest_paths
        from workbench.store.bundle import Bundle

        check_inputs(args.paths, None)
        print(f"ingesting {len(args.paths)} path(s) into {path} ...", flush=True)
        with Bundle.create(path, title=Path(args.paths[0]).name) as bundle:
            results = ingest_paths(bundle, args.paths)
        print(f"{len(results)} files ingested", flush=True)
    store = _open_store(path, args.author or default_author())
    return run_cockpit(Cockpit(store, workload=args.workload, theme=args.theme, baseline=accepted))


def run_cockpit(app: Cockpit) -> int:
    """Run the cockpit to its end; journal entries it could not save go to stderr, a stop signal it took
    is raised again for the command line's exit status. ``gpuwb demo`` opens its cockpit through here too."""
    app.run()
    for what in app.unsaved:
        print(f"gpuwb: not saved (the bundle was busy): {printable(what)}", file=sys.stderr)
    if app.terminated is not None:
        raise Terminated(app.terminated)
    if app.return_code:  # Textual has printed the traceback of a bug in the cockpit
        print("gpuwb: internal error in the cockpit (its traceback is above)", file=sys.stderr)
        return EX_SOFTWARE
    return 0


def _open_store(path: Path, author: str) -> SharedBundle:
    """The bundle for the cockpit, or the one-line error of a bundle that cannot be read at all."""
    import duckdb

    from workbench.store.bundle import BundleError
    from workbench.store.shared_bundle import SharedBundle

    try:
        return SharedBundle(path, author)
    except duckdb.Error as exc:
        raise BundleError(f"cannot read bundle {path}: {printable((str(exc).splitlines() or [''])[0])}") from None
