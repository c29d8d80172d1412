"""Scheduling layer causes: what Slurm (sacct, slurmctld) and the kernel's OOM killer say."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.training import Job


@fault("preemption", "training")
def preemption_training(job: Job) -> None:
    """A higher-priority job preempts the training job: Slurm ends it as PREEMPTED."""
    d = job.d
    d.title = f"Job {d.job} stopped before its end"
    d.place_host = False
    other = d.job + d.rng.randint(10, 400)
    job.slurmctld += [(d.fault - timedelta(seconds=2), f"_slurm_rpc_submit_batch_job: JobId={other} InitPrio=4294967000 usec=911"),
                      (d.fault, f"preempted JobId={d.job} has been killed to reclaim resources for JobId={other}"),
                      (d.fault + timedelta(seconds=1), f"sched: Allocate JobId={other} NodeList={d.hostlist()} #CPUs={32 * len(d.hosts)} Partition=gpu")]
    job.state, job.exit_code = "PREEMPTED", "0:15"
    job.finish(d.fault + timedelta(seconds=1))


@fault("job_time_limit", "training")
def job_time_limit_training(job: Job) -> None:
    """The job runs at its usual pace into a wall-time limit that was set too short."""
    d = job.d
    d.title = f"Job {d.job} was cancelled"
    d.place_host = False
    job.state, job.exit_code = "TIMEOUT", "0:0"
    job.finish(d.fault)
    d.add(f"slurm/job-{d.job}.err", f"slurmstepd: error: *** JOB {d.job} ON {d.hosts[0]} CANCELLED AT {d.fault:%Y-%m-%dT%H:%M:%S} DUE TO TIME LIMIT ***")


@fault("node_drained", "training")
def node_drained_training(job: Job) -> None:
    """An admin drains a node for maintenance while the job runs on it: Slurm kills the job with NODE_FAIL."""
    d = job.d
    d.title = f"Job {d.job} failed: node failure"
    d.place_gpu = False
    job.slurmctld += [(d.fault, f"update_node: node {d.culprit} reason set to: maintenance: BMC firmware update (ticket OPS-{d.rng.randint(1000, 9999)})"),
                      (d.fault, f"update_node: node {d.culprit} state set to DOWN"),
                      (d.fault + timedelta(milliseconds=40), f"Killing JobId={d.job} on failed node {d.culprit}")]
    d.add("slurm/sinfo-R.txt", "REASON               USER      TIMESTAMP           NODELIST",
          f"maintenance: BMC fir root      {fmt.slurm_time(d.fault)} {d.culprit}")
    job.stop(d.fault, dead={r for r in range(d.nranks) if d.host_of(r) == d.culprit})
    job.state, job.exit_code = "NODE_FAIL", "0:0"


@fault("host_oom_kill", "training")
def host_oom_kill_training(job: Job) -> None:
    """DataLoader workers leak host memory until the kernel OOM killer takes a rank."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    d.place_gpu = False
    pid = d.pid(d.rank)
    job.dmesg(d.culprit, d.fault,
              "pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
              f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/slurm/uid_1001/job_{d.job}/step_0,task=python3,pid={pid},uid=1001",
              f"Out of memory: Killed process {pid} (python3) total-vm:187421320kB, anon-rss:{d.rng.randint(130, 190)}371844kB, file-rss:81920kB, shmem-rss:2097152kB, UID:1001 pgtables:289412kB oom_score_adj:0")
    job.stop(d.fault)


@fault("insufficient_capacity", "inference")
def insufficient_capacity_inference(svc: Service) -> None:
    """Replicas added for a launch stay Pending: no node has a free GPU and the autoscaler is at its limit."""
    d = svc.d
    d.title = f"{svc.model}: requests queue after a planned scale-out"
    d.place_host = False
    wanted = len(svc.pods) + d.rng.randint(2, 4)
    svc.event(d.fault - timedelta(seconds=3), "ScalingReplicaSet", f"Scaled up replica set vllm to {wanted}",
              kind="Deployment", obj="vllm", typ="Normal", component="deployment-controller")
    for j in range(wanted - len(svc.pods)):
        pending = f"vllm-pending-{d.job % 1000}-{j}"
        svc.event(d.fault + timedelta(seconds=j), "FailedScheduling",
                  f"0/{len(svc.pods) + 6} nodes are available: {len(svc.pods)} Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity/selector. preemption: 0/{len(svc.pods) + 6} nodes are available: {len(svc.pods) + 6} No preemption victims found for incoming pod.",
                  obj=pending, component="default-scheduler", count=20 + j)
        svc.event(d.fault + timedelta(seconds=j + 10), "NotTriggerScaleUp",
                  "pod didn't trigger scale-up: 1 max node group size reached", obj=pending, typ="Normal",
                  component="cluster-autoscaler")
    # the traffic the launch brought lands on the replicas that exist
    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        level = svc.ramp(t, delay_s=60, over_s=120)
        s["rate"] *= 1 + 0.5 * level
        s["waiting"] += 60 * level
        s["slow"] = 0.2 * level
        s["kv"] += (0.9 - s["kv"]) * level
    svc.effects.append(effect)


@fault("pod_eviction", "inference")
def pod_eviction_inference(svc: Service) -> None:
    """The kubelet of one node evicts the vLLM pod there (model cache downloads filled ephemeral storage); the survivors take its load."""
    d = svc.d
    d.title = f"{svc.model}: errors and latency up, a replica gone"
    node, pod = d.culprit, svc.pods[svc.victim]
    d.first_sign = d.fault - timedelta(seconds=20)  # the kubelet's threshold, before the eviction itself
    svc.event(d.fault - timedelta(seconds=20), "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage",
              kind="Node", obj=node, node=node)
    svc.event(d.fault, "Evicted",
              f"The node was low on resource: ephemeral-storage. Threshold quantity: 21913043992, available: {d.rng.randint(9, 20)}912Ki. Container vllm was using {d.rng.randint(90, 180)}Gi, request is 0, has larger consumption of ephemeral-storage.",
              obj=pod, node=node)
    svc.replica_stopped(fail=0.03)


