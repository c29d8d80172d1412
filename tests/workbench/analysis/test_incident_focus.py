"""The incident is the failing job the bundle was collected for: another job's failure hours before
is history, and background that explains nothing (a full /tmp nothing failed to write to, a
corrected memory error) does not outrank the incident's own cause. Evidence in native formats,
ingested as a responder hands it over."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from tests.workbench.analysis.test_hypotheses_drill_gaps import analyse_files
from workbench.analysis.engine import analyze
from workbench.analysis.incident_focus import JOB_OUTPUT, IncidentFocus
from workbench.ingest.session import ingest_paths
from workbench.prevention.drill import write
from workbench.store.bundle import Bundle

SACCT_HEADER = "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|NodeList\n"
OLD_JOB = "4242|ablation-3|gpu|nlp|32|FAILED|1:0|2026-09-07T07:31:34|2026-09-07T07:59:34|node01\n"
INCIDENT_JOB = "4259|gpt-ft|gpu|ml-research|64|FAILED|1:0|2026-09-07T12:12:20|2026-09-07T12:22:42|node[01-02]\n"
XID13 = ("Sep 07 07:59:28 node01 kernel: NVRM: Xid (PCI:0000:9a:00): 13, pid=88543, name=python3, "
         "Graphics SM Warp Exception on (GPC 2, TPC 3, SM 0): Illegal Instruction Encoding\n")
FABRIC_MANAGER = (
    "Sep 07 12:12:10 node02 systemd[1]: Starting NVIDIA fabric manager service...\n"
    "Sep 07 12:12:10 node02 nv-fabricmanager[3511]: fabric manager NVIDIA GPU driver interface version "
    "550.90.07 don't match with driver version 550.107.02. Please update with matching NVIDIA driver package.\n"
    "Sep 07 12:12:10 node02 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
    "status=1/FAILURE\n"
    "Sep 07 12:12:10 node02 systemd[1]: Failed to start NVIDIA fabric manager service.\n")


def _causes(result: dict) -> list[tuple[str, float, str | None]]:
    return [(h["cause"], h["score"], h["host"]) for h in result["hypotheses"]]


def test_another_jobs_old_xid13_does_not_beat_the_incidents_own_cause(tmp_path: Path) -> None:
    """Job 4242 died of an Xid 13 on node01 four hours before job 4259 failed at start on node01 and
    node02, whose Fabric Manager refused to start: the Xid 13 explains 4242, not the incident."""
    result = analyse_files(tmp_path, {
        "slurm/sacct.txt": SACCT_HEADER + OLD_JOB + INCIDENT_JOB,
        "node01/kern.log": XID13,
        "node02/journal-nvidia-fabricmanager.txt": FABRIC_MANAGER,
    })
    assert result["hypotheses"][0]["cause"] == "fabric_manager_down", _causes(result)
    old = [h for h in result["hypotheses"] if h["cause"] == "app_gpu_fault"]
    assert old and all(h["score"] < result["hypotheses"][0]["score"] for h in old), _causes(result)
    # the incident's symptoms are job 4259's: none of them starts with job 4242's failure
    assert all(s["first_seen"] >= "2026-09-07T12:" for s in result["symptoms"]), result["symptoms"]


def test_a_job_failing_alone_is_the_incident_even_with_an_old_xid13(tmp_path: Path) -> None:
    """Without a later failure the old job is the incident: its Xid 13 explains it (the focus is
    not a filter on age)."""
    result = analyse_files(tmp_path, {"slurm/sacct.txt": SACCT_HEADER + OLD_JOB, "node01/kern.log": XID13})
    assert result["hypotheses"][0]["cause"] == "app_gpu_fault", _causes(result)


def test_jobs_failing_together_are_one_incident() -> None:
    """Two jobs failing within the horizon of each other are one incident; one that ended hours
    before is not part of it."""
    rows = [{"job": "1", "ts": datetime(2026, 9, 7, 7, 59)}, {"job": "2", "ts": datetime(2026, 9, 7, 12, 10)},
            {"job": "3", "ts": datetime(2026, 9, 7, 12, 22)}, {"job": None, "ts": datetime(2026, 9, 7, 8, 0)},
            {"attrs": '{"job": "1"}', "ts": datetime(2026, 9, 7, 7, 58)}]
    focus = IncidentFocus.of(rows, 3600.0)
    assert focus.jobs == {"2", "3"} and focus.others == {"1"}
    kept = focus.own(rows)
    assert [r.get("job") for r in kept] == ["2", "3", None]


def test_another_jobs_output_file_is_that_jobs_evidence() -> None:
    """Lines of ``slurm-4242.out`` never name their job, yet they are 4242's: its NCCL timeout is no
    symptom of the incident, and a cause row read from it keeps only part of its strength (a change
    keeps all of it)."""
    files = {"a1": "4242", "a2": "4259"}
    symptoms = [{"job": "4242", "ts": datetime(2026, 9, 7, 7, 59)}, {"job": "4259", "ts": datetime(2026, 9, 7, 12, 22)},
                {"job": None, "artifact": "a1", "ts": datetime(2026, 9, 7, 7, 58)},
                {"job": None, "artifact": "a2", "ts": datetime(2026, 9, 7, 12, 21)}]
    focus = IncidentFocus.of(symptoms, 3600.0, files)
    assert [r["ts"].hour for r in focus.own(symptoms)] == [12, 12]
    rows = focus.weigh([{"kind": "cuda_error", "artifact": "a1", "strength": 0.6},
                        {"kind": "change", "artifact": "a1", "strength": 0.6},
                        {"kind": "cuda_error", "artifact": "a2", "strength": 0.6}])
    assert [r["strength"] for r in rows] == [0.3, 0.6, 0.6]


def test_a_symptom_naming_no_job_before_the_incident_job_began_is_not_the_incidents() -> None:
    """Where other jobs failed too, a job-less timeout hours before the incident job was even
    submitted belongs to an earlier run; one within START_MARGIN_S of it (clock skew) is kept."""
    symptoms = [{"job": "1", "ts": datetime(2026, 9, 7, 7, 59)}, {"job": "2", "ts": datetime(2026, 9, 7, 12, 22)},
                {"job": None, "ts": datetime(2026, 9, 7, 9, 56)}, {"job": None, "ts": datetime(2026, 9, 7, 11, 55)}]
    focus = IncidentFocus.of(symptoms, 3600.0)
    focus.began = datetime(2026, 9, 7, 12, 0)
    assert [r["ts"].hour for r in focus.own(symptoms)] == [12, 11]
    alone = IncidentFocus.of(symptoms[1:], 3600.0)  # no other job failed: nothing to tell apart
    alone.began = datetime(2026, 9, 7, 12, 0)
    assert len(alone.own(symptoms[1:])) == 3


def test_the_incident_jobs_nodes_are_where_it_ran(tmp_path: Path) -> None:
    """sacct's node list of the incident job names its hosts, even with no rank map (no NCCL INFO)."""
    raw = tmp_path / "raw" / "slurm"
    raw.mkdir(parents=True)
    (raw / "sacct.txt").write_text(SACCT_HEADER + OLD_JOB + INCIDENT_JOB, encoding="utf-8")
    with Bundle.create(tmp_path / "b.duckdb", title="t") as bundle:
        ingest_paths(bundle, [str(tmp_path / "raw")])
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        rows = bundle.con.execute("SELECT job, ts FROM event WHERE kind = 'job_state'").fetchall()
        focus = IncidentFocus.of([{"job": j, "ts": t} for j, t in rows], 3600.0).read_records(bundle.con)
    assert focus.jobs == {"4259"} and focus.others == {"4242"}
    assert {"node01", "node02"} <= focus.hosts
    assert focus.began is not None and focus.began.hour == 12


