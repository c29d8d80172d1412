"""The series table as columns: its vocabulary rows fetched as Arrow (host, name and labels
dictionary-encoded, so each distinct label set is parsed once), grouped by sorting (one stable sort and a
reduce per run of equal keys, rows summed in table order) into one aggregated series per key."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


_EPOCH = datetime(1970, 1, 1)
_BATCH_ROWS = 1 << 18


def load_rows(con: Any, metrics: Iterable[str] | None = None) -> Iterator[tuple[datetime, str | None, str,
                                                                                dict[str, str], float]]:
    """Series rows that carry a vocabulary name, oldest first, fetched in batches."""
    sql = ("SELECT ts, host, name, labels, value FROM series "
           "WHERE json_extract_string(labels, '$.metric') IS NOT NULL AND ts IS NOT NULL")
    params: list[Any] = []
    wanted = sorted(set(metrics or ()))
    if wanted:
        sql += f" AND json_extract_string(labels, '$.metric') IN ({', '.join('?' for _ in wanted)})"
        params = wanted
    cur = con.execute(sql + " ORDER BY ts", params)
    while True:
        batch = cur.fetchmany(50_000)
        if not batch:
            return
        for ts, host, name, labels, value in batch:
            yield ts, host, name, json.loads(labels) if labels else {}, value


@dataclass
class Table:
    """The vocabulary rows of the series table, oldest first; host, name and label set as integer
    codes (-1: none) into their distinct values."""

    ts: np.ndarray
    value: np.ndarray
    codes: dict[str, np.ndarray]
    values: dict[str, list[Any]]


def load_table(con: Any, metrics: Iterable[str] | None) -> Table:
    """One query, streamed as Arrow batches; host, name and labels arrive as integer codes into
    their distinct values (each batch dictionary-encoded), so no Python object is made per row and
    each distinct label set is parsed once."""
    import numpy as np
    import pyarrow.compute as pc

    sql = ("SELECT epoch_us(ts) AS ts, value, host, name, labels FROM series "
           "WHERE json_extract_string(labels, '$.metric') IS NOT NULL AND ts IS NOT NULL "
           "AND value IS NOT NULL AND NOT isnan(value)")
    wanted = sorted(set(metrics or ()))
    if wanted:
        sql += f" AND json_extract_string(labels, '$.metric') IN ({', '.join('?' for _ in wanted)})"
    columns = ("host", "name", "labels")
    ids: dict[str, dict[Any, int]] = {name: {} for name in columns}
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ("ts", "value", *columns)}
    for batch in con.sql(sql, params=wanted or None).to_arrow_reader(_BATCH_ROWS):
        parts["ts"].append(batch.column("ts").to_numpy().astype(np.int64))
        parts["value"].append(batch.column("value").to_numpy().astype(float))
        for name in columns:
            encoded = pc.dictionary_encode(batch.column(name))
            known = ids[name]
            to_global = np.array([known.setdefault(v, len(known)) for v in encoded.dictionary.to_pylist()] + [-1],
                                 dtype=np.int32)
            local = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
            parts[name].append(to_global[local])
    if not parts["ts"]:
        return Table(np.zeros(0, dtype=np.int64), np.zeros(0), {name: np.zeros(0, dtype=np.int32) for name in columns},
                      {name: [] for name in columns})
    values = {name: list(ids[name]) for name in columns}
    values["labels"] = [json.loads(text) if text else {} for text in values["labels"]]
    return Table(np.concatenate(parts["ts"]), np.concatenate(parts["value"]),
                  {name: np.concatenate(parts[name]) for name in columns}, values)


def _dense(keys: list[np.ndarray]) -> np.ndarray:
    """One id per distinct tuple of integer keys (in no particular order)."""
    import numpy as np

    combined = np.zeros(len(keys[0]), dtype=np.int64)
    span = 1
    for key in keys:
        key = np.asarray(key, dtype=np.int64)
        low, width = (int(key.min()), int(key.max() - key.min()) + 1) if len(key) else (0, 1)
        if span * width >= 2 ** 62:  # keep the combined number in range: renumber what we have first
            combined = np.unique(combined, return_inverse=True)[1].astype(np.int64)
            span = int(combined.max()) + 1 if len(combined) else 1
        combined = combined * width + (key - low)
        span *= width
    return np.unique(combined, return_inverse=True)[1].astype(np.int64)


def factorize(keys: list[np.ndarray], when: np.ndarray) -> np.ndarray:
    """One id per distinct key tuple, numbered in the order the keys first appear in time (``when``:
    each row's time index; ties: the earlier row)."""
    import numpy as np

    ids = _dense(keys)
    count = int(ids.max()) + 1 if len(ids) else 0
    first_time = np.full(count, np.iinfo(np.int64).max)
    np.minimum.at(first_time, ids, when)
    first_row = np.full(count, len(ids), dtype=np.int64)
    np.minimum.at(first_row, ids, np.arange(len(ids), dtype=np.int64))
    rank = np.empty(count, dtype=np.int64)
    rank[np.lexsort((first_row, first_time))] = np.arange(count)
    return rank[ids]


@dataclass
class SeriesValues:
    """Values aggregated per (series, time), sorted by series then time, with each series' key."""

    sid: np.ndarray
    ts: np.ndarray
    value: np.ndarray
    keys: list[tuple[Any, ...]]

    def bounds(self) -> np.ndarray:
        import numpy as np

        return np.searchsorted(self.sid, np.arange(len(self.keys) + 1))


def group_runs(key: np.ndarray, value: np.ndarray, how: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group rows by an integer key: (distinct keys ascending, the sum or max of each one's values in
    row order, one row of each). A stable sort and a reduce over each run: no hash table, no Python loop."""
    import numpy as np

    order = np.argsort(key, kind="stable")
    ordered = key[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(key) else np.zeros(0, int)
    reduce = np.add if how == "sum" else np.maximum
    return ordered[starts], reduce.reduceat(value[order], starts) if len(key) else value[:0], order[starts]


def aggregate(keys: list[np.ndarray], when: np.ndarray, value: np.ndarray, how: str, times: Times) -> SeriesValues:
    """Sum (or max) the values of rows with the same key and time: the samples of the label sets a
    curve does not tell apart (engines, versions, reasons)."""
    import numpy as np

    if len(when) == 0:
        return SeriesValues(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), value, [])
    sid = factorize(keys, when)
    width = len(times.stamps)
    key, agg, rows = group_runs(sid * width + when, value, how)
    representative = np.empty(int(sid.max()) + 1, dtype=np.int64)
    representative[sid[rows]] = rows
    return SeriesValues(key // width, times.stamps[key % width], agg,
                   [tuple(k[r] for k in keys) for r in representative.tolist()])


class Times:
    """The distinct times of the rows (``index``: each row's), and back to the naive datetimes DuckDB
    returns, each distinct stamp built once."""

    def __init__(self, ts_us: np.ndarray) -> None:
        import numpy as np

        self.stamps, self.index = np.unique(ts_us, return_inverse=True)
        self.objects = np.empty(len(self.stamps), dtype=object)
        self.objects[:] = [_EPOCH + timedelta(microseconds=int(us)) for us in self.stamps.tolist()]

    def points(self, ts_us: np.ndarray, values: np.ndarray) -> list[tuple[datetime, float]]:
        import numpy as np

        return list(zip(self.objects[np.searchsorted(self.stamps, ts_us)].tolist(), values.tolist()))
