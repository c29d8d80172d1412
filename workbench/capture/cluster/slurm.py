"""One ``gpuwb capture`` per node through Slurm's own launcher, ``srun``: a step of one task on one
node each, run side by side up to a fan-out, each with its own deadline, so that a node that hangs
or is down costs its own row in the coverage table and not the whole capture.

Inside a running job the step joins the job's allocation (``--jobid --overlap``: the hung training
step keeps its CPUs, the capture shares them); otherwise each node gets a one-node allocation that
must start within a few seconds (``--immediate``). Every command is an argv list: no shell ever sees
a node name, a job id or a path.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

from collectors.framework.hostlist import expand_hostlist
from workbench.capture.cluster.coverage import NodeResult, down, judge
from workbench.errors import UsageError

SLURM_TIMEOUT_S = 30.0
"""A Slurm client call that takes longer than this means the controller is not answering."""
KILL_GRACE_S = 5.0
"""After TERM, how long srun gets to cancel its step before it is killed."""
ALLOCATION_WAIT_S = 10
"""Outside a job: how long srun may wait for a node's one-node allocation (``--immediate``)."""
DOWN_STATES = ("down", "future", "powered_down", "power_down", "powering_down")
"""Node states (sinfo ``%T``, without the ``*`` of a node not responding) where nothing is launched."""

INTERRUPTED = "interrupted (Ctrl-C)"

