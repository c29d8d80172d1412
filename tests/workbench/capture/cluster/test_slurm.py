"""How `gpuwb cluster capture` asks Slurm: the argv of each srun, which nodes are not launched, how
the job's node list is read, and per-node deadlines, with a stand-in for srun (no daemons here)."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.conftest import run_cli
from workbench.capture.cluster import slurm
from workbench.capture.cluster.slurm import NodePlan, capture_command, plan_nodes, run_plans, srun_command
from workbench.errors import UsageError
from workbench.store.bundle import Bundle

SINCE = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
GPUWB = ["/opt/venv/bin/python", "-m", "workbench.cli"]


def test_capture_argv_passes_the_options_on():
    argv = capture_command(GPUWB, bundle=Path("/shared/x/nodes/n1.duckdb"), since=SINCE, title="Slurm job 7: n1",
                           safe=True, job="7", only=["kernel", "slurm"], skip=["k8s"])
    assert argv == [*GPUWB, "capture", "-o", "/shared/x/nodes/n1.duckdb", "--since", "2026-12-01T09:30:00Z",
                    "--title", "Slurm job 7: n1", "--safe", "--slurm-job", "7", "--only", "kernel", "--only", "slurm",
                    "--skip", "k8s"]
    assert "--safe" not in capture_command(GPUWB, bundle=Path("b"), since=SINCE, title="t", safe=False)


def test_srun_argv_inside_a_running_job_and_outside():
    command = ["gpuwb", "capture"]
    inside = srun_command("gpu-node-07", command, timeout_s=150, workdir=Path("/shared/x/nodes"), running_job="48213")
    assert inside[0] == "srun" and inside[-2:] == command
    options = inside[:-2]
    assert {"--nodes=1", "--ntasks=1", "--nodelist=gpu-node-07", "--jobid=48213", "--overlap",
            "--chdir=/shared/x/nodes", "--time=4"} <= set(options)
    assert not any(o.startswith("--immediate") for o in options)
    outside = srun_command("gpu-node-07", command, timeout_s=30, workdir=Path("/w"))
    assert "--immediate=10" in outside and "--time=2" in outside
    assert not any(o.startswith("--jobid") or o == "--overlap" for o in outside)


@pytest.mark.parametrize("state, down", [("idle", False), ("mixed", False), ("allocated", False), ("drained", False),
                                         ("down*", True), ("idle*", True), ("down", True), ("future", True),
                                         ("powered_down", True), ("draining", False)])
def test_which_states_are_not_launched(state, down):
    assert slurm.is_down(state) is down


def test_plans_skip_down_and_unknown_nodes(tmp_path):
    states = {"n1": ("mixed", ""), "n2": ("down*", "Not responding"), "n3": ("idle", "")}
    job = slurm.JobNodes("7", "RUNNING", ["n1", "n2", "n3", "n4"])
    plans, skipped = plan_nodes(job.nodes, states, folder=tmp_path, gpuwb=GPUWB, since=SINCE, timeout_s=60,
                                safe=True, job=job, only=None, skip=None)
    assert [p.node for p in plans] == ["n1", "n3"]
    assert all("--jobid=7" in p.argv and "--safe" in p.argv for p in plans)
    assert plans[0].bundle == tmp_path / "n1.duckdb" and plans[0].log == tmp_path / "n1.log"
    assert {r.node: (r.status, r.reason) for r in skipped} == {
        "n2": ("no answer", "Slurm reports it down* (Not responding)"),
        "n4": ("no answer", "Slurm does not know this node")}
    ended = slurm.JobNodes("7", "FAILED", ["n1"])
    (plan,), _ = plan_nodes(["n1"], states, folder=tmp_path, gpuwb=GPUWB, since=SINCE, timeout_s=60, safe=False,
                            job=ended, only=None, skip=None)
    assert "--overlap" not in plan.argv and "--slurm-job" in plan.argv


@pytest.mark.parametrize("text", ["../etc", "a;b", "n1,$(id)", "-rf"])
def test_node_names_that_are_not_file_names_are_refused(text):
    with pytest.raises(UsageError):
        slurm.node_names(text)


def test_node_names_expand_the_host_list():
    assert slurm.node_names("gpu-[01-03],gpu-02,cpu7") == ["gpu-01", "gpu-02", "gpu-03", "cpu7"]


def _fake_slurm(answers: dict[str, subprocess.CompletedProcess]):
    def call(argv, env=None):
        return answers.get(argv[0], subprocess.CompletedProcess(argv, 1, "", f"{argv[0]}: error: no such job\n"))
    return call


def test_job_nodes_from_scontrol_then_sacct(monkeypatch):
    line = "JobId=7 JobName=train JobState=RUNNING Reason=None NodeList=gpu-[01-02],gpu-09 BatchHost=gpu-01\n"
    monkeypatch.setattr(slurm, "slurm", _fake_slurm({"scontrol": subprocess.CompletedProcess([], 0, line, "")}))
    job = slurm.job_nodes("7")
    assert (job.state, job.nodes, job.running) == ("RUNNING", ["gpu-01", "gpu-02", "gpu-09"], True)
    monkeypatch.setattr(slurm, "slurm", _fake_slurm({"sacct": subprocess.CompletedProcess([], 0,
                                                                                          "gpu-[03-04]|FAILED\n", "")}))
    job = slurm.job_nodes("8")
    assert (job.state, job.nodes, job.running) == ("FAILED", ["gpu-03", "gpu-04"], False)
    monkeypatch.setattr(slurm, "slurm", _fake_slurm({}))
    with pytest.raises(UsageError, match="no nodes for job 9"):
        slurm.job_nodes("9")
    with pytest.raises(UsageError, match="not a Slurm job id"):
        slurm.job_nodes("7; rm -rf /")


def test_node_states_from_sinfo(monkeypatch):
    out = "gpu-01|mixed|none\ngpu-02|down*|Not responding\ngpu-01|mixed|none\n"
    monkeypatch.setattr(slurm, "slurm", _fake_slurm({"sinfo": subprocess.CompletedProcess([], 0, out, "")}))
    assert slurm.node_states(["gpu-01", "gpu-02"]) == {"gpu-01": ("mixed", ""), "gpu-02": ("down*", "Not responding")}


FAKE_SRUN = """
import os, shutil, sys, time
mode, src, dst, pidfile = sys.argv[1:5]
open(pidfile, "w").write(str(os.getpid()))
if mode == "ok":
    shutil.copy(src, dst)
