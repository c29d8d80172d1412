"""The workbench's one spelling of a time as text, and its one reader of it back.

Every output (analysis JSON, timeline JSON, the journal, fleet history, drill and demo files) writes
UTC ISO-8601 ending in ``Z`` through :func:`iso`; outputs differ only in precision, which is the
``timespec`` argument, so no output changes spelling by going through here. Bundles hold naive UTC
(the store's convention), which is what :func:`parse_iso` gives back."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Literal, overload

Timespec = Literal["auto", "seconds", "milliseconds", "microseconds"]


@overload
def iso(ts: datetime, timespec: Timespec = ..., *, z: bool = ...) -> str: ...
@overload
def iso(ts: None, timespec: Timespec = ..., *, z: bool = ...) -> None: ...
@overload
def iso(ts: datetime | None, timespec: Timespec = ..., *, z: bool = ...) -> str | None: ...
def iso(ts: datetime | None, timespec: Timespec = "milliseconds", *, z: bool = True) -> str | None:
    """``ts`` as UTC ISO-8601 text: naive is UTC already, aware is converted. ``timespec`` is the
    output's precision: milliseconds for the analysis JSON (the default), microseconds for the timeline,
    seconds for fleet history and generated log lines, ``auto`` (microseconds only when non-zero) for the
    journal. ``z=False`` spells the zone ``+00:00``, as the capture meta has always been written."""
    if not ts:
        return None
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts.isoformat(timespec=timespec) + ("Z" if z else "+00:00")


def parse_iso(value: str | None) -> datetime | None:
    """ISO-8601 text (``Z``, an offset, or none meaning UTC) as naive UTC, the bundle's convention;
    None for none. Raises ValueError on text that is not ISO-8601, so a caller decides what bad input is."""
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo is None else parsed.astimezone(timezone.utc).replace(tzinfo=None)
