# ruff: noqa: E501, W291  (recorded Slurm outputs below are kept byte-exact: long lines, trailing blanks)
"""Slurm evidence: every scheduler file of the corpus through `gpuwb ingest` + `timeline --json`, checked
against its INDEX.tsv labels; outputs recorded from a real Slurm 22.05 cluster; capture with a fake runner."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import slurm
from collectors.base import Artifact, Event, ParseContext, Skipped
from collectors.framework import hostlist as _hostlist
from collectors.framework import registry
from collectors.slurm import events as slurm_events
from collectors.slurm import live_capture as slurm_capture
from collectors.slurm import states as slurm_states
from tests.conftest import CORPUS, corpus_index, ingest_timeline

INDEX = corpus_index()
SCHEDULER = sorted(p for p in INDEX if p.startswith("scheduler/"))
SLURM_FILES = [p for p in SCHEDULER if "slurm" in INDEX[p]["system"].lower()]
MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


# ============================================================== label checking, shared with test_k8s
def flatten(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in flatten(v)] + [str(k) for k in value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in flatten(v)]
    return [] if value is None else [str(value)]


def facts(events: list[dict]) -> list[str]:
    """Everything an event states in structured form (not its free-text message), lower-cased."""
    out = []
    for e in events:
        out += [str(v).lower() for v in (e["host"], e["job"], e["kind"], e["ts"]) if v]
        out += [v.lower() for k, v in ((k, v) for k, val in e["attrs"].items() if k != "message"
                                       for v in flatten(val))]
        out += [v.lower() for v in flatten(e["attrs"].get("message"))]
    return out


def stated(value: str, events: list[dict]) -> bool:
    """The label value is one of the events' structured facts (containment for long text)."""
    want = value.strip().lower()
    known = facts(events)
    if want in known:
        return True
    return len(want) >= 6 and any(want in f or (len(f) >= 6 and f in want) for f in known)