_JOB_ID = re.compile(r"^\d+(?:_\d+)?$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass
class JobNodes:
    """A job as Slurm tells it: its state and the nodes it was given."""

    job: str
    state: str
    nodes: list[str]

    @property
    def running(self) -> bool:
        return self.state == "RUNNING"


@dataclass
class NodePlan:
    """How one node is asked: the srun argv, where its bundle and its log go."""

    node: str
    argv: list[str]
    bundle: Path
    log: Path
    slurm_state: str = ""


def check_job_id(job: str) -> str:
    if not _JOB_ID.match(job):
        raise UsageError(f"not a Slurm job id: {job!r} (e.g. 48213 or 48213_7)")
    return job


def node_names(hostlist: str) -> list[str]:
    """A Slurm host list as node names, each usable as a file name; duplicates dropped."""
    names = list(dict.fromkeys(expand_hostlist(hostlist)))
    if not names:
        raise UsageError(f"no node in {hostlist!r}")
    bad = [n for n in names if not _NODE.match(n)]
    if bad:
        raise UsageError(f"not a node name: {bad[0]!r}")
    return names


def slurm(argv: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """A Slurm client call with a deadline; a missing client or a silent controller is one line."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_TIMEOUT_S, stdin=subprocess.DEVNULL,
                              env=dict(env if env is not None else os.environ, SLURM_TIME_FORMAT="standard"))
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} not found: cluster capture runs through Slurm's clients") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{' '.join(argv[:3])}: no answer from the Slurm controller in {SLURM_TIMEOUT_S:g} s") \
            from None


def job_nodes(job: str, env: Mapping[str, str] | None = None) -> JobNodes:
    """The job's state and node list: ``scontrol show job`` while the controller remembers it, else sacct."""
    check_job_id(job)
    shown = slurm(["scontrol", "show", "job", "-o", job], env)
    if shown.returncode == 0:
        fields = dict(tok.split("=", 1) for tok in shown.stdout.split() if "=" in tok)
        nodes = expand_hostlist(fields.get("NodeList"))
        if nodes:
            return JobNodes(job, fields.get("JobState", ""), node_names(",".join(nodes)))
    acct = slurm(["sacct", "-j", job, "-X", "-n", "-P", "-o", "NodeList,State"], env)
    for line in acct.stdout.splitlines():
        nodelist, _, state = line.partition("|")
        nodes = expand_hostlist(nodelist)
        if nodes:
            return JobNodes(job, state.split()[0] if state.split() else "", node_names(",".join(nodes)))
    said = (shown.stderr or acct.stderr).strip().splitlines()
    raise UsageError(f"Slurm names no nodes for job {job}" + (f": {said[-1]}" if said else ""))


def node_states(nodes: list[str], env: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """node -> (sinfo state such as ``idle``, ``mixed*``, ``down*``; reason). Unknown nodes are absent."""
    out = slurm(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E"], env)
    states: dict[str, tuple[str, str]] = {}
    for line in out.stdout.splitlines():
        parts = line.split("|", 2)
        if len(parts) == 3 and parts[0] not in states:
            states[parts[0]] = (parts[1].strip(), "" if parts[2].strip() == "none" else parts[2].strip())
    return states


def is_down(state: str) -> bool:
    """Slurm will not reach it: not responding (``*``) or down, powered off, not yet there."""
    return state.endswith("*") or state.rstrip("*~#!%$@^-").lower() in DOWN_STATES


def gpuwb_command(gpuwb: str | None) -> list[str]:
    """How a node starts gpuwb: the given program, else this very interpreter (same venv on every node)."""
    return [gpuwb] if gpuwb else [sys.executable, "-m", "workbench.cli"]


def capture_command(gpuwb: list[str], *, bundle: Path, since: datetime, title: str, safe: bool,
                    job: str | None = None, only: list[str] | None = None, skip: list[str] | None = None) -> list[str]:
    """The ``gpuwb capture`` one node runs; the window start is one absolute time for every node."""
    argv = [*gpuwb, "capture", "-o", str(bundle), "--since", since.astimezone(timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ"), "--title", title]
    if safe:
        argv.append("--safe")
    if job:
        argv += ["--slurm-job", job]
    for name in only or []:
        argv += ["--only", name]
    for name in skip or []:
        argv += ["--skip", name]
    return argv


def srun_command(node: str, command: list[str], *, timeout_s: float, workdir: Path,
                 running_job: str | None = None) -> list[str]:
    """srun for one task on one node, with a step time limit a minute past our own deadline."""
    argv = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", f"--time={math.ceil(timeout_s / 60) + 1}",
            "--job-name=gpuwb-capture", f"--chdir={workdir}"]
    if running_job:
        argv += [f"--jobid={running_job}", "--overlap"]
    else:
        argv.append(f"--immediate={ALLOCATION_WAIT_S}")
    return [*argv, *command]


def run_plans(plans: list[NodePlan], *, timeout_s: float, fanout: int,
              env: Mapping[str, str] | None = None, poll_s: float = 0.1,
              progress: Callable[[NodeResult], None] | None = None) -> tuple[list[NodeResult], bool]:
    """Run every plan's srun, at most ``fanout`` at once, each cut off at ``timeout_s``. Returns one
    result per plan, in the plans' order, and whether the run was complete: Ctrl-C stops every srun
    still running and leaves the nodes not finished as ``failed``, interrupted."""
    pending = deque(plans)
    running: dict[str, tuple[NodePlan, subprocess.Popen, float, datetime, IO[bytes]]] = {}
    results: dict[str, NodeResult] = {}
    complete = True
    try:
        while pending or running:
            while pending and len(running) < fanout:
                plan = pending.popleft()
                log = open(plan.log, "wb")
                proc = subprocess.Popen(plan.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        env=dict(env) if env is not None else None, start_new_session=True)
                running[plan.node] = (plan, proc, time.monotonic(), datetime.now(timezone.utc), log)
            for node, (plan, proc, began, started_at, log) in list(running.items()):
                timed_out = proc.poll() is None and time.monotonic() - began > timeout_s
                if timed_out:
                    stop([proc])
                elif proc.returncode is None:
                    continue
                log.close()
                del running[node]
                results[node] = judge(node, bundle=plan.bundle, log=plan.log, exit_code=proc.returncode,
                                      timed_out=timed_out, timeout_s=timeout_s,
                                      seconds=time.monotonic() - began, slurm_state=plan.slurm_state,
                                      started_at=started_at)
                if progress:
                    progress(results[node])
            time.sleep(poll_s)
    except KeyboardInterrupt:
        complete = False
    finally:
        stop([proc for _plan, proc, _began, _at, _log in running.values()])
        for node, (plan, _proc, began, started_at, log) in running.items():
            log.close()
            results[node] = NodeResult(node, "failed", INTERRUPTED, seconds=time.monotonic() - began,
                                       slurm_state=plan.slurm_state, log=plan.log, started_at=started_at)
    for plan in plans:
        results.setdefault(plan.node, NodeResult(plan.node, "failed", f"not started: {INTERRUPTED}",
                                                 slurm_state=plan.slurm_state))
    return [results[p.node] for p in plans], complete


def stop(procs: list[subprocess.Popen]) -> None:
    """TERM to each srun (it cancels its step on the node), all at once; KILL to the process group of
    any still there after one grace period."""
    alive = [p for p in procs if p.poll() is None]
    for proc in alive:
        proc.terminate()
    deadline = time.monotonic() + KILL_GRACE_S
    for proc in alive:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):  # already gone, or not ours to signal: kill the child
                proc.kill()
            proc.wait(timeout=KILL_GRACE_S)


def plan_nodes(nodes: list[str], states: dict[str, tuple[str, str]], *, folder: Path, gpuwb: list[str],
               since: datetime, timeout_s: float, safe: bool, job: JobNodes | None, only: list[str] | None,
               skip: list[str] | None) -> tuple[list[NodePlan], list[NodeResult]]:
    """A plan for every node Slurm can reach; a ``no answer`` row for each node it reports down or
    does not know."""
    plans: list[NodePlan] = []
    skipped: list[NodeResult] = []
    for node in nodes:
        if node not in states:
            skipped.append(NodeResult(node, "no answer", "Slurm does not know this node"))
            continue
        state, reason = states[node]
        if is_down(state):
            skipped.append(down(node, state, reason))
            continue
        bundle = folder / f"{node}.duckdb"
        title = f"Slurm job {job.job}: {node}" if job else f"cluster capture: {node}"
        command = capture_command(gpuwb, bundle=bundle, since=since, title=title, safe=safe,
                                  job=job.job if job else None, only=only, skip=skip)
        argv = srun_command(node, command, timeout_s=timeout_s, workdir=folder,
                            running_job=job.job if job and job.running else None)
        plans.append(NodePlan(node, argv, bundle, folder / f"{node}.log", state))
    return plans, skipped


def srun_available() -> bool:
    return shutil.which("srun") is not None
