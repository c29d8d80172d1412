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

from workbench.store.bundle import Bundle
from workbench.store.row_columns import utc_naive
from workbench.store.schema import EVIDENCE_TABLES
from workbench.times import iso

EVENT_COLUMNS = ("id", "ts", "ts_approx", "ts_origin", "ts_raw", "host", "source", "layer", "kind", "severity",
                 "gpu", "rank", "job", "message", "attrs", "artifact", "line")

SORT_KEY = ("coalesce(ts, TIMESTAMP '9999-12-31 23:59:59.999999')", "coalesce(artifact, '')", "coalesce(line, -1)",
            "id")
"""The timeline's total order (undated events last, then artifact and line), usable for keyset paging.
Undated events sort as the largest timestamp Python can hold, so a cursor round-trips exactly."""

ORDER = ", ".join(SORT_KEY)


def time_bounds(since: datetime | None, until: datetime | None) -> tuple[list[str], list[Any]]:
    """``ts >= ? AND ts <= ?`` as far as the bounds are given (UTC), for any table with a ``ts``."""
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append("ts >= ?")
        params.append(utc_naive(since))
    if until is not None:
        clauses.append("ts <= ?")
        params.append(utc_naive(until))
    return clauses, params


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
    ranks: tuple[int, ...] = ()

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (("host", self.hosts), ("source", self.sources), ("layer", self.layers),
                               ("kind", self.kinds), ("severity", self.severities)):
            if values:
                clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        bounds, values = time_bounds(self.since, self.until)
        clauses += bounds
        params += values
        if self.text:
            clauses.append("message ILIKE ?")
            params.append(f"%{self.text}%")
        if self.gpu:
            clauses.append("gpu = ?")
            params.append(self.gpu)
        if self.ranks:
            clauses.append(f"rank IN ({', '.join('?' for _ in self.ranks)})")
            params.extend(int(r) for r in self.ranks)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def events(bundle: Bundle, flt: EventFilter | None = None, *, limit: int | None = None,
           offset: int = 0) -> list[dict[str, Any]]:
    """The merged timeline, oldest first; undated events sort after dated ones. Screens page with
    :func:`page` instead: ``OFFSET`` gets slower the deeper it goes."""
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


# -- keyset paging: what a screen scrolls through, at the same cost on page 1 and page 5,000 ------

Cursor = tuple[datetime, str, int, int]
"""An event's place in the timeline order (:data:`SORT_KEY`); pages start after or end before one."""

_KEY = f"({', '.join(SORT_KEY)})"


@dataclass(frozen=True)
class Page:
    """A slice of the filtered timeline and whether more lies before and after it."""

    rows: list[dict[str, Any]]
    more_before: bool
    more_after: bool

    @property
    def first(self) -> Cursor | None:
        return self.rows[0]["cursor"] if self.rows else None

    @property
    def last(self) -> Cursor | None:
        return self.rows[-1]["cursor"] if self.rows else None


def page(bundle: Bundle, flt: EventFilter | None = None, *, after: Cursor | None = None,
         before: Cursor | None = None, at_or_after: Cursor | None = None, last: bool = False,
         limit: int = 200) -> Page:
    """``limit`` events after ``after`` (or from ``at_or_after``, ending just before ``before``, or the
    ``last`` ones), in timeline order. Each row carries its ``cursor``."""
    where, params = (flt or EventFilter()).where()
    cond, cparams, backwards = "", [], last
    if before is not None:
        cond, cparams, backwards = f"{_KEY} < (?, ?, ?, ?)", list(before), True
    elif after is not None:
        cond, cparams = f"{_KEY} > (?, ?, ?, ?)", list(after)
    elif at_or_after is not None:
        cond, cparams = f"{_KEY} >= (?, ?, ?, ?)", list(at_or_after)
    if cond:
        where = f"{where} AND {cond}" if where else f" WHERE {cond}"
    direction = " DESC" if backwards else ""
    order = ", ".join(k + direction for k in SORT_KEY)
    sql = (f"SELECT {', '.join(EVENT_COLUMNS)}, {', '.join(SORT_KEY)} FROM event{where} "
           f"ORDER BY {order} LIMIT ?")
    fetched = bundle.con.execute(sql, params + cparams + [limit + 1]).fetchall()
    more = len(fetched) > limit
    fetched = fetched[:limit]
    if backwards:
        fetched.reverse()
    rows = []
    for values in fetched:
        row = _row(values[: len(EVENT_COLUMNS)])
        row["cursor"] = tuple(values[len(EVENT_COLUMNS):])
        rows.append(row)
    if last:
        return Page(rows, more_before=more, more_after=False)
    if backwards:
        return Page(rows, more_before=more, more_after=_exists(bundle, flt, f"{_KEY} >= (?, ?, ?, ?)", list(before)))
    started_inside = after is not None or at_or_after is not None
    more_before = started_inside and bool(rows) and _exists(bundle, flt, f"{_KEY} < (?, ?, ?, ?)",
                                                             list(rows[0]["cursor"]))
    return Page(rows, more_before=more_before, more_after=more)


