"""Launcher task numbers told from global ranks: ``srun -l``'s ``3: ``, torchrun's ``[default3]:``, mpirun's
``[1,3]<stdout>:`` (collectors/framework/framing/wrappers.py, collectors/nccl/tasks.py)."""

# ruff: noqa: E501  (log lines are kept whole)

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest

from collectors import nccl
from collectors.base import Event, ParseContext, Topology
from collectors.framework.framing import peel

BODY = "NCCL WARN NET/IB : Got completion from peer 10.1.2.3<40312> with status=12"


@pytest.mark.parametrize(("line", "rank", "local_rank", "task"), [
    (f"3: {BODY}", 3, None, 3),  # srun started the ranks itself: the task is the rank
    (f"3: [rank5]: {BODY}", 5, None, 3),  # the line states its rank: the task number is the node's agent
    (f"0: [default3]: {BODY}", None, 3, 0),  # torchrun's local rank under the node's one task
    (f"[1,3]<stdout>: {BODY}", 3, None, 3),  # mpirun's rank
    (f"[1,1]<stdout>: [rank6]: {BODY}", 6, None, 1),
])
def test_a_task_number_is_the_rank_only_when_nothing_says_otherwise(line: str, rank, local_rank, task) -> None:
    framed = peel(line)
    assert (framed.rank, framed.local_rank, framed.task) == (rank, local_rank, task)
    assert framed.message == BODY


def _rows(text: str) -> list:
    when = datetime(2026, 5, 26, tzinfo=timezone.utc)
    ctx = ParseContext(host=None, source_name="slurm-4242.out", mtime=when, reference_time=when)
    return list(nccl.parse("nccl_log", io.BytesIO(text.encode()), ctx))


def _job(per_node: bool) -> str:
    """Two nodes, two ranks each: ``srun -l`` with one task per rank (labels 0..3), or one torchrun per
    node (labels 0 and 1, each over two processes)."""
    lines = []
    for rank in range(4):
        node, dev = rank // 2, rank % 2
        label = node if per_node else rank
        lines.append(f"{label}: node0{node + 7}:{4820 + rank}:{4900 + rank} [{dev}] transport/net_ib.cc:1696 {BODY}")
    return "\n".join(lines) + "\n"


def test_srun_tasks_over_one_process_each_are_ranks() -> None:
    rows = _rows(_job(per_node=False))
    placed = {(t.rank, t.host, t.cuda_dev) for t in rows if isinstance(t, Topology) and t.rank is not None}
    assert placed == {(0, "node07", 0), (1, "node07", 1), (2, "node08", 0), (3, "node08", 1)}
    assert sorted(e.rank for e in rows if isinstance(e, Event) and e.kind == "nccl_net_error") == [0, 1, 2, 3]


def test_one_srun_task_per_node_places_no_rank_by_its_task_number() -> None:
    """Task 0 shows two NCCL processes: it is node07's launcher. No line becomes rank 0 or 1 by its
    label, after the second process shows it (the first line of a task cannot yet tell)."""
    rows = _rows(_job(per_node=True))
    placed = {(t.rank, t.host) for t in rows if isinstance(t, Topology) and t.rank is not None}
    assert placed == set(), placed
    ranks = [e.rank for e in rows if isinstance(e, Event) and e.kind == "nccl_net_error"]
    assert ranks[1] is None and ranks[3] is None
    hosts = [e.host for e in rows if isinstance(e, Event) and e.kind == "nccl_net_error"]
    assert hosts == ["node07", "node07", "node08", "node08"]


AGENT = """1: I0526 10:00:05.000000 4111 torch/distributed/elastic/agent/server/api.py:525] [default] Rendezvous complete for workers. Result:
1:   restart_count=0
1:   master_addr=node07
1:   group_rank=1
1:   group_world_size=2
1:   local_ranks=[0, 1]
1:   role_ranks=[2, 3]
1:   global_ranks=[2, 3]
1:   global_world_sizes=[4, 4]
"""
TRACEBACK = "0: [default1]:[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
BARE = "1: [default0]:RuntimeError: CUDA error: an illegal memory access was encountered\n"


def test_a_per_node_task_places_the_ranks_its_agent_and_lines_name_on_that_task() -> None:
    """``srun -l`` over one torchrun a node: the agent's rendezvous table under task 1 puts ranks 2 and 3
    on the job's second node (no host in the file: rank_places takes it from the node list), and a
    ``0: [default1]:[rank1]:`` line puts rank 1 on the first, as local rank 1. No task becomes a rank."""
    rows = _rows(AGENT + TRACEBACK + BARE)
    placed = sorted((t.rank, t.host, t.extra.get("task"), t.extra.get("local_rank"), t.extra["placed_by"])
                    for t in rows if isinstance(t, Topology))
    assert placed == [(1, None, 0, 1, "srun_node_task"), (2, None, 1, 0, "srun_node_task"),
                      (3, None, 1, 1, "srun_node_task")]
    bare = next(e for e in rows if isinstance(e, Event) and "illegal memory" in e.message)
    assert (bare.rank, bare.attrs.get("launcher_task"), bare.attrs.get("local_rank")) == (None, 1, 0)
