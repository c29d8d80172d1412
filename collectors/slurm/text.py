"""The one reader of every Slurm text output, in any mix: each line goes to the record, table or log
reader it belongs to; a line quoted as a JSON string (Ansible) is read as its text."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import BinaryIO

from collectors.base import Row, Skipped
from collectors.framework.json_items import no_lone_surrogates
from collectors.framework.lazy_re import lazy_regex
from collectors.slurm.daemon_logs import LogLines, sets_node_state
from collectors.slurm.records import RecordLines, kv_start, opens_record
from collectors.slurm.tables import TableLines, header_columns

_DATE_LINE = lazy_regex(r"^(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d:\d\d:\d\d)\s+(?:[A-Z]{2,5}\s+)?"
                        r"(\d{4})$")
_ANSIBLE = lazy_regex(r'^\s*"((?:[^"\\]|\\.)*)",?\s*$')
_PROMPT = lazy_regex(r"^\s*(?:\[[^\]]*\]|\S+@\S+:?\S*)\s*[$#]\s*(?P<cmd>\S+)|"
                     r"^\s*~?[$#]\s*(?:sacct|squeue|sinfo|scontrol|sacctmgr|seff|sstat|sreport)\b")
"""A shell prompt before a pasted command, ``[user@host ~]$ sacct``, or a bare ``$ sacct -j 42``."""


class TextParser(RecordLines, TableLines, LogLines):
    """Any mix of Slurm text outputs, line by line, with just enough state to read tables and records."""

    # -- driver
    def run(self, stream: BinaryIO) -> Iterator[Row]:
        for n, raw in self.ctx.lines(stream):
            line = unwrap(raw).rstrip()
            try:
                yield from self._line(n, line)
            except (ValueError, OverflowError, IndexError) as exc:
                yield Skipped(n, f"unreadable Slurm line: {type(exc).__name__}")
        yield from self._flush_record()
        yield from self._flush_reason()
        yield from self._release(None, final=True)

    def _line(self, n: int, line: str) -> Iterator[Row]:
        stripped = line.strip()
        if not stripped or stripped == "---":
            self.table = None
            if not (self.record and not stripped):
                # a record stays open over a blank line: scontrol 24.05 prints one before a node's Reason=
                yield from self._flush_record()
            return
        if self.record and (line[:1].isspace() and kv_start(line)):
            self.record.append((n, stripped))
            return
        if self.record:
            yield from self._flush_record()
        if self.pending_reason is not None and not sets_node_state(stripped):
            yield from self._flush_reason()
        if _PROMPT.match(line) and not kv_start(stripped):
            self.table = None
            return
        date = _DATE_LINE.match(stripped)
        if date:
            self.table = None
            self.snapshot = _date_line(date)
            return
        if self.table is not None:
            if re.fullmatch(r"[-\s|]+", stripped):
                self.table["slices"] = [(m.start(), m.end()) for m in re.finditer(r"-+", line)]
                return
            rows = self._table_row(n, line)
            if rows is not None:
                yield from self._dated(rows)
                return
            self.table = None
        header = None if stripped[:1] == "[" else header_columns(stripped)
        if header:
            self.table = {"cols": header[0], "delim": header[1], "slack": header[2], "slices": None}
            return
        if opens_record(stripped):
            self.record = [(n, stripped)]
            return
        rows = self._free_line(n, stripped)
        if rows is None:
            rows = self._headerless_row(n, stripped)
        if rows is None:
            yield Skipped(n, "not a Slurm line")
            return
        yield from self._dated(rows)


def unwrap(line: str) -> str:
    """A line quoted as a JSON string (Ansible's stdout_lines) back to its text."""
    m = _ANSIBLE.match(line)
    if not m:
        return line
    try:
        return json.loads(no_lone_surrogates(f'"{m.group(1)}"'))
    except ValueError:
        return m.group(1)


def _date_line(m: re.Match[str]) -> datetime | None:
    mon, day, clock, year = m.groups()
    try:
        return datetime.strptime(f"{year} {mon} {day} {clock}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None