def cursor_at(ts: datetime | None) -> Cursor:
    """The place in the order where events at ``ts`` begin (``None``: where undated events begin)."""
    return (utc_naive(ts) if ts is not None else datetime.max, "", -1, -1)


def seek(bundle: Bundle, flt: EventFilter | None, *, after: Cursor | None, severities: tuple[str, ...] = (),
         backwards: bool = False) -> Cursor | None:
    """The cursor of the next (or previous) matching event that also has one of ``severities``:
    the timeline's "next error" jump."""
    base = flt or EventFilter()
    narrowed = EventFilter(**{**base.__dict__, "severities": severities or base.severities})
    where, params = narrowed.where()
    if after is not None:
        cond = f"{_KEY} {'<' if backwards else '>'} (?, ?, ?, ?)"
        where = f"{where} AND {cond}" if where else f" WHERE {cond}"
        params += list(after)
    order = ", ".join(k + (" DESC" if backwards else "") for k in SORT_KEY)
    rows = bundle.con.execute(f"SELECT {', '.join(SORT_KEY)} FROM event{where} ORDER BY {order} LIMIT 1",
                              params).fetchall()
    return tuple(rows[0]) if rows else None


def position(bundle: Bundle, flt: EventFilter | None, cursor: Cursor | None) -> int:
    """How many matching events come before ``cursor``: the "row N of M" a screen shows."""
    if cursor is None:
        return 0
    where, params = (flt or EventFilter()).where()
    cond = f"{_KEY} < (?, ?, ?, ?)"
    where = f"{where} AND {cond}" if where else f" WHERE {cond}"
    return bundle.con.execute(f"SELECT count(*) FROM event{where}", params + list(cursor)).fetchall()[0][0]


def _exists(bundle: Bundle, flt: EventFilter | None, cond: str, cparams: list[Any]) -> bool:
    where, params = (flt or EventFilter()).where()
    where = f"{where} AND {cond}" if where else f" WHERE {cond}"
    return bool(bundle.con.execute(f"SELECT 1 FROM event{where} LIMIT 1", params + cparams).fetchall())


def hosts_seen(bundle: Bundle) -> list[str]:
    """Every host any event names."""
    return [r[0] for r in bundle.con.execute(
        "SELECT DISTINCT host FROM event WHERE host IS NOT NULL ORDER BY 1").fetchall()]


def missing_sources(bundle: Bundle) -> dict[str, list[str]]:
    """Sources most hosts have but some lack (``{"nccl": ["node04"]}``): a host with no NCCL log is
    a gap in what we know, not a clean bill of health. Derived events do not count as a source."""
    rows = bundle.con.execute("SELECT host, source FROM event WHERE host IS NOT NULL AND source IS NOT NULL "
                              "AND ts_origin IS DISTINCT FROM 'derived' GROUP BY 1, 2").fetchall()
    hosts = {h for h, _ in rows}
    having: dict[str, set[str]] = {}
    for host, source in rows:
        having.setdefault(source, set()).add(host)
    return {source: sorted(hosts - present) for source, present in sorted(having.items())
            if len(present) >= 2 and 2 * len(present) >= len(hosts) and hosts - present}


