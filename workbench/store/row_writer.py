"""Writing parsed rows into a bundle: buffered per table, inserted as DuckDB list parameters in slices, so that
what an ingest holds stays bounded whatever the input."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from collectors.base import Row, Skipped
from workbench.store.row_columns import TABLE_OF, Columns, columns_of

if TYPE_CHECKING:
    from workbench.store.bundle import Bundle


class RowWriter:
    """Buffers parsed rows per table and appends them as DuckDB list parameters (bounded memory).

    One writer can serve many artifacts (``start`` names the current one): a folder of 512 small
    rank logs then costs a few batched inserts instead of three per file. No Arrow here: pyarrow's
    first ``pa.array`` imports pandas (~90 MB of RSS, ~0.5 s), and list parameters in slices insert
    a 200 MB metrics CSV (5 million points) as fast as Arrow batches did, at 371 MB peak RSS instead of 1,360."""

    BATCH = 10_000
    """Rows buffered before they go in, so what the writer holds does not grow with the input."""
    LIST_SLICE = 4096
    """List parameters go in this many rows per statement: DuckDB converts each parameter value to its own
    object first, ~3 KB a row, so 35,000 kernel events in one statement cost 100 MB of RSS at once. (numpy
    object arrays registered as a table insert ~9x faster, but DuckDB keeps every Python string of the open
    transaction alive: a 50 MB metrics CSV peaked at 428 MB instead of 179.)"""

    def __init__(self, bundle: Bundle, artifact_sha: str | None) -> None:
        self.bundle = bundle
        self.pending: dict[str, list[_Segment]] = {}
        """per table, in order: runs of rows added one by one, and columns prepared by the parse worker"""
        self._buffered = 0
        self.start(artifact_sha)

    def start(self, artifact_sha: str | None) -> None:
        """Rows added from now on come from this artifact; the per-artifact counts restart."""
        self.artifact = artifact_sha
        self.counts: dict[str, int] = {}
        self.skipped = 0
        self.skip_reasons: dict[str, int] = {}

    def add(self, row: Row) -> None:
        if isinstance(row, Skipped):
            self.skip(row.reason)
            return
        table = TABLE_OF[type(row)]
        segments = self.pending.setdefault(table, [])
        if not segments or segments[-1][0] is not None:
            segments.append((None, [], []))
        segments[-1][1].append(row)
        segments[-1][2].append(self.artifact)
        self._count(table, 1)

    def add_all(self, rows: Iterable[Row]) -> None:
        for row in rows:
            self.add(row)

    def add_prepared(self, tables: list[tuple[str, Columns, int]], skips: list[str]) -> None:
        """Rows already in columns (workbench/store/row_columns.py ``prepared``), as if added one by one."""
        for reason in skips:
            self.skip(reason)
        for table, columns, count in tables:
            self.pending.setdefault(table, []).append((columns, [], [self.artifact] * count))
            self._count(table, count)

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.skip_reasons[reason] = self.skip_reasons.get(reason, 0) + 1

    def _count(self, table: str, count: int) -> None:
        self.counts[table] = self.counts.get(table, 0) + count
        self._buffered += count
        if self._buffered >= self.BATCH:
            self.flush()

    def discard(self) -> None:
        """Forget the rows not written yet (their group is being rolled back)."""
        self.pending = {}
        self._buffered = 0

    def flush(self) -> None:
        for table, segments in self.pending.items():
            columns: Columns = {}
            artifacts: list[str | None] = []
            for prepared_columns, rows, shas in segments:
                for name, values in (prepared_columns or columns_of(rows)).items():
                    columns.setdefault(name, []).extend(values)
                artifacts += shas
            if artifacts:
                self._insert(table, columns, artifacts)
        self.pending = {}
        self._buffered = 0

    def _insert(self, table: str, columns: Columns, artifacts: list[str | None]) -> None:
        if table == "event":
            first = self.bundle.next_event_id(len(artifacts))
            columns["id"] = list(range(first, first + len(artifacts)))
        columns["artifact"] = artifacts
        cols = ", ".join(f'"{c}"' for c in columns)
        unnested = ", ".join(f'unnest(?) AS "{c}"' for c in columns)
        for at in range(0, len(artifacts), self.LIST_SLICE):
            self.bundle.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM (SELECT {unnested})",
                                    [values[at:at + self.LIST_SLICE] for values in columns.values()])


_Segment = tuple["Columns | None", list[Row], list["str | None"]]
