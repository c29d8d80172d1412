"""Network & storage layer causes: IB links, NCCL's network errors, NFS, full filesystems."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.training import Job


@fault("network_fabric_errors", "training")
def network_fabric_errors_training(job: Job) -> None:
    """One host's IB port flaps: its peers report completion errors (status 12) against its address and every rank times out."""
    d = job.d
    d.title = f"Job {d.job} failed: NCCL errors, collective timeouts on every rank"
    d.place_gpu = False
    for offset, state in ((0.0, "down"), (3.6, "up"), (7.9, "down"), (10.2, "up")):
        job.dmesg(d.culprit, d.fault + timedelta(seconds=offset), f"mlx5_core 0000:0c:00.0 ibp12s0: Link {state}")
    for rank in range(d.nranks):
        host = d.host_of(rank)
        if host == d.culprit:
            continue
        pid, dev = d.pid(rank), rank % d.gpus_per_host
        when = d.fault + timedelta(seconds=4.1 + 0.3 * rank)
        job.log(rank, fmt.pylog(when, f"[rank{rank}] NCCL_DEBUG_SUBSYS=NET warning follows"),
                f"{host}:{pid}:{pid + 177} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer {d.ip(d.culprit)}<{40100 + rank}> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid fe80::a088:c203:f1:{rank:04x} remoteGids fe80::a088:c203:f1:e20e hca mlx5_0",
                f"{host}:{pid}:{pid + 177} [{dev}] NCCL INFO transport/net.cc:1298 -> 6",
                f"{host}:{pid}:{pid + 177} [{dev}] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]")
    job.stop(d.fault - timedelta(seconds=1), dead=set())


@fault("network_misconfigured", "training")
def network_misconfigured_training(job: Job) -> None:
    """NCCL bootstraps over every interface of a container host, docker bridges included: the ranks cannot connect."""
    d = job.d
    d.title = f"Job {d.job} failed at start: NCCL could not connect"
    d.place_host = False
    d.fault = d.start + timedelta(seconds=6, milliseconds=d.rng.randint(0, 900))
    for rank in range(d.nranks):
        host, pid, dev = d.host_of(rank), d.pid(rank), rank % d.gpus_per_host
        job.log(rank, f"{host}:{pid}:{pid} [{dev}] NCCL INFO NET/Socket : Using [0]bond0:{d.ip(host)}<0> [1]docker0:172.17.0.1<0> [2]br-{d.rng.randint(0, 0xffffffff):08x}:172.19.0.1<0>",
                f"{host}:{pid}:{pid + 131} [{dev}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<{d.rng.randint(30000, 60000)}> failed : Software caused connection abort",
                f"{host}:{pid}:{pid + 131} [{dev}] NCCL INFO misc/socket.cc:565 -> 2",
                f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                f"[rank{rank}]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.")
    job.finish(d.fault + timedelta(seconds=4))


@fault("storage_stall", "training")
def storage_stall_training(job: Job) -> None:
    """The NFS server stops responding while rank 0 writes a checkpoint: rank 0 hangs in D state, the others time out."""
    d = job.d
    d.title = f"Job {d.job} hung during a checkpoint"
    d.culprit, d.local = d.hosts[0], 0
    d.place_gpu = False
    server = d.rng.choice(("nfs-ckpt01", "filer02", "nas-a"))
    job.log(0, fmt.pylog(d.fault - timedelta(seconds=37), f"[rank0] Saving checkpoint to /mnt/ckpt/run{d.job % 97}/step_{d.rng.randint(10, 90)}000 ..."))
    for k in range(3):
        job.dmesg(d.culprit, d.fault + timedelta(seconds=k * 31.2), f"nfs: server {server} not responding, still trying")
    pid = d.pid(0)
    job.dmesg(d.culprit, d.fault + timedelta(seconds=125.3), f"INFO: task python3:{pid} blocked for more than 120 seconds.",
              "      Tainted: P           OE     5.15.0-105-generic #115-Ubuntu",
              "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
              f"task:python3         state:D stack:    0 pid:{pid} ppid: {pid - 13} flags:0x00004002")
    job.stop(d.fault - timedelta(seconds=37))


@fault("disk_full", "training")
def disk_full_training(job: Job) -> None:
    """Rank 0 saves a checkpoint to a full scratch disk: No space left on device, rank 0 dies, the others time out."""
    d = job.d
    d.title = f"Job {d.job} failed during a checkpoint"
    d.culprit, d.local = d.hosts[0], 0
    d.place_gpu = False
    site = "/opt/conda/lib/python3.11/site-packages"
    path = f"/scratch/run{d.job % 97}/checkpoint-{d.rng.randint(10, 90)}000"
    job.log(0, *(f"[rank0]:{line}" for line in (
        f"[INFO|trainer.py:3410] {d.fault:%Y-%m-%d %H:%M:%S},118 >> Saving model checkpoint to {path}",
        "Traceback (most recent call last):",
        '  File "/opt/train/run_clm.py", line 655, in <module>',
        "    main()",
        f'  File "{site}/transformers/trainer.py", line 3008, in _save_checkpoint',
        "    self.save_model(output_dir, _internal_call=True)",
        f'  File "{site}/safetensors/torch.py", line 286, in save_file',
        "    serialize_file(_flatten(tensors), filename, metadata=metadata)",
        'safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })')))
    job.stop(d.fault)
