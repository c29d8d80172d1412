"""argparse types shared by sub-commands: numbers that must be in range, refused with one line."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A count that must be at least 1 (``--top``)."""
    return int(_at_least(text, int, 1, "a whole number of 1 or more"))


def non_negative_int(text: str) -> int:
    """A limit that may be 0 (``--limit``)."""
    return int(_at_least(text, int, 0, "a whole number of 0 or more"))


def positive_float(text: str) -> float:
    """A factor that must be above 0 (``--timeout-scale``)."""
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
