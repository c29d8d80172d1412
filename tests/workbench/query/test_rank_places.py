"""workbench/query/rank_places.py: one place per rank from every kind of evidence, and none where they disagree."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from collectors.base import Event, GpuInventory, Row, Topology
from workbench.query.rank_places import rank_places, world_size
from workbench.store.bundle import Bundle


@contextmanager
def _bundle(tmp_path: Path, rows: list[Row]) -> Iterator[Bundle]:
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(None)
        writer.add_all(rows)
        writer.flush()
        yield bundle


def _launcher(rank: int, by: str, host: str | None = None, **extra: object) -> Topology:
    return Topology(rank=rank, host=host, extra={"placed_by": by, **extra})


def _job(nodes: list[str], job: str = "91842") -> Event:
    return Event(kind="job_state", message="job", host=nodes[0], job=job, attrs={"job": job, "nodes": nodes})


def test_old_init_rows_without_comm_id_are_one_world(tmp_path):
    """Before NCCL 2.19 each rank's communicator is only its own pointer: the world is every row of the
    largest size, and a smaller communicator's rank numbers are not global ranks."""
    rows = [Topology(rank=r, host=f"n{r // 2}", nranks=4, comm_id=f"0x7fdf0{r}000d00", cuda_dev=r % 2,
                     gpu=("0000:18:00.0", "0000:2a:00.0")[r % 2]) for r in range(4)]
    rows.append(Topology(rank=0, host="n1", nranks=2, comm_id="0x7f30b0000d00", gpu="0000:2a:00.0"))
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
        assert world_size(bundle.con) == 4
    assert {r: (p.host, p.gpu) for r, p in places.items()} == {
        0: ("n0", "0000:18:00.0"), 1: ("n0", "0000:2a:00.0"), 2: ("n1", "0000:18:00.0"), 3: ("n1", "0000:2a:00.0")}
    assert places[0].sources == {"nccl_init"}


def test_srun_tasks_are_laid_over_the_job_nodes_in_blocks(tmp_path):
    rows: list[Row] = [Topology(rank=t, job="91842", extra={"placed_by": "srun_label"}) for t in range(4)]
    rows += [_job(["node07", "node08"]), _job(["node08"], job="91790")]
    rows += [GpuInventory(host="node07", gpu=f"0000:{bus}:00.0", index=i) for i, bus in enumerate(("18", "2a"))]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert [places[r].host for r in range(4)] == ["node07", "node07", "node08", "node08"]
    assert (places[1].device, places[1].gpu) == (1, "0000:2a:00.0")
    assert places[2].gpu is None, "node08 reported no GPU list"
    assert "slurm_nodelist" in places[3].sources


def test_srun_tasks_that_do_not_divide_over_the_nodes_stay_unplaced(tmp_path):
    rows: list[Row] = [Topology(rank=t, extra={"placed_by": "srun_label"}) for t in range(3)]
    rows.append(_job(["node07", "node08"]))
    with _bundle(tmp_path, rows) as bundle:
        assert rank_places(bundle.con) == {}


def test_every_rank_on_device_zero_says_nothing_about_the_gpu(tmp_path):
    """One GPU per task (CUDA_VISIBLE_DEVICES set per rank): each rank sees its GPU as device 0."""
    rows: list[Row] = [Topology(rank=r, host="n1", cuda_dev=0, extra={"placed_by": "nccl_header"}) for r in range(2)]
    rows += [GpuInventory(host="n1", gpu="0000:18:00.0", index=0), GpuInventory(host="n1", gpu="0000:2a:00.0", index=1)]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert {p.gpu for p in places.values()} == {None}


def test_pinned_gpu_index_is_used_even_when_devices_repeat(tmp_path):
    rows: list[Row] = [_launcher(r, "environment", "n1", local_rank=r, gpu_index=r + 4) for r in range(2)]
    rows += [GpuInventory(host="n1", gpu=f"0000:{bus}:00.0", index=i) for i, bus in ((4, "9a"), (5, "9b"))]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert (places[0].gpu, places[1].gpu) == ("0000:9a:00.0", "0000:9b:00.0")


def test_a_device_index_only_a_uuid_keyed_listing_gives_lands_on_the_bus_id(tmp_path):
    """``nvidia-smi nvlink -s`` numbers GPUs and names them by UUID; the kernel ties that UUID to a bus id.
    The rank's device is that bus id (the store's binding), not the UUID."""
    uuid = "GPU-8d3f2a61-5b7c-4e0a-9c21-7f44d0e10101"
    rows: list[Row] = [_launcher(r, "environment", "n1", local_rank=r) for r in range(2)]
    rows += [GpuInventory(host="n1", gpu="0000:18:00.0", index=0),
             GpuInventory(host="n1", gpu="0000:2a:00.0", uuid=uuid),
             GpuInventory(host="n1", gpu=uuid, index=1, uuid=uuid)]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert (places[0].gpu, places[1].gpu) == ("0000:18:00.0", "0000:2a:00.0")


