"""``gpuwb`` as it stored raw bytes before the flat-memory layout, the baseline the perf benches print
beside today's numbers: 4 MiB chunks in DuckDB's default row groups (an artifact's whole transaction in
memory until commit), and a kernel log's events inserted in one statement.

    python -m tests.perf.old_chunk_layout ingest OUT.duckdb FILE
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from workbench.store import bundle


def _plain_connect(path: Path) -> duckdb.DuckDBPyConnection:
    return duckdb.connect(str(path))


def use_old_layout() -> None:
    """Patch this process's workbench.store.bundle back to the former storage settings."""
    bundle.CHUNK_BYTES = bundle.MAX_CHUNK_BYTES = bundle.STORE_BATCH_BYTES = 4 << 20
    bundle.RowWriter.LIST_SLICE = bundle.RowWriter.BATCH = 50_000
    bundle._connect_writable = _plain_connect


def main(argv: list[str]) -> int:
    from workbench.cli import main as cli

    use_old_layout()
    return cli(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