def unrecognised_groups(bundle: Bundle, limit: int = 200) -> list[dict[str, Any]]:
    """The bundle's error lines no parser or catalog entry knows (kind unrecognised_error), grouped by
    layer, program and template, most frequent first: what the cockpit, the report's appendix and
    ``gpuwb catalog unknown`` show as what the workbench does not know."""
    cur = bundle.con.execute("""
        SELECT e.layer, coalesce(e.attrs->>'program', '') AS program, e.attrs->>'template' AS template,
               sum(coalesce(TRY_CAST(e.attrs->>'count' AS BIGINT), 1)) AS lines, count(DISTINCT e.host) AS hosts,
               arg_min(e.message, e.id) AS example, arg_min(a.source, e.id) AS file, arg_min(e.line, e.id) AS line
        FROM event AS e LEFT JOIN artifact AS a ON a.sha256 = e.artifact
        WHERE e.kind = 'unrecognised_error'
        GROUP BY ALL ORDER BY lines DESC, layer, program, template LIMIT ?""", [limit])
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def facets(bundle: Bundle, limit: int = 200) -> dict[str, list[tuple[Any, int]]]:
    """The values each timeline filter can take, with event counts: what the filter pickers offer."""
    out: dict[str, list[tuple[Any, int]]] = {}
    for column in ("layer", "source", "host", "kind", "severity", "gpu", "rank"):
        out[column] = [(v, n) for v, n in bundle.con.execute(
            f"SELECT {column}, count(*) FROM event WHERE {column} IS NOT NULL GROUP BY 1 "
            f"ORDER BY 2 DESC, 1 LIMIT ?", [limit]).fetchall()]
    return out


def _row(values: tuple[Any, ...]) -> dict[str, Any]:
    row = dict(zip(EVENT_COLUMNS, values))
    row["attrs"] = json.loads(row["attrs"]) if row["attrs"] else {}
    return row


def event_json(row: dict[str, Any]) -> dict[str, Any]:
    """An event in the ``gpuwb timeline --json`` shape (docs/cli.md)."""
    ts = row["ts"]
    return {"ts": iso(ts, "microseconds"),
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
    out["hosts"] = hosts_seen(bundle)
    out["window"] = con.execute("SELECT min(ts), max(ts) FROM event").fetchall()[0]
    out["tables"] = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                     for t in EVIDENCE_TABLES}
    out["seal"] = bundle.last_seal()
    return out


# -- aggregates for summaries (the postmortem, the TUI's overview): bounded rows, never the whole table --

KEY_KINDS = ("job_state", "node_state", "change", "k8s_event", "checkpoint_last_good")
"""Kinds that belong on an incident's timeline whatever their severity (a job starting, a node drained,
a deploy, a checkpoint): with warnings and worse and derived events they make up the key events."""

SEVERITY_RANK = {"debug": 0, "info": 1, "warning": 2, "error": 3, "critical": 4}
_SEV_SQL = ("CASE severity WHEN 'critical' THEN 4 WHEN 'error' THEN 3 WHEN 'warning' THEN 2 "
            "WHEN 'info' THEN 1 ELSE 0 END")


def _key_where(since: datetime | None, until: datetime | None, kinds: tuple[str, ...]) -> tuple[str, list[Any]]:
    clauses = ["ts IS NOT NULL",
               f"(severity IN ('warning', 'error', 'critical') OR ts_origin = 'derived' "
               f"OR kind IN ({', '.join('?' for _ in kinds)}))"]
    params: list[Any] = list(kinds)
    bounds, values = time_bounds(since, until)
    return " WHERE " + " AND ".join(clauses + bounds), params + values


_SUBKIND_SQL = ("coalesce(json_extract_string(attrs, '$.reason'), json_extract_string(attrs, '$.state'), "
                "json_extract_string(attrs, '$.severity'), json_extract_string(attrs, '$.xid'), "
                "json_extract_string(attrs, '$.metric'))")
"""What splits a kind into groups worth showing apart: a Kubernetes reason, a job or node state, an AER
severity, an Xid code, a metric."""


def key_events(bundle: Bundle, *, since: datetime | None = None, until: datetime | None = None,
               per_group: int = 3, kinds: tuple[str, ...] = KEY_KINDS) -> list[dict[str, Any]]:
    """The first ``per_group`` key events of each layer, kind and sub-kind (reason, state, Xid, ...),
    oldest first, each with ``group_count`` (events of its group in the range) and ``group_hosts``:
    a timeline summary of any size."""
    where, params = _key_where(since, until, kinds)
    cols = ", ".join(EVENT_COLUMNS)
    group = f"layer, kind, {_SUBKIND_SQL}"
    sql = (f"WITH k AS (SELECT {cols}, "
           f"row_number() OVER (PARTITION BY {group} ORDER BY {ORDER}) AS rn, "
           f"count(*) OVER (PARTITION BY {group}) AS group_count, "
           f"count(DISTINCT host) OVER (PARTITION BY {group}) AS group_hosts FROM event{where}) "
           f"SELECT {cols}, group_count, group_hosts FROM k WHERE rn <= ? ORDER BY {ORDER}")
    out = []
    for values in bundle.con.execute(sql, params + [per_group]).fetchall():
        row = _row(values[: len(EVENT_COLUMNS)])
        row["group_count"], row["group_hosts"] = values[len(EVENT_COLUMNS):]
        out.append(row)
    return out


