"""Live capture: ask the controller what happened in the window (sacct, scontrol show job/node,
sinfo -R, sacctmgr show event), then copy the tails of the slurmctld/slurmd logs."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from collectors.base import Artifact, CaptureContext
from collectors.slurm.config import config_settings

COMMAND_TIMEOUT = 20.0
LOG_TAIL_BYTES = 32 << 20
SACCT_FIELDS = ("JobID,JobName,State,ExitCode,DerivedExitCode,Elapsed,Timelimit,Submit,Start,End,NodeList,Reason,"
                "User,Partition,AllocTRES")
EVENT_FIELDS = "NodeName,Start,End,State,Reason,User"
LOG_PATHS = ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmd.log", "/var/log/slurmctld.log",
             "/var/log/slurmd.log", "/var/log/slurm-llnl/slurmctld.log", "/var/log/slurm-llnl/slurmd.log")


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
    settings = config_settings(_artifact_text(config, 1 << 20))
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


def _read_tail(ctx: CaptureContext, path: str, kind: str = "slurm_log") -> Artifact | None:
    """The last LOG_TAIL_BYTES of a log: an incident is at the end of a log, not its start."""
    return ctx.read_file(path, kind=kind, max_bytes=LOG_TAIL_BYTES, tail=True)


def _json_exit_codes_broken(head: str) -> bool:
    """Slurm 22.05's sacct --json writes exit_code SUCCESS/0 for every job, failed ones too."""
    m = re.search(r'"release"\s*:\s*"(\d+)\.(\d+)', head)
    return bool(m and (int(m.group(1)), int(m.group(2))) == (22, 5))
