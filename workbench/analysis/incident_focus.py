"""What the incident is: the failing job(s) the bundle was collected for, told from other jobs that
failed hours before on the same cluster.

A responder handed a bundle for job 97059 reads sacct and slurmctld for the whole day: job 97042 of
another user died of an Xid 13 four hours earlier on another node. That failure is on record, but it
is not the incident; counted as a symptom it drags the incident's start back to 07:59 and makes the
old Xid 13 "explain" a failure that happened long after it. So the symptoms a cause has to explain
are the incident's own: rows of the failing job(s) whose failures lie together (within the
playbook's horizon of the latest one), plus every row that names no job (NCCL timeouts in rank
logs, serving metrics), which the engine already relates by place and time.

Only symptom rows are focused here: cause evidence is never dropped (an old change can still be the
root); evidence long before the incident's own symptoms is weighed down by the engine's timing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass
class IncidentFocus:
    """The incident's job ids and when their failure showed."""

    jobs: frozenset[str] = field(default_factory=frozenset)
    """Job ids of the incident's failure; empty when no symptom names a job (then nothing is focused)."""
    others: frozenset[str] = field(default_factory=frozenset)
    """Job ids whose failure ended more than a horizon before the incident's: history, not the incident."""
    start: datetime | None = None
    """The incident's first failure symptom with a job id."""

    @classmethod
    def of(cls, symptom_rows: list[dict[str, Any]], horizon_s: float) -> IncidentFocus:
        """The latest failing job is the incident; a job whose symptoms last showed within the horizon
        before the incident's first is part of it (one fault that failed two jobs); older ones are not."""
        spans: dict[str, list[datetime]] = {}
        for row in symptom_rows:
            job = job_of(row)
            if job is not None and row.get("ts") is not None:
                span = spans.setdefault(job, [row["ts"], row["ts"]])
                span[0] = min(span[0], row["ts"])
                span[1] = max(span[1], row["ts"])
        if len(spans) < 2:
            return cls(jobs=frozenset(spans))
        order = sorted(spans, key=lambda j: spans[j][1], reverse=True)
        jobs = {order[0]}
        start = spans[order[0]][0]
        for job in order[1:]:
            if (start - spans[job][1]).total_seconds() <= horizon_s:
                jobs.add(job)
                start = min(start, spans[job][0])
            else:
                break  # sorted by end: every later one ended even earlier
        return cls(jobs=frozenset(jobs), others=frozenset(spans) - jobs, start=start)

    def own(self, symptom_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The symptoms the incident's cause has to explain: all but other jobs' failures."""
        if not self.others:
            return symptom_rows
        return [row for row in symptom_rows if job_of(row) not in self.others]


def job_of(row: dict[str, Any]) -> str | None:
    """A row's job id: its ``job`` column, else a ``job`` key in its attrs (when the query kept them)."""
    job = row.get("job")
    if job is None:
        attrs = row.get("attrs")
        if isinstance(attrs, str):
            try:
                attrs = json.loads(attrs)
            except ValueError:
                attrs = None
        if isinstance(attrs, dict):
            job = attrs.get("job")
    return str(job) if job not in (None, "") else None
