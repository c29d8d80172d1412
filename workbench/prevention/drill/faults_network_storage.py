"""Network & storage layer causes: IB links, NCCL's network errors, NFS, full filesystems."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
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
    # NCCL bootstraps right after the process group's init line: its lines carry no time of their own
    # (NCCL before 2.26), so that line's is when the failure shows
    d.fault = d.start + timedelta(milliseconds=d.rng.randint(200, 900))
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


@fault("network_fabric_errors", "inference")
def network_fabric_errors_inference(svc: Service) -> None:
    """One node's uplink port flaps: the node drops off the cluster network for a minute, its replica is unreachable and its in-flight requests fail."""
    d = svc.d
    d.title = f"{svc.model}: errors and latency up, a replica unreachable"
    for offset, state in ((0.0, "down"), (4.3, "up"), (9.1, "down"), (52.6, "up")):
        svc.kernel(d.culprit, d.fault + timedelta(seconds=offset), f"mlx5_core 0000:0c:00.0 ens1f0np0: Link {state}")
    d.first_sign = d.fault.replace(microsecond=0)
    svc.event(d.fault + timedelta(seconds=41), "NodeNotReady", f"Node {d.culprit} status is now: NodeNotReady", kind="Node",
              obj=d.culprit, node=d.culprit, typ="Normal", component="node-controller")
    svc.event(d.fault + timedelta(seconds=66), "NodeReady", f"Node {d.culprit} status is now: NodeReady", kind="Node",
              obj=d.culprit, node=d.culprit, typ="Normal")
    back = d.fault + timedelta(seconds=60)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        if not d.fault <= t < back + timedelta(seconds=30):
            return
        if p == svc.victim:
            if t < back:
                s["up"] = 0.0  # the scrape could not reach the pod
            else:
                s["fail"] = 0.08  # the requests cut off mid-stream come back as aborts
            return
        svc.absorb(s)
    svc.effects.append(effect)


@fault("network_misconfigured", "inference")
def network_misconfigured_inference(svc: Service) -> None:
    """A host-network replica restarted on a node with a Docker bridge: NCCL lists the bridge, dials it, and the engine cannot start."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff"
    d.place_host = False
    svc.engine_fails_at_start(lambda pod, pid: [
        f"{pod}:{pid}:{pid} [0] NCCL INFO NET/Socket : Using [0]bond0:10.0.2.{21 + svc.victim}<0> [1]docker0:172.17.0.1<0>",
        f"{pod}:{pid}:{pid + 61} [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 172.17.0.1<{d.rng.randint(30000, 60000)}> failed : Software caused connection abort",
        f"{pod}:{pid}:{pid + 61} [0] NCCL INFO misc/socket.cc:565 -> 2"])


@fault("storage_stall", "inference")
def storage_stall_inference(svc: Service) -> None:
    """The NFS server holding the LoRA adapters stops answering one node: requests that load an adapter hang there and the replica queues."""
    d = svc.d
    d.title = f"{svc.model}: latency up on one replica"
    server = d.rng.choice(("nfs-models01", "filer02", "nas-a"))
    for k in range(3):
        svc.kernel(d.culprit, d.fault + timedelta(seconds=k * 31.2), f"nfs: server {server} not responding, still trying")
    pid = d.rng.randint(2000, 9000)
    svc.kernel(d.culprit, d.fault + timedelta(seconds=125.3), f"INFO: task python3:{pid} blocked for more than 120 seconds.",
               "      Tainted: P           OE     5.15.0-105-generic #115-Ubuntu",
               "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
               f"task:python3         state:D stack:    0 pid:{pid} ppid: {pid - 13} flags:0x00004002")
    d.first_sign = d.fault.replace(microsecond=0)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        if p == svc.victim and t >= d.fault:
            level = svc.ramp(t, over_s=60)
            s["waiting"] += 90 * level
            s["slow"] = 0.5 * level
            s["rate"] *= 1 - 0.6 * level
    svc.effects.append(effect)


@fault("disk_full", "inference")
def disk_full_inference(svc: Service) -> None:
    """A replica restarts and re-downloads its weights to the node's model cache disk, which old versions filled: No space left on device, CrashLoopBackOff."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff"
    pod, node = svc.pods[svc.victim], d.culprit
    svc.event(d.fault - timedelta(seconds=6), "Killing", "Stopping container vllm", obj=pod,
              node=node, typ="Normal")
    repo = svc.model.replace("/", "--")
    svc.engine_log(d.fault, "weight_utils.py:218] Error downloading the weights",
                   f"weight_utils.py:218] OSError: [Errno 28] No space left on device: '/models/hub/models--{repo}/blobs/{d.rng.randint(0, 16 ** 12):012x}.incomplete'")
    d.first_sign = d.fault.replace(microsecond=0)
    d.texts[f"{node}/df-h.txt"] = ("Filesystem      Size  Used Avail Use% Mounted on\n"
                                   "/dev/nvme0n1p2  1.8T  412G  1.3T  25% /\n"
                                   "/dev/nvme1n1    3.5T  3.5T     0 100% /models\n"
                                   "tmpfs            63G     0   63G   0% /dev/shm\n")
    svc.event(d.fault + timedelta(seconds=30), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
              obj=pod, node=node, count=4)
    svc.replica_gone()
