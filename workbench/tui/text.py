"""Small renderings every screen uses: plain text, times, clipped text, text sparklines, verdict colours.

Evidence is never markup. A line of a log holds ``[/dev/nvidia0]``, ``[/]`` or ``[rank5]:``, a host or
a note may hold anything, and Rich and Textual read square brackets in a plain ``str`` as style tags:
``[/]`` and ``[/dev/nvidia0]`` crash the cockpit, ``[rank5]`` disappears. So text from a bundle reaches
a widget only as a Rich :class:`~rich.text.Text` made by :func:`plain` (or built with ``Text.append``
and ``Text.assemble``, which never parse), and the cockpit's widgets (``workbench/tui/widgets.py``)
turn any ``str`` they are still handed into plain text the same way.

Colour is never the only signal: every verdict also has its mark (✓ ? ✗ ·) and its word.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.style import StyleType
from rich.text import Text

from workbench.times import parse_iso

BLOCKS = "▁▂▃▄▅▆▇█"
_VERDICT_STYLES = {"fault": "bold red", "suspect": "yellow", "clear": "green", "no_evidence": "dim"}
_SEVERITY_STYLES = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "", "debug": "dim"}


def clip(text: str | None, width: int | None) -> str:
    """One line of at most ``width`` characters (None: any length); control characters shown as
    blanks, never interpreted (an escape sequence in a log must not reach the terminal)."""
    flat = "".join(ch if ch.isprintable() else " " for ch in (text or "").replace("\n", " "))
    return flat if width is None or len(flat) <= width else flat[: max(0, width - 1)] + "…"


def plain(text: object, width: int | None = None, style: StyleType = "") -> Text:
    """``text`` as one line that shows exactly what it holds: never read as markup, control
    characters shown as :func:`clip` shows them, at most ``width`` characters. None is empty."""
    return Text(clip(None if text is None else str(text), width), style=style, end="")


def short_time(value: datetime | str | None, *, seconds: bool = False) -> str:
    """``03-14 09:10`` (or with seconds and milliseconds): enough to order an incident's minutes."""
    if isinstance(value, str):
        try:
            value = parse_iso(value.replace(" ", "T"))
        except ValueError:
            return value
    if value is None:
        return "?"
    return value.strftime("%m-%d %H:%M:%S.%f")[:-3] if seconds else value.strftime("%m-%d %H:%M")


def sparkline(values: Sequence[float]) -> str:
    """Block characters scaled to the largest value; zero stays the lowest block."""
    top = max(values, default=0) or 1
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int(round(v / top * (len(BLOCKS) - 1))))] for v in values)


def verdict_style(verdict: str) -> str:
    return _VERDICT_STYLES.get(verdict, "")


def severity_style(severity: str | None) -> str:
    return _SEVERITY_STYLES.get(severity or "", "")
