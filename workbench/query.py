"""The query layer: the one place that reads the timeline for the CLI, the report and the TUI.

Every function takes filters plus ``limit``/``cursor`` and returns plain rows, so the screens,
``gpuwb timeline`` and the postmortem cannot disagree about what the evidence says.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.bundle import Bundle, utc_naive

EVENT_COLUMNS = ("id", "ts", "ts_approx", "ts_origin", "ts_raw", "host", "source", "layer", "kind", "severity",
                 "gpu", "rank", "job", "message", "attrs", "artifact", "line")

ORDER = "ts NULLS LAST, artifact, line, id"


@dataclass
class EventFilter:
    """Filters shared by ``gpuwb timeline``, the report and the TUI's timeline screen."""

    hosts: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    layers: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    severities: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None
    gpu: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (("host", self.hosts), ("source", self.sources), ("layer", self.layers),
                               ("kind", self.kinds), ("severity", self.severities)):
            if values:
                clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        if self.since is not None:
            clauses.append("ts >= ?")
            params.append(utc_naive(self.since))
        if self.until is not None:
            clauses.append("ts <= ?")
            params.append(utc_naive(self.until))
        if self.text:
            clauses.append("message ILIKE ?")
            params.append(f"%{self.text}%")
        if self.gpu:
            clauses.append("gpu = ?")
            params.append(self.gpu)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def events(bundle: Bundle, flt: EventFilter | None = None, *, limit: int | None = None,
           offset: int = 0) -> list[dict[str, Any]]:
    """One page of the merged timeline, oldest first; undated events sort after dated ones."""
    where, params = (flt or EventFilter()).where()
    sql = f"SELECT {', '.join(EVENT_COLUMNS)} FROM event{where} ORDER BY {ORDER}"
    if limit is not None:
        sql += " LIMIT ? OFFSET ?"
        params += [limit, offset]
    cur = bundle.con.execute(sql, params)
    return [_row(r) for r in cur.fetchall()]


def iter_events(bundle: Bundle, flt: EventFilter | None = None, batch: int = 10_000) -> Iterator[dict[str, Any]]:
    """All matching events in timeline order, fetched in batches so memory stays flat."""
    where, params = (flt or EventFilter()).where()
    cur = bundle.con.execute(f"SELECT {', '.join(EVENT_COLUMNS)} FROM event{where} ORDER BY {ORDER}", params)
    while True:
        rows = cur.fetchmany(batch)
        if not rows:
            return
        for r in rows:
            yield _row(r)


def count_events(bundle: Bundle, flt: EventFilter | None = None) -> int:
    where, params = (flt or EventFilter()).where()
    return bundle.con.execute(f"SELECT count(*) FROM event{where}", params).fetchall()[0][0]


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(EVENT_COLUMNS, values))
    row["attrs"] = json.loads(row["attrs"]) if row["attrs"] else {}
    return row


def event_json(row: dict[str, Any]) -> dict[str, Any]:
    """An event in DESIGN.md's ``gpuwb timeline --json`` shape."""
    ts = row["ts"]
    return {"ts": ts.isoformat(timespec="microseconds") + "Z" if ts else None,
            "ts_approx": bool(row["ts_approx"]), "host": row["host"], "source": row["source"],
            "layer": row["layer"], "kind": row["kind"], "severity": row["severity"], "gpu": row["gpu"],
            "rank": row["rank"], "job": row["job"], "message": row["message"], "attrs": row["attrs"],
            "artifact": row["artifact"], "line": row["line"], "ts_origin": row["ts_origin"],
            "ts_raw": row["ts_raw"]}


def summary(bundle: Bundle) -> dict[str, Any]:
    """Counts that tell a responder at a glance what a bundle holds."""
    con = bundle.con
    out: dict[str, Any] = {"meta": bundle.meta()}
    out["artifacts"] = con.execute("SELECT count(*), coalesce(sum(size), 0) FROM artifact").fetchall()[0]
    out["events_by_kind"] = con.execute(
        "SELECT kind, count(*) FROM event GROUP BY kind ORDER BY count(*) DESC, kind").fetchall()
    out["hosts"] = [r[0] for r in con.execute(
        "SELECT DISTINCT host FROM event WHERE host IS NOT NULL ORDER BY host").fetchall()]
    out["window"] = con.execute("SELECT min(ts), max(ts) FROM event").fetchall()[0]
    out["tables"] = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                     for t in ("event", "gpu_sample", "gpu_inventory", "topology", "series", "host_inventory")}
    out["seal"] = bundle.last_seal()
    return out
