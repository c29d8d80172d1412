"""Writing a document the postmortem stage made (a report, alert rules, their tests): never over
evidence, never half written. The CLI's report command and the cockpit's report screen both write
through here."""

from __future__ import annotations

import os
from pathlib import Path

from workbench.errors import UsageError


def check_output(output: Path) -> None:
    """A report may replace an older report, never evidence: ``-o incident.duckdb`` (the bundle, or any
    other DuckDB file) is refused, as are a folder and a folder that does not exist."""
    if output.is_dir():
        raise UsageError(f"-o {output} is a folder; give a file name")
    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: folder {output.parent} does not exist")
    if is_duckdb(output):
        raise UsageError(f"-o {output} is a DuckDB file (evidence); refusing to overwrite it with a report")


def is_duckdb(path: Path) -> bool:
    """A DuckDB database file (its header's magic), whatever its name: evidence a report must not replace."""
    try:
        with open(path, "rb") as f:
            return f.read(12)[8:12] == b"DUCK"
    except OSError:
        return False


def write_atomically(path: Path, text: str) -> bool:
    """Write next to ``path`` and rename over it, so an interrupted run never leaves half a report.
    True when an existing file was replaced."""
    existed = path.exists()
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:  # name the file the user asked for, not the temporary one
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    finally:
        tmp.unlink(missing_ok=True)
    return existed
