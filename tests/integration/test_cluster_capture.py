"""`gpuwb cluster` on a real Slurm cluster: three slurmd on this machine (Slurm's multiple-slurmd
mode: one NodeName, Port and ``slurmd -N`` each) and a fourth node in slurm.conf that never gets one.
A job runs on three nodes, one node's slurmd is taken down, and the capture goes through the real
``srun``; the shipped epilog script is installed as the cluster's Epilog and captures a failed job."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.slurm_cluster import SlurmCluster, tools_missing
from workbench.store.bundle import Bundle

pytestmark = pytest.mark.integration

LIVE = ("gpu-node-01", "gpu-node-02", "gpu-node-03")
DEAD = "gpu-node-04"
TAKEN_DOWN = "gpu-node-03"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = tools_missing()
    if missing:
        pytest.fail(f"the Slurm integration test needs {', '.join(missing)}: run scripts/system-deps.sh as root")
    root = tmp_path_factory.mktemp("cluster") / "slurm"
    epilog = root / "etc" / "slurm-epilog-gpuwb.sh"
    c = SlurmCluster(root, node=LIVE[0], extra_nodes=LIVE[1:], dead_nodes=(DEAD,), extra_conf=f"Epilog={epilog}\n")
    c.start()
    try:
        shutil.copy(ROOT / "scripts" / "slurm-epilog-gpuwb.sh", epilog)
        epilog.chmod(0o755)
        (root / "etc" / "gpuwb-epilog.conf").write_text(
            f"GPUWB={Path(sys.executable).parent / 'gpuwb'}\nGPUWB_DIR={root / 'epilog'}\nGPUWB_SINCE=1h\n"
            "GPUWB_TIMEOUT=90\n")
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def training_job(cluster: SlurmCluster) -> str:
    """A job on the three live nodes, still running: the hung training job."""
    job = cluster.sbatch("train", "sleep 600", "-N", "3", f"--nodelist={','.join(LIVE)}")
    cluster.wait_state(job, {"RUNNING"}, timeout=30)
    return job


def gpuwb_cluster(cluster: SlurmCluster, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench.cli", "cluster", *args], cwd=ROOT, env=cluster.env,
                          capture_output=True, text=True, timeout=timeout)


def table_rows(stdout: str) -> dict[str, list[str]]:
    """node -> the cells of its coverage row (split on runs of two spaces)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if cells and cells[0].startswith("gpu-node-"):
            rows[cells[0]] = cells
    return rows


def test_a_running_job_with_a_node_taken_down(cluster, training_job, tmp_path):
    cluster.stop_node(TAKEN_DOWN)
    out = tmp_path / "incident"
    began = time.monotonic()
    proc = gpuwb_cluster(cluster, "capture", "--slurm-job", training_job, "--out", str(out), "--safe",
                         "--since", "1h", "--node-timeout", "90")
    took = time.monotonic() - began
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    rows = table_rows(proc.stdout)
    assert {n: r[1] for n, r in rows.items()} == {"gpu-node-01": "answered", "gpu-node-02": "answered",
                                                  TAKEN_DOWN: "no answer"}, proc.stdout
    assert "3 nodes: 2 answered, 1 no answer" in proc.stdout
    assert took < 150, took

    nodes = out / "nodes"
    assert sorted(p.name for p in nodes.glob("*.duckdb")) == ["gpu-node-01.duckdb", "gpu-node-02.duckdb"]
    assert "Communication connection failure" in (nodes / f"{TAKEN_DOWN}.log").read_text()
    document = json.loads((out / "coverage.json").read_text())
    assert (document["job"], document["job_state"], document["launcher"]) == (training_job, "RUNNING", "srun")
    down = next(n for n in document["nodes"] if n["node"] == TAKEN_DOWN)
    assert down["status"] == "no answer" and "Communication connection failure" in down["reason"], down

    # the captures ran as steps of the job, one on each node that answered
    steps = cluster.cmd(["sacct", "-j", training_job, "-n", "-P", "-o", "JobID,JobName,NodeList,State"]).stdout
    capture_steps = [line.split("|") for line in steps.splitlines() if "|gpuwb-capture|" in line]
    assert {(s[2], s[3]) for s in capture_steps} >= {("gpu-node-01", "COMPLETED"), ("gpu-node-02", "COMPLETED")}

    with Bundle.open(out / "merged.duckdb") as merged:
        coverage = merged.coverage()
        kinds = {(a["kind"], a["host"]) for a in merged.artifacts()}
        meta = merged.meta()
        assert merged.verify() == []
    by_node = {c["host"]: c for c in coverage if c["collector"] == "cluster"}
    assert by_node[TAKEN_DOWN]["status"] == "no answer"
    assert by_node["gpu-node-01"]["status"] == by_node["gpu-node-02"]["status"] == "ok"
    assert {c["collector"] for c in coverage} >= {"cluster", "slurm", "kernel"}, "the nodes' own coverage came too"
    assert ("cluster_node_log", TAKEN_DOWN) in kinds
    assert len(json.loads(meta["merged_from"])) == 3, "two node bundles and the coverage bundle"


