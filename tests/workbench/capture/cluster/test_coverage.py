"""A node's row from what its capture left on disk, and the coverage bundle that carries the nodes
that gave nothing into the merged incident."""

from __future__ import annotations

import json
from pathlib import Path

from workbench.capture.cluster.coverage import NodeResult, coverage_table, judge, record_coverage, summary
from workbench.ingest.merge import merge_bundles
from workbench.store.bundle import Bundle

SRUN_DOWN = ("srun: error: Task launch for StepId=7.3 failed on node gpu-node-03: Communication connection failure\n"
             "srun: error: Application launch failed: Communication connection failure\nsrun: Job step aborted\n")


def node_bundle(path: Path, host: str) -> Path:
    with Bundle.create(path, title=f"capture of {host}", meta={"captured_on": host}) as b:
        b.record_capture("host", host=host, status="ok")
        b.seal()
    return path


def test_a_bundle_on_disk_is_an_answer(tmp_path):
    bundle = node_bundle(tmp_path / "gpu-node-01.duckdb", "node01.example")
    r = judge("gpu-node-01", bundle=bundle, log=tmp_path / "gpu-node-01.log", exit_code=0, seconds=4.2)
    assert (r.status, r.captured_on, r.bundle, r.reason) == ("answered", "node01.example", bundle, "")
    late = judge("gpu-node-01", bundle=bundle, log=None, exit_code=130)
    assert late.status == "answered" and late.reason.startswith("capture exited 130")


def test_srun_that_cannot_reach_the_node_is_no_answer(tmp_path):
    log = tmp_path / "gpu-node-03.log"
    log.write_text(SRUN_DOWN)
    r = judge("gpu-node-03", bundle=tmp_path / "gpu-node-03.duckdb", log=log, exit_code=233)
    assert r.status == "no answer" and "Communication connection failure" in r.reason and r.bundle is None


def test_a_failure_inside_the_capture_is_failed_not_no_answer(tmp_path):
    log = tmp_path / "n.log"
    log.write_text("prometheus   unavailable  Connection refused\n"
                   "gpuwb: error: -o /x/n.duckdb: folder /x does not exist\n")
    r = judge("n", bundle=tmp_path / "n.duckdb", log=log, exit_code=2)
    assert r.status == "failed" and r.reason == "exit 2: gpuwb: error: -o /x/n.duckdb: folder /x does not exist"


def test_timeouts_ours_and_the_epilogs(tmp_path):
    r = judge("n", bundle=tmp_path / "n.duckdb", log=tmp_path / "n.log", exit_code=-15, timed_out=True, timeout_s=90)
    assert (r.status, r.reason) == ("timeout", "cut off after 90 s")
    log = tmp_path / "e.log"
    log.write_text("gpuwb capture: 14 collectors\ngpuwb-epilog: cut off after 120 s\n")
    assert judge("e", bundle=tmp_path / "e.duckdb", log=log).status == "timeout"


def test_silence_and_garbage(tmp_path):
    r = judge("n", bundle=tmp_path / "n.duckdb", log=tmp_path / "n.log")
    assert r.status == "no answer" and "neither bundle nor log" in r.reason
    (tmp_path / "g.duckdb").write_bytes(b"not a bundle")
    assert judge("g", bundle=tmp_path / "g.duckdb", log=None).status == "failed"


def test_the_coverage_bundle_puts_silent_nodes_into_the_merge(tmp_path):
    answered = judge("gpu-node-01", bundle=node_bundle(tmp_path / "gpu-node-01.duckdb", "gpu-node-01"), log=None,
                     exit_code=0, seconds=3.0)
    log = tmp_path / "gpu-node-03.log"
    log.write_text(SRUN_DOWN)
    silent = judge("gpu-node-03", bundle=tmp_path / "gpu-node-03.duckdb", log=log, exit_code=233, seconds=11.0)
    down = NodeResult("gpu-node-04", "no answer", "Slurm reports it down* (Not responding)", slurm_state="down*")
    results = [answered, silent, down]
    assert summary(results) == "3 nodes: 1 answered, 2 no answer"
    table = coverage_table(results)
    assert table.splitlines()[0].split()[:2] == ["node", "status"]
    assert sum("no answer" in line for line in table.splitlines()) == 2

    coverage = record_coverage(tmp_path / "cluster-coverage.duckdb", results, {"job": "7"}, title="coverage")
    merged = merge_bundles(tmp_path / "merged.duckdb", [answered.bundle, coverage], title="job 7")
    with Bundle.open(merged.path) as b:
        rows = {(c["collector"], c["host"]): c for c in b.coverage()}
        arts = {(a["kind"], a["host"]) for a in b.artifacts()}
        document = json.loads(b"".join(b.artifact_bytes(next(a["sha256"] for a in b.artifacts()
                                                             if a["kind"] == "cluster_coverage"))))
        assert b.verify() == []
    assert rows[("cluster", "gpu-node-01")]["status"] == "ok"
    assert rows[("cluster", "gpu-node-03")]["status"] == "no answer"
    assert rows[("cluster", "gpu-node-04")]["reason"] == "Slurm reports it down* (Not responding)"
    assert ("host", "gpu-node-01") in rows, "the node's own coverage came along"
    assert ("cluster_node_log", "gpu-node-03") in arts, "srun's words about the silent node are evidence"
    assert [n["status"] for n in document["nodes"]] == ["answered", "no answer", "no answer"]
