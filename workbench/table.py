"""Plain-text tables for terminal output (no UI library: capture must start fast on a bare node).

Evidence is printed as text, never as terminal control: an escape sequence in a log line or a file
name (set the window title, clear the screen, write the clipboard) is shown as ``\\x1b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)}


def printable(text: str) -> str:
    """``text`` with control characters (except tab and newline) written out as ``\\xNN``."""
    return text.translate(_CONTROL)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], max_width: int = 80) -> str:
    """Left-aligned columns; a cell wider than ``max_width`` is cut with an ellipsis."""
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    lines = ["  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(widths[i]) for i, v in enumerate(row)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any, max_width: int) -> str:
    text = "-" if value is None or value == "" else str(value)
    text = printable(text.replace("\n", " "))
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
