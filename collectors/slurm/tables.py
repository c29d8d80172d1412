"""The whitespace and ``|`` tables: ``sinfo`` (``-R`` too), ``squeue``, ``sacct`` (``-P``, with or without a
header) and ``sacctmgr show event``; a header names the columns, a dashed rule fixes their widths."""

from __future__ import annotations

import re
from datetime import timedelta

from collectors.base import Row
from collectors.framework.hostlist import expand_hostlist
from collectors.framework.lazy_re import lazy_regex
from collectors.slurm.events import job_events, node_event
from collectors.slurm.lines import LineState
from collectors.slurm.live_capture import SACCT_FIELDS
from collectors.slurm.states import clean, job_state, parse_duration, parse_time

_SINFO_R_ROW = lazy_regex(r"^(?P<reason>\S.*?)\s+(?P<user>[a-z_][\w.-]*(?:\(\d+\))?)\s+"
                          r"(?P<timestamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\s+(?P<nodelist>[\w.\[\],-]+)$")
"""A ``sinfo -R`` row (REASON USER TIMESTAMP NODELIST) whose header was not pasted with it."""

_HEADER_WORDS = {
    "PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST", "REASON", "USER", "TIMESTAMP", "CPUS", "S:C:T",
    "MEMORY", "TMP_DISK", "WEIGHT", "FEATURES", "GRES", "NODES(A/I/O/T)", "CPUS(A/I/O/T)", "AVAIL_FE",
    "ACTIVE_FEATURES", "CPU_LOAD", "FREE_MEM", "HOSTNAMES", "NODE_ADDR", "JOBID", "NAME", "ST", "TIME", "TIME_LIMI",
    "TIME_LIMIT", "NODELIST(REASON)", "PRIORITY", "START_TIME", "SUBMIT_TIME", "ACCOUNT", "MIN_MEMORY", "QOS",
    "JOBNAME", "ALLOCCPUS", "EXITCODE", "DERIVEDEXITCODE", "ELAPSED", "SUBMIT", "START", "END", "NODENAME",
    "TIMESTART", "TIMEEND", "CLUSTER", "JOBIDRAW", "NNODES", "MAXRSS", "REQMEM", "ELAPSEDRAW", "UID", "GROUP",
    "WORKDIR", "CLUSTERNODES", "DURATION", "EVENT", "EVENTRAW", "STATERAW", "ROOT", "SHARE", "GROUPS", "SOCKETS",
    "CORES", "THREADS", "TRES", "ALLOCTRES", "REQTRES", "RESERVATION", "COMMENT", "EXIT_CODE", "NODE", "STEPID",
    "DEPENDENCY", "PENDING_TIME", "TIME_LEFT", "END_TIME", "WCKEY", "CONSTRAINTS", "ARRAY_JOB_ID", "MIN_CPUS",
    "TOTALCPU", "MAXVMSIZE", "NCPUS", "AVERSS", "AVECPU", "USERCPU", "ALLOCGRES",
}
_SLACK_COLUMNS = ("reason", "nodelist(reason)")
ALIASES = {"job_id": "jobid", "jobidraw": "jobidraw", "name": "jobname", "st": "state", "time": "elapsed",
            "time_limi": "timelimit", "time_limit": "timelimit", "submit_time": "submit", "start_time": "start",
            "end_time": "end", "timestart": "start", "timeend": "end", "exit_code": "exitcode",
            "nodelist(reason)": "nodelist", "hostnames": "nodelist", "nodename": "nodelist", "node": "nodelist",
            "timestamp": "timestamp"}