def event_density(bundle: Bundle, *, since: datetime, until: datetime, bucket_s: float, max_lanes: int = 16,
                  kinds: tuple[str, ...] = KEY_KINDS) -> list[tuple[str, str, int, int, str]]:
    """Key events counted per (host, layer, time bucket) with the worst severity in each bucket, for the
    busiest ``max_lanes`` host/layer lanes (worst severity first). Rows: (host, layer, bucket index,
    count, severity); bucket i starts at ``since + i * bucket_s``."""
    where, params = _key_where(since, until, kinds)
    lanes = bundle.con.execute(
        f"SELECT coalesce(host, '-') AS h, coalesce(layer, '-') AS l FROM event{where} GROUP BY ALL "
        f"ORDER BY max({_SEV_SQL}) DESC, count(*) DESC, h, l LIMIT ?", params + [max_lanes]).fetchall()
    if not lanes:
        return []
    lane_clause = " OR ".join("(coalesce(host, '-') = ? AND coalesce(layer, '-') = ?)" for _ in lanes)
    lane_params = [v for lane in lanes for v in lane]
    rows = bundle.con.execute(
        f"SELECT coalesce(host, '-'), coalesce(layer, '-'), "
        f"CAST(floor((epoch_us(ts) - epoch_us(CAST(? AS TIMESTAMP))) / ?) AS BIGINT) AS b, count(*), "
        f"max({_SEV_SQL}) FROM event{where} AND ({lane_clause}) GROUP BY ALL ORDER BY 1, 2, 3",
        [utc_naive(since), bucket_s * 1_000_000] + params + lane_params).fetchall()
    names = {v: k for k, v in SEVERITY_RANK.items()}
    return [(h, layer, int(b), int(n), names.get(s, "info")) for h, layer, b, n, s in rows]