elif mode == "hang":
    time.sleep(120)
elif mode == "refused":
    print("srun: error: Task launch for StepId=7.4 failed on node n3: Communication connection failure")
    sys.exit(1)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_each_node_is_cut_off_at_its_own_deadline(tmp_path):
    """One node hangs: it alone times out (its process is gone afterwards); the others answer or say why."""
    fake = tmp_path / "fake_srun.py"
    fake.write_text(FAKE_SRUN)
    src = tmp_path / "src.duckdb"
    with Bundle.create(src, meta={"captured_on": "somehost"}) as b:
        b.seal()
    plans = []
    for node, mode in (("n1", "ok"), ("n2", "hang"), ("n3", "refused"), ("n4", "ok")):
        bundle = tmp_path / f"{node}.duckdb"
        plans.append(NodePlan(node, [sys.executable, str(fake), mode, str(src), str(bundle), str(tmp_path / node)],
                              bundle, tmp_path / f"{node}.log", "mixed"))
    seen = []
    began = time.monotonic()
    results, complete = run_plans(plans, timeout_s=3.0, fanout=2, progress=lambda r: seen.append(r.node))
    assert complete
    took = time.monotonic() - began
    assert [(r.node, r.status) for r in results] == [("n1", "answered"), ("n2", "timeout"), ("n3", "no answer"),
                                                      ("n4", "answered")]
    assert sorted(seen) == ["n1", "n2", "n3", "n4"]
    assert 3.0 <= took < 20, took
    assert results[1].reason == "cut off after 3 s" and results[1].seconds >= 3.0
    assert not _alive(int((tmp_path / "n2").read_text())), "the hung srun was stopped"
    assert results[0].captured_on == "somehost" and results[0].slurm_state == "mixed"


def test_the_command_refuses_before_launching(tmp_path, monkeypatch):
    code, _, err = run_cli("cluster", "capture", "--nodes", "n1")
    assert code == 2 and "--out" in err
    code, _, err = run_cli("cluster", "capture", "--nodes", "n1", "--slurm-job", "7", "--out", tmp_path / "o")
    assert code == 2 and "either" in err
    code, _, err = run_cli("cluster", "collect", "--nodes", "n1", "--out", tmp_path / "none")
    assert code == 2 and "nodes/" in err
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = run_cli("cluster", "capture", "--nodes", "n1", "--out", tmp_path / "o")
    assert code == 2 and "srun not found" in err
    assert not (tmp_path / "o").exists()


def test_collect_reports_every_node_of_a_folder(tmp_path, monkeypatch):
    """What the epilog leaves: a bundle from n1, a cut-off log from n2, nothing from n3."""
    nodes = tmp_path / "job-7" / "nodes"
    nodes.mkdir(parents=True)
    with Bundle.create(nodes / "n1.duckdb", meta={"captured_on": "n1"}) as b:
        b.seal()
    (nodes / "n2.log").write_text("gpuwb-epilog: cut off after 120 s\n")
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client here: rows without a Slurm state
    code, out, err = run_cli("cluster", "collect", "--nodes", "n[1-3]", "--out", tmp_path / "job-7")
    assert code == 1, err
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("n")}
    assert "answered" in rows["n1"] and "timeout" in rows["n2"] and "no answer" in rows["n3"]
    assert "3 nodes: 1 answered, 1 timeout, 1 no answer" in out
    with Bundle.open(tmp_path / "job-7" / "merged.duckdb") as b:
        assert {c["host"]: c["status"] for c in b.coverage() if c["collector"] == "cluster"} == {
            "n1": "ok", "n2": "timeout", "n3": "no answer"}
    code, _, err = run_cli("cluster", "collect", "--nodes", "n[1-3]", "--out", tmp_path / "job-7")
    assert code == 2 and "already exists" in err


def test_ctrl_c_stops_every_srun_and_says_which_nodes_it_left(tmp_path):
    fake = tmp_path / "fake_srun.py"
    fake.write_text(FAKE_SRUN)
    plans = [NodePlan(n, [sys.executable, str(fake), mode, "-", str(tmp_path / f"{n}.duckdb"), str(tmp_path / n)],
                      tmp_path / f"{n}.duckdb", tmp_path / f"{n}.log")
             for n, mode in (("n1", "refused"), ("n2", "hang"), ("n3", "hang"))]

    def interrupt(result):
        raise KeyboardInterrupt

    began = time.monotonic()
    results, complete = run_plans(plans, timeout_s=60, fanout=2, progress=interrupt)
    assert not complete and time.monotonic() - began < 30
    assert [(r.node, r.status) for r in results] == [("n1", "no answer"), ("n2", "failed"), ("n3", "failed")]
    assert results[1].reason == "interrupted (Ctrl-C)" and results[2].reason == "not started: interrupted (Ctrl-C)"
    pid = tmp_path / "n2"  # absent if the stand-in was stopped before it wrote its pid
    assert not pid.exists() or not _alive(int(pid.read_text()))
