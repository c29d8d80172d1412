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
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb

JOB_OUTPUT = re.compile(r"slurm-(\d+(?:_\d+)?)\.(?:out|err)$")
"""Slurm's default output file name, ``slurm-JOBID.out`` (``slurm-JOBID_TASK.out`` for an array task):
every line in it is that job's, though the lines themselves never say so."""
START_MARGIN_S = 600.0
"""How far before the incident job's first record (its submission, on the scheduler's clock) a symptom
that names no job may lie and still be the incident's: clocks disagree by minutes, not hours."""
OTHER_JOB_FACTOR = 0.5
"""What a cause row from another job's records keeps of its strength: it may still be the same
fault (a bad GPU fails every job put on it), but it was seen in a failure that is not the incident."""


@dataclass
class IncidentFocus:
    """The incident's job ids and when their failure showed."""

    jobs: frozenset[str] = field(default_factory=frozenset)
    """Job ids of the incident's failure; empty when no symptom names a job (then nothing is focused)."""
    others: frozenset[str] = field(default_factory=frozenset)
    """Job ids whose failure ended more than a horizon before the incident's: history, not the incident."""
    start: datetime | None = None
    """The incident's first failure symptom with a job id."""
    artifact_jobs: dict[str, str] = field(default_factory=dict)
    """Artifact (sha256) -> the job whose output file it is."""
    began: datetime | None = None
    """The incident job's first record (submitted, started): a symptom naming no job before it
    (less START_MARGIN_S) belongs to an earlier job's run."""
    hosts: frozenset[str] = field(default_factory=frozenset)
    """The nodes the incident job ran on (its records' node lists)."""

    @classmethod
    def of(cls, symptom_rows: list[dict[str, Any]], horizon_s: float,
           artifact_jobs: dict[str, str] | None = None) -> IncidentFocus:
        """The latest failing job is the incident; a job whose symptoms last showed within the horizon
        before the incident's first is part of it (one fault that failed two jobs); older ones are not."""
        artifact_jobs = artifact_jobs or {}
        spans: dict[str, list[datetime]] = {}
        for row in symptom_rows:
            job = job_of(row, artifact_jobs)
            if job is not None and row.get("ts") is not None:
                span = spans.setdefault(job, [row["ts"], row["ts"]])
                span[0] = min(span[0], row["ts"])
                span[1] = max(span[1], row["ts"])
        if len(spans) < 2:
            return cls(jobs=frozenset(spans), artifact_jobs=artifact_jobs)
        order = sorted(spans, key=lambda j: spans[j][1], reverse=True)
        jobs = {order[0]}
        start = spans[order[0]][0]
        for job in order[1:]:
            if (start - spans[job][1]).total_seconds() <= horizon_s:
                jobs.add(job)
                start = min(start, spans[job][0])
            else:
                break  # sorted by end: every later one ended even earlier
        return cls(jobs=frozenset(jobs), others=frozenset(spans) - jobs, start=start,
                   artifact_jobs=artifact_jobs)

    def own(self, symptom_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The symptoms the incident's cause has to explain: all but other jobs' failures, and, where
        other jobs failed too, the job-less ones from before the incident job existed."""
        if not self.others:
            return symptom_rows
        floor = self.began - timedelta(seconds=START_MARGIN_S) if self.began is not None else None
        kept = []
        for row in symptom_rows:
            job = job_of(row, self.artifact_jobs)
            if job in self.others:
                continue
            if job is None and floor is not None and row.get("ts") is not None and row["ts"] < floor:
                continue
            kept.append(row)
        return kept

    def read_records(self, con: duckdb.DuckDBPyConnection) -> IncidentFocus:
        """When the incident job began and where it ran, from the scheduler's records of it."""
        if not self.jobs:
            return self
        jobs = sorted(self.jobs)
        marks = ", ".join("?" for _ in jobs)
        rows = con.execute(f"SELECT min(ts) FROM event WHERE job IN ({marks})", jobs).fetchall()
        self.began = rows[0][0] if rows else None
        hosts: set[str] = set()
        records = con.execute(
            f"SELECT DISTINCT host, CAST(attrs->'nodes' AS VARCHAR) FROM event WHERE job IN ({marks})", jobs)
        for host, nodes in records.fetchall():
            if host:
                hosts.add(host)
            if nodes:
                try:
                    names = json.loads(nodes)
                except ValueError:
                    names = None
                if isinstance(names, list):
                    hosts.update(str(n) for n in names)
        self.hosts = frozenset(hosts)
        return self

    def weigh(self, cause_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Cause rows from another job's records keep OTHER_JOB_FACTOR of their strength; changes
        keep all of it (a change is nobody's job and may lie dormant until the incident)."""
        if self.others:
            for row in cause_rows:
                if row.get("kind") != "change" and job_of(row, self.artifact_jobs) in self.others:
                    row["strength"] *= OTHER_JOB_FACTOR
        return cause_rows


def artifact_jobs(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Which artifacts are one job's output (``slurm-JOBID.out``), by their file name."""
    out: dict[str, str] = {}
    for sha, path in con.execute("SELECT sha256, source FROM artifact WHERE source IS NOT NULL").fetchall():
        m = JOB_OUTPUT.search(path)
        if m:
            out[sha] = m.group(1)
    return out


def job_of(row: dict[str, Any], artifact_jobs: dict[str, str] | None = None) -> str | None:
    """A row's job id: its ``job`` column, else a ``job`` key in its attrs (when the query kept them),
    else the job whose output file the row was read from."""
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
    if job in (None, "") and artifact_jobs:
        job = artifact_jobs.get(row.get("artifact") or "")
    return str(job) if job not in (None, "") else None
