"""Where each rank of the job ran: its host and its GPU, from whatever the evidence holds.

NCCL's init lines say it best (``comm 0x… rank 3 nranks 16 cudaDev 3 busId 3b000``), but most jobs run
with NCCL_DEBUG unset, and NCCL releases before 2.19 print no commId that ties a rank's communicator to
the others'. So the ``topology`` table holds, besides NCCL's rows, rows the log reader placed from
launcher evidence (``extra.placed_by``: ``nccl_header`` a rank's NCCL WARN line names its host:pid,
``torchelastic`` the agent's rendezvous table, ``environment`` an environment dump, ``srun_label`` an
``srun -l`` task prefix, ``srun_node_task`` a rank printed under a per-node launcher's task (the task is
the node's index in the job's node list: ``0: [default3]:[rank3]:`` or the agent's rendezvous table),
``failure_table`` torchrun's root-cause table), and this module joins them
across artifacts:

- ranks of the world communicator: every NCCL row whose nranks is the largest (with or without commId),
  plus the launcher rows (their ranks are global ranks);
- an ``srun -l`` task without a host: the Slurm job's node list (hostlist syntax, from sacct/scontrol)
  cut into equal blocks of tasks, Slurm's default block distribution (cyclic when the ranks placed by
  other evidence say so; none when they fit neither);
- the GPU: NCCL's busId, else the host's process table (nvidia-smi: pid -> GPU) or an Xid's ``pid=``
  joined with the rank's pid, else the rank's CUDA device (cudaDev, or the local rank) as the host's GPU
  index, but only when the ranks on that host use distinct devices (one GPU per task under
  CUDA_VISIBLE_DEVICES shows every rank as device 0, which says nothing).

NCCL's init lines outrank the launcher evidence (a launcher log may be another job's); a rank that two
sources of the same standing put on different hosts is left unplaced: a wrong place is worse than none.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

import duckdb

from collectors.base import gpu_id
from workbench.store.gpu_identity import aliases


@dataclass
class RankPlace:
    """One rank's host and GPU, and which kinds of evidence said so."""

    host: str | None = None
    gpu: str | None = None
    pid: int | None = None
    device: int | None = None
    comm: str | None = None
    sources: set[str] = field(default_factory=set)


@dataclass
class _Claims:
    hosts: set[str] = field(default_factory=set)
    nccl_hosts: set[str] = field(default_factory=set)
    gpus: set[str] = field(default_factory=set)
    pids: set[tuple[str, int]] = field(default_factory=set)
    devices: set[tuple[str, int]] = field(default_factory=set)
    comms: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)


def world_size(con: duckdb.DuckDBPyConnection) -> int:
    """The job's size as the evidence states it (0 when nothing does)."""
    row = con.execute("SELECT max(nranks) FROM topology WHERE rank IS NOT NULL").fetchone()
    return int(row[0] or 0) if row else 0