def header_columns(line: str) -> tuple[list[str], str, int | None] | None:
    """A table header of sinfo/squeue/sacct/sacctmgr: (normalized column names, delimiter)."""
    if "|" in line:
        raw = [c.strip() for c in line.rstrip("|").split("|")]
        delim = "|"
    else:
        raw = line.split()
        delim = " "
    if len(raw) < 2 or any(not c for c in raw):
        return None
    upper = [c.upper() for c in raw]
    known = sum(1 for c in upper if c in _HEADER_WORDS)
    if known < max(2, len(upper) * 3 // 4):
        return None
    cols = [ALIASES.get(c.lower(), c.lower()) for c in raw]
    if not ({"jobid", "nodelist"} & set(cols)):
        return None
    return cols, delim, next((i for i, c in enumerate(raw) if c.lower() in _SLACK_COLUMNS), None)


class TableLines(LineState):
    """Reads one row of the table whose header the driver found."""

    # -- tables
    def _table_row(self, n: int, line: str) -> list[Row] | None:
        table = self.table
        assert table is not None
        cols: list[str] = table["cols"]
        if table["delim"] == "|":
            values = [v.strip() for v in line.split("|")]
            if line.endswith("|") and len(values) == len(cols) + 1:
                values = values[:-1]
            if len(values) != len(cols):
                return None
        elif table["slices"]:
            slices = table["slices"]
            if len(slices) != len(cols):
                return None
            values = [line[a:b].strip() for a, b in slices[:-1]] + [line[slices[-1][0]:].strip()]
        else:
            values = _split_row(line.split(), len(cols), table["slack"])
            if values is None:
                return None
        row = dict(zip(cols, values))
        return self._row_events(n, row)

    def _headerless_row(self, n: int, line: str) -> list[Row] | None:
        """``sacct -P -n`` / ``sacctmgr -n -P`` output in the field orders capture uses."""
        values = line.split("|")
        if self.kind == "sacctmgr_event" and len(values) in (6, 7) and parse_time(values[-5]):
            return self._row_events(n, dict(zip(["nodelist", "start", "end", "state", "reason", "user"],
                                                values[-6:] if len(values) == 6 else values[1:])))
        fields = [ALIASES.get(f.lower(), f.lower()) for f in SACCT_FIELDS.split(",")]
        if self.kind == "sacct" and abs(len(values) - len(fields)) <= 1 and re.match(r"^\d", values[0]):
            return self._row_events(n, dict(zip(fields, values)))
        if self.kind == "sinfo" and (m := _SINFO_R_ROW.match(line)) is not None:
            return self._row_events(n, m.groupdict())
        return None

    def _row_events(self, n: int, row: dict[str, str]) -> list[Row]:
        if "jobid" in row:
            job = clean(row.get("jobid"))
            state = row.get("state")
            elapsed = parse_duration(row.get("elapsed"))
            submit = parse_time(row.get("submit"))
            start = parse_time(row.get("start"))
            end = parse_time(row.get("end"))
            start_approx = False
            taken = self._snapshot()
            if start is None and elapsed is not None and taken and job_state(state)[0] in (
                    "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                # squeue's TIME is the time since start: the snapshot's moment minus it dates the start
                start, start_approx = taken - timedelta(seconds=elapsed), True
            nodes = row.get("nodelist")
            reason = row.get("reason")
            if nodes and nodes.startswith("("):
                reason, nodes = reason or nodes.strip("()"), None
            return list(job_events(job, state, line=n, exit_code=row.get("exitcode"),
                                   derived=row.get("derivedexitcode"), nodes=nodes, reason=reason, elapsed=elapsed,
                                   submit=submit, start=start, end=end, snapshot=self._snapshot(),
                                   snapshot_origin=self._snapshot_origin(), name=row.get("jobname"),
                                   partition=row.get("partition"), user=row.get("user"), start_approx=start_approx,
                                   tres=row.get("alloctres")))
        nodes = row.get("nodelist")
        if not nodes:
            return []
        if "start" in row and "state" in row:
            return self._event_rows(n, row, nodes)
        when = parse_time(row.get("timestamp"))
        out: list[Row] = []
        for node in expand_hostlist(nodes):
            event = node_event(node, row.get("state"),
                               reason=row.get("reason"), user=(row.get("user") or "").split("(")[0] or None,
                               ts=when or self._snapshot(), approx=when is None,
                               origin="iso" if when else self._snapshot_origin(), line=n,
                               partition=(row.get("partition") or "").rstrip("*") or None, only_unhealthy=True)
            if event is not None:
                out.append(event)
        return out

    def _event_rows(self, n: int, row: dict[str, str], nodes: str) -> list[Row]:
        """sacctmgr show event: a node state that began at Start and, unless 'Unknown', ended at End."""
        start, end = parse_time(row.get("start")), parse_time(row.get("end"))
        user = (row.get("user") or "").split("(")[0] or None
        out: list[Row] = []
        for node in expand_hostlist(nodes):
            event = node_event(node, row.get("state"), reason=row.get("reason"), user=user, ts=start, line=n)
            if event is not None:
                out.append(event)
            if end is not None and event is not None:
                back = node_event(node, "RESUME", reason=row.get("reason"), user=user, ts=end, line=n)
                if back is not None:
                    back.attrs["ended_state"] = event.attrs.get("state")
                    back.message = f"node {node} back from {event.attrs.get('state')}: {row.get('reason') or ''}"
                    out.append(back)
        return out


def _split_row(tokens: list[str], ncols: int, slack: int | None) -> list[str] | None:
    """Whitespace table row -> one value per column; the reason column takes the extra words."""
    if len(tokens) == ncols:
        return tokens
    if len(tokens) > ncols:
        i = slack if slack is not None else ncols - 1
        extra = len(tokens) - ncols
        return tokens[:i] + [" ".join(tokens[i:i + extra + 1])] + tokens[i + extra + 1:]
    if slack == ncols - 1 and len(tokens) == ncols - 1:
        return tokens + [""]
    return None