def test_sources_that_disagree_leave_the_rank_unplaced(tmp_path):
    rows: list[Row] = [_launcher(3, "torchelastic", "n1", local_rank=1), _launcher(3, "environment", "n2")]
    rows.append(_launcher(4, "torchelastic", "n2", local_rank=0))
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert 3 not in places and places[4].host == "n2"


def test_xid_pid_names_the_gpu_of_the_rank_with_that_pid(tmp_path):
    rows: list[Row] = [Topology(rank=3, host="node04", pid=20931, extra={"placed_by": "failure_table"}),
                       _launcher(3, "torchelastic", "node04", local_rank=1)]
    rows.append(Event(kind="xid", message="Xid 94", host="node04", gpu="0000:9b:00.0",
                      attrs={"xid": 94, "pid": 20931}))
    rows.append(Event(kind="xid", message="Xid 13", host="node08", gpu="0000:ab:00.0",
                      attrs={"xid": 13, "pid": 20931}))
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert (places[3].host, places[3].pid, places[3].gpu) == ("node04", 20931, "0000:9b:00.0")
    assert "process_table" in places[3].sources


def test_nvidia_smi_process_table_names_the_gpu(tmp_path):
    rows: list[Row] = [Topology(rank=1, host="n1", pid=4242, extra={"placed_by": "nccl_header"})]
    rows.append(GpuInventory(host="n1", gpu="0000:2a:00.0", index=1,
                             extra={"processes": [{"pid": 4242, "name": "python3"}]}))
    with _bundle(tmp_path, rows) as bundle:
        assert rank_places(bundle.con)[1].gpu == "0000:2a:00.0"


def test_nccl_init_lines_outrank_a_launcher_log_of_another_job(tmp_path):
    rows: list[Row] = [Topology(rank=r, host="n1", nranks=2, comm_id="0x3e1a", cuda_dev=r) for r in range(2)]
    rows.append(_launcher(1, "torchelastic", "old-node", local_rank=1))
    rows.append(_launcher(2, "torchelastic", "n2", local_rank=0))
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert (places[1].host, places[2].host) == ("n1", "n2")


def test_srun_tasks_follow_the_distribution_the_placed_ranks_show(tmp_path):
    """``srun -m cyclic``: task 1 is on the second node, and a WARN header of task 1 says so."""
    rows: list[Row] = [Topology(rank=t, extra={"placed_by": "srun_label"}) for t in range(4)]
    rows += [_job(["node07", "node08"]), _launcher(1, "nccl_header", "node08")]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert [places[r].host for r in range(4)] == ["node07", "node08", "node07", "node08"]
    rows[-1] = _launcher(1, "nccl_header", "node09")
    (tmp_path / "neither").mkdir()
    with _bundle(tmp_path / "neither", rows) as bundle:
        assert set(rank_places(bundle.con)) == {1}, "a layout the evidence contradicts places nobody"


def test_as_many_srun_tasks_as_nodes_in_a_larger_world_are_node_launchers(tmp_path):
    """``srun --ntasks-per-node=1 torchrun``: tasks 0 and 1 are the two nodes' agents in a world of 4
    ranks; laying them out as ranks 0 and 1 would put rank 1 on the second node."""
    rows: list[Row] = [Topology(rank=t, job="91842", extra={"placed_by": "srun_label"}) for t in range(2)]
    rows += [_job(["node07", "node08"]), Topology(rank=3, nranks=4, extra={"placed_by": "environment"},
                                                   host="node08")]
    with _bundle(tmp_path, rows) as bundle:
        assert world_size(bundle.con) == 4
        places = rank_places(bundle.con)
    assert set(places) == {3}


def test_the_world_size_sets_the_ranks_per_node(tmp_path):
    """Ranks 0-2 printed under their labels in a world of 8 over two nodes: four ranks a node, not two."""
    rows: list[Row] = [Topology(rank=t, job="91842", extra={"placed_by": "srun_label"}) for t in range(3)]
    rows += [_job(["node07", "node08"]), Topology(rank=7, nranks=8, host="node08", extra={"placed_by": "environment"})]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert [places[r].host for r in range(3)] == ["node07"] * 3 and places[7].host == "node08"


def test_a_rank_under_a_per_node_launchers_task_runs_on_that_node_of_the_job(tmp_path):
    """``srun -l`` over one torchrun a node: task 1 is the job's second node (the node list's order),
    whatever the rank number; its local rank is the GPU index there. Four tasks read as ranks would have
    put rank 5 nowhere and rank 1 on node08."""
    rows: list[Row] = [_launcher(r, "srun_node_task", task=r // 4, local_rank=r % 4) for r in range(8)]
    for row in rows:
        row.job = "91842"
    rows += [_job(["node07", "node08"]), _job(["node09"], job="91790")]
    buses = ("18", "2a", "3a", "5d")
    rows += [GpuInventory(host="node08", gpu=f"0000:{bus}:00.0", index=i) for i, bus in enumerate(buses)]
    with _bundle(tmp_path, rows) as bundle:
        places = rank_places(bundle.con)
    assert [places[r].host for r in (0, 3, 4, 7)] == ["node07", "node07", "node08", "node08"]
    assert (places[5].device, places[5].gpu) == (1, "0000:2a:00.0")
    assert places[1].gpu is None, "node07 reported no GPU list"
