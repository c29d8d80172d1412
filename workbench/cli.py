"""``gpuwb``: the command line. Each sub-command is a module of ``workbench.commands``.

Usage and input errors exit 2 with one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

import duckdb

import workbench.commands
from workbench import __version__
from workbench.bundle import BundleError
from workbench.ingest import IngestError
from workbench.table import printable

COMMAND_ORDER = ("capture", "ingest", "timeline", "analyze", "open", "report", "export", "verify", "merge",
                 "demo")


class UsageError(Exception):
    """A mistake in how gpuwb was called; printed as one line, exit 2."""


def positive_int(text: str) -> int:
    """An argparse type: a count that must be at least 1 (``--top``)."""
    return int(_at_least(text, int, 1, "a whole number of 1 or more"))


def non_negative_int(text: str) -> int:
    """An argparse type: a limit that may be 0 (``--limit``)."""
    return int(_at_least(text, int, 0, "a whole number of 0 or more"))


def positive_float(text: str) -> float:
    """An argparse type: a factor that must be above 0 (``--timeout-scale``)."""
    value = _at_least(text, float, 0, "a number above 0")
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def _at_least(text: str, kind: type, low: float, what: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if not value >= low:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + exits 2; keep it to one line
        self.exit(2, f"gpuwb: error: {message} (see gpuwb {self.prog.split()[-1]} --help)\n"
                  if " " in self.prog else f"gpuwb: error: {message} (see gpuwb --help)\n")


def _commands() -> list:
    found = []
    for info in pkgutil.iter_modules(workbench.commands.__path__):
        module = importlib.import_module(f"workbench.commands.{info.name}")
        if hasattr(module, "NAME"):
            found.append(module)
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    return sorted(found, key=lambda m: (rank.get(m.NAME, 99), m.NAME))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuwb", description="GPU incident workbench: capture evidence, find the root cause, "
                     "write the postmortem.")
    parser.add_argument("--version", action="version", version=f"gpuwb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in _commands():
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        code = int(args._run(args) or 0)
        sys.stdout.flush()  # here, not at exit: a closed pipe must end up in the handler below
        return code
    except (BundleError, IngestError, UsageError, ValueError) as exc:
        print(f"gpuwb: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as exc:  # the file system said no (missing folder, permission, disk full): one line
        print(f"gpuwb: error: {printable(_os_message(exc))}", file=sys.stderr)
        return 2
    except (duckdb.IOException, duckdb.OutOfMemoryException, duckdb.TransactionException) as exc:
        # the same from inside DuckDB: a full disk shows up as a commit that could not write its log
        print(f"gpuwb: error: the bundle could not be written or read: {printable(str(exc).splitlines()[0])}",
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("gpuwb: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    """`gpuwb timeline | head` closed the pipe: point stdout at /dev/null so that Python's final
    flush does not print 'Exception ignored ... BrokenPipeError' on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout replaced by an object without a file descriptor (tests)
        pass


def _os_message(exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return reason
    return f"{exc.filename}: {reason}" if exc.filename2 is None else f"{exc.filename} -> {exc.filename2}: {reason}"


if __name__ == "__main__":
    sys.exit(main())
