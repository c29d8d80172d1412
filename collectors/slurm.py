"""Slurm: when jobs and nodes changed state, and why, from the scheduler's own records.

Live, it asks the controller (``sacct``, ``scontrol show job/node``, ``sinfo -R``, ``sacctmgr show
event``) and copies the tail of slurmctld/slurmd logs. Offline, one line-oriented parser reads all
of those text formats, and job stdout/stderr (``slurmstepd``/``srun`` messages), in any mix: real
hand-overs paste several outputs into one file, sometimes wrapped by Ansible as JSON strings.

Decisions:
- Job events are transitions, each dated when it happened: PENDING at submit, RUNNING at start,
  the terminal state at end. A snapshot without those times (squeue, sinfo) is dated by the time
  printed above it, else the file's mtime, marked approximate.
- ``sacct --json`` of Slurm 22.05 reports every exit code as 0, so capture falls back to
  ``sacct -P`` there, and the JSON parser drops exit codes it cannot trust.
- Node states collapse to one word a playbook can test (DRAIN for drained and draining, DOWN,
  FAIL, ...); Slurm's spelling stays in ``state_raw`` and suffix flags (``*``, ``@``) in ``flags``.
- Slurm prints local time without an offset; capture runs the commands with TZ=UTC, and offline
  text is read as UTC.

Event kinds emitted here: job_state, node_state, step_killed and oom_kill (a cgroup OOM kill reported
by slurmstepd); their attrs are declared in collectors/catalog/events.yaml.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO

from collectors._slurm_messages import daemon_message, reason_class
from collectors.base import (
    MONTHS,
    Artifact,
    CaptureContext,
    Event,
    HostFact,
    ParseContext,
    Row,
    Skipped,
    infer_year,
    to_utc,
)
from collectors.framework.hostlist import expand_hostlist
from collectors.framework.json_items import decoded, no_lone_surrogates, one_item
from collectors.framework.lazy_re import lazy_regex

NAME = "slurm"
LAYER = "scheduling"
TEXT_KINDS = ("sacct", "scontrol_job", "scontrol_node", "sinfo", "squeue", "sacctmgr_event", "slurm_log")
JSON_KINDS = ("sacct_json", "slurm_json")
KINDS = TEXT_KINDS + JSON_KINDS + ("slurm_config",)
TIMEOUT = 90.0
PRIORITY = 40

COMMAND_TIMEOUT = 20.0
LOG_TAIL_BYTES = 32 << 20
MAX_JSON_BYTES = 256 << 20
MAX_PENDING = 10_000
SACCT_FIELDS = ("JobID,JobName,State,ExitCode,DerivedExitCode,Elapsed,Timelimit,Submit,Start,End,NodeList,Reason,"
                "User,Partition,AllocTRES")
EVENT_FIELDS = "NodeName,Start,End,State,Reason,User"
LOG_PATHS = ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log", "/var/log/slurmctld.log",
             "/var/log/slurmd.log", "/var/log/slurm-llnl/slurmctld.log", "/var/log/slurm-llnl/slurmd.log")

JOB_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL",
              "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "COMPLETING", "CONFIGURING", "RESIZING",
              "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED", "SIGNALING", "STAGE_OUT",
              "RESV_DEL_HOLD", "REVOKED")
JOB_CODES = {"PD": "PENDING", "R": "RUNNING", "S": "SUSPENDED", "CD": "COMPLETED", "CA": "CANCELLED", "F": "FAILED",
             "TO": "TIMEOUT", "NF": "NODE_FAIL", "PR": "PREEMPTED", "BF": "BOOT_FAIL", "DL": "DEADLINE",
             "OOM": "OUT_OF_MEMORY", "CG": "COMPLETING", "CF": "CONFIGURING", "RS": "RESIZING", "RQ": "REQUEUED",
             "RF": "REQUEUE_FED", "RH": "REQUEUE_HOLD", "SE": "SPECIAL_EXIT", "ST": "STOPPED", "SI": "SIGNALING",
             "SO": "STAGE_OUT", "RD": "RESV_DEL_HOLD", "RV": "REVOKED"}
TERMINAL = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE",
            "OUT_OF_MEMORY", "REVOKED", "SPECIAL_EXIT", "REQUEUED"}
JOB_SEVERITY = {"FAILED": "error", "NODE_FAIL": "error", "OUT_OF_MEMORY": "error", "TIMEOUT": "error",
                "BOOT_FAIL": "error", "DEADLINE": "error", "CANCELLED": "warning", "PREEMPTED": "warning",
                "REQUEUED": "warning", "REQUEUE_HOLD": "warning", "SUSPENDED": "warning", "SPECIAL_EXIT": "warning",
                "PENDING": "debug"}
MAX_NODES = 4096
"""Node names a job event's attrs carry: the whole list of any real job (the analysis relates a job's
failure to each node of it), bounded so that one malformed host list cannot bloat every event."""

NODE_WORDS = {"alloc": "ALLOCATED", "allocated": "ALLOCATED", "comp": "COMPLETING", "completing": "COMPLETING",
              "mix": "MIXED", "mixed": "MIXED", "idle": "IDLE", "drng": "DRAINING", "draining": "DRAINING",
              "drain": "DRAINED", "drained": "DRAINED", "down": "DOWN", "fail": "FAIL", "failg": "FAILING",
              "failing": "FAILING", "maint": "MAINT", "resv": "RESERVED", "reserved": "RESERVED",
              "futr": "FUTURE", "future": "FUTURE", "unk": "UNKNOWN", "unknown": "UNKNOWN", "boot": "REBOOT",
              "inval": "INVAL", "plnd": "PLANNED", "planned": "PLANNED", "npc": "PERFCTRS", "blocked": "BLOCKED",
              "pow_dn": "POWERED_DOWN", "pow_up": "POWERING_UP", "powered_down": "POWERED_DOWN",
              "powering_up": "POWERING_UP", "powering_down": "POWERING_DOWN", "not_responding": "NOT_RESPONDING",
              "no_respond": "NOT_RESPONDING", "resume": "RESUME", "undrain": "RESUME", "reboot": "REBOOT",
              "reboot_requested": "REBOOT_REQUESTED", "reboot_issued": "REBOOT_ISSUED", "cloud": "CLOUD",
              "power_down": "POWER_DOWN", "power_up": "POWER_UP", "perfctrs": "PERFCTRS", "dynamic_norm": "DYNAMIC"}
NODE_SUFFIX = {"*": "NOT_RESPONDING", "~": "POWERED_OFF", "#": "POWERING_UP", "!": "POWER_DOWN_PENDING",
               "%": "POWERING_DOWN", "$": "MAINT_RESERVATION", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
               "-": "PLANNED"}
# The one word a playbook tests, most serious condition first.
NODE_CANON = (("DOWN", {"DOWN"}), ("DRAIN", {"DRAINED", "DRAINING", "DRAIN"}), ("FAIL", {"FAIL", "FAILING"}),
              ("MAINT", {"MAINT"}), ("REBOOT", {"REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED"}))
HEALTHY_NODE = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING", "RESERVED", "PLANNED", "FUTURE", "CLOUD", "POWERED_DOWN",
                "POWERING_UP", "POWERED_OFF", "POWERING_DOWN", "POWER_DOWN_PENDING", "DYNAMIC", "RESUME"}
NODE_SEVERITY = {"DOWN": "error", "FAIL": "error", "DRAIN": "warning", "MAINT": "warning", "NOT_RESPONDING": "warning",
                 "REBOOT": "warning"}

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
_DATE_LINE = lazy_regex(r"^(?:[A-Z][a-z]{2}\s+)?([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d\d:\d\d:\d\d)\s+(?:[A-Z]{2,5}\s+)?"
                        r"(\d{4})$")
_ANSIBLE = lazy_regex(r'^\s*"((?:[^"\\]|\\.)*)",?\s*$')
_PROMPT = lazy_regex(r"^\s*(?:\[[^\]]*\]|\S+@\S+:?\S*)\s*[$#]\s*(?P<cmd>\S+)|"
                     r"^\s*~?[$#]\s*(?:sacct|squeue|sinfo|scontrol|sacctmgr|seff|sstat|sreport)\b")
"""A shell prompt before a pasted command, ``[user@host ~]$ sacct``, or a bare ``$ sacct -j 42``."""
_KV_START = lazy_regex(r"^\s*[A-Za-z][\w/:.]*=")
_KV_SPLIT = lazy_regex(r"(?:^|\s)([A-Za-z][\w/:.]*)=")
_REASON_TAIL = lazy_regex(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\]]+)@(?P<ts>[^\]]+)\]\s*$")
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
_SINFO_R_ROW = lazy_regex(r"^(?P<reason>\S.*?)\s+(?P<user>[a-z_][\w.-]*(?:\(\d+\))?)\s+"
                          r"(?P<timestamp>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\s+(?P<nodelist>[\w.\[\],-]+)$")
"""A ``sinfo -R`` row (REASON USER TIMESTAMP NODELIST) whose header was not pasted with it."""
_SPOOL_JOB = lazy_regex(r"job0*(\d+)/slurm_script")
# One cheap test before the specific patterns below: most daemon log lines report none of these.
_WORTH_A_LOOK = lazy_regex(r"JobId=|[Nn]ode|\*\*\*|oom|memory limit|task|Terminating|aborted|line \d+:|^Job ID:|"
                           r"^State:|equeu|reempt")
_SEFF_JOB = lazy_regex(r"^Job ID:\s*(?P<job>\d+(?:_\d+)?)\s*$")
_SEFF_STATE = lazy_regex(r"^State:\s*(?P<state>[A-Z_]+)(?: by \d+)?\s*\(exit code (?P<code>-?\d+)\)")

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
_ALIASES = {"job_id": "jobid", "jobidraw": "jobidraw", "name": "jobname", "st": "state", "time": "elapsed",
            "time_limi": "timelimit", "time_limit": "timelimit", "submit_time": "submit", "start_time": "start",
            "end_time": "end", "timestart": "start", "timeend": "end", "exit_code": "exitcode",
            "nodelist(reason)": "nodelist", "hostnames": "nodelist", "nodename": "nodelist", "node": "nodelist",
            "timestamp": "timestamp"}


# ===================================================================== live capture
def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--slurm-job", metavar="ID", action="append", dest="slurm_job",
                        help="Slurm job id(s) to collect (default: every job in the --since window)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Ask the controller what happened in the window, then copy the daemons' log tails."""
    if ctx.which("scontrol") is None:
        ctx.missing("slurm", "unavailable: scontrol not installed")
        return
    # This runs in capture's own forked process: the variables reach only the Slurm commands
    # below, which then print UTC in one ISO format whatever the host's locale settings are.
    os.environ["TZ"] = "UTC"
    os.environ["SLURM_TIME_FORMAT"] = "standard"
    config = ctx.run(["scontrol", "show", "config"], kind="slurm_config", timeout=COMMAND_TIMEOUT)
    if config.info.get("exit_code") != 0:
        reason = (config.info.get("stderr") or config.info.get("error") or "").strip().splitlines()
        ctx.missing("slurm", f"unavailable: no reachable Slurm controller ({reason[-1] if reason else 'no output'})")
        return
    yield config
    settings = _config_settings(_artifact_text(config, 1 << 20))
    jobs = _job_options(ctx.options.get("slurm_job"))
    since = (ctx.since or datetime.now(timezone.utc) - timedelta(days=1)).astimezone(timezone.utc)
    window = since.strftime("%Y-%m-%dT%H:%M:%S")
    accounting = list(_capture_sacct(ctx, jobs, window))
    yield from accounting
    if not any(a.info.get("exit_code") == 0 for a in accounting) and settings.get("JobCompType") == "jobcomp/filetxt":
        # no accounting database: the job completion file is the only job history there is
        comp = _read_tail(ctx, settings.get("JobCompLoc", ""), kind="scontrol_job")
        if comp is not None:
            yield comp
    for job in jobs[:50] or [None]:
        argv = ["scontrol", "show", "job", "-o"] + ([job] if job else [])
        yield _checked(ctx, ctx.run(argv, kind="scontrol_job", timeout=COMMAND_TIMEOUT, max_bytes=64 << 20))
    yield _checked(ctx, ctx.run(["scontrol", "show", "node", "-o"], kind="scontrol_node", timeout=COMMAND_TIMEOUT,
                                max_bytes=64 << 20))
    if ctx.which("sinfo"):
        yield _checked(ctx, ctx.run(["sinfo", "-R", "-o", "%E|%U|%H|%N|%T"], kind="sinfo", timeout=COMMAND_TIMEOUT))
    else:
        ctx.missing("sinfo", "unavailable: sinfo not installed")
    if ctx.which("sacctmgr"):
        yield _checked(ctx, ctx.run(["sacctmgr", "-P", "show", "event", f"start={window}", f"format={EVENT_FIELDS}"],
                                    kind="sacctmgr_event", timeout=COMMAND_TIMEOUT))
    else:
        ctx.missing("sacctmgr", "unavailable: sacctmgr not installed (node drain history)")
    paths = [settings.get(k) for k in ("SlurmctldLogFile", "SlurmdLogFile")]
    seen: set[str] = set()
    for path in [p for p in paths if p and p.startswith("/")] + list(LOG_PATHS):
        real = os.path.realpath(path)
        if real in seen or not os.path.exists(path):
            continue
        seen.add(real)
        log = _read_tail(ctx, path)
        if log is not None:
            yield log


