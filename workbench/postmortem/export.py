"""The bundle's normalized tables as Parquet, partitioned by table and host, for fleet-wide questions.

Layout: ``DIR/<table>/host=<host>/<incident>_<uuid>.parquet`` (hive style, so DuckDB, Spark and
Trino read the host as a column); tables without a host column go to ``DIR/<table>/``. Every row
carries ``incident_id``, so many incidents can be exported into one folder and queried together;
exporting the same incident again replaces its files and leaves the other incidents' alone.
Raw artifact bytes stay in the bundle: the export carries their metadata and hashes only.
DuckDB's own COPY writes the files, so nothing is materialized in Python.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb

from workbench.store.bundle import Bundle
from workbench.store.schema import EVIDENCE_TABLES

PARTITIONED = (*EVIDENCE_TABLES, "artifact", "capture_log")
"""Tables with a ``host`` column, written one folder per host."""

UNPARTITIONED = ("journal", "seal")

_INCIDENT_SAFE = re.compile(r"[^A-Za-z0-9.-]+")
"""No underscore: it separates the incident from the file's uuid, so one incident's glob never
matches another's files."""


@dataclass
class TableExport:
    """What one table's export wrote."""

    table: str
    rows: int
    files: int
    partitioned: bool


def incident_key(bundle: Bundle) -> str:
    """The incident id in a form safe for file names (it prefixes every file of this incident)."""
    raw = bundle.meta().get("incident_id") or bundle.path.stem
    return _INCIDENT_SAFE.sub("-", raw).strip(".-") or "incident"


def export_parquet(bundle: Bundle, out_dir: str | Path) -> list[TableExport]:
    """Write every normalized table of ``bundle`` under ``out_dir``; returns per-table row counts."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    incident = incident_key(bundle)
    results: list[TableExport] = []
    for table in (*PARTITIONED, *UNPARTITIONED, "incident"):
        target = out / table
        for old in target.rglob(f"{incident}_*.parquet") if target.exists() else ():
            old.unlink()
        rows = _count(bundle, table)
        if rows == 0:
            results.append(TableExport(table, 0, 0, table in PARTITIONED))
            continue
        target.mkdir(parents=True, exist_ok=True)
        select = _select(table)
        if table in PARTITIONED:
            dest = target
            options = f"FORMAT parquet, PARTITION_BY (host), FILENAME_PATTERN '{incident}_{{uuid}}', APPEND"
        else:
            dest, options = target / f"{incident}_{uuid.uuid4()}.parquet", "FORMAT parquet"
        # COPY takes no bound parameters; the incident id was reduced to a safe alphabet above and
        # the path is quoted, so neither can break out of the statement.
        path = str(dest).replace("'", "''")
        bundle.con.execute(f"COPY ({select.format(incident=incident)}) TO '{path}' ({options})")
        files = len(list(target.rglob(f"{incident}_*.parquet")))
        results.append(TableExport(table, rows, files, table in PARTITIONED))
    return results


def _count(bundle: Bundle, table: str) -> int:
    source = "meta" if table == "incident" else table
    return bundle.con.execute(f"SELECT count(*) FROM {source}").fetchall()[0][0]


def _select(table: str) -> str:
    if table == "incident":
        return "SELECT '{incident}' AS incident_id, key, value FROM meta ORDER BY key"
    return "SELECT '{incident}' AS incident_id, * FROM " + table


def read_back_counts(out_dir: str | Path, incident: str | None = None) -> dict[str, int]:
    """Rows per table as DuckDB reads the Parquet folder back (optionally one incident's only)."""
    out = Path(out_dir)
    counts: dict[str, int] = {}
    con = duckdb.connect()
    try:
        for table in (*PARTITIONED, *UNPARTITIONED, "incident"):
            files = sorted((out / table).rglob("*.parquet")) if (out / table).exists() else []
            if not files:
                counts[table] = 0
                continue
            pattern = str(out / table / ("**/*.parquet" if table in PARTITIONED else "*.parquet"))
            sql = "SELECT count(*) FROM read_parquet(?, hive_partitioning = true)"
            params: list[str] = [pattern]
            if incident is not None:
                sql += " WHERE incident_id = ?"
                params.append(incident)
            counts[table] = con.execute(sql, params).fetchall()[0][0]
    finally:
        con.close()
    return counts
