"""Slurm daemons' error and fatal lines that say what broke on a node, by family.

slurmctld, slurmd and slurmstepd write hundreds of distinct error()/fatal() messages (harvested in
collectors/catalog/harvest/slurm.yaml). A few decide a diagnosis on their own: the node was drained
because a prolog or epilog failed, a task could not be killed, the node registered with fewer GPUs
than configured, the step's spool directory filled. Those become ``node_state`` or ``step_killed``
events with the reason Slurm drains the node for; every other error or fatal line of a Slurm daemon
is a ``slurm_<family>_error`` (auth, communication, cgroup, gres, plugin, node_table, step_setup, os,
config, internal: what a responder would look at) with daemon, level, error, job and step, and a line of
no known family the catch-all ``slurm_daemon_error``: never dropped.

The pending reasons of job_state_reason.c are grouped here too: a job that waits on a QOS or
association limit waits on policy, one that waits on Resources waits on capacity, one on
ReqNodeNotAvail on nodes that are down or drained.
"""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex

LEVEL = lazy_regex(r"^(?:(?P<plugin>[\w./-]+): )?(?P<level>error|fatal|FATAL|Error):\s*(?P<rest>.*)$")
"""``error: ...``, or a plugin's ``spank-epilog: error: ...`` as slurmd logs it."""
_STEP = lazy_regex(r"\b(?:StepId=|step )(?P<step>\d+(?:_\d+)?\.(?:\d+|batch|extern|interactive|TBD))\b")
_JOB = lazy_regex(r"\bJobId=(?P<job>\d+(?:_\d+)?)")

NODE_PROBLEMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Prolog error", re.compile(r"\b(?:[Pp]rolog failed|prolog_slurmd failed|[Pp]rolog error|error running prolog)")),
    ("Epilog error", re.compile(r"\b(?:[Ee]pilog failed|[Ee]pilog error|epilog_slurmd failed)")),
    ("Kill task failed", re.compile(r"\b(?:Kill task failed|[Uu]nable to kill|"
                                    r"STEPD TERMINATED .*NOT ENDING WITH SIGNALS|step_terminate_monitor)")),
    ("gres count reported lower than configured", re.compile(r"\b(?P<gres>gres/\w+) count reported lower than "
                                                              r"configured \((?P<found>\d+) < (?P<want>\d+)\)")),
    ("node registration invalid", re.compile(r"_slurm_rpc_node_registration node=(?P<node>[\w.-]+): "
                                             r"(?P<error>.+)$")),
    ("SlurmdSpoolDir is full", re.compile(r"SlurmdSpoolDir is full|[Nn]o space left on device")),
)
"""Messages whose node Slurm drains (or should), by the drain reason Slurm writes for them."""

_ERROR_CLASS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("gres", re.compile(r"\bgres\b|\bGRES\b|gpu", re.I)),
    ("cgroup", re.compile(r"cgroup|cpuset|oom|memory limit|task/affinity|task_g_|task plugin|proctrack|prlimit|"
                          r"RLIMIT|CPU time limit", re.I)),
    ("internal", re.compile(r"underflow|should never happen|Sanity check|\bNULL\b|unpack|_pack|protocol_version|"
                            r"not supported|bitmap|Unrecognized request|bad op code|not valid|didn't understand|"
                            r"incomplete data|ret_list|is NULL|mmap|half-way", re.I)),
    ("auth", re.compile(r"cred|Security violation|munge|auth|setresuid|setgroups|initgroups|privileges|\buid\b|"
                        r"\bgid\b|access denied|SlurmUser|allowed only for root", re.I)),
    ("plugin", re.compile(r"spank|pam_|x11|Xauthority|SELinux|mpi_g_|switch_g_|switch plugin|acct_gather|"
                          r"job_container|Plugin stack|plugins|namespace|bpf|energy|power sensors", re.I)),
    ("node_table", re.compile(r"node state|checkpoint file|unable to find node|does not exist|dynamic node|NodeSet|"
                              r"state file|MaxPoweredUpNodes|[Pp]ower action|PowerAction|reboot|delete|"
                              r"Node creation|create a node|RealMemory|ping_count|node update|INVAL|features",
                              re.I)),
    ("communication", re.compile(r"connect|send|recv|receive|socket|slurm_msg|\bRPC\b|forward|eio|io_init|"
                                 r"response|stepmgr|message|msg|notify|address|resolve|timed out|ack\b|"
                                 r"pending requests|header", re.I)),
    ("step_setup", re.compile(r"TaskProlog|TaskEpilog|task-epilog|prolog|epilog|setup failed|TMPDIR|stepd|"
                              r"slurmstepd|launch|task|runtime setup|IO setup|child|exit|[Pp]rocess \d+|"
                              r"working directory|script|step|zero processors|home directory|tmp file|"
                              r"TMPDIR|SLURM_JOBID|pdebug|job resources|tres list|/dev/null", re.I)),
    ("os", re.compile(r"open|mkdir|chdir|chown|chmod|rmdir|unlink|exec|fork|stat\b|write|read|dup2?\b|pipe|pty|"
                      r"No space|waitpid|kill|signal|setsid|environment|getpw|Permission denied|ioctl|reap|"
                      r"directory|path",
                      re.I)),
    ("config", re.compile(r"conf|config|invalid|parse|not set|unknown|specified|overlaps", re.I)),
)
"""What a daemon error line is about, the first class that matches; each class is its own event kind
(slurm_<class>_error), so a check can ask for the family it cares about."""