def rank_places(con: duckdb.DuckDBPyConnection) -> dict[int, RankPlace]:
    """Rank -> where it ran, for the ranks the evidence places on exactly one host."""
    rows = con.execute(
        "SELECT rank, host, gpu, cuda_dev, pid, comm_id, coalesce(nranks, 0), extra->>'placed_by', "
        "coalesce(extra->>'gpu_index', extra->>'local_rank'), job, (extra->>'gpu_index') IS NOT NULL, "
        "TRY_CAST(extra->>'task' AS INTEGER) FROM topology "
        "WHERE rank IS NOT NULL AND ((extra->>'placed_by') IS NOT NULL OR coalesce(nranks, 0) = (SELECT "
        "coalesce(max(nranks), 0) FROM topology WHERE rank IS NOT NULL AND (extra->>'placed_by') IS NULL))").fetchall()
    nccl_world = max((r[6] for r in rows if r[7] is None), default=0)
    claims: dict[int, _Claims] = defaultdict(_Claims)
    unhosted: list[tuple[int, str | None]] = []
    node_lists: dict[str | None, list[str] | None] = {}
    for rank, host, gpu, dev, pid, comm, nranks, placed_by, index, job, pinned, task in rows:
        if placed_by is None and nranks != nccl_world:
            continue
        if host is None and placed_by == "srun_node_task" and task is not None:
            host = _node_of_task(con, node_lists, job, task)
        claim = claims[rank]
        claim.sources.add(placed_by or "nccl_init")
        if comm and placed_by is None:
            claim.comms.append(comm)
        if host is None:
            if placed_by == "srun_label":
                unhosted.append((rank, job))
            continue
        (claim.hosts if placed_by else claim.nccl_hosts).add(host)
        if gpu:
            claim.gpus.add(gpu_id(gpu))
        if pid is not None:
            claim.pids.add((host, pid))
        device = int(index) if pinned or (dev is None and str(index or "").isdigit()) else dev
        if device is not None:
            claim.devices.add((host, device))
    _srun_blocks(con, claims, unhosted)
    places: dict[int, RankPlace] = {}
    for rank, claim in claims.items():
        hosts = claim.nccl_hosts or claim.hosts
        if len(hosts) != 1:
            continue
        host = next(iter(hosts))
        place = RankPlace(host=host, sources=claim.sources, comm=claim.comms[0] if claim.comms else None)
        if len(claim.gpus) == 1:
            place.gpu = next(iter(claim.gpus))
        pids = {pid for h, pid in claim.pids if h == host}
        devices = {dev for h, dev in claim.devices if h == host}
        place.pid = next(iter(pids)) if len(pids) == 1 else None
        place.device = next(iter(devices)) if len(devices) == 1 else None
        places[rank] = place
    _gpus_from_processes(con, places)
    _gpus_from_devices(con, places)
    return places


def _node_of_task(con: duckdb.DuckDBPyConnection, node_lists: dict[str | None, list[str] | None],
                  job: str | None, task: int) -> str | None:
    """The node a per-node launcher's ``srun -l`` task ran on: with one task a node, task i is the
    job's i-th node (SLURM_NODEID, the node list's order)."""
    if job not in node_lists:
        node_lists[job] = (job_nodes(con, {job}) if job else None) or job_nodes(con, None)
    nodes = node_lists[job]
    return nodes[task] if nodes and 0 <= task < len(nodes) else None


