"""``gpuwb``: the command line. Each sub-command is a module of ``workbench.commands``.

Usage and input errors exit 2 with one line on stderr, never a traceback; so do a bundle that cannot be
written (a full disk) and one whose storage is damaged (a block whose checksum fails). Anything else is a
bug: one line saying so, the traceback kept in a file that line names, exit 70 (EX_SOFTWARE). Ctrl-C ends a
command with exit 130; SIGTERM and SIGHUP are handled the same way and end it with exit 143 and exit 129.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import traceback
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from collectors.framework.plugins import discover
from workbench import __version__
from workbench.errors import GpuwbError, Terminated, as_interrupt, on_signal
from workbench.table import printable

COMMAND_ORDER = ("capture", "cluster", "record", "ingest", "timeline", "analyze", "open", "report", "export",
                 "verify", "baseline", "history", "merge", "demo", "drill")
EX_SOFTWARE = 70
"""Exit status of an internal error (a bug), as sysexits.h names it."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse prints usage + exits 2; keep it to one line
        self.exit(2, f"gpuwb: error: {message} (see gpuwb {self.prog.split(' ', 1)[-1]} --help)\n"
                  if " " in self.prog else f"gpuwb: error: {message} (see gpuwb --help)\n")


def _commands(only: str | None = None) -> list:
    """Every module of :mod:`workbench.commands` that declares NAME (``_`` modules are the commands' helpers),
    or with ``only`` the module of that name alone, in COMMAND_ORDER then by NAME."""
    found = discover("workbench.commands", attr="NAME", kind=str, requires=("HELP", "add_arguments", "run"),
                     only=only)
    rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
    return sorted(found, key=lambda m: (rank.get(m.NAME, 99), m.NAME))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every sub-command, or with ``only`` that one alone: a run parses its own arguments without importing
    the other commands' modules and what their arguments need (capture's imports every collector)."""
    parser = _Parser(prog="gpuwb", description="GPU incident workbench: capture evidence, find the root cause, "
                     "write the postmortem.")
    parser.add_argument("--version", action="version", version=f"gpuwb {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for module in _commands(only):
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.__doc__)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def _parser_for(words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the sub-command the first word names, else the whole one (--help, --version, a typo)."""
    name = words[0] if words else ""
    if name and not name.startswith("-") and any(m.NAME == name for m in _commands(only=name)):
        return build_parser(only=name)
    return build_parser()


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = _parser_for(words)
    args = parser.parse_args(words)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    previous = _terminate_like_interrupt()
    try:
        try:
            code = int(args._run(args) or 0)
            sys.stdout.flush()  # here, not at exit: a closed pipe must end up in the handler below
            return code
        except Exception as exc:
            stop = as_interrupt(exc)  # a signal DuckDB turned into RuntimeError('Query interrupted')
            if stop is None:
                raise
            raise stop from None
    except GpuwbError as exc:
        print(f"gpuwb: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except OSError as exc:  # the file system said no (missing folder, permission, disk full): one line
        print(f"gpuwb: error: {printable(_os_message(exc))}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"gpuwb: terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print("gpuwb: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        storage = _storage_message(exc, args)
        if storage:  # DuckDB could not write the bundle (a full disk) or read it back (a damaged block)
            print(f"gpuwb: error: {printable(storage)}", file=sys.stderr)
            return 2
        # a bug: say so in one line, keep the traceback for the bug report
        saved = _save_traceback(exc, argv if argv is not None else sys.argv[1:])
        where = f"traceback saved to {saved}" if saved else "the traceback could not be saved"
        message = printable((str(exc).splitlines() or [""])[0])
        print(f"gpuwb: internal error: {type(exc).__name__}: {message} ({where})", file=sys.stderr)
        return EX_SOFTWARE
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _terminate_like_interrupt() -> dict[int, object]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt) in the main thread, so a command
    stopped by its scheduler or a closed terminal cleans up the way Ctrl-C does; SIGINT raises Ctrl-C's own
    KeyboardInterrupt. The handler (``workbench.errors.on_signal``) also notes each signal, so that one DuckDB
    swallowed while it ran a statement is still known for what it was, and can be held back while an
    interrupted command seals. Returns the handlers it replaced, for ``main`` to put back (tests call ``main``
    in-process). Only from the main thread: signal handlers cannot be set from another one."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _storage_message(exc: Exception, args: argparse.Namespace) -> str | None:
    """The one line for a DuckDB error that is about the bundle file, not about gpuwb: it could not be written
    (a full disk fails a commit or a checkpoint), or its stored bytes cannot be read back (a block whose
    checksum fails, a table gone). None for anything else, which is a bug. Looked up in sys.modules, not
    imported: commands that never open a bundle (--help, --version, capture's parser) must not load DuckDB."""
    duckdb = sys.modules.get("duckdb")
    bundle = sys.modules.get("workbench.store.bundle")
    if duckdb is None or bundle is None or not isinstance(exc, duckdb.Error):
        return None
    path = getattr(args, "bundle", None) or getattr(args, "into", None) or getattr(args, "out", None) or "the bundle"
    line = (str(exc).splitlines() or [type(exc).__name__])[0]
    failure = bundle.storage_failure(exc)
    if failure is None and isinstance(exc, duckdb.CatalogException) and _missing_table(line):
        failure = "damaged"
    if failure == "damaged":
        return str(bundle.BundleDamaged(path, line))
    if failure == "write" or isinstance(exc, (duckdb.IOException, duckdb.OutOfMemoryException,
                                                duckdb.TransactionException)):
        return f"{path} could not be written or read: {line}"
    return None


def _missing_table(line: str) -> bool:
    """DuckDB's "Table with name X does not exist" for one of a bundle's own tables."""
    from workbench.store.schema import TABLES

    return any(line.startswith(f"Catalog Error: Table with name {table} does not exist") for table in TABLES)


def traceback_dirs() -> list[Path]:
    """Where internal-error tracebacks go: ``$XDG_STATE_HOME/gpuwb`` (else ``~/.local/state/gpuwb``),
    and the temp folder when that cannot be written."""
    state = os.environ.get("XDG_STATE_HOME")
    if not state:
        try:
            state = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory known (a bare container's uid)
            state = None
    return ([Path(state) / "gpuwb"] if state else []) + [Path(tempfile.gettempdir())]


def _save_traceback(exc: BaseException, argv: Sequence[str]) -> Path | None:
    """The traceback, after the command line, in a new file; secrets in either are masked as in a
    capture. None if no folder can be written (the one-line message is printed all the same)."""
    from collectors.framework.redact import redact_bytes

    text = f"gpuwb {__version__} {' '.join(argv)}\n" + "".join(traceback.format_exception(exc))
    data = redact_bytes(text.encode("utf-8", "replace"))[0]
    name = f"gpuwb-internal-error-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{os.getpid()}.txt"
    for folder in traceback_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            with open(path, "xb") as f:
                f.write(data)
            return path
        except OSError:
            continue
    return None


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
