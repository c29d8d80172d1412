"""What the Kubernetes text reader carries from line to line: the table, pod, section and container it is in,
and the time a table's ages are counted back from."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from collectors.base import ParseContext


class LineState:
    """The state every part of the Kubernetes text reader works on (tables, describe, agent logs)."""

    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.table: dict[str, Any] | None = None
        self.pod: dict[str, Any] = {}
        self.section: str | None = None
        self.container: dict[str, Any] | None = None
        self.candidate: str | None = None
        self.block: str | None = None
        self.resources: tuple[str, int] | None = None
        self.last_ts: datetime | None = None
        self.base = 0

    def _anchor(self) -> tuple[datetime | None, str]:
        if self.ctx.mtime is not None:
            return self.ctx.mtime, "mtime"
        if self.last_ts is not None:
            return self.last_ts, "neighbour"
        ref = self.ctx.reference_for(self.ctx.host)
        return ref, "neighbour"
