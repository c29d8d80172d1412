"""slurmctld / slurmd / slurmstepd log lines and job output (``slurmstepd``, ``srun`` messages, the
batch script's ``Killed`` lines, ``seff``): each known message to its job, step or node event; a daemon's
other error lines through collectors.slurm.messages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from collectors.base import Event, Row
from collectors.framework.framing.times import syslog_time
from collectors.framework.hostlist import expand_hostlist
from collectors.framework.lazy_re import lazy_regex
from collectors.slurm.events import job_events, node_event, step_event
from collectors.slurm.lines import MAX_PENDING, LineState
from collectors.slurm.messages import daemon_message
from collectors.slurm.states import parse_time

SIGNALS = {"hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4, "trace/breakpoint trap": 5,
           "aborted": 6, "bus error": 7, "floating point exception": 8, "killed": 9, "user defined signal 1": 10,
           "segmentation fault": 11, "user defined signal 2": 12, "terminated": 15}

_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"
_LOG_BRACKET = lazy_regex(rf"^\[({_ISO})\]\s*(?:\[(\d[\w.+]*)\]\s*)?(.*)$")
_LOG_SYSLOG = lazy_regex(r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
                         r"(?P<host>\S+)\s+(?P<prog>slurm\w*)(?:-\S+)?(?:\[\d+\])?:\s*(?:\[(?P<step>\d[\w.+]*)\]\s*)?"
                         r"(?P<msg>.*)$")
_LOG_ISO_SYSLOG = lazy_regex(rf"^(?P<ts>{_ISO})\s+(?P<host>\S+)\s+(?P<prog>slurm\w*)(?:-\S+)?(?:\[\d+\])?:\s*"
                             r"(?:\[(?P<step>\d[\w.+]*)\]\s*)?(?P<msg>.*)$")
_PROGRAM_PREFIX = lazy_regex(r"^(?P<prog>slurmstepd|srun|salloc|sbatch|slurmd|slurmctld)(?:-(?P<host>[\w.-]+))?:\s*"
                             r"(?:\[(?P<step>\d[\w.+]*)\]\s*)?(?P<msg>.*)$")
_JOBID = r"(?P<job>\d+(?:[_+]\d+)?)(?:\(\d+\))?"

# Log messages (after the time/step prefix). Each maps to one event; see _log_message.
_JOB_COMPLETE = lazy_regex(rf"_job_complete: JobId={_JOBID} (?P<how>WEXITSTATUS|WTERMSIG) (?P<code>\d+)")
_TIME_LIMIT = lazy_regex(rf"Time limit exhausted for JobId={_JOBID}")
_KILL_JOB = lazy_regex(rf"REQUEST_KILL_JOB:? JobId={_JOBID} uid (?P<uid>\d+)")
_SUBMIT = lazy_regex(rf"_slurm_rpc_submit_batch_job:? JobId={_JOBID}")
_ALLOCATE = lazy_regex(rf"(?:sched: Allocate|_start_job: Started|backfill: Started) JobId={_JOBID}"
                       r"(?:.*?(?:NodeList=| on )(?P<nodes>\S+))?")
_REQUEUE = lazy_regex(rf"[Rr]equeu\w* (?:of )?JobId={_JOBID}")
_PREEMPT = lazy_regex(rf"[Pp]reempted JobId={_JOBID}")
_NODE_FAIL_JOB = lazy_regex(rf"Killing JobId={_JOBID} on failed node (?P<node>\S+)")
_UPDATE_REASON = lazy_regex(r"update_node: node (?P<node>\S+) reason set to: (?P<reason>.*)$")
_UPDATE_STATE = lazy_regex(r"(?:update_node|drain_nodes|_drain_node|set_node_down\w*): node (?P<node>\S+) "
                           r"state set to (?P<state>\S+)")
_NOT_RESPONDING = lazy_regex(r"Nodes? (?P<nodes>\S+) not responding(?P<down>, setting DOWN)?")
_RESPONDING = lazy_regex(r"Node (?P<nodes>\S+) now responding")
_RETURNED = lazy_regex(r"[Nn]ode (?P<node>\S+) returned to service")
_BANNER = lazy_regex(r"\*\*\* (?P<what>JOB|STEP) (?P<id>\d[\w.+]*) (?:ON (?P<node>\S+) CANCELLED AT (?P<ts>\S+)"
                     r"(?: DUE [Tt][Oo] (?P<due>.+?))?(?: by \d+)?|STEPD TERMINATED ON (?P<node2>\S+) AT (?P<ts2>\S+)"
                     r" DUE TO (?P<due2>.+?)) \*\*\*")
_OOM = lazy_regex(r"Detected (?P<count>\d+) oom[-_]kill events?(?:\(s\))? in (?:StepId=|step )(?P<step>\d[\w.+]*?)"
                  r"(?: cgroup)?\.?(?:\s|$)")
_MEM_LIMIT = lazy_regex(rf"(?:Job|JobId=?) {_JOBID} exceeded memory limit|Exceeded (?P<scope>job|step) memory limit")
_SRUN_TASK = lazy_regex(r"^(?P<node>[\w.-]+): tasks? (?P<task>[\d,\-]+): (?P<why>.+)$")
_TERMINATING = lazy_regex(r"Terminating (?:job step |StepId=)(?P<step>\d[\w.+]*)")
_STEP_ABORTED = lazy_regex(r"Job step aborted")
_NODE_FAILURE = lazy_regex(r"Node failure on (?P<node>\S+)")
_BASH_KILLED = lazy_regex(r"^(?P<script>\S+): line \d+:\s+(?P<pid>\d+) (?P<sig>Killed|Terminated|Aborted|Bus error|"
                          r"Segmentation fault|Floating point exception|Illegal instruction|Hangup|Quit|"
                          r"User defined signal [12])(?: +\(core dumped\))?\s*(?P<cmd>.*)$")
_SPOOL_JOB = lazy_regex(r"job0*(\d+)/slurm_script")
# One cheap test before the specific patterns below: most daemon log lines report none of these.
_WORTH_A_LOOK = lazy_regex(r"JobId=|[Nn]ode|\*\*\*|oom|memory limit|task|Terminating|aborted|line \d+:|^Job ID:|"
                           r"^State:|equeu|reempt")
_SEFF_JOB = lazy_regex(r"^Job ID:\s*(?P<job>\d+(?:_\d+)?)\s*$")
_SEFF_STATE = lazy_regex(r"^State:\s*(?P<state>[A-Z_]+)(?: by \d+)?\s*\(exit code (?P<code>-?\d+)\)")


class LogLines(LineState):
    """Reads a log line or a job output line; a node's reason waits for the line that sets its state."""

    # -- log lines and job output
    def _free_line(self, n: int, line: str) -> list[Row] | None:
        ts, origin, host, step, msg = None, "iso", None, None, line
        m = _LOG_BRACKET.match(line)
        if m:
            ts, step, msg = parse_time(m.group(1)), m.group(2), m.group(3)
        elif (m := _LOG_ISO_SYSLOG.match(line)) is not None:
            ts, host, step, msg = parse_time(m.group("ts")), m.group("host"), m.group("step"), m.group("msg")
        elif (m := _LOG_SYSLOG.match(line)) is not None:
            ts, origin, host, step, msg = self._syslog_time(m), "syslog_noyear", m.group("host"), m.group("step"), \
                m.group("msg")
        prog = _PROGRAM_PREFIX.match(msg)
        if prog:
            msg, step = prog.group("msg"), step or prog.group("step")
            host = host or prog.group("host")
        daemon = m.group("prog") if m is not None and "prog" in m.groupdict() else None
        events = self._log_message(n, msg, step, host, prog.group("prog") if prog else None, daemon)
        if ts is None:
            return events
        raw = line[:m.end(1)].strip("[]") if m is not None and m.lastindex else line[:32]
        for event in events or []:
            if event.ts is None:
                event.ts, event.ts_origin, event.ts_raw = ts, origin, raw
        held = self.pending_reason
        if held is not None and held.ts is None:
            held.ts, held.ts_origin, held.ts_raw = ts, origin, raw
        # a dated line, even one with nothing to report, dates the undated lines before it
        released = list(self._release(ts))
        self.last_ts = ts
        return released + list(events or [])

    def _syslog_time(self, m: re.Match[str]) -> datetime | None:
        return syslog_time(m.group("mon"), m.group("day"), m.group("clock"), self.ctx.reference_for(m.group("host")))

    def _flush_reason(self) -> Iterator[Row]:
        if self.pending_reason is not None:
            event, self.pending_reason = self.pending_reason, None
            yield event

    def _log_message(self, n: int, msg: str, step: str | None, host: str | None,
                     prog: str | None, daemon: str | None = None) -> list[Event] | None:
        """One Slurm message -> its events; None when it is not one this parser knows."""
        events = self._known_message(n, msg, step, host, prog)
        if events or (found := daemon_message(msg)) is None:
            return events
        kind, attrs = found
        if step and "step" not in attrs:
            attrs.update(step=step, job=step.split(".")[0])
        node = attrs.get("node") or host
        if kind == "node_problem" and node:
            event = node_event(node, None, reason=attrs["reason"], line=n)
            if event is not None:
                event.attrs["error"] = attrs["error"]
                return [event]
        attrs["daemon"] = prog or daemon or ("slurmstepd" if step else None)
        return [Event(kind="slurm_node_problem" if kind == "node_problem" else kind,
                      message=f"{attrs['daemon'] or 'slurm'} {attrs['level']}: "
                      f"{attrs['error'][:300]}", host=host, job=attrs.get("job"),
                      severity="critical" if attrs["level"] == "fatal" else "error",
                      attrs={k: v for k, v in attrs.items() if v is not None}, line=n)]

    def _known_message(self, n: int, msg: str, step: str | None, host: str | None,
                       prog: str | None) -> list[Event] | None:
        """The messages of jobs, steps and nodes this parser reads; None for a line it does not know."""
        if not _WORTH_A_LOOK.search(msg):
            return [] if prog is not None or step is not None else None
        msg = re.sub(r"^(?:error|debug\d?|info|verbose|fatal|warning):\s*", "", msg)
        if (m := _JOB_COMPLETE.search(msg)) is not None:
            job, code = m.group("job"), int(m.group("code"))
            if m.group("how") == "WEXITSTATUS":
                return self._job(job, "COMPLETED" if code == 0 else "FAILED", line=n, exit_status=(code, 0))
            if job in self.ended:
                return []
            return self._job(job, "FAILED", line=n, exit_status=(None, code))
        if (m := _TIME_LIMIT.search(msg)) is not None:
            self.ended.add(m.group("job"))
            return self._job(m.group("job"), "TIMEOUT", line=n)
        if (m := _KILL_JOB.search(msg)) is not None:
            self.ended.add(m.group("job"))
            return self._job(m.group("job"), f"CANCELLED by {m.group('uid')}", line=n)
        if (m := _SUBMIT.search(msg)) is not None:
            return self._job(m.group("job"), "PENDING", line=n)
        if (m := _ALLOCATE.search(msg)) is not None:
            if m.group("nodes"):
                self.job_nodes[m.group("job")] = m.group("nodes")
                if len(self.job_nodes) > MAX_PENDING * 10:
                    self.job_nodes.pop(next(iter(self.job_nodes)))
            return self._job(m.group("job"), "RUNNING", line=n, nodes=m.group("nodes"))
        if (m := _NODE_FAIL_JOB.search(msg)) is not None:
            self.ended.add(m.group("job"))
            return self._job(m.group("job"), "NODE_FAIL", line=n, nodes=m.group("node"))
        if (m := _PREEMPT.search(msg)) is not None:
            self.ended.add(m.group("job"))
            return self._job(m.group("job"), "PREEMPTED", line=n)
        if (m := _REQUEUE.search(msg)) is not None:
            return self._job(m.group("job"), "REQUEUED", line=n)
        if (m := _UPDATE_REASON.search(msg)) is not None:
            self.pending_reason = node_event(m.group("node"), None, reason=m.group("reason"), line=n)
            return []
        if (m := _UPDATE_STATE.search(msg)) is not None:
            held, self.pending_reason = self.pending_reason, None
            reason = held.attrs.get("reason") if held is not None and held.host == m.group("node") else None
            rows = [] if held is None or reason is not None else [held]
            event = node_event(m.group("node"), m.group("state"), reason=reason, line=n)
            return rows + ([event] if event else [])
        if (m := _NOT_RESPONDING.search(msg)) is not None:
            state = "DOWN+NOT_RESPONDING" if m.group("down") else "NOT_RESPONDING"
            return [e for node in expand_hostlist(m.group("nodes"))
                    if (e := node_event(node, state, reason="Not responding", line=n))]
        if (m := _RESPONDING.search(msg)) is not None:
            return [e for node in expand_hostlist(m.group("nodes"))
                    if (e := node_event(node, "RESPONDING", line=n))]
        if (m := _RETURNED.search(msg)) is not None:
            event = node_event(m.group("node"), "RESUME", reason="returned to service", line=n)
            return [event] if event else []
        if (m := _BANNER.search(msg)) is not None:
            return self._banner(n, m)
        if (m := _OOM.search(msg)) is not None:
            return [self._oom(n, m.group("step"), int(m.group("count")), host)]
        if (m := _MEM_LIMIT.search(msg)) is not None:
            target = m.group("job") or step or (f"{self.current_job}.batch" if self.current_job else None)
            return [self._oom(n, target, None, host)]
        if prog in ("srun", "salloc"):
            return self._srun(n, msg)
        if (m := _BASH_KILLED.match(msg)) is not None:
            return [self._bash_killed(n, m)]
        if (m := _SEFF_JOB.match(msg)) is not None:
            self.seff_job = self.current_job = m.group("job")
            return []
        if (m := _SEFF_STATE.match(msg)) is not None:
            return job_events(self.seff_job or self.current_job, m.group("state"), line=n,
                              exit_status=(int(m.group("code")), None))
        if prog is not None or step is not None:
            return []
        return None

    def _job(self, job: str, state: str, **kw: Any) -> list[Event]:
        """A job event from a log line; its nodes, when the line omits them, from the job's allocation."""
        if not kw.get("nodes") and job in self.job_nodes:
            kw["nodes"] = self.job_nodes[job]
        return job_events(job, state, **kw)

    def _banner(self, n: int, m: re.Match[str]) -> list[Event]:
        ident, node = m.group("id"), m.group("node") or m.group("node2")
        when = parse_time(m.group("ts") or m.group("ts2"))
        due = (m.group("due") or m.group("due2") or "").strip()
        state = _due_state(due)
        if m.group("what") == "JOB":
            self.current_job = ident
            self.ended.add(ident)
            events = job_events(ident, state, line=n, nodes=node, reason=due or None, end=when)
        else:
            self.current_job = ident.split(".")[0]
            events = step_event(ident, state, None, None, node, when, n, approx=False, origin="iso")
            for event in events:
                if due:
                    event.attrs["reason"] = due
                    event.message += f" due to {due}"
        for event in events:
            event.ts_raw = m.group("ts") or m.group("ts2")
        return events

    def _oom(self, n: int, step: str | None, count: int | None, host: str | None) -> Event:
        job = step.split(".")[0] if step else self.current_job
        if job:
            self.current_job = job
        attrs = {k: v for k, v in {"job": job, "step": step, "count": count}.items() if v is not None}
        return Event(kind="oom_kill", message=f"cgroup OOM kill in step {step or '?'}"
                     + (f" ({count} event(s))" if count else ""), host=host, job=job, severity="error",
                     attrs=attrs, line=n)

    def _srun(self, n: int, msg: str) -> list[Event]:
        if (m := _SRUN_TASK.match(msg)) is not None:
            why = m.group("why").strip()
            code = re.search(r"[Ee]xited with exit code (\d+)", why)
            sig = SIGNALS.get(why.lower().replace(" (core dumped)", ""))
            state = "OUT_OF_MEMORY" if "out of memory" in why.lower() else "FAILED"
            attrs = {k: v for k, v in {"job": self.current_job, "state": state, "node": m.group("node"),
                                       "task": m.group("task"), "reason": why,
                                       "exit_code": int(code.group(1)) if code else None, "signal": sig}.items()
                     if v is not None}
            return [Event(kind="step_killed", message=f"task {m.group('task')} on {m.group('node')}: {why}",
                          host=m.group("node"), job=self.current_job, severity="error", attrs=attrs, line=n)]
        if (m := _TERMINATING.search(msg)) is not None:
            step = m.group("step")
            self.current_job = step.split(".")[0]
            for event in self.pending:
                if event.kind == "step_killed" and "step" not in event.attrs:
                    event.attrs.update(step=step, job=self.current_job)
                    event.job = self.current_job
            return []
        if (m := _NODE_FAILURE.search(msg)) is not None:
            attrs = {k: v for k, v in {"job": self.current_job, "state": "NODE_FAIL", "node": m.group("node"),
                                       "reason": "node failure"}.items() if v}
            return [Event(kind="step_killed", message=msg, host=m.group("node"), job=self.current_job,
                          severity="error", attrs=attrs, line=n)]
        if _STEP_ABORTED.search(msg):
            attrs = {k: v for k, v in {"job": self.current_job, "state": "CANCELLED", "reason": "job step aborted"
                                       }.items() if v}
            return [Event(kind="step_killed", message=msg, job=self.current_job, severity="warning", attrs=attrs,
                          line=n)]
        return []

    def _bash_killed(self, n: int, m: re.Match[str]) -> Event:
        job = _SPOOL_JOB.search(m.group("script"))
        job_id = job.group(1) if job else self.current_job
        if job_id:
            self.current_job = job_id
        sig_text = m.group("sig")
        process = m.group("cmd").split()[0] if m.group("cmd").split() else None
        attrs = {k: v for k, v in {"job": job_id, "step": f"{job_id}.batch" if job else None,
                                   "pid": int(m.group("pid")), "process": process,
                                   "signal": SIGNALS.get(sig_text.lower()),
                                   "signal_text": sig_text, "state": "FAILED"}.items() if v is not None}
        return Event(kind="step_killed", message=f"process {m.group('pid')} ({process}) {sig_text}", job=job_id,
                     severity="error", attrs=attrs, line=n)


def _due_state(due: str) -> str:
    due = due.upper()
    if "TIME LIMIT" in due:
        return "TIMEOUT"
    if "PREEMPT" in due:
        return "PREEMPTED"
    if "NODE FAIL" in due:
        return "NODE_FAIL"
    if "REQUEUE" in due:
        return "REQUEUED"
    if "NOT ENDING" in due:
        return "FAILED"
    return "CANCELLED"


def log_lines(lines: list[str]) -> int:
    """How many of a head's lines begin like a Slurm daemon's log line (the sniffer's test)."""
    return sum(1 for line in lines if _LOG_BRACKET.match(line) or _LOG_SYSLOG.match(line)
               or _LOG_ISO_SYSLOG.match(line))


def sets_node_state(line: str) -> bool:
    """A daemon line that sets a node's state: it takes the reason the line before it set."""
    return _UPDATE_STATE.search(line) is not None