def _capture_sacct(ctx: CaptureContext, jobs: list[str], window: str) -> Iterator[Artifact]:
    """``sacct --json`` where it reports exit codes truthfully, else ``sacct -P`` with explicit fields."""
    if ctx.which("sacct") is None:
        ctx.missing("sacct", "unavailable: sacct not installed")
        return
    select = ["-j", ",".join(jobs)] if jobs else ["-S", window]
    art = ctx.run(["sacct", "--json", "-a", *select], kind="sacct_json", timeout=COMMAND_TIMEOUT)
    if art.info.get("exit_code") == 0 and not _json_exit_codes_broken(_artifact_text(art, 64 << 10)):
        yield art
        return
    art = ctx.run(["sacct", "-P", "-a", "-D", "-o", SACCT_FIELDS, *select], kind="sacct", timeout=COMMAND_TIMEOUT)
    yield _checked(ctx, art)


def _checked(ctx: CaptureContext, art: Artifact) -> Artifact:
    """Keep a failed command's (empty) output as evidence, and say why it is empty."""
    if art.info.get("exit_code") not in (0, None) or art.info.get("error"):
        stderr = (art.info.get("stderr") or art.info.get("error") or "").strip().splitlines()
        ctx.missing(art.source, f"error: exit {art.info.get('exit_code')}: {stderr[-1] if stderr else ''}")
    return art


