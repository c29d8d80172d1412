"""The rank and process-group prefixes inside a rank's messages (``[PG ID 0 PG GUID 0(default_pg) Rank 3]``,
``[Rank 3]``): which process group a line is about, and whether its rank is a global one."""

from __future__ import annotations

from typing import Any

from collectors.framework.lazy_re import lazy_regex

_PG = lazy_regex(r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s(\]]+))?\s*(?:\((?P<name>[^)\]]*)\))?"
                 r"(?: Rank (?P<rank>\d+))?\]")
_RANK = lazy_regex(r"\[Rank (?P<rank>\d+)\]")


def pg_info(text: str) -> tuple[dict[str, Any], int | None]:
    """Process-group attrs and the rank to give the event: a sub-group's rank is not a global rank,
    so only the default group's (or a line without a group) names the event's rank."""
    attrs: dict[str, Any] = {}
    if m := _PG.search(text):
        pg_id = int(m.group("pg"))
        attrs["pg_id"] = pg_id
        name = m.group("name") or ("default_pg" if pg_id == 0 else None)
        attrs["pg"] = name or str(pg_id)
        if m.group("guid"):
            attrs["pg_guid"] = m.group("guid")
        if m.group("rank") is not None:
            attrs["pg_rank"] = int(m.group("rank"))
            return attrs, attrs["pg_rank"] if pg_id == 0 or name == "default_pg" else None
        return attrs, None
    if m := _RANK.search(text):
        attrs["pg_rank"] = int(m.group("rank"))
        return attrs, attrs["pg_rank"]
    return attrs, None
