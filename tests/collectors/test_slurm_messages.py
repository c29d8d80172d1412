# ruff: noqa: E501  (real slurmd/slurmctld lines keep their long lines)
"""Slurm daemons' error lines and pending reasons: a node problem gets the reason Slurm drains for,
any other error or fatal line of a Slurm daemon is one slurm_daemon_error, and a pending job says
whether it waits on capacity, a policy limit or unavailable nodes."""

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors import slurm
from collectors.base import Event, ParseContext
from collectors.slurm.messages import daemon_message, reason_class

MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _events(text: str, kind: str = "slurm_log") -> list[Event]:
    ctx = ParseContext(host=None, mtime=MTIME)
    return [r for r in slurm.parse(kind, io.BytesIO(text.encode()), ctx) if isinstance(r, Event)]


def test_a_daemon_error_is_kept_with_its_step_and_family():
    # https://github.com/SchedMD/slurm/blob/284c3b95f08a2dc2478499837b03355e1b9c5c75/src/slurmd/slurmstepd/mgr.c (filled)
    (event,) = _events("[2026-03-02T10:15:42.118] [4242.0] error: execve(): python: No such file or directory\n")
    assert event.kind == "slurm_os_error" and event.attrs["step"] == "4242.0" and event.job == "4242"
    assert event.attrs["daemon"] == "slurmstepd" and event.attrs["level"] == "error"
    assert event.ts == datetime(2026, 3, 2, 10, 15, 42, 118000, tzinfo=timezone.utc)


def test_a_fatal_line_is_critical():
    (event,) = _events("[2026-03-02T10:15:42.118] fatal: Unable to determine this slurmd's NodeName\n")
    assert event.kind.startswith("slurm_") and event.kind.endswith("_error") and event.severity == "critical"


def test_a_node_problem_names_the_drain_reason():
    # https://github.com/awslabs/awsome-distributed-ai/issues/185 (slurmd's spank epilog under syslog)
    kind, attrs = daemon_message("error: Prolog failed with rc 1 for JobId=63532")
    assert kind == "node_problem" and attrs["reason"] == "Prolog error" and attrs["job"] == "63532"
    kind, attrs = daemon_message("error: _slurm_rpc_node_registration node=gpu-node-07: Invalid argument")
    assert (kind, attrs["node"], attrs["reason"]) == ("node_problem", "gpu-node-07", "node registration invalid")
    events = _events("Mar 02 10:15:42 gpu-node-07 slurmctld[811]: error: _slurm_rpc_node_registration node=gpu-node-07: Invalid argument\n")
    assert [(e.kind, e.host, e.attrs["reason"]) for e in events] == [("node_state", "gpu-node-07", "node registration invalid")]


def test_the_lines_jobs_and_nodes_already_had_keep_their_events():
    # https://github.com/ai4d-iasc/trixie/issues/45
    text = ("[2020-12-14T09:43:55.500] [63532.0] error: *** STEP 63532.0 ON cn106 CANCELLED AT 2020-12-14T09:43:55 ***\n"
            "[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT 2020-12-14T09:44:56 DUE TO JOB NOT ENDING WITH SIGNALS ***\n")
    kinds = [e.kind for e in _events(text)]
    assert kinds == ["step_killed", "step_killed"]


def test_pending_reasons_say_what_the_job_waits_on():
    assert reason_class("Resources") == "capacity"
    assert reason_class("QOSMaxGRESPerUser") == "limit" and reason_class("AssocGrpGRES") == "limit"
    assert reason_class("PartitionTimeLimit") == "limit"
    assert reason_class("ReqNodeNotAvail, UnavailableNodes:gpu[01-04]") == "nodes_unavailable"
    assert reason_class("DependencyNeverSatisfied") == "dependency"
    assert reason_class("launch failed requeued held") == "nodes_unavailable"
    assert reason_class("None") is None


def test_a_pending_job_record_carries_its_reason_class():
    # scontrol show job -o, the layout of https://github.com/SchedMD/slurm/blob/284c3b95f08a2dc2478499837b03355e1b9c5c75/src/common/job_state_reason.c (filled)
    (event,) = _events("JobId=4242 JobName=train UserId=alice(1000) JobState=PENDING Reason=QOSMaxGRESPerUser "
                       "Dependency=(null) SubmitTime=2026-03-02T10:00:00 StartTime=Unknown\n", kind="scontrol_job")
    assert event.attrs["state"] == "PENDING" and event.attrs["reason_class"] == "limit"


def test_an_error_line_cut_after_its_level_gives_no_event():
    assert daemon_message("error: ") is None
    assert _events("srun: error: \n") == []


def test_a_plugins_error_line_keeps_the_plugins_name():
    # https://github.com/awslabs/awsome-distributed-ai/issues/185
    (event,) = _events("Feb 22 17:46:38 ip-10-1-74-228 slurmd[13562]: spank-epilog: error: pyxis: mkdir: cannot create directory '/opt/dlami/nvme/tmp/enroot/data': Permission denied\n")
    assert event.kind == "slurm_plugin_error" and event.host == "ip-10-1-74-228" and event.attrs["daemon"] == "slurmd"
    assert event.attrs["error"].startswith("spank-epilog: pyxis: mkdir: cannot create directory")


def test_a_sinfo_r_row_without_its_header():
    # https://github.com/awslabs/awsome-distributed-ai/issues/185 (the header was pasted on the command line)
    (event,) = _events("sinfo -R REASON USER TIMESTAMP NODELIST\n\nKill task failed root 2024-01-25T15:12:23 ip-10-0-1-23\n",
                       kind="sinfo")
    assert (event.kind, event.host, event.attrs["reason"], event.attrs["user"]) == ("node_state", "ip-10-0-1-23",
                                                                                   "Kill task failed", "root")
    assert event.ts == datetime(2024, 1, 25, 15, 12, 23, tzinfo=timezone.utc)


def test_daemon_errors_say_what_they_are_about():
    # filled from https://github.com/SchedMD/slurm/blob/284c3b95f08a2dc2478499837b03355e1b9c5c75/src/slurmd/slurmd/req.c
    assert daemon_message("error: Security violation: sbcast_cred from 1000 has bad hostset node01")[0] == "slurm_auth_error"
    assert daemon_message("error: stepd_connect to StepId=4242.0 failed: Connection refused")[0] == "slurm_communication_error"
    assert daemon_message("error: couldn't chdir to `/home/alice': No such file or directory")[0] == "slurm_os_error"
    assert daemon_message("error: _pack_node: protocol_version 9728 not supported")[0] == "slurm_internal_error"
    assert daemon_message("error: something no family names")[0] == "slurm_daemon_error"