def test_slurm_output_names_are_read_as_their_job() -> None:
    assert JOB_OUTPUT.search("/raw/slurm/slurm-97042.out").group(1) == "97042"
    assert JOB_OUTPUT.search("slurm-123_4.out").group(1) == "123_4"
    assert JOB_OUTPUT.search("/raw/node01/rank0.log") is None


DF_FULL_TMP = ("Filesystem      Size  Used Avail Use% Mounted on\n"
               "/dev/nvme0n1p2  1.8T  811G  1.0T  35% /\n"
               "/dev/nvme1n1p1   64G   64G     0 100% /tmp\n")


def _rank_log(rank: int, last: str) -> str:
    return (f"2026-09-07 12:12:20,000 - INFO - [rank{rank}] torch.distributed initialized: world_size=2 backend=nccl\n"
            f"{last}\n")


OOM = ("[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 1 has a total "
       "capacity of 79.11 GiB of which 600.06 MiB is free. Including non-PyTorch memory, this process has "
       "78.80 GiB memory in use. Of the allocated memory 75.12 GiB is allocated by PyTorch, and 1.93 GiB is "
       "reserved by PyTorch but unallocated.")
ENOSPC = ('[rank0]: safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: '
          'StorageFull, message: "No space left on device" })')


def test_a_full_tmp_seen_only_in_df_stays_background(tmp_path: Path) -> None:
    """A /tmp at 100 % on a host in a df snapshot, with no write anywhere failing for space: the
    CUDA OOM that killed the job is the cause; the full disk is background."""
    result = analyse_files(tmp_path, {
        "slurm/sacct.txt": SACCT_HEADER + INCIDENT_JOB,
        "node01/df-h.txt": DF_FULL_TMP,
        "node02/rank1.log": _rank_log(1, OOM),
    }, captured=datetime(2026, 9, 7, 12, 30).astimezone())
    assert result["hypotheses"][0]["cause"] == "gpu_oom", _causes(result)
    disk = [h for h in result["hypotheses"] if h["cause"] == "disk_full"]
    assert all(h["score"] < 0.2 for h in disk), _causes(result)
    assert result["layers"]["network_storage"]["verdict"] not in ("fault", "suspect")