def parse_label_time(text: str) -> datetime:
    text = text.strip()
    for fmt in ("%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%a %b %d %H:%M:%S %Y", "%Y/%m/%d %H:%M:%S"):
        try:
            return datetime.strptime(re.sub(r"\s+", " ", text), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    return parsedate_to_datetime(text).astimezone(timezone.utc)


def event_times(events: list[dict]) -> set[datetime]:
    return {datetime.fromisoformat(e["ts"]).replace(microsecond=0).astimezone(timezone.utc)
            for e in events if e["ts"]}


def values(text: str) -> list[str]:
    """``a,b`` -> [a, b] but ``gpu[01-04,07]`` stays one hostlist."""
    return _hostlist.split_hostlist(text)


def has_state(events: list[dict], want: str) -> bool:
    want = want.strip()
    canon = slurm_states.job_state(want)[0] or want.upper()
    for e in events:
        attrs = e["attrs"]
        for got in (attrs.get("state"), attrs.get("state_raw"), attrs.get("reason")):
            if got and (str(got).lower() == want.lower() or str(got) == canon or str(got).startswith(want.upper())):
                return True
    return False


def has_exit(events: list[dict], want: str) -> bool:
    code, _, sig = want.partition(":")
    for e in events:
        attrs = e["attrs"]
        if str(attrs.get("exit_code")) == code and (not sig or str(attrs.get("signal") or 0) == sig):
            return True
    return False


def hosts_named(events: list[dict], text: str) -> bool:
    names = {n.lower() for n in _hostlist.expand_hostlist(text)}
    seen = {str(v).lower() for e in events for v in [e["host"], *flatten(e["attrs"].get("nodes")),
                                                     e["attrs"].get("node")] if v}
    return names <= seen


def check_time(events: list[dict], text: str) -> None:
    try:
        items = [text] if parse_label_time(text) else []
    except (TypeError, ValueError):
        items = text.split(",")
    for item in items:
        when = parse_label_time(item).replace(microsecond=0)
        assert when in event_times(events), f"no event at {when}: {sorted(event_times(events))[:10]}"


LABEL_CHECKS = {
    "jobid": lambda ev, v: all(any(e["job"] == j for e in ev) for j in values(v)),
    "jobs": lambda ev, v: all(any(e["job"] == j for e in ev) for j in values(v)),
    "state": lambda ev, v: has_state(ev, v.split("(")[0]),
    "job_state": lambda ev, v: has_state(ev, v),
    "step0_state": lambda ev, v: any(e["attrs"].get("step", "").endswith(".0") and e["attrs"].get("state") == v
                                     for e in ev),
    "step0_exit": lambda ev, v: has_exit([e for e in ev if e["attrs"].get("step", "").endswith(".0")], v),
    "exit_code": has_exit,
    "signal": lambda ev, v: any(str(e["attrs"].get("signal")) == v or e["attrs"].get("signal_text") == v
                                for e in ev),
    "step": lambda ev, v: all(any(e["attrs"].get("step") == s for e in ev) for s in values(v)),
    "oom_kill_events": lambda ev, v: any(e["kind"] == "oom_kill" and e["attrs"].get("count") == int(v) for e in ev),
    "task": lambda ev, v: all(any(e["attrs"].get("task") == t.split(" ")[0]
                                  and e["attrs"].get("reason") == t.split("(")[1].rstrip(")") for e in ev)
                              for t in values(v)),
    "node": hosts_named, "nodes": lambda ev, v: all(hosts_named(ev, n) for n in values(v)),
    "failed_nodes": lambda ev, v: all(hosts_named(ev, n) for n in values(v)),
    "gpu_drng_nodes": lambda ev, v: hosts_with_state(ev, v, "DRAIN"),
    "gpu_fail_nodes": lambda ev, v: hosts_with_state(ev, v, "FAIL"),
    "gpu_maint_nodes": lambda ev, v: hosts_with_state(ev, v, "MAINT"),
    "cpu_fail_node": lambda ev, v: hosts_with_state(ev, v, "FAIL"),
    "states": lambda ev, v: all(has_state(ev, s) or slurm_states.node_state(s)[0] in slurm_states.HEALTHY_NODE for s in values(v)),
    "reason": lambda ev, v: stated(v, ev),
    "partition": lambda ev, v: any(e["attrs"].get("partition") == v.rstrip("*") for e in ev),
    "count": None, "ts": None, "first_ts": None, "last_ts": None, "cancelled_at": None, "submit_ts": None,
}


def hosts_with_state(events: list[dict], text: str, state: str) -> bool:
    return hosts_named([e for e in events if e["attrs"].get("state") == state], text)


# Labels that say what kind of text a file is (the command, the log, the Slurm message), not what it reports.
DESCRIPTIVE = {"tool", "ts_style", "wrapper", "log", "event"}


def derivable(value: str, text: str) -> bool:
    """Some item of the label, without a parenthetical note, is written in the file."""
    for item in values(value):
        core = re.sub(r"\s+", " ", re.sub(r"\(.*?\)", "", item)).strip().lower()
        if core and core in text:
            return True
    return False


def assert_labels(rel: str, events: list[dict], checks: dict) -> None:
    """Each label of the file holds in the events: typed checks where the key has one; otherwise a
    value that occurs in the file's text must occur among the events' structured facts."""
    labels = INDEX[rel]["parsed_labels"]
    text = re.sub(r"\s+", " ", (CORPUS / rel).read_text(errors="replace").lower())
    for key, value in labels.items():
        if not derivable(value, text):
            continue  # what the reporter knew beside the text (the node of a job's stderr), no parser can
        if key in ("ts", "first_ts", "last_ts", "cancelled_at", "submit_ts", "finished"):
            check_time(events, value)
        elif key == "count":
            reason = labels.get("reason", "")
            assert sum(1 for e in events if e["attrs"].get("reason") == reason) == int(value), key
        elif checks.get(key) is not None:
            assert checks[key](events, value), f"{rel}: label {key}={value} not in events"
        elif key not in DESCRIPTIVE and not stated(value, events):
            for item in values(value):
                if item.lower() in text:
                    assert stated(item, events), f"{rel}: label {key}={item} appears in the file but not in events"


# ============================================================== the corpus, through the user's path
def test_every_scheduler_file_belongs_to_slurm_or_k8s():
    from tests.collectors.test_k8s import K8S_FILES

    assert sorted(SLURM_FILES + K8S_FILES) == SCHEDULER
    assert not set(SLURM_FILES) & set(K8S_FILES)


@pytest.mark.parametrize("rel", SLURM_FILES)
def test_corpus_file_matches_its_labels(rel, bundle_path):
    events = [e for e in ingest_timeline(bundle_path, CORPUS / rel) if e["source"] == "slurm"]
    assert events, f"{rel}: no Slurm events"
    assert {e["kind"] for e in events} <= {"job_state", "node_state", "step_killed", "oom_kill"}
    assert all(e["layer"] == "scheduling" for e in events)
    assert_labels(rel, events, LABEL_CHECKS)


def test_corpus_files_are_sniffed_as_slurm_with_confidence():
    for rel in SLURM_FILES:
        head = (CORPUS / rel).read_text(errors="replace")[:65536]
        found = registry.sniff(rel, head)
        assert found is not None and found[1].NAME == "slurm", rel
        assert max(slurm.sniff(rel, head).values()) >= 80, rel


def test_scontrol_failed_job_dates_each_transition(bundle_path):
    rel = "scheduler/ubuntu-slurm_5_scontrol_show_job_failed_nonzeroexit.txt"
    events = [e for e in ingest_timeline(bundle_path, CORPUS / rel) if e["kind"] == "job_state"]
    assert [(e["attrs"]["state"], e["ts"][:19]) for e in events] == [
        ("PENDING", "2018-11-01T14:54:02"), ("RUNNING", "2018-11-01T14:54:03"), ("FAILED", "2018-11-01T14:54:03")]
    failed = events[-1]
    assert failed["host"] == "asus" and failed["attrs"]["reason"] == "NonZeroExitCode"
    assert (failed["attrs"]["exit_code"], failed["attrs"]["signal"]) == (1, 0)
    assert failed["severity"] == "error" and not failed["ts_approx"]


def test_squeue_snapshot_dates_configuring_jobs_from_their_elapsed_time(bundle_path):
    rel = "scheduler/azhop_1210_sinfo_R_cyclecloud_node_fail_squeue_ansible.txt"
    events = ingest_timeline(bundle_path, CORPUS / rel)
    job3 = next(e for e in events if e["job"] == "3")
    # squeue was taken at 13:51:50 (the date line above it) and job 3 had been configuring 26:07
    assert job3["attrs"]["state"] == "CONFIGURING" and job3["ts"].startswith("2022-11-22T13:25:43")
    assert job3["ts_approx"] and job3["host"] == "hc44rs-pg0-1"
    nodes = [e for e in events if e["kind"] == "node_state"]
    assert [e["host"] for e in nodes] == ["viz3d-1", "viz3d-2", "viz3d-3", "viz3d-4"]
    assert {e["attrs"]["reason"] for e in nodes} == {"cyclecloud_node_fail"}


def test_job_output_lines_without_time_take_their_neighbours(bundle_path):
    rel = "scheduler/hafs_101_slurm_step_oom_and_bus_error_cancelled.log"
    events = ingest_timeline(bundle_path, CORPUS / rel)
    oom = next(e for e in events if e["kind"] == "oom_kill")
    assert oom["ts"].startswith("2021-10-27T19:35:36") and oom["ts_approx"]
    task = next(e for e in events if e["attrs"].get("task") == "4")
    assert task["attrs"]["step"] == "3495064.0" and task["attrs"]["state"] == "OUT_OF_MEMORY"
    assert task["host"] == "Orion-01-01"
    bus = next(e for e in events if e["attrs"].get("task") == "289")
    assert bus["attrs"]["signal"] == 7 and bus["attrs"]["step"] == "3495450.0"


# ============================================================== outputs recorded from a real Slurm 22.05.8
SACCT_P = """\
JobID|JobName|State|ExitCode|DerivedExitCode|Elapsed|Timelimit|Submit|Start|End|NodeList|Reason|User|Partition
1|tlimit|TIMEOUT|0:0|0:0|00:01:27|00:01:00|2026-11-29T23:09:39|2026-11-29T23:09:42|2026-11-29T23:11:09|gpu-node-01|None|root|debug
1.batch|batch|CANCELLED|0:15||00:01:27||2026-11-29T23:09:42|2026-11-29T23:09:42|2026-11-29T23:11:09|gpu-node-01|||
2|train|COMPLETED|0:0|0:0|00:00:05|UNLIMITED|2026-11-29T23:09:39|2026-11-29T23:09:42|2026-11-29T23:09:47|gpu-node-01|None|root|debug
2.batch|batch|COMPLETED|0:0||00:00:05||2026-11-29T23:09:42|2026-11-29T23:09:42|2026-11-29T23:09:47|gpu-node-01|||
3|tocancel|CANCELLED by 0|0:0|0:0|00:00:00|UNLIMITED|2026-11-29T23:09:39|2026-11-29T23:09:42|2026-11-29T23:09:42|gpu-node-01|None|root|debug
3.batch|batch|CANCELLED|0:15||00:00:00||2026-11-29T23:09:42|2026-11-29T23:09:42|2026-11-29T23:09:42|gpu-node-01|||
4|failer|FAILED|3:0|0:0|00:00:00|UNLIMITED|2026-11-29T23:09:39|2026-11-29T23:09:42|2026-11-29T23:09:42|gpu-node-01|None|root|debug
4.batch|batch|FAILED|3:0||00:00:00||2026-11-29T23:09:42|2026-11-29T23:09:42|2026-11-29T23:09:42|gpu-node-01|||
"""
SACCT_TABLE = """\
JobID           JobName  Partition    Account  AllocCPUS      State ExitCode 
------------ ---------- ---------- ---------- ---------- ---------- -------- 
1                tlimit      debug       root          1    TIMEOUT      0:0 
1.batch           batch                  root          1  CANCELLED     0:15 
3              tocancel      debug       root          1 CANCELLED+      0:0 
4                failer      debug       root          1     FAILED      3:0 
"""
SACCT_JSON = json.dumps({
    "meta": {"plugin": {"type": "openapi/dbv0.0.38"}, "Slurm": {"version": {"major": 22, "micro": 8, "minor": 5},
                                                               "release": "22.05.8"}},
    "errors": [],
    "jobs": [{"job_id": 1, "name": "tlimit", "state": {"current": "TIMEOUT", "reason": "None"},
              "exit_code": {"status": "SUCCESS", "return_code": 0},
              "time": {"elapsed": 87, "end": 1795993869, "start": 1795993782, "submission": 1795993779, "limit": 1},
              "nodes": "gpu-node-01", "partition": "debug", "user": "root",
              "steps": [{"step": {"job_id": 1, "id": "batch", "name": "batch"}, "state": "CANCELLED",
                         "exit_code": {"status": "SIGNALED", "return_code": None,
                                       "signal": {"signal_id": 15, "name": "Terminated"}},
                         "nodes": {"range": "gpu-node-01"}, "time": {"end": 1795993869, "start": 1795993782}}]},
             {"job_id": 4, "name": "failer", "state": {"current": "FAILED", "reason": "None"},
              "exit_code": {"status": "SUCCESS", "return_code": 0},
              "time": {"elapsed": 0, "end": 1795993782, "start": 1795993782, "submission": 1795993779, "limit": None},
              "nodes": "gpu-node-01", "partition": "debug", "user": "root", "steps": []}]})
SCONTROL_JOB_MULTILINE = """\
JobId=4 JobName=failer
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901756 Nice=0 Account=root QOS=normal
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=3:0
   RunTime=00:00:00 TimeLimit=UNLIMITED TimeMin=N/A
   SubmitTime=2026-11-29T23:09:39 EligibleTime=2026-11-29T23:09:39
   StartTime=2026-11-29T23:09:42 EndTime=2026-11-29T23:09:42 Deadline=N/A
   Partition=debug AllocNode:Sid=localhost:4799
   NodeList=gpu-node-01
   BatchHost=gpu-node-01
   TRES=cpu=1,node=1,billing=1
   Command=(null)
   StdErr=/tmp/slx/c/out/4.out
   Power=

JobId=1 JobName=tlimit UserId=root(0) GroupId=root(0) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 \
RunTime=00:01:27 TimeLimit=00:01:00 SubmitTime=2026-11-29T23:09:39 StartTime=2026-11-29T23:09:42 \
EndTime=2026-11-29T23:11:09 Partition=debug NodeList=gpu-node-01 BatchHost=gpu-node-01
"""
SCONTROL_NODE = (
    "NodeName=gpu-node-01 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.17 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 NodeHostName=localhost "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 FreeMem=23260 "
    "Sockets=8 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug "
    " BootTime=2026-11-29T22:58:18 SlurmdStartTime=2026-11-29T23:09:38 LastBusyTime=2026-11-29T23:11:09 "
    "CfgTRES=cpu=8,mem=1000M,billing=8 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
    "ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=Xid 79 GPU fell off bus [root@2026-11-29T23:09:47]\n"
    "NodeName=gpu-node-02 Arch=x86_64 CPUAlloc=0 State=IDLE Partitions=debug\n")
SINFO_R = "REASON|USER|TIMESTAMP|NODELIST|STATE\nXid 79 GPU fell off bus|root(0)|2026-11-29T23:09:47|gpu-node-01|drained\n"
SINFO_R_DEFAULT = """\
REASON               USER      TIMESTAMP           NODELIST
Xid 79 GPU fell off  root      2026-11-29T23:09:47 gpu-node-01
"""
SACCTMGR_EVENTS = """\
NodeName|TimeStart|TimeEnd|State|Reason|User
|2026-11-29T23:09:39|Unknown||Cluster Registered TRES|
gpu-node-01|2026-11-29T23:11:09|Unknown|DRAIN|Xid 79 GPU fell off bus|root(0)
gpu[02-03]|2026-11-29T20:00:00|2026-11-29T21:30:00|DOWN|Not responding|slurm(64030)
"""
SLURMCTLD_LOG = """\
[2026-11-29T23:09:38.715] slurmctld version 22.05.8 started on cluster itest
[2026-11-29T23:09:39.844] _slurm_rpc_submit_batch_job: JobId=1 InitPrio=4294901759 usec=750
[2026-11-29T23:09:42.577] sched: Allocate JobId=1 NodeList=gpu-node-01 #CPUs=1 Partition=debug
[2026-11-29T23:09:42.607] _job_complete: JobId=4 WEXITSTATUS 3
[2026-11-29T23:09:42.607] _job_complete: JobId=4 done
[2026-11-29T23:09:42.912] _slurm_rpc_kill_job: REQUEST_KILL_JOB JobId=3 uid 0
[2026-11-29T23:09:47.608] _job_complete: JobId=2 WEXITSTATUS 0
[2026-11-29T23:09:47.983] update_node: node gpu-node-01 reason set to: Xid 79 GPU fell off bus
[2026-11-29T23:09:47.983] update_node: node gpu-node-01 state set to DRAINING
[2026-11-29T23:11:09.723] Time limit exhausted for JobId=1
"""
SLURMD_LOG = """\
[2026-11-29T23:09:42.580] Launching batch job 2 for UID 0
[2026-11-29T23:09:42.916] [3.batch] error: *** JOB 3 ON gpu-node-01 CANCELLED AT 2026-11-29T23:09:42 ***
[2026-11-29T23:09:42.923] [3.batch] done with job
[2026-11-29T23:11:09.735] [1.batch] error: *** JOB 1 ON gpu-node-01 CANCELLED AT 2026-11-29T23:11:09 DUE TO TIME LIMIT ***
"""
JOBCOMP = (
    "JobId=4 UserId=root(0) GroupId=root(0) Name=failer JobState=FAILED Partition=debug TimeLimit=UNLIMITED "
    "StartTime=2026-11-29T23:09:42 EndTime=2026-11-29T23:09:42 NodeList=gpu-node-01 NodeCnt=1 ProcCnt=1 "
    "WorkDir=/tmp/slx/c/out ReservationName= Tres=cpu=1,mem=1000M,node=1,billing=1 Account=root QOS=normal WcKey= "
    "Cluster=itest SubmitTime=2026-11-29T23:09:39 EligibleTime=2026-11-29T23:09:39 DerivedExitCode=0:0 ExitCode=3:0 \n")


def parse(kind: str, text: str | bytes, mtime: datetime | None = MTIME) -> list:
    data = text.encode() if isinstance(text, str) else text
    return list(slurm.parse(kind, io.BytesIO(data), ParseContext(host="capture-host", mtime=mtime)))


def events_of(rows: list) -> list[Event]:
    return [r for r in rows if isinstance(r, Event)]


def terminal(events: list[Event]) -> dict[str | None, Event]:
    return {e.job: e for e in events if e.kind == "job_state" and e.attrs["state"] in slurm_states.TERMINAL}


@pytest.mark.parametrize(("kind", "text"), [("sacct", SACCT_P), ("sacct", SACCT_TABLE), ("scontrol_job", JOBCOMP),
                                            ("scontrol_job", SCONTROL_JOB_MULTILINE), ("sacct_json", SACCT_JSON),
                                            ("sinfo", SINFO_R), ("scontrol_node", SCONTROL_NODE),
                                            ("sacctmgr_event", SACCTMGR_EVENTS), ("slurm_log", SLURMCTLD_LOG),
                                            ("slurm_log", SLURMD_LOG)])
def test_recorded_output_is_sniffed_as_its_kind(kind, text):
    scores = slurm.sniff("out.txt", text)
    assert max(scores, key=scores.get) == kind and scores[kind] >= 80


def test_sacct_parsable_gives_exit_codes_states_and_steps():
    events = events_of(parse("sacct", SACCT_P))
    final = terminal(events)
    assert {j: e.attrs["state"] for j, e in final.items()} == {
        "1": "TIMEOUT", "2": "COMPLETED", "3": "CANCELLED", "4": "FAILED"}
    assert final["4"].attrs["exit_code"] == 3 and final["4"].ts == datetime(2026, 11, 29, 23, 9, 42,
                                                                          tzinfo=timezone.utc)
    assert final["3"].attrs["cancelled_by"] == "0"
    assert final["1"].attrs["elapsed"] == 87 and final["1"].host == "gpu-node-01"
    steps = {e.attrs["step"]: e for e in events if e.kind == "step_killed"}
    assert set(steps) == {"1.batch", "3.batch", "4.batch"}
    assert steps["1.batch"].attrs["signal"] == 15 and steps["4.batch"].attrs["exit_code"] == 3
    running = [e for e in events if e.kind == "job_state" and e.attrs["state"] == "RUNNING"]
    assert {e.job for e in running} == {"1", "2", "3", "4"}
    pending = [e for e in events if e.attrs.get("state") == "PENDING"]
    assert all(e.ts == datetime(2026, 11, 29, 23, 9, 39, tzinfo=timezone.utc) for e in pending)


def test_sacct_fixed_width_table_reads_truncated_state():
    final = terminal(events_of(parse("sacct", SACCT_TABLE)))
    assert final["3"].attrs["state"] == "CANCELLED"
    assert final["4"].attrs["exit_code"] == 3 and final["4"].ts_approx and final["4"].ts_origin == "mtime"


def test_sacct_json_of_22_05_drops_its_wrong_exit_codes_but_keeps_signals():
    rows = parse("sacct_json", SACCT_JSON)
    assert any(getattr(r, "key", None) == "versions.slurm" and r.value == "22.05.8" for r in rows)
    events = events_of(rows)
    final = terminal(events)
    assert final["4"].attrs["state"] == "FAILED" and "exit_code" not in final["4"].attrs
    assert final["1"].attrs["elapsed"] == 87
    assert final["1"].ts == datetime.fromtimestamp(1795993869, tz=timezone.utc)
    step = next(e for e in events if e.kind == "step_killed")
    assert step.attrs["step"] == "1.batch" and step.attrs["signal"] == 15


def test_sacct_json_of_other_versions_keeps_exit_codes():
    doc = json.loads(SACCT_JSON)
    doc["meta"]["Slurm"]["release"] = "23.11.4"
    doc["jobs"][1]["exit_code"] = {"status": ["NONZERO"], "return_code": {"set": True, "infinite": False,
                                                                          "number": 3}}
    doc["jobs"][1]["state"] = {"current": ["FAILED"], "reason": "NonZeroExitCode"}
    final = terminal(events_of(parse("sacct_json", json.dumps(doc))))
    assert final["4"].attrs["exit_code"] == 3 and final["4"].attrs["reason"] == "NonZeroExitCode"


def test_scontrol_multiline_and_one_line_records():
    final = terminal(events_of(parse("scontrol_job", SCONTROL_JOB_MULTILINE)))
    assert final["4"].attrs["exit_code"] == 3 and final["4"].attrs["reason"] == "NonZeroExitCode"
    assert final["1"].attrs["state"] == "TIMEOUT" and final["1"].attrs["signal"] == 15
    assert final["1"].attrs["name"] == "tlimit" and final["1"].attrs["partition"] == "debug"


def test_jobcomp_filetxt_line():
    final = terminal(events_of(parse("scontrol_job", JOBCOMP)))
    assert final["4"].attrs["state"] == "FAILED" and final["4"].attrs["exit_code"] == 3


@pytest.mark.parametrize(("kind", "text"), [("scontrol_node", SCONTROL_NODE), ("sinfo", SINFO_R)])
def test_drained_node_with_its_reason_and_time(kind, text):
    events = events_of(parse(kind, text))
    assert len(events) == 1, "the healthy node is not an event"
    event = events[0]
    assert event.kind == "node_state" and event.host == "gpu-node-01"
    assert event.attrs["state"] == "DRAIN" and "DRAINED" in event.attrs["flags"]
    assert event.attrs["reason"] == "Xid 79 GPU fell off bus" and event.attrs["user"] == "root"
    assert event.ts == datetime(2026, 11, 29, 23, 9, 47, tzinfo=timezone.utc) and not event.ts_approx


def test_sinfo_default_reason_is_cut_at_20_characters_and_kept_as_printed():
    event = events_of(parse("sinfo", SINFO_R_DEFAULT))[0]
    assert event.attrs["reason"] == "Xid 79 GPU fell off" and event.host == "gpu-node-01"


def test_sacctmgr_events_give_drain_history_with_its_end():
    events = events_of(parse("sacctmgr_event", SACCTMGR_EVENTS))
    drain = [e for e in events if e.attrs["state"] == "DRAIN"]
    assert [(e.host, e.attrs["reason"]) for e in drain] == [("gpu-node-01", "Xid 79 GPU fell off bus")]
    down = [e for e in events if e.attrs["state"] == "DOWN"]
    assert [e.host for e in down] == ["gpu02", "gpu03"]
    back = [e for e in events if e.attrs["state"] == "RESUME"]
    assert [e.host for e in back] == ["gpu02", "gpu03"]
    assert back[0].ts == datetime(2026, 11, 29, 21, 30, tzinfo=timezone.utc)
    assert back[0].attrs["ended_state"] == "DOWN"


def test_headerless_sacctmgr_output_in_capture_order():
    line = "gpu-node-01|2026-11-29T22:54:27|Unknown|DRAIN|Xid 79 GPU fell off bus|root(0)\n"
    event = events_of(parse("sacctmgr_event", line))[0]
    assert event.attrs["state"] == "DRAIN" and event.attrs["reason"] == "Xid 79 GPU fell off bus"


def test_slurmctld_log_events():
    events = events_of(parse("slurm_log", SLURMCTLD_LOG))
    states = [(e.job, e.attrs["state"]) for e in events if e.kind == "job_state"]
    assert states == [("1", "PENDING"), ("1", "RUNNING"), ("4", "FAILED"), ("3", "CANCELLED"), ("2", "COMPLETED"),
                      ("1", "TIMEOUT")]
    failed = next(e for e in events if e.job == "4")
    assert failed.attrs["exit_code"] == 3 and failed.ts.isoformat() == "2026-11-29T23:09:42.607000+00:00"
    node = [e for e in events if e.kind == "node_state"]
    assert len(node) == 1, "reason and state lines of one update are one event"
    assert node[0].attrs["state"] == "DRAIN" and node[0].attrs["reason"] == "Xid 79 GPU fell off bus"
    assert node[0].attrs["state_raw"] == "DRAINING"


def test_slurmd_banners():
    events = events_of(parse("slurm_log", SLURMD_LOG))
    assert [(e.job, e.attrs["state"]) for e in events] == [("3", "CANCELLED"), ("1", "TIMEOUT")]
    assert events[1].attrs["reason"] == "TIME LIMIT" and events[1].host == "gpu-node-01"


@pytest.mark.parametrize(("line", "kind", "attrs"), [
    ("[2020-12-14T09:44:56.002] [63532.0] error: *** STEP 63532.0 STEPD TERMINATED ON cn106 AT 2020-12-14T09:44:56 "
     "DUE TO JOB NOT ENDING WITH SIGNALS ***", "step_killed", {"step": "63532.0", "node": "cn106"}),
    ("slurmstepd: error: *** JOB 32391783 ON cn119 CANCELLED AT 2021-06-18T13:05:36 DUE TO PREEMPTION ***",
     "job_state", {"state": "PREEMPTED", "job": "32391783"}),
    ("slurmstepd-phoenix-07: error: *** JOB 1449736 ON phoenix-07 CANCELLED AT 2023-12-03T12:47:09 DUE TO TIME LIMIT "
     "***", "job_state", {"state": "TIMEOUT"}),
    ("[2022-05-27T11:37:57.377] _job_complete: JobId=127441 WTERMSIG 9", "job_state",
     {"state": "FAILED", "signal": 9}),
    ("[2021-03-01T10:00:00.000] Killing JobId=77 on failed node gpu07", "job_state", {"state": "NODE_FAIL"}),
    ("[2021-03-01T10:00:00.000] error: Nodes gpu[07-08] not responding, setting DOWN", "node_state",
     {"state": "DOWN", "node": "gpu07"}),
    ("[2021-03-01T10:05:00.000] Node gpu07 now responding", "node_state", {"state": "RESPONDING"}),
    ("[2021-03-01T10:06:00.000] node gpu07 returned to service", "node_state", {"state": "RESUME"}),
    ("[2021-03-01T10:06:00.000] Requeuing JobId=88", "job_state", {"state": "REQUEUED"}),
    ("Nov 29 10:00:01 ctl01 slurmctld[811]: Time limit exhausted for JobId=91", "job_state", {"state": "TIMEOUT"}),
    ("slurmstepd: error: Job 4242 exceeded memory limit (1200000 > 1048576), being killed", "oom_kill",
     {"job": "4242"}),
    ("srun: error: gpu03: task 0: Exited with exit code 3", "step_killed", {"exit_code": 3, "node": "gpu03"}),
])
def test_log_line_forms(line, kind, attrs):
    events = events_of(parse("slurm_log", line + "\n"))
    assert events and events[0].kind == kind
    for key, value in attrs.items():
        assert events[0].attrs.get(key) == value, (key, events[0].attrs)
    assert events[0].ts is not None


def test_syslog_slurm_line_takes_the_year_from_the_reference():
    rows = list(slurm.parse("slurm_log", io.BytesIO(b"Feb  3 10:00:01 ctl01 slurmctld[811]: "
                                                    b"_job_complete: JobId=5 WEXITSTATUS 2\n"),
                            ParseContext(reference_time=datetime(2025, 2, 4, tzinfo=timezone.utc))))
    event = events_of(rows)[0]
    assert event.ts == datetime(2025, 2, 3, 10, 0, 1, tzinfo=timezone.utc) and event.ts_origin == "syslog_noyear"
    assert event.attrs["exit_code"] == 2


def test_program_output_between_slurm_lines_is_counted_not_fatal():
    text = ("epoch 1 loss 0.3\nslurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-01-01T00:00:00 ***\n"
            "\x00\xff garbage\n")
    rows = parse("slurm_log", text)
    assert sum(isinstance(r, Skipped) for r in rows) == 2
    assert [e.attrs["state"] for e in events_of(rows)] == ["CANCELLED"]


# ============================================================== helpers
@pytest.mark.parametrize(("text", "hosts"), [
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("d[001-002],f[009-010]", ["d001", "d002", "f009", "f010"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("gpu-node-01", ["gpu-node-01"]), ("None assigned", []), ("(null)", []), ("", []),
])
def test_expand_hostlist(text, hosts):
    assert _hostlist.expand_hostlist(text) == hosts


@pytest.mark.parametrize(("text", "state", "flags"), [
    ("IDLE+DRAIN", "DRAIN", ["IDLE", "DRAINED"]), ("MIXED+DRAIN", "DRAIN", ["MIXED", "DRAINING"]),
    ("drng@", "DRAIN", ["DRAINING", "REBOOT_REQUESTED"]), ("down*", "DOWN", ["NOT_RESPONDING"]),
    ("fail*", "FAIL", ["NOT_RESPONDING"]), ("maint", "MAINT", []), ("idle", "IDLE", []),
    ("IDLE*", "IDLE", ["NOT_RESPONDING"]), ("DOWN+NOT_RESPONDING", "DOWN", ["NOT_RESPONDING"]),
])
def test_node_state(text, state, flags):
    assert slurm_states.node_state(text) == (state, flags)


@pytest.mark.parametrize(("text", "state", "by"), [
    ("CANCELLED by 0", "CANCELLED", "0"), ("CANCELLED+", "CANCELLED", None), ("CA", "CANCELLED", None),
    ("CONFIGUR", "CONFIGURING", None), ("OUT_OF_ME+", "OUT_OF_MEMORY", None), ("TO", "TIMEOUT", None),
    ("NODE_FAIL", "NODE_FAIL", None), ("", None, None),
])
def test_job_state(text, state, by):
    assert slurm_states.job_state(text) == (state, by)


@pytest.mark.parametrize(("text", "seconds"), [("00:01:27", 87), ("1-02:00:00", 93600), ("28:14", 1694),
                                               ("5", 300), ("UNLIMITED", None)])
def test_parse_duration(text, seconds):
    assert slurm_states.parse_duration(text) == seconds


# ============================================================== capture with a recorded runner
class FakeContext:
    """A capture context that answers commands with recorded outputs and remembers what was asked."""

    def __init__(self, outputs: dict[str, tuple[int, str]], options: dict | None = None, tools: set | None = None):
        self.host = "login01"
        self.since = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)
        self.options = options or {}
        self.outputs = outputs
        self.tools = tools if tools is not None else {"scontrol", "sacct", "sinfo", "sacctmgr"}
        self.argvs: list[list[str]] = []
        self.missed: list[tuple[str, str]] = []

    def which(self, name: str) -> str | None:
        return f"/usr/bin/{name}" if name in self.tools else None

    def missing(self, what: str, reason: str) -> None:
        self.missed.append((what, reason))

    def run(self, argv, *, kind, timeout=None, max_bytes=None):
        assert timeout is not None, f"{argv} has no timeout"
        self.argvs.append(argv)
        key = next((k for k in self.outputs if " ".join(argv).startswith(k)), None)
        code, out = self.outputs.get(key, (1, ""))
        return Artifact(source=" ".join(argv), kind=kind, data=out.encode(),
                        info={"exit_code": code, "stderr": "" if code == 0 else "boom"})

    def read_file(self, path, *, kind, max_bytes=None, tail=False):
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            self.missing(path, f"unavailable: {exc.strerror}")
            return None
        if max_bytes:
            data = data[-max_bytes:] if tail else data[:max_bytes]
        return Artifact(source=path, kind=kind, data=data, info={"path": path})


CONFIG = "SlurmctldLogFile        = {log}\nSlurmdLogFile           = (null)\nSLURM_VERSION           = 22.05.8\n"


@pytest.fixture
def slurm_env(monkeypatch):
    """capture() sets TZ for its own forked process; keep this test process's environment as it was."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "standard")


def test_capture_falls_back_to_sacct_parsable_on_22_05(slurm_env, tmp_path):
    log = tmp_path / "slurmctld.log"
    log.write_text(SLURMCTLD_LOG)
    ctx = FakeContext({"scontrol show config": (0, CONFIG.format(log=log)), "sacct --json": (0, SACCT_JSON),
                       "sacct -P": (0, SACCT_P), "scontrol show job": (0, JOBCOMP),
                       "scontrol show node": (0, SCONTROL_NODE), "sinfo": (0, SINFO_R),
                       "sacctmgr": (0, SACCTMGR_EVENTS)})
    arts = list(slurm.capture(ctx))
    kinds = [a.kind for a in arts]
    assert kinds == ["slurm_config", "sacct", "scontrol_job", "scontrol_node", "sinfo", "sacctmgr_event", "slurm_log"]
    sacct = next(a for a in ctx.argvs if a[:2] == ["sacct", "-P"])
    assert sacct[sacct.index("-S") + 1] == "2026-11-29T22:00:00" and "-a" in sacct
    assert arts[-1].data == SLURMCTLD_LOG.encode() and arts[-1].info["path"] == str(log)
    assert ctx.missed == []


def test_capture_without_accounting_reads_the_jobcomp_file(slurm_env, tmp_path):
    comp = tmp_path / "jobcomp.txt"
    comp.write_text(JOBCOMP)
    config = f"JobCompType             = jobcomp/filetxt\nJobCompLoc              = {comp}\nSLURM_VERSION = 22.05.8\n"
    ctx = FakeContext({"scontrol show config": (0, config), "sacct": (1, "")})
    arts = list(slurm.capture(ctx))
    comp_art = next(a for a in arts if a.source == str(comp))
    assert comp_art.kind == "scontrol_job" and comp_art.data == JOBCOMP.encode()
    assert any(what.startswith("sacct -P") for what, _ in ctx.missed)


def test_capture_keeps_json_where_exit_codes_are_right(slurm_env):
    doc = json.loads(SACCT_JSON)
    doc["meta"]["Slurm"]["release"] = "23.11.4"
    ctx = FakeContext({"scontrol show config": (0, "SLURM_VERSION = 23.11.4\n"), "sacct --json": (0, json.dumps(doc))},
                      options={"slurm_job": ["4"]})
    arts = list(slurm.capture(ctx))
    assert [a.kind for a in arts][:2] == ["slurm_config", "sacct_json"]
    assert ["sacct", "--json", "-a", "-j", "4"] in ctx.argvs
    assert ["scontrol", "show", "job", "-o", "4"] in ctx.argvs
    assert not any(a[:2] == ["sacct", "-P"] for a in ctx.argvs)


def test_capture_without_controller_says_why_and_stops(slurm_env):
    ctx = FakeContext({"scontrol show config": (1, "")})
    assert list(slurm.capture(ctx)) == []
    assert ctx.missed and ctx.missed[0][1].startswith("unavailable: no reachable Slurm controller")
    assert len(ctx.argvs) == 1


def test_capture_without_slurm_installed():
    ctx = FakeContext({}, tools=set())
    assert list(slurm.capture(ctx)) == [] and ctx.argvs == []
    assert ctx.missed == [("slurm", "unavailable: scontrol not installed")]


def test_capture_option_is_registered():
    import argparse

    parser = argparse.ArgumentParser()
    slurm.add_capture_arguments(parser)
    assert parser.parse_args(["--slurm-job", "12", "--slurm-job", "13"]).slurm_job == ["12", "13"]
    assert slurm_capture._job_options(["12,13", "x;rm"]) == ["12", "13"]


# ============================================================== malformed input
REAL_LINES = [line for rel in SLURM_FILES for line in (CORPUS / rel).read_text(errors="replace").splitlines()
              if line.strip()] + SACCT_P.splitlines() + SLURMCTLD_LOG.splitlines() + SCONTROL_NODE.splitlines()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=12), cuts=st.lists(st.integers(0, 200)),
       junk=st.binary(max_size=64), kind=st.sampled_from(slurm.KINDS))
def test_truncated_and_interleaved_real_lines_never_raise(lines, cuts, junk, kind):
    """Real lines cut anywhere, shuffled together (two writers on one file) and mixed with junk bytes."""
    cut = [line[:c] if i < len(cuts) and (c := cuts[i]) < len(line) else line for i, line in enumerate(lines)]
    data = "\n".join(cut).encode() + b"\n" + junk
    rows = parse(kind, data)
    for row in rows:
        assert isinstance(row, (Event, Skipped)) or hasattr(row, "key")
        if isinstance(row, Event):
            assert row.kind in ("job_state", "node_state", "step_killed", "oom_kill") or (
                row.kind.startswith("slurm_") and row.kind.endswith(("_error", "_problem")))
            assert row.ts is None or row.ts.tzinfo is not None


def test_truncated_file_keeps_what_was_complete():
    text = SACCT_P[: SACCT_P.index("4|failer") + 20]
    final = terminal(events_of(parse("sacct", text)))
    assert set(final) == {"1", "2", "3"}


def test_a_job_on_several_nodes_is_on_its_batch_host_and_names_every_node():
    log = ("[2026-03-14T06:40:00.100] sched: Allocate JobId=48213 NodeList=node[01-04] #CPUs=768 Partition=gpu\n"
           "[2026-03-14T09:41:47.000] _job_complete: JobId=48213 WEXITSTATUS 1\n"
           "[2026-03-14T09:41:47.001] _job_complete: JobId=48213 done\n")
    events = [e for e in events_of(parse("slurm_log", log)) if e.kind == "job_state"]
    assert {e.attrs["state"] for e in events} >= {"RUNNING", "FAILED"}
    assert all(e.host == "node01" and e.attrs["nodes"] == ["node01", "node02", "node03", "node04"] for e in events)
    shown = SCONTROL_JOB_MULTILINE.replace("NodeList=gpu-node-01\n", "NodeList=gpu-node-[01-03]\n").replace(
        "BatchHost=gpu-node-01\n", "BatchHost=gpu-node-02\n")
    failed = terminal(events_of(parse("scontrol", shown)))["4"]
    assert failed.host == "gpu-node-02" and failed.attrs["nodes"] == ["gpu-node-01", "gpu-node-02", "gpu-node-03"]
    (one,) = slurm_events.job_events("7", "FAILED", nodes="node05", end=datetime(2026, 3, 14, tzinfo=timezone.utc))
    assert one.host == "node05"
    (big,) = slurm_events.job_events("8", "RUNNING", nodes="n[0001-1000]", start=datetime(2026, 3, 14, tzinfo=timezone.utc))
    assert big.host == "n0001" and len(big.attrs["nodes"]) == 1000 and big.attrs["nodes"][-1] == "n1000"
