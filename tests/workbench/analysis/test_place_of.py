"""Where lines that name no host of their own ran (workbench/analysis/hypotheses.py ``Place``): a line
printed under a per-node launcher's ``srun -l`` task that names no rank (a traceback, a CUDA error) is on
the task's node and the local rank's GPU there (``task_lines``); a pod seen only by name (metrics) is on
the node the Kubernetes events or its collected log put it on (``pod_nodes``)."""

from __future__ import annotations

from collectors.base import Event, GpuInventory, Row, Topology
from workbench.analysis.hypotheses import Engine, Place
from workbench.store.bundle import Bundle

ARTIFACT = "a" * 64


def _place(tmp_path, rows: list[Row]) -> Place:
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(ARTIFACT)
        writer.add_all(rows)
        writer.flush()
        return Place.of(bundle.con)


def test_a_bare_line_under_a_node_task_lands_on_that_node_and_its_local_ranks_gpu(tmp_path):
    rows: list[Row] = [Topology(rank=r, job="91842", extra={"placed_by": "srun_node_task", "task": r // 2,
                                                           "local_rank": r % 2}) for r in range(4)]
    rows += [Event(kind="job_state", message="job", host="node07", job="91842",
                   attrs={"job": "91842", "nodes": ["node07", "node08"]})]
    rows += [GpuInventory(host="node08", gpu=f"0000:{bus}:00.0", index=i) for i, bus in enumerate(("18", "2a"))]
    rows += [Event(kind="cuda_error", message="RuntimeError: CUDA error: an illegal memory access", job="91842",
                   attrs={"launcher_task": 1, "local_rank": 1}, line=40),
             Event(kind="cuda_error", message="RuntimeError: CUDA error: an illegal memory access", job="91842",
                   attrs={"launcher_task": 7, "local_rank": 0}, line=41)]
    place = _place(tmp_path, rows)
    assert place.task_lines[(ARTIFACT, 40)] == ("node08", "0000:2a:00.0")
    assert (ARTIFACT, 41) not in place.task_lines, "task 7 is no node of a two-node job"


def test_a_pod_seen_by_name_is_placed_on_the_one_node_the_evidence_names(tmp_path):
    def k8s(pod: str, node: str) -> Event:
        return Event(kind="k8s_event", message="Started container", host=node,
                     attrs={"object": f"Pod/{pod}", "node": node, "reason": "Started"})
    rows: list[Row] = [k8s("vllm-a-1", "hgx05"), k8s("rotate-x", "hgx05"), k8s("rotate-x", "hgx06"),
                       k8s("vllm-b-2", "hgx06")]
    place = _place(tmp_path, rows)
    assert place.pod_nodes == {"vllm-a-1": "hgx05", "vllm-b-2": "hgx06"}, "a pod two nodes claim stays unplaced"
    engine = Engine(place, {}, {}, 3600.0, 5.0)
    row = engine.locate({"host": "vllm-a-1", "gpu": None, "rank": None, "ts": None})
    assert row["host"] == "hgx05"