def _srun_blocks(con: duckdb.DuckDBPyConnection, claims: dict[int, _Claims],
                 unhosted: list[tuple[int, str | None]]) -> None:
    """``srun -l`` tasks onto the job's nodes: n tasks over k nodes, in Slurm's default block distribution,
    or cyclic where the ranks placed otherwise say so (and nowhere when they fit neither). Where the world
    is known (NCCL's nranks, WORLD_SIZE) it sets the ranks per node; as many tasks as nodes in a larger
    world are one launcher per node (``srun --ntasks-per-node=1 torchrun``): their numbers are node
    indexes, not ranks, and place nobody."""
    if not unhosted:
        return
    tasks = 1 + max(rank for rank, _ in unhosted)
    named = {job for _, job in unhosted if job}
    nodes = job_nodes(con, named) or job_nodes(con, None)
    if nodes is None:
        return
    world = world_size(con)
    if world > tasks and (tasks <= len(nodes) or world % len(nodes)):
        return
    total = max(world, tasks)
    if total % len(nodes):
        return
    per_node = total // len(nodes)
    known = {rank: claim.nccl_hosts or claim.hosts for rank, claim in claims.items() if claim.nccl_hosts or claim.hosts}
    layouts = ((lambda r: (nodes[r // per_node], r % per_node)), (lambda r: (nodes[r % len(nodes)], r // len(nodes))))
    layout = next((lay for lay in layouts if all(lay(r)[0] in hosts for r, hosts in known.items() if r < tasks)), None)
    if layout is None:
        return
    for rank, _ in unhosted:
        claim = claims[rank]
        if not claim.hosts and not claim.nccl_hosts:
            host, local = layout(rank)
            claim.hosts.add(host)
            claim.devices.add((host, local))
            claim.sources.add("slurm_nodelist")


def job_nodes(con: duckdb.DuckDBPyConnection, jobs: set[str] | None) -> list[str] | None:
    """The node list of the named job, else of the one multi-node job the bundle holds (the job with
    the most nodes; None when two different lists tie)."""
    lists: dict[str, list[str]] = {}
    for job, nodes_text in con.execute(
            "SELECT job, CAST(attrs->'nodes' AS VARCHAR) FROM event WHERE job IS NOT NULL "
            "AND (attrs->'nodes') IS NOT NULL AND coalesce(ts_origin, '') <> 'derived'").fetchall():
        nodes = json.loads(nodes_text or "[]")
        if isinstance(nodes, list) and len(nodes) > len(lists.get(job, [])):
            lists[job] = [str(n) for n in nodes]
    if jobs:
        found = [lists[j] for j in jobs if j in lists]
        return found[0] if len(found) == 1 else None
    widest = max((len(v) for v in lists.values()), default=0)
    candidates = {tuple(v) for v in lists.values() if len(v) == widest and widest > 1}
    return list(next(iter(candidates))) if len(candidates) == 1 else None


def _gpus_from_processes(con: duckdb.DuckDBPyConnection, places: dict[int, RankPlace]) -> None:
    """nvidia-smi's process table names the GPU each pid runs on, and an Xid names the pid it hit."""
    wanted = {(p.host, p.pid) for p in places.values() if p.gpu is None and p.pid is not None}
    if not wanted:
        return
    owner: dict[tuple[str, int], set[str]] = defaultdict(set)
    for host, gpu, procs_text in con.execute(
            "SELECT host, gpu, CAST(extra->'processes' AS VARCHAR) FROM gpu_inventory WHERE (extra->'processes') "
            "IS NOT NULL UNION ALL SELECT host, gpu, CAST(extra->'processes' AS VARCHAR) FROM gpu_sample "
            "WHERE (extra->'processes') IS NOT NULL").fetchall():
        for proc in json.loads(procs_text or "[]"):
            if isinstance(proc, dict) and isinstance(proc.get("pid"), int) and gpu:
                owner[(host, proc["pid"])].add(gpu_id(gpu))
    for host, pid, gpu in con.execute(
            "SELECT host, TRY_CAST(attrs->>'pid' AS BIGINT), gpu FROM event WHERE kind = 'xid' AND host IS NOT NULL "
            "AND gpu IS NOT NULL").fetchall():
        if pid:
            owner[(host, pid)].add(gpu_id(gpu))
    for place in places.values():
        gpus = owner.get((place.host, place.pid)) if place.gpu is None else None
        if gpus and len(gpus) == 1:
            place.gpu = next(iter(gpus))
            place.sources.add("process_table")


def _gpus_from_devices(con: duckdb.DuckDBPyConnection, places: dict[int, RankPlace]) -> None:
    """A rank's CUDA device as its host's GPU index, where the host's ranks use distinct devices."""
    if not any(p.gpu is None and p.device is not None for p in places.values()):
        return
    by_host: dict[str, list[RankPlace]] = defaultdict(list)
    for place in places.values():
        by_host[place.host or ""].append(place)
    index: dict[tuple[str | None, int], set[str]] = defaultdict(set)
    for (host, bus), named in aliases(con).items():  # the store's index <-> bus id, from inventory and samples
        if named.index is not None:
            index[(host, named.index)].add(bus)
    for host, ranks in by_host.items():
        devices = [p.device for p in ranks if p.device is not None]
        if len(devices) != len(set(devices)):
            continue
        for place in ranks:
            gpus = index.get((host, place.device)) if place.gpu is None and place.device is not None else None
            if gpus and len(gpus) == 1:
                place.gpu = next(iter(gpus))
                place.sources.add("gpu_index")
