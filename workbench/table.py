"""Plain-text tables for terminal output (no UI library: capture must start fast on a bare node)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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
    text = text.replace("\n", " ")
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
