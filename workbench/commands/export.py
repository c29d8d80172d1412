"""Write the bundle's normalized tables as Parquet, partitioned by table and host.

Many incidents can be exported into one folder (each file is prefixed with its incident id), so
fleet-wide questions run on DuckDB, Spark or Trino: for example
``SELECT host, count(*) FROM read_parquet('DIR/event/**/*.parquet', hive_partitioning=true)
WHERE kind = 'xid' GROUP BY host``."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.errors import UsageError
from workbench.table import format_table

NAME = "export"
HELP = "export the normalized tables as Parquet (partitioned by table/host)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", metavar="BUNDLE")
    parser.add_argument("--parquet", metavar="DIR", required=True, help="folder to write (created if missing)")


def run(args: argparse.Namespace) -> int:
    from workbench.postmortem.export import export_parquet, incident_key, read_back_counts
    from workbench.store.bundle import Bundle

    target = Path(args.parquet)
    if target.exists() and not target.is_dir():
        raise UsageError(f"--parquet {target} is a file; the export writes a folder of Parquet files")
    with Bundle.open(args.bundle) as bundle:
        incident = incident_key(bundle)
        written = export_parquet(bundle, args.parquet)
    back = read_back_counts(args.parquet, incident)
    print(format_table(["table", "rows", "files", "read back", "partitioned by"],
                       [(w.table, w.rows, w.files, back.get(w.table, 0), "host" if w.partitioned else "-")
                        for w in written]))
    mismatched = [w.table for w in written if back.get(w.table, 0) != w.rows]
    if mismatched:
        print(f"MISMATCH: rows read back differ for {', '.join(mismatched)}")
        return 1
    print(f"incident {incident}: {sum(w.rows for w in written)} rows in {sum(w.files for w in written)} files "
          f"under {args.parquet}")
    return 0
