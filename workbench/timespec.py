"""Times given on the command line: ``30m``, ``2h``, ``1d`` back from now, or an ISO 8601 instant."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from workbench.errors import InputError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|hr|d|day|w)?s?\s*$", re.IGNORECASE)
_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "day": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    m = _DURATION.match(text)
    if not m:
        raise InputError(f"not a duration: {text!r} (use e.g. 30m, 2h, 1d)")
    return timedelta(seconds=float(m.group(1)) * _UNIT[(m.group(2) or "s").lower()])


def parse_instant(text: str) -> datetime:
    """An ISO 8601 time (UTC if no offset is given)."""
    try:
        value = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"not an ISO 8601 time: {text!r} (e.g. 2026-11-29T10:00:00Z)") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A window start: a duration back from ``now`` or an absolute time."""
    now = now or datetime.now(timezone.utc)
    try:
        return now - parse_duration(text)
    except ValueError:
        try:
            return parse_instant(text)
        except ValueError:
            raise InputError(f"not a duration or time: {text!r} (use e.g. 2h or 2026-11-29T10:00:00Z)") from None