@fault("host_oom_kill", "inference")
def host_oom_kill_inference(svc: Service) -> None:
    """A replica's container goes over its memory limit (a tokenizer cache leak): the cgroup OOM killer ends it and it restarts."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors, a replica restarted"
    pid = d.rng.randint(2000, 9000)
    uid = f"{d.rng.randint(0, 0xffffffff):08x}_{d.rng.randint(0, 0xffff):04x}"
    d.first_sign = d.fault - timedelta(milliseconds=40)
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=40),
               "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=-997",
               f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-{uid}.scope,mems_allowed=0-1,oom_memcg=/kubepods.slice/kubepods-pod{uid}.slice,task_memcg=/kubepods.slice/kubepods-pod{uid}.slice/cri-containerd-{uid}.scope,task=python3,pid={pid},uid=0",
               f"Memory cgroup out of memory: Killed process {pid} (python3) total-vm:{d.rng.randint(150, 190)}421320kB, anon-rss:100663296kB, file-rss:81920kB, shmem-rss:2097152kB, UID:0 pgtables:289412kB oom_score_adj:-997")
    svc.replica_restarts(reason="OOMKilled")


@fault("preemption", "inference")
def preemption_inference(svc: Service) -> None:
    """A higher-priority training job preempts one serving pod; the rest of the fleet takes its load."""
    d = svc.d
    d.title = f"{svc.model}: latency up, a replica gone"
    d.place_host = False
    pod, node = svc.pods[svc.victim], d.culprit
    svc.event(d.fault, "Preempted", f"Preempted by pod {d.rng.randint(0, 0xffffffff):08x}-4c1e-9a53-{d.job:012d} on node {node}",
              obj=pod, node=node, component="default-scheduler")
    svc.replica_stopped()


@fault("shm_exhausted", "training")
def shm_exhausted_training(job: Job) -> None:
    """The container's /dev/shm is the 64 MB default: NCCL cannot create its shared-memory segments at start."""
    d = job.d
    d.title = f"Job {d.job} failed at start: NCCL could not set up shared memory"
    d.place_host = False
    # NCCL sets up its transports right after the process group's init line: its WARN lines carry no
    # time of their own (NCCL before 2.26), so that line's is when the failure shows
    d.fault = d.start + timedelta(milliseconds=d.rng.randint(200, 900))
    for rank in range(d.nranks):
        host, pid, dev = d.host_of(rank), d.pid(rank), rank % d.gpus_per_host
        job.log(rank, f"{host}:{pid}:{pid + 97} [{dev}] misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-{d.rng.randint(0, 0xffffff):06X} (size {d.rng.randint(9, 40) * 1048576}), error: No space left on device (28)",
                f"{host}:{pid}:{pid + 97} [{dev}] NCCL INFO transport/shm.cc:114 -> 2",
                f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
                f"[rank{rank}]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.")
    job.finish(d.fault + timedelta(seconds=4))


@fault("node_drained", "inference")
def node_drained_inference(svc: Service) -> None:
    """An admin drains a GPU node for maintenance: its replica is evicted and cannot be placed again, the survivors take its load."""
    d = svc.d
    d.title = f"{svc.model}: latency up, a replica gone"
    d.place_gpu = False
    node, pod = d.culprit, svc.pods[svc.victim]
    svc.event(d.fault - timedelta(seconds=2), "NodeNotSchedulable", f"Node {node} status is now: NodeNotSchedulable",
              kind="Node", obj=node, node=node, typ="Normal")
    d.first_sign = d.fault - timedelta(seconds=2)
    d.first_sign = d.first_sign.replace(microsecond=0)
    svc.event(d.fault, "Killing", "Stopping container vllm", obj=pod, node=node, typ="Normal")
    busy = len(svc.pods) - 1
    svc.event(d.fault + timedelta(seconds=3), "FailedScheduling",
              f"0/{len(svc.pods)} nodes are available: 1 node(s) were unschedulable, {busy} Insufficient nvidia.com/gpu. preemption: 0/{len(svc.pods)} nodes are available: 1 Preemption is not helpful for scheduling, {busy} No preemption victims found for incoming pod.",
              obj=f"{pod[:-5]}{d.rng.choice('bcdfghjk')}x2m9", component="default-scheduler", count=12)
    d.add("k8s/nodes.txt", "NAME      STATUS                     ROLES    AGE    VERSION",
          *(f"{n:<9} {'Ready,SchedulingDisabled' if n == node else 'Ready':<26} <none>   {41 + i}d   v1.29.4" for i, n in enumerate(d.hosts)))
    svc.replica_gone()


@fault("shm_exhausted", "inference")
def shm_exhausted_inference(svc: Service) -> None:
    """A replica restarted from a pod spec without the /dev/shm volume: its tensor-parallel workers cannot create NCCL's shared-memory segments."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff"
    d.place_host = False
    svc.engine_fails_at_start(lambda pod, pid: [
        f"{pod}:{pid}:{pid + 97} [1] misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-{d.rng.randint(0, 0xffffff):06X} (size {d.rng.randint(9, 40) * 1048576}), error: No space left on device (28)",
        f"{pod}:{pid}:{pid + 97} [1] NCCL INFO transport/shm.cc:114 -> 2"])
