"""Small renderings every screen uses: times, clipped text, text sparklines, verdict colours.

Colour is never the only signal: every verdict also has its mark (✓ ? ✗ ·) and its word.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from workbench.findings import parse_iso

BLOCKS = "▁▂▃▄▅▆▇█"
_VERDICT_STYLES = {"fault": "bold red", "suspect": "yellow", "clear": "green", "no_evidence": "dim"}
_SEVERITY_STYLES = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "", "debug": "dim"}


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters; control characters shown, never interpreted."""
    flat = "".join(ch if ch.isprintable() else " " for ch in (text or "").replace("\n", " "))
    return flat if len(flat) <= width else flat[: max(0, width - 1)] + "…"


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
