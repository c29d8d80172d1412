"""Rows turned into stored columns (what the parse worker sends) equal a row-by-row reading."""

from __future__ import annotations

import dataclasses
import json
import random
from datetime import datetime, timedelta, timezone

from collectors.base import Event, HostFact, SeriesPoint, Skipped
from workbench.store.row_columns import columns_of, prepared, utc_naive


def _plain(rows):
    out = {}
    for field in dataclasses.fields(rows[0]):
        values = [getattr(r, field.name) for r in rows]
        if field.name in ("attrs", "extra", "labels"):
            values = [json.dumps(v, default=str) if v is not None else None for v in values]
        elif field.name == "ts":
            values = [utc_naive(v) for v in values]
        out[field.name] = values
    return out


def test_columns_equal_the_row_by_row_reading():
    rng = random.Random(7)
    start = datetime(2025, 3, 10, 14, tzinfo=timezone(timedelta(hours=2)))
    shared = start + timedelta(seconds=5)
    labels = [{"model": "llama"}, {"gpu": "0", "host": "n1"}, {"le": 0.5}, {"nested": {"a": [1, 2]}}, None,
              {"when": start}]
    points = [SeriesPoint(ts=shared if i % 3 else start + timedelta(seconds=i), name="vllm:num_requests_running",
                          value=rng.random(), host=rng.choice(["n1", None]), labels=rng.choice(labels))
              for i in range(500)]
    events = [Event(ts=rng.choice([None, shared, start.replace(tzinfo=None)]), kind="xid", host="n1",
                    attrs=rng.choice(labels) or {}, message=f"m{i}") for i in range(200)]
    for rows in (points, events):
        assert columns_of(rows) == _plain(rows)
        assert json.dumps(columns_of(rows), default=str) == json.dumps(_plain(rows), default=str)  # key order


def test_prepared_keeps_the_order_within_each_table_and_the_skips():
    rows = [HostFact("kernel", "6.8"), Skipped(3, "bad line"), Event(ts=None, kind="xid", message="a"),
            HostFact("date", "x"), Skipped(9, "bad line"), Event(ts=None, kind="aer", message="b")]
    tables, skips = prepared(rows)
    assert [(t, n) for t, _, n in tables] == [("host_inventory", 2), ("event", 2)]
    assert tables[1][1]["kind"] == ["xid", "aer"] and tables[0][1]["key"] == ["kernel", "date"]
    assert skips == ["bad line", "bad line"]