def test_nodes_outside_a_job_a_dead_one_and_a_timeout(cluster, training_job, tmp_path):
    proc = gpuwb_cluster(cluster, "capture", "--nodes", f"gpu-node-01,{DEAD}", "--out", str(tmp_path / "a"),
                         "--safe", "--since", "1h", "--node-timeout", "60")
    assert proc.returncode == 1, proc.stderr[-3000:] + proc.stdout[-3000:]
    rows = table_rows(proc.stdout)
    assert rows["gpu-node-01"][1] == "answered", proc.stdout + proc.stderr[-2000:]
    assert rows[DEAD][1] == "no answer", rows[DEAD]

    began = time.monotonic()
    proc = gpuwb_cluster(cluster, "capture", "--nodes", "gpu-node-02", "--out", str(tmp_path / "b"), "--safe",
                         "--node-timeout", "1")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert table_rows(proc.stdout)["gpu-node-02"][1] == "timeout", proc.stdout
    assert time.monotonic() - began < 60
    deadline = time.monotonic() + 30
    while cluster.cmd(["squeue", "-h", "-n", "gpuwb-capture", "-t", "RUNNING,PENDING"], check=False).stdout.strip():
        assert time.monotonic() < deadline, "the cut-off capture's allocation was not cancelled"
        time.sleep(0.5)


def test_the_epilog_captures_a_failed_job_and_collect_reports_it(cluster, tmp_path):
    job = cluster.sbatch("failer", "echo 'CUDA error: an illegal memory access' >&2; exit 3", "-N", "2",
                         "--nodelist=gpu-node-01,gpu-node-02")
    cluster.wait_state(job, {"FAILED"}, timeout=60)
    folder = cluster.root / "epilog" / f"job-{job}"
    wanted = [folder / "nodes" / f"{n}.duckdb" for n in ("gpu-node-01", "gpu-node-02")]
    deadline = time.monotonic() + 150
    while not all(p.exists() for p in wanted):
        assert time.monotonic() < deadline, sorted(p.name for p in (folder / "nodes").glob("*"))
        time.sleep(1)
    with Bundle.open(wanted[0]) as b:
        assert f"Slurm job {job} (exit 768)" in b.meta()["title"]
    proc = gpuwb_cluster(cluster, "collect", "--out", str(folder), "--slurm-job", job)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    assert {n: r[1] for n, r in table_rows(proc.stdout).items()} == {"gpu-node-01": "answered",
                                                                      "gpu-node-02": "answered"}
    with Bundle.open(folder / "merged.duckdb") as merged:
        sacct = [a for a in merged.artifacts() if a["kind"] in ("sacct", "sacct_json")]
    assert sacct and all(f"-j {job}" in a["source"] for a in sacct), "each node asked Slurm about the failed job"
