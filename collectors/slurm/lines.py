"""What the Slurm text reader carries from line to line: the table or record it is in, the time printed
above a snapshot, and the undated events that wait for the next dated line of the same file."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from collectors.base import Event, ParseContext, Row

MAX_PENDING = 10_000


class LineState:
    """The state every part of the Slurm text reader works on (records, tables, daemon logs)."""

    def __init__(self, kind: str, ctx: ParseContext) -> None:
        self.kind = kind
        self.ctx = ctx
        self.table: dict[str, Any] | None = None
        self.record: list[tuple[int, str]] = []
        self.snapshot: datetime | None = None
        self.last_ts: datetime | None = None
        self.pending: list[Event] = []
        self.pending_reason: Event | None = None
        self.current_job: str | None = None
        self.seff_job: str | None = None
        self.ended: set[str] = set()
        self.job_nodes: dict[str, str] = {}

    # -- undated events wait for the next dated line of the same file
    def _dated(self, rows: list[Row]) -> Iterator[Row]:
        dated = next((r.ts for r in rows if isinstance(r, Event) and r.ts is not None and not r.ts_approx), None)
        if dated is not None:
            yield from self._release(dated)
            self.last_ts = dated
        for row in rows:
            if isinstance(row, Event) and row.ts is None:
                self.pending.append(row)
                if len(self.pending) >= MAX_PENDING:
                    yield from self._release(None, final=True)
            else:
                yield row

    def _release(self, when: datetime | None, final: bool = False) -> Iterator[Row]:
        anchor, origin = when, "neighbour"
        if anchor is None and final:
            anchor, origin = (self.last_ts, "neighbour") if self.last_ts else (self.ctx.mtime, "mtime")
        for event in self.pending:
            if anchor is not None:
                event.ts, event.ts_origin, event.ts_approx = anchor, origin, True
            yield event
        self.pending = []

    # -- the moment a snapshot was taken
    def _snapshot(self) -> datetime | None:
        return self.snapshot or self.ctx.mtime

    def _snapshot_origin(self) -> str:
        return "neighbour" if self.snapshot else "mtime"
