"""A multi-rank, multi-host training job's logs, written in real NCCL / PyTorch line formats.

The line shapes are those of the real logs in tests/corpus/nccl and of the NCCL issues they come
from (INDEX.tsv names each): ``host:pid:tid [dev] NCCL INFO`` init lines (``comm 0x… rank R nranks N cudaDev D nvmlDev D
busId B commId 0x… - Init START/COMPLETE``, ``Channel 00/0 : R[D] -> R'[D'] via P2P/IPC``, ``NET/IB :
Using [0]mlx5_0:1/IB``), PyTorch 2.x watchdog lines with the ``[rankN]:`` prefix and glog stamps
(basicsr_737, nccl_1409), Python-logging trainer lines. One file per rank, in one folder per host,
as responders hand them over (``node07/rank5.log``).

The incident: one rank (``straggler``) stops at SeqNum ``seq - 1``: its watchdog times out there
(or, with ``silent``, it logs no timeout at all) while every other rank times out waiting at
``seq``. Used by the collector and straggler tests and, with ``filler_bytes``, by the 1 GB benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

BUS_IDS = ("18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000")
"""busId as NCCL prints it for the 8 GPUs of an HGX H100 board (0000:18:00.0 ...)."""

COMM_ID = "0x5ae77eb5ea4ec1ee"
NCCL_VERSION = "2.21.5+cuda12.4"


@dataclass
class Job:
    """Where each rank ran, to check what the workbench recovers."""

    root: Path
    hosts: list[str]
    gpus_per_host: int
    seq: int
    straggler: int
    start: datetime

    @property
    def nranks(self) -> int:
        return len(self.hosts) * self.gpus_per_host

    def host_of(self, rank: int) -> str:
        return self.hosts[rank // self.gpus_per_host]

    def bus_of(self, rank: int) -> str:
        bus = BUS_IDS[rank % self.gpus_per_host % len(BUS_IDS)]
        return f"0000:{bus[:-3].zfill(2)}:00.0"

    def pid_of(self, rank: int) -> int:
        return 41000 + 97 * (rank // self.gpus_per_host) + rank % self.gpus_per_host


def _glog(when: datetime) -> str:
    return f"{when.month}{when.day:02d} {when:%H:%M:%S}.{when.microsecond:06d}{random.randint(100, 999)}"


def write_job(root: Path, *, hosts: int = 2, gpus_per_host: int = 8, seq: int = 4242, straggler: int = 5,
              silent: bool = False, filler_bytes: int = 0, per_host: bool = False, seed: int = 7) -> Job:
    """Write one log per rank under ``root/<host>/rank<R>.log`` or, with ``per_host``, one per host
    (``root/<host>/srun.log``) whose ranks' lines interleave behind ``srun --label`` prefixes (``R: ``),
    as a Slurm job's output is kept; returns the job's layout."""
    random.seed(seed)
    job = Job(root, [f"gpu-node-{7 + 5 * h:02d}" for h in range(hosts)], gpus_per_host, seq, straggler,
              datetime(2026, 3, 14, 9, 2, 11, tzinfo=timezone.utc))
    for host in job.hosts:
        (root / host).mkdir(parents=True, exist_ok=True)
    if per_host:
        for h, host in enumerate(job.hosts):
            ranks = range(h * gpus_per_host, (h + 1) * gpus_per_host)
            streams = {rank: _rank_lines(job, rank, silent, filler_bytes) for rank in ranks}
            with open(root / host / "srun.log", "w") as out:
                while streams:
                    for rank, lines in list(streams.items()):
                        line = next(lines, None)
                        if line is None:
                            del streams[rank]
                        else:
                            out.write(f"{rank}: {line}")
        return job
    for rank in range(job.nranks):
        with open(root / job.host_of(rank) / f"rank{rank}.log", "w") as out:
            out.writelines(_rank_lines(job, rank, silent, filler_bytes))
    return job


def _rank_lines(job: Job, rank: int, silent: bool, filler_bytes: int) -> Iterator[str]:
    host, pid = job.host_of(rank), job.pid_of(rank)
    dev = rank % job.gpus_per_host
    tid = pid + 140
    head = f"{host}:{pid}:{pid} [{dev}] NCCL INFO"
    init = f"{host}:{pid}:{tid} [{dev}] NCCL INFO"
    comm = f"0x55{pid:06x}{rank:04x}"
    when = job.start
    yield (f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - INFO - train - rank {rank} starting, "
           f"world size {job.nranks}\n")
    if rank == 0:
        yield f"NCCL version {NCCL_VERSION}\n"
    yield f"{head} Bootstrap : Using eth0:10.42.{rank // job.gpus_per_host}.{10 + dev}<0>\n"
    yield f"{head} NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
    yield f"{head} cudaDriverVersion 12040\n"
    yield f"{head} NCCL version {NCCL_VERSION}\n"
    yield (f"{init} NET/IB : Using [0]mlx5_{dev}:1/IB [RO]; OOB eth0:10.42.{rank // job.gpus_per_host}."
           f"{10 + dev}<0>\n")
    yield f"{init} Using network IB\n"
    yield (f"{init} comm {comm} rank {rank} nranks {job.nranks} cudaDev {dev} nvmlDev {dev} "
           f"busId {BUS_IDS[dev % len(BUS_IDS)]} commId {COMM_ID} - Init START\n")
    yield f"{init} Setting affinity for GPU {dev} to ffff,ffffffff\n"
    nxt, prv = (rank + 1) % job.nranks, (rank - 1) % job.nranks
    same_host = nxt // job.gpus_per_host == rank // job.gpus_per_host
    for ch in range(8):
        if same_host:
            yield f"{init} Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % job.gpus_per_host}] via P2P/IPC\n"
        else:
            yield (f"{init} Channel {ch:02d}/0 : {rank}[{dev}] -> {nxt}[{nxt % job.gpus_per_host}] "
                   f"[send] via NET/IB/{dev}/GDRDMA\n")
        yield (f"{init} Channel {ch:02d}/0 : {prv}[{prv % job.gpus_per_host}] -> {rank}[{dev}] "
               f"[receive] via NET/IB/{dev}/GDRDMA\n")
    yield f"{init} Connected all rings\n"
    yield f"{init} Connected all trees\n"
    yield (f"{init} 32 coll channels, 32 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels "
           f"per peer\n")
    yield (f"{init} comm {comm} rank {rank} nranks {job.nranks} cudaDev {dev} nvmlDev {dev} "
           f"busId {BUS_IDS[dev % len(BUS_IDS)]} commId {COMM_ID} - Init COMPLETE\n")
    written, step, op = 0, 0, 0
    while written < filler_bytes:
        step += 1
        when = job.start + timedelta(seconds=2 * step)
        for _ in range(6):
            op += 1
            line = (f"{head} AllReduce: opCount {op:x} sendbuff 0x7f{random.getrandbits(36):09x} recvbuff "
                    f"0x7f{random.getrandbits(36):09x} count {random.choice((262144, 1048576, 4194304))} datatype 7 "
                    f"op 0 root 0 comm {comm} [nranks={job.nranks}] stream 0x55{random.getrandbits(28):07x}\n")
            yield line
            written += len(line)
        line = (f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - INFO - train - step {step} "
                f"loss {2.0 + random.random():.4f} lr 3.0e-04 grad_norm {random.random() + 0.5:.3f} "
                f"tokens/s {random.randint(9000, 11000)}\n")
        yield line
        written += len(line)
    when = job.start + timedelta(seconds=2 * step + 5)
    yield (f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - INFO - train - step {step + 1} "
           f"loss 2.1874 lr 3.0e-04\n")
    stuck = job.seq - 1 if rank == job.straggler else job.seq
    if rank == job.straggler and silent:
        return
    when = when + timedelta(minutes=10, milliseconds=37 * (rank % 13))
    ran = 600000 + 11 * (rank % 9) + 3
    yield (f"[rank{rank}]:[E{_glog(when)} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
           f"operation timeout: WorkNCCL(SeqNum={stuck}, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, "
           f"Timeout(ms)=600000) ran for {ran} milliseconds before timing out.\n")
    yield (f"[rank{rank}]:[E{_glog(when)} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
           f"Exception (either an error or timeout) detected by watchdog at work: {stuck}, last enqueued NCCL "
           f"work: {stuck}, last completed NCCL work: {stuck - 1}.\n")
    yield (f"[rank{rank}]:[E{_glog(when)} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have "
           f"failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might "
           f"run on corrupted/incomplete data.\n")
