"""``gpuwb`` as it stored raw bytes before the flat-memory layout, the baseline the perf benches print
beside today's numbers: 4 MiB chunks in DuckDB's default row groups (an artifact's whole transaction in
memory until commit), and a kernel log's events inserted in one statement.

    python -m tests.perf.old_chunk_layout ingest OUT.duckdb FILE
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from workbench.store import artifacts, chunks, connection, row_writer


def _plain_connect(path: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(path))


def use_old_layout() -> None:
    """Patch this process's bundle store (workbench/store/) back to the former storage settings."""
    chunks.CHUNK_BYTES = chunks.MAX_CHUNK_BYTES = artifacts.STORE_BATCH_BYTES = 4 << 20
    row_writer.RowWriter.LIST_SLICE = row_writer.RowWriter.BATCH = 50_000
    connection._connect_writable = _plain_connect


def main(argv: list[str]) -> int:
    from workbench.cli import main as cli

    use_old_layout()
    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