_REASON_CLASS = (
    ("capacity", re.compile(r"^(?:Resources|Priority|Reservation|Nodes_required_for_job_are_DOWN.*|"
                            r"NodeDown|BadConstraints|MaxPoweredUpNodes)$")),
    ("nodes_unavailable", re.compile(r"^(?:ReqNodeNotAvail.*|NodeDown|PartitionDown|PartitionInactive|"
                                     r"Nodes_required.*|launch failed requeued held|BootFail)$")),
    ("dependency", re.compile(r"^(?:Dependency|DependencyNeverSatisfied|BeginTime)$")),
    ("held", re.compile(r"^(?:JobHeldUser|JobHeldAdmin|job_requeued_in_held_state|JobHoldMaxRequeue|"
                        r"launch failed requeued held|SchedDefer|FrontEndDown|Prolog)$")),
)


def reason_class(reason: str | None, flags: str = "") -> str | None:
    """What a pending reason waits on: capacity, a policy limit, unavailable nodes, a dependency, a hold."""
    if not reason or reason == "None":
        return None
    if reason.startswith(("QOS", "Assoc", "MaxCpu", "MaxGRES", "MaxNode", "MaxMem", "MaxTRES", "MaxBB",
                          "MaxLicense", "MaxEnergy", "MaxBilling", "MaxUnknown", "MaxVmem", "MaxFS", "MaxWall",
                          "MinCpu", "MinGRES", "MinNode", "MinMem", "MinTRES", "MinBB", "MinLicense", "MinEnergy",
                          "MinBilling", "MinUnknown", "MinVmem", "MinFS", "GrpCpu", "GrpGRES", "GrpNode",
                          "GrpMem", "GrpTRES", "GrpJobs", "GrpSubmit", "GrpWall", "GrpBB", "GrpLicense",
                          "Partition", "AccountNotAllowed", "InvalidAccount", "InvalidQOS", "Licenses")):
        return "limit" if not reason.startswith(("PartitionDown", "PartitionInactive")) else "nodes_unavailable"
    for name, pattern in _REASON_CLASS:
        if pattern.match(reason):
            return name
    return "other"


def daemon_message(body: str) -> tuple[str, dict[str, Any]] | None:
    """An error/fatal line of a Slurm daemon -> (kind, attrs): a node problem, or slurm_daemon_error."""
    m = LEVEL.match(body)
    if m is None:
        return None
    level, rest = m.group("level").lower(), m.group("rest").strip()
    if not rest:
        return None
    if m.group("plugin"):
        rest = f"{m.group('plugin')}: {rest}"
    attrs: dict[str, Any] = {"level": level, "error": rest[:2000]}
    if (s := _STEP.search(rest)) is not None:
        attrs["step"] = s.group("step")
        attrs["job"] = s.group("step").split(".")[0]
    elif (j := _JOB.search(rest)) is not None:
        attrs["job"] = j.group("job")
    for reason, pattern in NODE_PROBLEMS:
        if (p := pattern.search(rest)) is not None:
            attrs["reason"] = reason
            attrs.update({k: v for k, v in p.groupdict().items() if v and k != "error"})
            return "node_problem", attrs
    family = next((name for name, pattern in _ERROR_CLASS if pattern.search(rest)), None)
    return (f"slurm_{family}_error" if family else "slurm_daemon_error"), attrs