def _job_options(value: Any) -> list[str]:
    if not value:
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    return [j for item in items for j in str(item).replace(" ", ",").split(",") if re.fullmatch(r"[\w.+]+", j)]


def _artifact_text(art: Artifact, limit: int) -> str:
    if art.data is not None:
        return art.data[:limit].decode("utf-8", "replace")
    try:
        with open(art.path or "", "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""


def _config_settings(text: str) -> dict[str, str]:
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip()] = value.strip()
    return settings


def _read_tail(ctx: CaptureContext, path: str, kind: str = "slurm_log") -> Artifact | None:
    """The last LOG_TAIL_BYTES of a log: an incident is at the end of a log, not its start."""
    return ctx.read_file(path, kind=kind, max_bytes=LOG_TAIL_BYTES, tail=True)


def _json_exit_codes_broken(head: str) -> bool:
    """Slurm 22.05's sacct --json writes exit_code SUCCESS/0 for every job, failed ones too."""
    m = re.search(r'"release"\s*:\s*"(\d+)\.(\d+)', head)
    return bool(m and (int(m.group(1)), int(m.group(2))) == (22, 5))


# ===================================================================== sniffing
def sniff(name: str, head: str) -> dict[str, int]:
    text = head.lstrip()
    if not text:
        return {}
    if text.startswith("{"):
        if re.search(r'"jobs"\s*:', head) and re.search(r'"job_id"|"Slurm"|"slurm"', head):
            return {"sacct_json": 90}
        if re.search(r'"nodes"\s*:', head) and re.search(r'"state_flags"|"reason_set_by_user"|"Slurm"', head):
            return {"slurm_json": 85}
        return {}
    lines = [_unwrap(line).strip() if '"' in line else line.strip() for line in head.splitlines()[:200]]
    lines = [line for line in lines if line]
    if not lines:
        return {}
    first = lines[0]
    if first.startswith("Configuration data as of") or (re.search(r"^SLURM_VERSION\s+=", head, re.M)
                                                        and re.search(r"^Slurmctld\w*\s+=", head, re.M)):
        return {"slurm_config": 90}
    scores: dict[str, int] = {}
    body = "\n".join(lines)
    has_job_state = "JobState=" in body and _JOB_STATE.search(body)
    if has_job_state and (any(re.match(r"^JobId=\d", line) for line in lines[:20]) or _JOB_TIMES.search(body)):
        scores["scontrol_job"] = 90
    if "NodeName=" in body and any(re.match(r"^NodeName=\S+", line) for line in lines[:20]) \
            and re.search(r"\bState=", head):
        scores["scontrol_node"] = 90
    for line in lines[:40] if _HEADER_KEY.search("\n" + "\n".join(lines[:40]).lower()) else ():
        header = _header_columns(line)
        if header:
            cols = header[0]
            if "jobid" in cols:
                # only sacct rules its header with dashes, and only it has accounting columns
                ruled = re.fullmatch(r"-+(?: +-+)+", lines[min(lines.index(line) + 1, len(lines) - 1)])
                sacct = "|" in line or ruled or bool(_SACCT_ONLY & set(cols))
                scores.setdefault("sacct" if sacct else "squeue", 85)
            elif "start" in cols and "nodelist" in cols and "|" in line:
                scores.setdefault("sacctmgr_event", 85)
            else:
                scores.setdefault("sinfo", 85)
            break
    slurm_words = sum(1 for line in lines if _SLURM_WORDS.search(line)) \
        if any(word in body for word in _SLURM_WORD_ANCHORS) else 0
    if (slurm_words or "slurm" in head[:4000].lower()) and _log_lines(lines) >= max(1, len(lines) // 2):
        scores["slurm_log"] = max(scores.get("slurm_log", 0), 85)
    elif slurm_words:
        scores["slurm_log"] = 80 if slurm_words * 3 >= len(lines) else 40
    return scores


_JOB_STATE = lazy_regex(r"\bJobState=\w+")
"""Searched in a head's lines joined by newlines (after a plain substring test, far cheaper than a pattern
that starts with \\b): no match can span two lines, so one search is the any() over lines."""
_JOB_TIMES = lazy_regex(r"\b(?:ExitCode|SubmitTime|StartTime)=")
_SLURM_WORDS = lazy_regex(r"JobId=|slurmstepd|slurm_script|srun: |_job_complete|update_node|\bsched: |"
                          r"\*\*\* (?:JOB|STEP) \d|oom[-_]kill event|^State: [A-Z_]+ \(exit code")
_SLURM_WORD_ANCHORS = ("JobId=", "slurmstepd", "slurm_script", "srun: ", "_job_complete", "update_node", "sched: ",
                       "*** JOB ", "*** STEP ", "kill event", "State: ")
"""A text in every _SLURM_WORDS match: a head with none of them has no slurm words, found without a search per line."""
_SACCT_ONLY = {"exitcode", "alloccpus", "maxrss", "totalcpu", "jobidraw", "derivedexitcode", "reqmem", "alloctres",
               "maxvmsize", "averss", "ncpus", "elapsedraw"}
_HEADER_CELLS = sorted({*(k for k, v in _ALIASES.items() if v in ("jobid", "nodelist")), "jobid", "nodelist"})
_HEADER_KEY = lazy_regex(r"[\s|](?:" + "|".join(map(re.escape, _HEADER_CELLS)) + r")(?![^\s|])")
"""A column _header_columns needs (one named jobid or nodelist), as a whole cell of the lower-cased lines, each
after a newline: lines without one are not tried as a table header."""


def _log_lines(lines: list[str]) -> int:
    return sum(1 for line in lines if _LOG_BRACKET.match(line) or _LOG_SYSLOG.match(line)
               or _LOG_ISO_SYSLOG.match(line))


def _unwrap(line: str) -> str:
    """A line quoted as a JSON string (Ansible's stdout_lines) back to its text."""
    m = _ANSIBLE.match(line)
    if not m:
        return line
    try:
        return json.loads(no_lone_surrogates(f'"{m.group(1)}"'))
    except ValueError:
        return m.group(1)


# ===================================================================== parse
def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind in JSON_KINDS:
        yield from _parse_json(stream, ctx)
    elif kind == "slurm_config":
        yield from _parse_config(stream, ctx)
    else:
        yield from _TextParser(kind, ctx).run(stream)


def _parse_config(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    for n, line in ctx.lines(stream):
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SLURM_VERSION":
            yield HostFact("versions.slurm", value.strip())
        elif sep and key.strip() == "ClusterName":
            yield HostFact("slurm.cluster", value.strip())
        elif line.strip() and not sep and not line.startswith("Configuration data"):
            yield Skipped(n, "not a scontrol show config line")


# --------------------------------------------------------------------- helpers shared by the parsers
def parse_time(text: str | None) -> datetime | None:
    """A Slurm time (ISO, with or without offset) as UTC; 'Unknown', 'None', 'N/A' -> None."""
    if not text:
        return None
    text = text.strip()
    if not re.match(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d)?", text):
        return None
    try:
        return to_utc(datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T", 1)))
    except ValueError:
        return None


def parse_duration(text: str | None) -> int | None:
    """Slurm durations ``[D-]HH:MM:SS``, ``MM:SS``, ``MM`` as seconds."""
    if not text:
        return None
    m = re.fullmatch(r"\s*(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?(?:\.\d+)?\s*", text)
    if not m:
        return None
    days, a, b, c = m.groups()
    if c is not None:
        secs = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:
        secs = int(a) * 60 + int(b) if days is None else int(a) * 3600 + int(b) * 60
    else:
        secs = int(a) * 60 if days is None else int(a) * 3600
    return secs + int(days or 0) * 86400


def job_state(text: str | None) -> tuple[str | None, str | None]:
    """Slurm's state spellings (``CANCELLED by 0``, ``CANCELLED+``, ``CA``, ``CONFIGUR``) -> (STATE, by-uid)."""
    if not text:
        return None, None
    raw = text.strip()
    by = None
    m = re.match(r"^(\S+)\s+by\s+(\S+)", raw)
    if m:
        raw, by = m.group(1), m.group(2)
    word = raw.rstrip("+").upper()
    if not word:
        return None, by
    if word in JOB_CODES:
        return JOB_CODES[word], by
    if word in JOB_STATES:
        return word, by
    matches = [s for s in JOB_STATES if s.startswith(word)]
    if len(matches) >= 1 and len(word) >= 4:
        return matches[0], by
    return (word if re.fullmatch(r"[A-Z_]{2,}", word) else None), by


def node_state(text: str | None) -> tuple[str | None, list[str]]:
    """``IDLE+DRAIN``, ``drng@``, ``down*``, ``drained`` -> (canonical state, detail flags)."""
    if not text:
        return None, []
    words: list[str] = []
    for i, piece in enumerate(re.split(r"[+,\s]+", text.strip())):
        core = piece.rstrip("*~#!%$@^-")
        if core and i > 0 and core.upper() == "DRAIN":
            words.append("DRAIN")  # scontrol's +DRAIN flag; sinfo's lone "drain" means drained
        elif core:
            words.append(NODE_WORDS.get(core.lower(), core.upper()))
        words.extend(NODE_SUFFIX[suffix] for suffix in piece[len(core):])
    seen = set(words)
    for canon, members in NODE_CANON:
        if seen & members:
            flags = [w for w in words if w != canon]
            if canon == "DRAIN" and not seen & {"DRAINED", "DRAINING"}:
                # scontrol's IDLE+DRAIN is drained; ALLOCATED/MIXED+DRAIN still runs jobs: draining
                flags.append("DRAINING" if seen & {"ALLOCATED", "MIXED", "COMPLETING"} else "DRAINED")
            return canon, flags
    suffixes = set(NODE_SUFFIX.values())
    primary = next((w for w in words if w not in suffixes), words[0] if words else None)
    return primary, [w for w in words if w != primary]


def _exit_pair(text: str | None) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(-?\d+)(?::(\d+))?\s*", text or "")
    if not m:
        return None, None
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def _clean(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return None if text.lower() in ("", "none", "(null)", "n/a", "unknown") else text


# --------------------------------------------------------------------- events
def job_events(job: str | None, state_text: str | None, *, line: int | None = None, exit_code: str | None = None,
               derived: str | None = None, nodes: str | None = None, reason: str | None = None,
               elapsed: int | None = None, submit: datetime | None = None, start: datetime | None = None,
               end: datetime | None = None, snapshot: datetime | None = None, snapshot_origin: str = "mtime",
               name: str | None = None, partition: str | None = None, user: str | None = None,
               exit_status: tuple[int | None, int | None] | None = None, start_approx: bool = False,
               tres: str | None = None, batch_host: str | None = None) -> list[Event]:
    """One event per dated transition of a job or, for a step id, a step_killed when it did not complete.

    PENDING at submit, RUNNING (or CONFIGURING) at start, a terminal state at end; a state whose
    moment is unknown is dated by ``snapshot`` (when the output was taken), marked approximate.
    A job's event is filed on its batch host: the one Slurm printed, else the first node of the list
    (where Slurm runs a batch script); its attrs name every node. Not NULL: ingest files a host-less
    row on the host that captured it, which for a multi-node job is any node, once per node."""
    state, by = job_state(state_text)
    if state is None:
        return []
    node_list = expand_hostlist(nodes)
    code, sig = exit_status if exit_status is not None else _exit_pair(exit_code)
    host = node_list[0] if node_list else None
    if job and "." in job:
        when = end or start or snapshot
        return _step_event(job, state, code, sig, host, when, line, approx=not (end or start),
                           origin="iso" if (end or start) else snapshot_origin)
    batch_host = _clean(batch_host)
    host = batch_host if batch_host in node_list else host
    common = {"job": job, "nodes": node_list[:MAX_NODES], "name": _clean(name), "partition": _clean(partition),
              "user": _clean(user), "tres": _clean(tres)}
    final = dict(common, state=state, reason=_clean(reason), elapsed=elapsed)
    if state in TERMINAL:
        final.update(exit_code=code, signal=sig, cancelled_by=by,
                     derived_exit_code=derived.strip() if derived and derived.strip() else None)
    steps: list[tuple[str, datetime | None, dict[str, Any], bool, str]] = []
    if submit is not None:
        steps.append(("PENDING", submit, final if state == "PENDING" else dict(common, state="PENDING"), False, "iso"))
    if start is not None and node_list and state not in ("PENDING", "CONFIGURING"):
        steps.append(("RUNNING", start, final if state == "RUNNING" else dict(common, state="RUNNING"),
                      start_approx, snapshot_origin if start_approx else "iso"))
    if state in TERMINAL:
        steps.append((state, end or snapshot, final, end is None, "iso" if end else snapshot_origin))
    elif not steps or steps[-1][0] != state:
        if start is not None and state in ("RUNNING", "CONFIGURING"):
            steps.append((state, start, final, start_approx, snapshot_origin if start_approx else "iso"))
        else:
            steps.append((state, snapshot, final, True, snapshot_origin))
    return [_job_event(job, st, when, attrs, approx, origin, host, nodes if node_list else None, line)
            for st, when, attrs, approx, origin in steps]


def _job_event(job: str | None, state: str, when: datetime | None, attrs: dict[str, Any], approx: bool, origin: str,
               host: str | None, nodes: str | None, line: int | None) -> Event:
    attrs = {k: v for k, v in attrs.items() if v not in (None, [], "")}
    if state == "PENDING" and (waits := reason_class(attrs.get("reason"))) is not None:
        attrs["reason_class"] = waits
    label = f"job {job or '?'}" + (f" ({attrs['name']})" if attrs.get("name") else "")
    detail = f" exit {attrs['exit_code']}:{attrs.get('signal') or 0}" if "exit_code" in attrs else ""
    if "exit_code" not in attrs and attrs.get("signal"):
        detail = f" signal {attrs['signal']}"
    where = f" on {nodes}" if nodes and state != "PENDING" else ""
    why = f" reason {attrs['reason']}" if attrs.get("reason") else ""
    return Event(kind="job_state", message=f"{label} {state}{detail}{where}{why}", ts=when,
                 ts_origin=origin if when else "none", ts_approx=approx and when is not None,
                 host=host if state != "PENDING" else None, job=job, severity=JOB_SEVERITY.get(state, "info"),
                 attrs=attrs, line=line)


def _step_event(step: str, state: str, code: int | None, sig: int | None, host: str | None, when: datetime | None,
                line: int | None, *, approx: bool, origin: str) -> list[Event]:
    if state in ("COMPLETED", "RUNNING", "PENDING", "COMPLETING"):
        return []
    job = step.split(".", 1)[0]
    attrs = {k: v for k, v in {"job": job, "step": step, "state": state, "exit_code": code, "signal": sig,
                               "node": host}.items() if v is not None}
    msg = f"step {step} {state}" + (f" exit {code}:{sig or 0}" if code is not None else "")
    return [Event(kind="step_killed", message=msg, ts=when, ts_origin=origin if when else "none",
                  ts_approx=approx and when is not None, host=host, job=job,
                  severity="error" if state in ("FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "TIMEOUT") else "warning",
                  attrs=attrs, line=line)]


def node_event(node: str, state_text: str | None, *, reason: str | None = None, user: str | None = None,
               ts: datetime | None = None, line: int | None = None, approx: bool = False, origin: str = "iso",
               partition: str | None = None, only_unhealthy: bool = False,
               raw_state: str | None = None) -> Event | None:
    state, flags = node_state(state_text)
    reason = _clean(reason)
    if only_unhealthy and state in HEALTHY_NODE and not reason and "NOT_RESPONDING" not in flags:
        return None
    attrs = {k: v for k, v in {"node": node, "state": state, "state_raw": raw_state or _clean(state_text),
                               "flags": flags, "reason": reason, "user": _clean(user),
                               "partition": _clean(partition)}.items() if v not in (None, [], "")}
    severity = NODE_SEVERITY.get(state or "", "warning" if "NOT_RESPONDING" in flags else "info")
    msg = f"node {node} {state or 'reason set'}" + (f" ({attrs['state_raw']})" if attrs.get("state_raw")
                                                    and attrs["state_raw"] != state else "")
    if reason:
        msg += f": {reason}"
    return Event(kind="node_state", message=msg, ts=ts, ts_origin=origin if ts else "none",
                 ts_approx=approx and ts is not None, host=node, severity=severity, attrs=attrs, line=line)


# --------------------------------------------------------------------- JSON
def _parse_json(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    data = stream.read(MAX_JSON_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_JSON_BYTES:
        yield Skipped(None, f"Slurm JSON larger than {MAX_JSON_BYTES >> 20} MiB")
        return
    try:
        doc = json.loads(decoded(data))
    except ValueError as exc:
        yield Skipped(None, f"not valid JSON: {exc}"[:200])
        return
    if not isinstance(doc, dict):
        yield Skipped(None, "Slurm JSON is not an object")
        return
    release = _dig(doc, "meta", "Slurm", "release") or _dig(doc, "meta", "slurm", "release") or ""
    broken = str(release).startswith("22.05")
    if release:
        yield HostFact("versions.slurm", str(release))
    snapshot = ctx.mtime
    readers = (("jobs", lambda job: _json_job(job, broken, snapshot)),
               ("nodes", lambda node: [e for e in (_json_node(node, snapshot),) if e is not None]),
               ("sinfo", lambda entry: _json_sinfo(entry, snapshot)))
    for key, read in readers:  # one item that cannot be read is one counted skip, the others are read
        items = doc.get(key) or []
        if not isinstance(items, list):
            yield Skipped(None, f"Slurm JSON {key!r} is not a list")
            continue
        for item in items:
            if isinstance(item, dict):
                yield from one_item(lambda item=item, read=read: read(item), f"Slurm JSON {key!r} item")


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _num(value: Any) -> int | None:
    """Slurm JSON numbers: plain, or {"set": bool, "infinite": bool, "number": n} since 23.02."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value)


def _epoch(value: Any) -> datetime | None:
    n = _num(value)
    if not n or n <= 0:
        return None
    try:
        return datetime.fromtimestamp(n, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _first(value: Any) -> str | None:
    if isinstance(value, list):
        return str(value[0]) if value else None
    return None if value is None else str(value)


def _json_exit(value: Any, state: str | None, broken: bool) -> tuple[int | None, int | None]:
    if isinstance(value, dict):
        status = _first(value.get("status"))
        code = _num(value.get("return_code"))
        sig = _num(_dig(value, "signal", "id")) or _num(_dig(value, "signal", "signal_id"))
        if broken or (status == "SUCCESS" and code == 0 and state in ("FAILED", "OUT_OF_MEMORY")):
            # the return code is the part 22.05 gets wrong; a signal it names is still real
            return None, sig if status == "SIGNALED" else None
        return code, sig
    n = _num(value)
    if n is None:
        return None, None
    # squeue --json gives the raw wait status (exit code << 8 | signal), correct in 22.05 too
    return (n >> 8) & 0xFF, n & 0x7F


def _json_job(job: dict, broken: bool, snapshot: datetime | None) -> Iterator[Row]:
    job_id = job.get("job_id")
    array_task = _num(_dig(job, "array", "task_id"))
    jid = None if job_id is None else str(job_id) + (f"_{array_task}" if array_task is not None else "")
    state_obj = job.get("state")
    state = _first(state_obj.get("current")) if isinstance(state_obj, dict) else _first(job.get("job_state") or
                                                                                         state_obj)
    reason = state_obj.get("reason") if isinstance(state_obj, dict) else job.get("state_reason")
    times = job.get("time") if isinstance(job.get("time"), dict) else {}
    canon, _ = job_state(state)
    code, sig = _json_exit(job.get("exit_code"), canon, broken)
    nodes = job.get("nodes")
    yield from job_events(
        jid, state, exit_status=(code, sig), nodes=nodes if isinstance(nodes, str) else None, reason=_clean(reason),
        elapsed=_num(times.get("elapsed")), submit=_epoch(times.get("submission") or job.get("submit_time")),
        start=_epoch(times.get("start") or job.get("start_time")), end=_epoch(times.get("end") or job.get("end_time")),
        snapshot=snapshot, name=job.get("name"), partition=job.get("partition"),
        user=job.get("user") or job.get("user_name"), batch_host=job.get("batch_host"))
    for step in job.get("steps") or []:
        if not isinstance(step, dict):
            continue
        sid = step.get("step")
        sid = sid.get("id") if isinstance(sid, dict) else sid
        if isinstance(sid, dict):
            sid = sid.get("step_id") or sid.get("name")
        if sid is None or jid is None:
            continue
        sname = str(sid) if "." in str(sid) else f"{jid}.{sid}"
        stime = step.get("time") if isinstance(step.get("time"), dict) else {}
        sstate = _first(step.get("state"))
        scanon, _ = job_state(sstate)
        scode, ssig = _json_exit(step.get("exit_code"), scanon, broken)
        snodes = _dig(step, "nodes", "range")
        yield from job_events(sname, sstate, exit_status=(scode, ssig), nodes=snodes, start=_epoch(stime.get("start")),
                              end=_epoch(stime.get("end")), snapshot=snapshot)


def _json_node(node: dict, snapshot: datetime | None) -> Event | None:
    name = node.get("name") or node.get("hostname")
    if not name:
        return None
    state = node.get("state")
    parts = [str(s) for s in (state if isinstance(state, list) else [state]) if s]
    parts += [str(f) for f in node.get("state_flags") or []]
    when = _epoch(node.get("reason_changed_at"))
    reason = node.get("reason")
    if isinstance(reason, dict):
        when = when or _epoch(reason.get("time"))
        reason = reason.get("description")
    return node_event(str(name), "+".join(parts), reason=reason, user=node.get("reason_set_by_user"),
                      ts=when or snapshot, approx=when is None, origin="iso" if when else "mtime",
                      only_unhealthy=True)


def _json_sinfo(entry: dict, snapshot: datetime | None) -> Iterator[Row]:
    names = _dig(entry, "nodes", "nodes") or []
    states = _dig(entry, "node", "state") or []
    reason = entry.get("reason") if isinstance(entry.get("reason"), dict) else {}
    when = _epoch(reason.get("time"))
    for name in names if isinstance(names, list) else []:
        event = node_event(str(name), "+".join(str(s) for s in states), reason=reason.get("description"),
                           user=reason.get("user"), ts=when or snapshot, approx=when is None,
                           origin="iso" if when else "mtime", only_unhealthy=True)
        if event is not None:
            yield event


# --------------------------------------------------------------------- text
def _header_columns(line: str) -> tuple[list[str], str, int | None] | None:
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
    cols = [_ALIASES.get(c.lower(), c.lower()) for c in raw]
    if not ({"jobid", "nodelist"} & set(cols)):
        return None
    return cols, delim, next((i for i, c in enumerate(raw) if c.lower() in _SLACK_COLUMNS), None)


class _TextParser:
    """Any mix of Slurm text outputs, line by line, with just enough state to read tables and records."""

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

    # -- driver
    def run(self, stream: BinaryIO) -> Iterator[Row]:
        for n, raw in self.ctx.lines(stream):
            line = _unwrap(raw).rstrip()
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
        if self.record and (line[:1].isspace() and _KV_START.match(line)):
            self.record.append((n, stripped))
            return
        if self.record:
            yield from self._flush_record()
        if self.pending_reason is not None and not _UPDATE_STATE.search(stripped):
            yield from self._flush_reason()
        if _PROMPT.match(line) and not _KV_START.match(stripped):
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
        header = None if stripped[:1] == "[" else _header_columns(stripped)
        if header:
            self.table = {"cols": header[0], "delim": header[1], "slack": header[2], "slices": None}
            return
        if _KV_START.match(stripped) and len(_KV_SPLIT.findall(stripped)) >= 2:
            self.record = [(n, stripped)]
            return
        rows = self._free_line(n, stripped)
        if rows is None:
            rows = self._headerless_row(n, stripped)
        if rows is None:
            yield Skipped(n, "not a Slurm line")
            return
        yield from self._dated(rows)

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

    # -- key=value records: scontrol show job/node (one line or many), jobcomp/filetxt
    def _flush_record(self) -> Iterator[Row]:
        if not self.record:
            return
        lines, self.record = self.record, []
        first = lines[0][0]
        kv = _kv(" ".join(text for _, text in lines))
        if "NodeName" in kv and "State" in kv and "JobState" not in kv:
            rows: list[Row] = []
            reason, user, when = kv.get("Reason"), None, None
            m = _REASON_TAIL.match(reason or "")
            if m:
                reason, user, when = m.group("reason"), m.group("user"), parse_time(m.group("ts"))
            for node in expand_hostlist(kv["NodeName"]) or [kv["NodeName"]]:
                event = node_event(node, kv.get("State"), reason=reason, user=user, ts=when or self._snapshot(),
                                   approx=when is None, origin="iso" if when else self._snapshot_origin(), line=first,
                                   partition=kv.get("Partitions"), only_unhealthy=True)
                if event is not None:
                    rows.append(event)
            yield from self._dated(rows)
            return
        if "JobState" in kv or "JobId" in kv and "State" in kv:
            job = _clean(kv.get("JobId"))
            if kv.get("ArrayJobId") and kv.get("ArrayTaskId") and _clean(kv.get("ArrayTaskId")):
                job = f"{kv['ArrayJobId']}_{kv['ArrayTaskId']}"
            user = kv.get("UserId", "").split("(")[0] or None
            rows = list(job_events(
                job, kv.get("JobState") or kv.get("State"), line=first, exit_code=kv.get("ExitCode"),
                derived=kv.get("DerivedExitCode"), nodes=kv.get("NodeList"), reason=kv.get("Reason"),
                elapsed=parse_duration(kv.get("RunTime")), submit=parse_time(kv.get("SubmitTime")),
                start=parse_time(kv.get("StartTime")), end=parse_time(kv.get("EndTime")), snapshot=self._snapshot(),
                snapshot_origin=self._snapshot_origin(), name=kv.get("JobName") or kv.get("Name"),
                partition=kv.get("Partition"), user=user, tres=kv.get("TRES") or kv.get("Tres"),
                batch_host=kv.get("BatchHost")))
            if job:
                self.current_job = job
            yield from self._dated(rows)
            return
        if not any(k in kv for k in ("PartitionName", "ReservationName", "Cluster", "SLURM_VERSION")):
            yield Skipped(first, "key=value record that is neither a job nor a node")

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
        fields = [_ALIASES.get(f.lower(), f.lower()) for f in SACCT_FIELDS.split(",")]
        if self.kind == "sacct" and abs(len(values) - len(fields)) <= 1 and re.match(r"^\d", values[0]):
            return self._row_events(n, dict(zip(fields, values)))
        if self.kind == "sinfo" and (m := _SINFO_R_ROW.match(line)) is not None:
            return self._row_events(n, m.groupdict())
        return None

    def _row_events(self, n: int, row: dict[str, str]) -> list[Row]:
        if "jobid" in row:
            job = _clean(row.get("jobid"))
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

    def _snapshot(self) -> datetime | None:
        return self.snapshot or self.ctx.mtime

    def _snapshot_origin(self) -> str:
        return "neighbour" if self.snapshot else "mtime"

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
        month = MONTHS.get(m.group("mon").lower())
        if not month:
            return None
        year, _ = infer_year(month, int(m.group("day")), self.ctx.reference_for(m.group("host")))
        try:
            return datetime.strptime(f"{year} {month} {m.group('day')} {m.group('clock')}",
                                     "%Y %m %d %H:%M:%S").replace(tzinfo=timezone.utc)
        except ValueError:
            return None

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
            events = _step_event(ident, state, None, None, node, when, n, approx=False, origin="iso")
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


def _date_line(m: re.Match[str]) -> datetime | None:
    mon, day, clock, year = m.groups()
    try:
        return datetime.strptime(f"{year} {mon} {day} {clock}", "%Y %b %d %H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _kv(text: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` -> dict; a value runs until the next `` Key=``."""
    out: dict[str, str] = {}
    matches = list(_KV_SPLIT.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out.setdefault(m.group(1), text[m.end():end].strip())
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