def events_at(bundle: Bundle, refs: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
    """The events recorded at given (artifact sha256, line) positions: what an evidence quote points to."""
    refs = [(a, int(n)) for a, n in refs if a and n is not None]
    if not refs:
        return {}
    clause = " OR ".join("(artifact = ? AND line = ?)" for _ in refs)
    rows = bundle.con.execute(f"SELECT {', '.join(EVENT_COLUMNS)} FROM event WHERE {clause} ORDER BY {ORDER}",
                              [v for ref in refs for v in ref]).fetchall()
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for values in rows:
        row = _row(values)
        out.setdefault((row["artifact"], row["line"]), row)
    return out


# -- incident scope: what an incident touched (postmortem impact, the TUI's overview) -------------

def time_range(bundle: Bundle) -> tuple[datetime | None, datetime | None]:
    """First and last dated event."""
    lo, hi = bundle.con.execute("SELECT min(ts), max(ts) FROM event").fetchall()[0]
    return lo, hi


def affected(bundle: Bundle, since: datetime | None, until: datetime | None) -> dict[str, list[Any]]:
    """Hosts, ranks and GPUs with errors in a time range. GPUs count only when a GPU- or hardware-layer
    error names them: every rank's NCCL timeout names its GPU too, which says nothing about that GPU."""
    params = [utc_naive(since), utc_naive(until)]
    bad = "ts IS NOT NULL AND ts >= ? AND ts <= ? AND severity IN ('error', 'critical')"
    con = bundle.con
    return {
        "hosts": [r[0] for r in con.execute(
            f"SELECT DISTINCT host FROM event WHERE {bad} AND host IS NOT NULL ORDER BY 1", params).fetchall()],
        "ranks": [r[0] for r in con.execute(
            f"SELECT DISTINCT rank FROM event WHERE {bad} AND rank IS NOT NULL ORDER BY 1", params).fetchall()],
        "gpus": [tuple(r) for r in con.execute(
            f"SELECT DISTINCT host, gpu FROM event WHERE {bad} AND gpu IS NOT NULL AND layer IN ('gpu', 'hardware') "
            "ORDER BY 1, 2 LIMIT 64", params).fetchall()],
    }


def jobs_seen(bundle: Bundle, since: datetime | None, until: datetime | None, limit: int = 50) -> list[dict[str, Any]]:
    """Scheduler jobs with state changes in a time range: last state, first/last change, when it started
    running (the RUNNING transition, else a ``start`` attribute), its name."""
    rows = bundle.con.execute(
        "SELECT coalesce(job, json_extract_string(attrs, '$.job')) AS j, "
        "arg_max(upper(json_extract_string(attrs, '$.state')), ts), min(ts), max(ts), "
        "min(CASE WHEN upper(json_extract_string(attrs, '$.state')) = 'RUNNING' THEN ts END), "
        "max(json_extract_string(attrs, '$.start')), max(json_extract_string(attrs, '$.name')) "
        "FROM event WHERE kind = 'job_state' AND ts IS NOT NULL AND ts >= ? AND ts <= ? "
        "AND coalesce(job, json_extract_string(attrs, '$.job')) IS NOT NULL "
        "GROUP BY j ORDER BY min(ts), j LIMIT ?", [utc_naive(since), utc_naive(until), limit]).fetchall()
    return [{"job": j, "state": state, "first": first, "last": last, "running_at": running, "start_attr": started,
             "name": name} for j, state, first, last, running, started, name in rows]


def serving_identities(bundle: Bundle, since: datetime | None, until: datetime | None,
                       limit: int = 20) -> list[str]:
    """Models named by the serving metrics, then Kubernetes objects with warnings in the range."""
    models = [r[0] for r in bundle.con.execute(
        "SELECT DISTINCT coalesce(json_extract_string(labels, '$.model_name'), json_extract_string(labels, '$.model')) "
        "AS m FROM series WHERE m IS NOT NULL ORDER BY m LIMIT ?", [limit]).fetchall()]
    objects = [r[0] for r in bundle.con.execute(
        "SELECT DISTINCT json_extract_string(attrs, '$.object') AS o FROM event WHERE kind = 'k8s_event' "
        "AND severity IN ('warning', 'error', 'critical') AND ts >= ? AND ts <= ? AND o IS NOT NULL "
        "ORDER BY o LIMIT ?", [utc_naive(since), utc_naive(until), limit]).fetchall()]
    return models + objects


def last_checkpoint(bundle: Bundle, before: datetime) -> datetime | None:
    """When the newest complete checkpoint at or before ``before`` was written."""
    return bundle.con.execute("SELECT max(ts) FROM event WHERE kind = 'checkpoint_last_good' AND ts <= ?",
                              [utc_naive(before)]).fetchall()[0][0]


def job_gpu_count(bundle: Bundle, job: str | None) -> int:
    """GPUs a job held: its NCCL ranks from the topology, else the scheduler's GPU count, else the GPUs
    on record."""
    con = bundle.con
    ranks = con.execute("SELECT greatest(count(DISTINCT rank), coalesce(max(nranks), 0)) FROM topology "
                        "WHERE rank IS NOT NULL AND (? IS NULL OR job IS NULL OR job = ?)", [job, job]).fetchall()[0][0]
    if ranks:
        return int(ranks)
    alloc = con.execute("SELECT max(TRY_CAST(json_extract_string(attrs, '$.gpus') AS INTEGER)) FROM event "
                        "WHERE kind = 'job_state' AND (? IS NULL OR job = ?)", [job, job]).fetchall()[0][0]
    if alloc:
        return int(alloc)
    return int(con.execute("SELECT count(DISTINCT (host, gpu)) FROM gpu_inventory").fetchall()[0][0])


def count_reason(bundle: Bundle, kind: str, reason: str, since: datetime | None, until: datetime | None) -> int:
    """Events of ``kind`` whose ``reason`` attribute is ``reason`` (OOMKilled, Evicted, ...) in a range."""
    return bundle.con.execute(
        "SELECT count(*) FROM event WHERE kind = ? AND json_extract_string(attrs, '$.reason') = ? "
        "AND ts >= ? AND ts <= ?", [kind, reason, utc_naive(since), utc_naive(until)]).fetchall()[0][0]
