"""The one reader of every Kubernetes text output, in any order: each line goes to the table, describe or
agent-log reader it belongs to."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import Row, Skipped
from collectors.k8s.agent_logs import AgentLines
from collectors.k8s.describe import DescribeLines
from collectors.k8s.tables import TableLines, table_columns


class TextParser(TableLines, DescribeLines, AgentLines):
    """kubectl tables, describe text and node-agent logs, in any order, line by line."""

    def run(self, stream: BinaryIO) -> Iterator[Row]:
        for n, raw in self.ctx.lines(stream):
            try:
                yield from self._line(n, raw)
            except (ValueError, OverflowError, IndexError, KeyError) as exc:
                yield Skipped(n, f"unreadable Kubernetes line: {type(exc).__name__}")
        yield from self._flush_container()

    # -- dispatch
    def _line(self, n: int, line: str) -> Iterator[Row]:
        if not line.strip():
            self.table = None
            self.candidate = None
            yield from self._flush_container()
            return
        if self.table is not None:
            if re.fullmatch(r"[-\s]+", line):
                if self.table["starts"][0] >= 0:
                    self.table["starts"] = [m.start() for m in re.finditer(r"-+", line)]
                return  # a tab-separated table's ruler only underlines it
            row = None
            if self.table["starts"] and self.table["starts"][0] < 0 and "\t" in line:
                row = self._tab_row(line)
            elif self.table["starts"] and len(line) > self.table["starts"][-1]:
                row = self._slice(line)
            rows = self._table_row(n, row) if row is not None else None
            if rows is not None:
                yield from rows
                return
            self.table = None
        cols = table_columns(line.strip()) if not line.startswith("  " * 3) else []
        if cols:
            yield from self._flush_container()
            offset = len(line) - len(line.lstrip())
            self.table = {"cols": [c for c, _ in cols], "starts": [p + offset if p >= 0 else -1 for _, p in cols],
                          "n": n}
            return
        log = self._log_line(n, line)
        if log is not None:
            yield from log
            return
        describe = self._describe_line(n, line)
        if describe is not None:
            yield from describe
            return
        yield Skipped(n, "not a Kubernetes line")