def test_a_full_disk_that_failed_a_write_still_wins(tmp_path: Path) -> None:
    """The same df snapshot with a checkpoint write failing "No space left on device": disk_full."""
    result = analyse_files(tmp_path, {
        "slurm/sacct.txt": SACCT_HEADER + INCIDENT_JOB,
        "node01/df-h.txt": DF_FULL_TMP,
        "node01/rank0.log": _rank_log(0, ENOSPC),
    }, captured=datetime(2026, 9, 7, 12, 30).astimezone())
    assert result["hypotheses"][0]["cause"] == "disk_full", _causes(result)
    full = [e for h in result["hypotheses"] if h["cause"] == "disk_full" for e in h["evidence"]]
    assert any("100%" in e["text"] for e in full) or any("No space" in e["text"] for e in full)


def test_a_corrected_edac_error_on_another_host_is_background(tmp_path: Path) -> None:
    """EDAC's "1 CE" is a corrected memory error on one of the job's hosts: it does not outrank the
    CUDA OOM that failed the job, which the job's output reports without a host."""
    result = analyse_files(tmp_path, {
        "slurm/sacct.txt": SACCT_HEADER + INCIDENT_JOB,
        "node01/kern.log": "Sep 07 12:15:45 node01 kernel: EDAC MC1: 1 CE memory read error on "
                          "CPU_SrcID#1_MC#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x6c1e4 offset:0x0 grain:32 "
                          "syndrome:0x0 - err_code:0x0000:0x009f socket:0 imc:0 rank:0)\n",
        "slurm/slurm-4259.out": _rank_log(1, OOM),  # the job output names no host
    })
    assert result["hypotheses"][0]["cause"] == "gpu_oom", _causes(result)
    hw = [h for h in result["hypotheses"] if h["cause"] == "host_hardware_error"]
    assert all(h["score"] < 0.1 for h in hw), _causes(result)


DISTRACTED = [("fabric_manager_down", "hard"), ("network_misconfigured", "hard"), ("shm_exhausted", "hard"),
              ("app_gpu_fault", "hardest"), ("gpu_oom", "hardest"), ("row_remap_failure", "hardest")]
"""Drills another job's old failure, a full /tmp or a corrected EDAC error used to win (seed 1)."""


@pytest.mark.parametrize(("cause", "level"), DISTRACTED)
def test_drills_with_another_jobs_failure_or_background_name_their_own_cause(
        tmp_path: Path, cause: str, level: str) -> None:
    written = write(cause, "training", 1, tmp_path / cause, level=level)
    with Bundle.open(written.bundle) as bundle:
        result = analyze(bundle)
    assert result["hypotheses"][0]["cause"] == cause, _causes(result)[:3]
