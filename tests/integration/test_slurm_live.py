"""A real Slurm cluster: jobs that complete, fail, time out and get cancelled, a node drained for an
Xid, then `gpuwb capture --only slurm`; the bundle must tell each of those stories."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.integration.slurm_cluster import SlurmCluster
from workbench.store.bundle import Bundle

pytestmark = pytest.mark.integration

DRAIN_REASON = "Xid 79 GPU fell off bus"


@pytest.fixture(scope="module")
def incident(slurm_cluster: SlurmCluster) -> dict[str, str]:
    """Submit the four jobs, cancel one while it runs, drain the node, wait for the time limit."""
    c = slurm_cluster
    jobs = {"timeout": c.sbatch("tlimit", "sleep 300", "--time=1"),
            "completed": c.sbatch("train", "sleep 2"),
            "cancelled": c.sbatch("tocancel", "sleep 300"),
            "failed": c.sbatch("failer", "echo 'CUDA error: an illegal memory access' >&2; exit 3")}
    c.wait_state(jobs["cancelled"], {"RUNNING"}, timeout=30)
    c.cmd(["scancel", jobs["cancelled"]])
    c.wait_state(jobs["completed"], {"COMPLETED"}, timeout=30)
    c.wait_state(jobs["failed"], {"FAILED"}, timeout=30)
    c.wait_state(jobs["cancelled"], {"CANCELLED"}, timeout=30)
    c.cmd(["scontrol", "update", f"nodename={c.node}", "state=drain", f"reason={DRAIN_REASON}"])
    # the time limit is 1 minute and slurmctld checks it about every 30 s: TIMEOUT lands 60-90 s after start
    c.wait_state(jobs["timeout"], {"TIMEOUT"}, timeout=150)
    return jobs


def _capture(cluster: SlurmCluster, out: Path, *extra: str) -> list[dict]:
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "capture", "--only", "slurm", "-o", str(out),
                           *extra], cwd=ROOT, env=cluster.env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert time.monotonic() - began < 60
    code, stdout, err = run_cli("timeline", out, "--json", "--source", "slurm")
    assert code == 0, err
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _job_states(events: list[dict], job: str) -> dict[str, list[dict]]:
    """The job's events by state; sacct, scontrol and the daemons' logs each tell a transition once."""
    out: dict[str, list[dict]] = {}
    for e in events:
        if e["kind"] == "job_state" and e["job"] == job:
            out.setdefault(e["attrs"]["state"], []).append(e)
    return out


def test_window_capture_tells_every_job_and_the_drain(slurm_cluster, incident, tmp_path):
    events = _capture(slurm_cluster, tmp_path / "window.duckdb", "--since", "1h")
    node = slurm_cluster.node

    failed = _job_states(events, incident["failed"])
    assert {e["attrs"].get("exit_code") for e in failed["FAILED"]} == {3}
    assert all(e["host"] == node and e["ts"] and e["severity"] == "error" for e in failed["FAILED"])
    assert len(failed["FAILED"]) >= 3, "sacct, scontrol and slurmctld.log each report the failure"
    assert "RUNNING" in failed and "PENDING" in failed
    completed = _job_states(events, incident["completed"])
    assert {e["attrs"].get("exit_code") for e in completed["COMPLETED"]} == {0}
    assert min(e["ts"] for e in completed["COMPLETED"]) > max(e["ts"] for e in completed["RUNNING"])
    timeout = _job_states(events, incident["timeout"])["TIMEOUT"]
    assert all(e["host"] == node and e["severity"] == "error" for e in timeout)
    assert any(e["attrs"].get("reason") == "TIME LIMIT" for e in timeout), "slurmd.log's DUE TO TIME LIMIT banner"
    assert any(e["attrs"].get("elapsed", 0) >= 60 for e in timeout)
    cancelled = _job_states(events, incident["cancelled"])["CANCELLED"]
    assert all(e["host"] == node for e in cancelled)
    assert any(e["attrs"].get("cancelled_by") == "0" for e in cancelled)

    drains = [e for e in events if e["kind"] == "node_state" and e["attrs"].get("state") == "DRAIN"]
    assert drains, [e["message"] for e in events if e["kind"] == "node_state"]
    assert all(e["host"] == node for e in drains)
    assert {e["attrs"].get("reason") for e in drains} == {DRAIN_REASON}
    # scontrol show node, sinfo -R, sacctmgr's event table and slurmctld.log each saw the drain
    assert len({e["artifact"] for e in drains}) >= 4
    batch = f"{incident['timeout']}.batch"
    killed = [e for e in events if e["kind"] == "step_killed" and e["attrs"].get("step") == batch]
    assert killed and killed[0]["attrs"]["signal"] == 15


def test_job_capture_asks_slurm_about_that_job(slurm_cluster, incident, tmp_path):
    out = tmp_path / "job.duckdb"
    events = _capture(slurm_cluster, out, "--slurm-job", incident["failed"])
    with Bundle.open(out) as bundle:
        commands = {a["kind"]: a["source"] for a in bundle.artifacts() if a["collector"] == "slurm"}
        coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
    assert coverage["slurm"] == "ok", coverage
    assert f"-j {incident['failed']}" in commands["sacct"]
    assert commands["scontrol_job"].endswith(f"-o {incident['failed']}")
    # sacct and scontrol were asked about one job: the only named job events are that job's
    assert {e["job"] for e in events if e["kind"] == "job_state" and e["attrs"].get("name")} == {incident["failed"]}
    assert {e["attrs"].get("exit_code") for e in _job_states(events, incident["failed"])["FAILED"]} == {3}
