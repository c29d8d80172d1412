# ruff: noqa: E501, W291, W293  (real sacct and scontrol outputs keep their columns and trailing blanks)
"""sacct's fixed-width and parsable tables and multi-line ``scontrol show node`` records, old and new
layouts, as Slurm's documentation and public threads show them."""

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors import slurm
from collectors.base import Event, ParseContext, Skipped

MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _rows(kind: str, text: str) -> list:
    return list(slurm.parse(kind, io.BytesIO(text.encode()), ParseContext(host=None, mtime=MTIME)))


def _events(kind: str, text: str) -> list[Event]:
    return [r for r in _rows(kind, text) if isinstance(r, Event)]


# https://github.com/SchedMD/slurm/blob/284c3b95f08a2dc2478499837b03355e1b9c5c75/doc/man/man1/sacct.1 (roff dashes unescaped)
SACCT_OLD = """\
Jobid      Jobname    Partition Account    AllocCPUS  State     ExitCode
---------- ---------- ---------- ---------- ------- ---------- --------
3          sja_init   andy       acct1            1 COMPLETED         0
4          sjaload    andy       acct1            2 COMPLETED         0
6          sja_scr2   andy       acct1           18 COMPLETED         2
"""
# https://github.com/SchedMD/slurm/blob/284c3b95f08a2dc2478499837b03355e1b9c5c75/doc/html/heterogeneous_jobs.shtml
SACCT_HET = """\
$  sacct -j 67767
  JobID JobName Partition Account AllocCPUS     State ExitCode
------- ------- --------- ------- --------- --------- --------
67767+0     foo     debug    test         2 COMPLETED      0:0
67767+1     foo     debug    test         4 COMPLETED      0:0
"""
# https://github.com/nebius/soperator/pull/321
SACCT_FORMAT = """\
~# sacct --format=JobID,JobName,AllocCPUS,MaxRSS,MaxVMSize,TotalCPU,State
JobID           JobName  AllocCPUS     MaxRSS  MaxVMSize   TotalCPU      State 
------------ ---------- ---------- ---------- ---------- ---------- ---------- 
19.0              sleep          2      6040K          0  00:00.004  COMPLETED 
20                sleep          2                        00:00.004     FAILED 
20.0              sleep          2      5872K          0  00:00.004     FAILED 
22                sleep          2                        00:00.004  COMPLETED 
"""
# https://github.com/martius-lab/cluster_utils/issues/87
SACCT_PARSABLE = """\
JobID|NodeList|State|ExitCode
239023|galvani-cn001|COMPLETED|0:0
239023.batch|galvani-cn001|COMPLETED|0:0
239023.extern|galvani-cn001|COMPLETED|0:0
239023.0|galvani-cn001|CANCELLED|0:10
"""


def test_the_old_single_number_exit_code_layout():
    assert slurm.sniff("sacct.txt", SACCT_OLD) == {"sacct": 85}
    events = _events("sacct", SACCT_OLD)
    assert [(e.job, e.attrs.get("exit_code")) for e in events] == [("3", 0), ("4", 0), ("6", 2)]
    assert events[2].attrs["partition"] == "andy" and events[2].attrs["name"] == "sja_scr2"


def test_a_pasted_command_line_is_not_a_skipped_line():
    rows = _rows("sacct", SACCT_HET)
    assert not [r for r in rows if isinstance(r, Skipped)]
    assert [e.job for e in rows if isinstance(e, Event)] == ["67767+0", "67767+1"]


def test_a_ruled_table_without_exit_codes_is_sacct_not_squeue():
    assert slurm.sniff("out.txt", SACCT_FORMAT) == {"sacct": 85}
    rows = _rows("sacct", SACCT_FORMAT)
    assert not [r for r in rows if isinstance(r, Skipped)]
    failed = [(e.kind, e.attrs.get("step") or e.job) for e in rows if isinstance(e, Event) and e.attrs.get("state") == "FAILED"]
    assert failed == [("job_state", "20"), ("step_killed", "20.0")]


def test_batch_and_extern_steps_that_completed_say_nothing_and_a_signalled_step_does():
    events = _events("sacct", SACCT_PARSABLE)
    assert [(e.kind, e.attrs.get("step"), e.attrs.get("signal")) for e in events] == [
        ("job_state", None, 0), ("step_killed", "239023.0", 10)]


# Two nodes as `scontrol show node` prints them, one record each, from two threads:
# https://github.com/awslabs/awsome-distributed-ai/issues/195 (24.05) and
# https://github.com/SckyzO/slurm_exporter/issues/198 (23.11.4, cut where the thread's excerpt ends)
SCONTROL_NODES = """\
NodeName=yigou-dev-102-68 Arch=x86_64 CoresPerSocket=1 
   CPUAlloc=0 CPUEfctv=8 CPUTot=8 CPULoad=0.99
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:nvidia-rtx-3090:1
   NodeAddr=yigou-dev-102-68 NodeHostName=yigou-dev-102-68 Version=24.05.0-0rc1
   OS=Linux 5.10.0-153.12.0.92.oe2203sp2.x86_64 #1 SMP Wed Jun 28 23:04:48 CST 2023 
   RealMemory=1 AllocMem=0 FreeMem=340 Sockets=8 Boards=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=compute100 
   BootTime=2024-11-18T20:46:45 SlurmdStartTime=2024-12-19T11:41:49
   LastBusyTime=2024-12-19T11:41:49 ResumeAfterTime=None
   CfgTRES=cpu=8,mem=1M,billing=8,gres/gpu=1
   AllocTRES=
   CurrentWatts=0 AveWatts=0
   
   Reason=gres/gpu count reported lower than configured (0 < 1) [slurm@2024-12-19T11:03:34]

NodeName=gpu02 Arch=x86_64 CoresPerSocket=4 
   CPUAlloc=0 CPUEfctv=16 CPUTot=16 CPULoad=0.00
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=gpu:1080:7,gpu:block:1
   NodeAddr=gpu02 NodeHostName=gpu02 Version=23.11.4
   OS=Linux 6.8.0-31-generic #31-Ubuntu SMP PREEMPT_DYNAMIC Sat Apr 20 00:40:06 UTC 2024 
   RealMemory=250000 AllocMem=0 FreeMem=38206 Sockets=2 Boards=1
   State=DOWN+NOT_RESPONDING ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=ifn,dll 
   BootTime=2025-10-24T11:23:24 SlurmdStartTime=2026-07-07T13:36:57
   LastBusyTime=2026-07-25T11:54:03 ResumeAfterTime=None
"""


def test_multi_line_node_records_one_event_each():
    assert slurm.sniff("nodes.txt", SCONTROL_NODES) == {"scontrol_node": 90}
    drained, down = _events("scontrol_node", SCONTROL_NODES)
    assert drained.host == "yigou-dev-102-68" and drained.attrs["state"] == "DRAIN"
    assert drained.attrs["reason"] == "gres/gpu count reported lower than configured (0 < 1)"
    assert drained.attrs["user"] == "slurm" and drained.ts == datetime(2024, 12, 19, 11, 3, 34, tzinfo=timezone.utc)
    assert drained.attrs["partition"] == "compute100"
    assert down.host == "gpu02" and down.attrs["state"] == "DOWN" and "NOT_RESPONDING" in down.attrs["flags"]
