"""Parsed rows as the columns the bundle stores them in: JSON fields as text, times as naive UTC.

The parse worker (workbench/parse_worker.py) sends its rows in this form, so the ingest process
unpickles plain strings, numbers and times instead of one object per row (~8x cheaper for 100,000
series points) and writes them without touching each row again. No duckdb here: the worker never
imports it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from collectors.base import Event, GpuInventory, GpuSample, HostFact, Row, SeriesPoint, Skipped, Topology, to_utc

TABLE_OF = {Event: "event", GpuSample: "gpu_sample", GpuInventory: "gpu_inventory", Topology: "topology",
            SeriesPoint: "series", HostFact: "host_inventory"}
JSON_FIELDS = {"attrs", "extra", "labels"}

Columns = dict[str, list[Any]]


def utc_naive(value: datetime | None) -> datetime | None:
    """Bundles store naive timestamps that are UTC by convention."""
    if value is None:
        return None
    return to_utc(value).replace(tzinfo=None)


def columns_of(rows: list[Row]) -> Columns:
    """Rows of one type as stored columns, in the type's field order."""
    columns: Columns = {}
    for field in dataclasses.fields(rows[0]):
        name = field.name
        values = [getattr(r, name) for r in rows]
        if name in JSON_FIELDS:
            values = [json.dumps(v, default=str) if v is not None else None for v in values]
        elif name == "ts":
            values = [utc_naive(v) for v in values]
        columns[name] = values
    return columns


def prepared(rows: Iterable[Row]) -> tuple[list[tuple[str, Columns, int]], list[str]]:
    """A run of rows as (table, columns, count) per table, tables in the order they first appear and
    rows in their order within each table, plus the reasons of the skipped lines in order."""
    by_table: dict[str, list[Row]] = {}
    skips: list[str] = []
    for row in rows:
        if isinstance(row, Skipped):
            skips.append(row.reason)
        else:
            by_table.setdefault(TABLE_OF[type(row)], []).append(row)
    return [(table, columns_of(group), len(group)) for table, group in by_table.items()], skips
