"""GPU & driver layer causes: what the culprit's own logs, the kernel and nvidia-smi show."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.nvsmi import Gpu, page
from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.training import Job

SITE = "/usr/local/lib/python3.10/dist-packages"


def _traceback(rank: int, *tail: str) -> list[str]:
    """A training step's traceback under torchrun's ``[rankN]:`` prefix, ending in ``tail``."""
    lines = ["Traceback (most recent call last):",
             '  File "/workspace/train.py", line 412, in <module>',
             "    main()",
             '  File "/workspace/train.py", line 361, in main',
             "    loss = engine(batch)",
             f'  File "{SITE}/deepspeed/runtime/engine.py", line 1846, in forward',
             "    loss = self.module(*inputs, **kwargs)",
             *tail]
    return [f"[rank{rank}]: {line}" for line in lines]


@fault("gpu_oom", "training")
def gpu_oom_training(job: Job) -> None:
    """A longer batch than any before asks for more GPU memory than is left: CUDA out of memory on one rank."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    free = d.rng.randint(300, 900)
    job.log(d.rank, fmt.pylog(d.fault, f"[rank{d.rank}] step batch: seq_len 16384 (longest so far)", "WARNING"),
            *_traceback(d.rank, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {d.rng.randint(2, 9)}.50 GiB. "
                        f"GPU {d.local} has a total capacity of 79.11 GiB of which {free}.06 MiB is free. Including non-PyTorch "
                        f"memory, this process has 78.{d.rng.randint(10, 90)} GiB memory in use. Of the allocated memory 74.21 GiB "
                        "is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
                        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."))
    job.stop(d.fault)


@fault("app_gpu_fault", "training")
def app_gpu_fault_training(job: Job) -> None:
    """A custom kernel reads out of bounds: Xid 31 MMU fault on the rank's GPU, illegal memory access in its log."""
    d = job.d
    d.title = f"Job {d.job} failed: illegal memory access"
    pid = d.pid(d.rank)
    job.dmesg(d.culprit, d.fault,
              f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 31, pid={pid}, name=python3, Ch 00000008, intr 00000000. "
              f"MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_{d.rng.randint(0, 7)} faulted @ 0x7f2a_8c{d.rng.randint(0, 0xffff):04x}000. "
              "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ")
    when = d.fault + timedelta(milliseconds=412)
    job.log(d.rank, fmt.glog(d.rank, when, "E", "ProcessGroupNCCL.cpp:1595",
                             f"[PG ID 0 PG GUID 0(default_pg) Rank {d.rank}] Process group watchdog thread terminated with "
                             "exception: CUDA error: an illegal memory access was encountered"),
            f"[rank{d.rank}]:CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.")
    job.stop(d.fault)


@fault("numeric_instability", "training")
def numeric_instability_training(job: Job) -> None:
    """The loss diverges after warm-up and turns NaN on every rank at one step; the NaN check aborts the job."""
    d = job.d
    d.title = f"Job {d.job} aborted: NaN in the gradients"
    d.place_host = False
    d.first_sign = (d.fault - timedelta(seconds=2 * 60)).replace(microsecond=0)  # the loss jumps 50 % two logs before NaN
    for rank in range(d.nranks):
        if rank == 0:
            for i, loss in enumerate((1.874512, 1.902433, 2.817764, 9.733120)):
                when = d.fault - timedelta(seconds=(4 - i) * 60)
                job.log(rank, f" [{when:%Y-%m-%d %H:%M:%S}] iteration     {8350 + i * 50}/  100000 | consumed samples:      {(8350 + i * 50) * 512} | elapsed time per iteration (ms): 1210.4 | learning rate: 3.000E-04 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {0.9 + i * 3.1:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
            job.log(rank, f" [{d.fault:%Y-%m-%d %H:%M:%S}] iteration     8600/  100000 | consumed samples:      4403200 | elapsed time per iteration (ms): 1208.9 | learning rate: 3.000E-04 | global batch size:   512 | lm loss: nan | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   1 |")
        host, dev = d.host_of(rank), rank % d.gpus_per_host
        job.log(rank, fmt.pylog(d.fault + timedelta(seconds=1, milliseconds=200 + rank), f"[rank{rank}] AssertionError: Rank {rank}: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: {dev}, node: {host}", "ERROR"))
    job.finish(d.fault + timedelta(seconds=9))


@fault("driver_stack_mismatch", "training")
def driver_stack_mismatch_training(job: Job) -> None:
    """Unattended upgrades replaced the NVIDIA user-space libraries on one node without a reboot: CUDA cannot start there."""
    d = job.d
    d.title = f"Job {d.job} failed at start"
    d.place_gpu = False
    upgrade = d.start - timedelta(hours=d.rng.randint(2, 9), minutes=d.rng.randint(0, 59))
    d.fault = d.start + timedelta(seconds=9, milliseconds=d.rng.randint(0, 900))
    d.first_sign = upgrade.replace(microsecond=0)  # the change before the first error, as dpkg stamps it
    old, new = "550.90.07-0ubuntu0.22.04.1", "550.107.02-0ubuntu0.22.04.1"
    pkgs = ("libnvidia-compute-550", "nvidia-utils-550", "libnvidia-extra-550", "nvidia-compute-utils-550")
    for host in d.hosts:
        routine = upgrade + timedelta(minutes=d.hosts.index(host) * 3 + 1)
        log = [f"{routine:%Y-%m-%d %H:%M:%S} startup archives unpack",
               f"{routine:%Y-%m-%d %H:%M:%S} upgrade tzdata:all 2024a-0ubuntu0.22.04 2025a-0ubuntu0.22.04",
               f"{routine:%Y-%m-%d %H:%M:%S} status installed tzdata:all 2025a-0ubuntu0.22.04"]
        if host == d.culprit:
            for i, pkg in enumerate(pkgs):
                when = upgrade + timedelta(seconds=i * 1.3)
                log += [f"{when:%Y-%m-%d %H:%M:%S} upgrade {pkg}:amd64 {old} {new}",
                        f"{when:%Y-%m-%d %H:%M:%S} status installed {pkg}:amd64 {new}"]
        d.add(f"{host}/dpkg.log", *sorted(log))
    job.dmesg(d.culprit, d.fault, "NVRM: API mismatch: the client has the version 550.107.02, but",
              "               NVRM: this kernel module has the version 550.90.07.  Please",
              "               NVRM: make sure that this kernel module and all NVIDIA driver",
              "               NVRM: components have the same version.")
    dead = {r for r in range(d.nranks) if d.host_of(r) == d.culprit}
    for rank in dead:
        job.log(rank, *_traceback(rank, "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination"))
    job.smi_edit = lambda _: "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.107\n"
    job.stop(d.fault, dead=dead)


@fault("fabric_manager_down", "training")
def fabric_manager_down_training(job: Job) -> None:
    """After a driver update the node's Fabric Manager no longer matches the driver and refuses to start: CUDA says 802."""
    d = job.d
    d.title = f"Job {d.job} failed at start"
    d.place_gpu = False
    d.fault = d.start + timedelta(seconds=8, milliseconds=d.rng.randint(0, 900))
    boot = d.start - timedelta(minutes=d.rng.randint(20, 200))
    d.first_sign = boot.replace(microsecond=0)  # Fabric Manager refusing to start, as the journal stamps it
    d.add(f"{d.culprit}/journal-nvidia-fabricmanager.txt",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: Starting NVIDIA fabric manager service...",
          f"{boot:%b %d %H:%M:%S} {d.culprit} nv-fabricmanager[{d.rng.randint(2000, 5000)}]: fabric manager NVIDIA GPU driver interface version 550.90.07 don't match with driver version 550.107.02. Please update with matching NVIDIA driver package.",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: Failed to start NVIDIA fabric manager service.")
    dead = {r for r in range(d.nranks) if d.host_of(r) == d.culprit}
    for rank in dead:
        job.log(rank, *_traceback(rank, "RuntimeError: CUDA error: system not yet initialized",
                                  "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect."))
    job.stop(d.fault, dead=dead)


@fault("gpu_hang", "training")
def gpu_hang_training(job: Job) -> None:
    """The GPU's GSP firmware stops answering (Xid 119): the rank stalls inside its collective."""
    d = job.d
    d.title = f"Job {d.job} hung: collective timeouts on every rank"
    for k in range(3):
        when = d.fault + timedelta(seconds=45 * k)
        job.dmesg(d.culprit, when,
                  f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 119, pid={d.pid(d.rank)}, name=python3, Timeout after 45s of "
                  f"waiting for RPC response from GPU{d.local} GSP! Expected function 76 (GSP_RM_CONTROL) sequence "
                  f"{24174 + k * 7} (0x20801322 0x808).")
    job.stop(d.fault, dead=set())
    job.dead_ranks.add(d.rank)


@fault("ecc_uncorrectable", "training")
def ecc_uncorrectable_training(job: Job) -> None:
    """A contained uncorrectable ECC error (Xid 94) kills the rank using the memory; a row remap is pending."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    bus, pid = d.buses[d.local], d.pid(d.rank)
    job.dmesg(d.culprit, d.fault, f"NVRM: Xid (PCI:0000:{bus}:00): 94, pid={pid}, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No")
    job.dmesg(d.culprit, d.fault + timedelta(milliseconds=4),
              f"NVRM: Xid (PCI:0000:{bus}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000000a1{d.rng.randint(0, 0xfff):03x}c0) Marked for Remapping, reset gpu to activate.")
    job.log(d.rank, *_traceback(d.rank, "RuntimeError: CUDA error: uncorrectable ECC error encountered"))
    job.smi_edit = _smi_ecc(job)
    job.stop(d.fault)


def _kv(indent: int, key: str, value: object) -> str:
    """One ``key : value`` line of nvidia-smi -q."""
    return f"{' ' * indent}{key:<{42 - indent}}: {value}"


def _smi_ecc(job: Job) -> Callable[[str], str]:
    """The culprit GPU's nvidia-smi -q section with a volatile DBE and a pending remap."""
    d = job.d
    target = f"GPU 0000:{d.buses[d.local]}:00.0".upper()

    def edit(text: str) -> str:
        head, sep, rest = text.partition(target)
        nxt = rest.find("\nGPU 0000")
        section = rest if nxt < 0 else rest[:nxt]
        section = section.replace(_kv(12, "DRAM Uncorrectable", 0), _kv(12, "DRAM Uncorrectable", 1), 1)
        section = section.replace(_kv(8, "Pending", "No"), _kv(8, "Pending", "Yes"), 1)
        return head + sep + section + ("" if nxt < 0 else rest[nxt:])
    return edit



@fault("kv_cache_pressure", "inference")
def kv_cache_pressure_inference(svc: Service) -> None:
    """One replica's KV cache runs full (its memory budget was the smallest): it preempts requests and they queue."""
    d = svc.d
    d.title = f"{svc.model}: latency up on one replica"
    pod = svc.pods[svc.victim]
    lines = [f"INFO {d.start:%m-%d %H:%M:%S} api_server.py:585] vLLM API server version 0.6.3",
             f"INFO {d.start:%m-%d %H:%M:%S} gpu_executor.py:122] # GPU blocks: 9166, # CPU blocks: 3276"]
    total = 0
    for k in range(d.rng.randint(5, 9)):
        when = d.fault + timedelta(seconds=20 + k * d.rng.randint(15, 60))
        total += d.rng.randint(1, 40)
        lines.append(f"WARNING {when:%m-%d %H:%M:%S} scheduler.py:1057] Sequence group {d.rng.randint(100, 9000)} is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={total}")
    d.add(f"{d.culprit}/logs/{pod}.log", *lines)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        if p == svc.victim:
            level = svc.ramp(t, over_s=60)
            s["kv"] += (0.995 - s["kv"]) * level
            s["waiting"] += 120 * level
            s["slow"] = 0.4 * level
            s["preempt"] = 2.0 * level
    svc.effects.append(effect)


@fault("gpu_contention", "inference")
def gpu_contention_inference(svc: Service) -> None:
    """A stray training job lands on a serving GPU; the vLLM pod there restarts and cannot get its memory back."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff"
    d.place_gpu = True
    pod, node = svc.pods[svc.victim], d.culprit
    free = d.rng.uniform(20, 40)
    lines = []
    for k in range(3):
        when = d.fault + timedelta(seconds=50 + k * 40)
        lines += [f"INFO {when:%m-%d %H:%M:%S} api_server.py:585] vLLM API server version 0.6.3",
                  f"ERROR {when:%m-%d %H:%M:%S} engine.py:158] ValueError: Free memory on device cuda:{d.local} ({free:.2f}/79.10 GiB) on startup is less than desired GPU memory utilization (0.9, 71.19 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."]
    d.add(f"{node}/logs/{pod}.log", *lines)
    d.texts[f"{node}/nvidia-smi-q.txt"] = _two_processes(svc, d.fault + timedelta(minutes=6))
    svc.event(d.fault + timedelta(seconds=40), "Killing", "Container vllm failed liveness probe, will be restarted", obj=pod, node=node,
              typ="Normal")
    svc.event(d.fault + timedelta(seconds=140), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
              obj=pod, node=node, count=3)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        if t < d.fault:
            return
        if p == svc.victim:
            s["latency"] = 3.0
            if t >= d.fault + timedelta(seconds=40):
                s["up"] = 0.0
            return
        if t >= d.fault + timedelta(seconds=40):
            svc.absorb(s)
    svc.effects.append(effect)


def _two_processes(svc: Service, when: datetime) -> str:
    """The node's nvidia-smi -q as the responder takes it: the stray job's process holds the culprit
    GPU's memory next to the vLLM worker that keeps restarting there."""
    d = svc.d
    gpus = [Gpu(index=i, bus=f":{bus}:00.0", uuid=f"GPU-{d.job * 31 + i:08x}-77aa-4c1e-9a53-{d.job:06d}{i:06d}",
                serial=f"16544221{40000 + i}", util=97 if i == d.local else 61, mem_used=79_000 if i == d.local else 72_400,
                temp=58 + i, power=420.0 + 9 * i, pid=d.rng.randint(2000, 9000)) for i, bus in enumerate(d.buses)]
    text = page(gpus, when)
    stray = d.rng.randint(10_000, 60_000)
    marker = f"GPU 0000:{d.buses[d.local]}:00.0".upper()
    head, sep, rest = text.partition(marker)
    block = ("\n" + _kv(8, "GPU instance ID", "N/A") + "\n" + _kv(8, "Compute instance ID", "N/A") + "\n"
             + _kv(8, "Process ID", stray) + "\n" + _kv(12, "Type", "C") + "\n" + _kv(12, "Name", "python")
             + "\n" + _kv(12, "Used GPU Memory", "47104 MiB"))
    end = rest.find("\n\nGPU 0000")
    end = len(rest.rstrip("\n")) if end < 0 else end
    section = rest[:end].replace(_kv(12, "Used GPU Memory", "78488 MiB"), _kv(12, "Used GPU Memory", "31384 MiB"))
    return head + sep + section + block + rest[end:]


@fault("gpu_runtime_misconfigured", "inference")
def gpu_runtime_misconfigured_inference(svc: Service) -> None:
    """A node rebuilt from a new image has no NVIDIA container runtime: the device plugin finds no NVML and the replica cannot be placed."""
    d = svc.d
    d.title = f"{svc.model}: a replica stays Pending after a node rebuild"
    node, pod = d.culprit, svc.pods[svc.victim]
    for k in range(3):  # kubectl logs of the device plugin's pod (v0.9), one block per restart
        stamp = f"{d.fault + timedelta(seconds=k * 40):%Y/%m/%d %H:%M:%S}"
        d.add(f"{node}/nvidia-device-plugin.log", f"{stamp} Loading NVML",
              f"{stamp} Failed to initialize NVML: could not load NVML library.",
              f"{stamp} If this is a GPU node, did you set the docker default runtime to `nvidia`?",
              f"{stamp} You can check the prerequisites at: https://github.com/NVIDIA/k8s-device-plugin#prerequisites",
              f"{stamp} You can learn how to set the runtime at: https://github.com/NVIDIA/k8s-device-plugin#quick-start",
              f"{stamp} If this is not a GPU node, you should set up a toleration or nodeSelector to only deploy this plugin on GPU nodes")
    svc.event(d.fault + timedelta(seconds=90), "FailedScheduling",
              f"0/{len(svc.pods) + 4} nodes are available: 1 Insufficient nvidia.com/gpu, {len(svc.pods) + 3} node(s) didn't match Pod's node affinity/selector.",
              obj=pod, component="default-scheduler", count=9)
    svc.replica_gone()


def _engine_dies(svc: Service, error: str) -> None:
    """The victim's vLLM 0.6 engine loop dies of a CUDA ``error`` at the fault (the error, then every
    request failing) and its container restarts."""
    svc.d.title = f"{svc.model}: 5xx errors, a replica restarted"
    svc.engine_log(svc.d.fault, "async_llm_engine.py:64] Engine background task failed", f"async_llm_engine.py:64] {error}",
                   "client.py:269] AsyncEngineDeadError: Background loop has errored already.")
    svc.replica_restarts()


@fault("gpu_oom", "inference")
def gpu_oom_inference(svc: Service) -> None:
    """One replica's engine runs out of GPU memory on a burst of long requests and dies; it restarts."""
    d = svc.d
    _engine_dies(svc, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {d.rng.randint(2, 9)}.00 GiB. GPU {d.local} has a total capacity of 79.11 GiB of which {d.rng.randint(100, 900)}.50 MiB is free. Including non-PyTorch memory, this process has 78.{d.rng.randint(10, 90)} GiB memory in use. Of the allocated memory 76.02 GiB is allocated by PyTorch, and 1.12 GiB is reserved by PyTorch but unallocated.")


@fault("app_gpu_fault", "inference")
def app_gpu_fault_inference(svc: Service) -> None:
    """A custom attention kernel of the release faults on one replica's GPU (Xid 13): illegal memory access, the engine dies."""
    d = svc.d
    d.place_gpu = True
    pid = d.rng.randint(2000, 9000)
    d.first_sign = d.fault - timedelta(milliseconds=300)
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=300),
               f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on (GPC {d.rng.randint(0, 7)}, TPC 1, SM 0): Out Of Range Address",
               f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 13, pid={pid}, name=python3, Graphics Exception: ESR 0x51e730=0x201000e 0x51e734=0x0 0x51e728=0x4c1eb72 0x51e72c=0x174")
    _engine_dies(svc, "RuntimeError: CUDA error: an illegal memory access was encountered")


@fault("ecc_uncorrectable", "inference")
def ecc_uncorrectable_inference(svc: Service) -> None:
    """An uncorrectable ECC error (Xid 94) on one replica's GPU kills its engine; a row remap is pending."""
    d = svc.d
    d.place_gpu = True
    bus = d.buses[d.local]
    d.first_sign = d.fault - timedelta(milliseconds=200)
    svc.kernel(d.culprit, d.fault - timedelta(milliseconds=200),
               f"NVRM: Xid (PCI:0000:{bus}:00): 94, pid={d.rng.randint(2000, 9000)}, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No",
               f"NVRM: Xid (PCI:0000:{bus}:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000000a1{d.rng.randint(0, 0xfff):03x}c0) Marked for Remapping, reset gpu to activate.")
    _engine_dies(svc, "RuntimeError: CUDA error: uncorrectable ECC error encountered")


def _crashloop(svc: Service, first: datetime, *error: str) -> None:
    """The victim's container comes back at ``first`` and dies at start with ``error`` (its vLLM log
    shows each try), then stays in CrashLoopBackOff; the other replicas take its load."""
    pod, node = svc.pods[svc.victim], svc.d.culprit
    svc.engine_log(first, *error)
    svc.event(first + timedelta(seconds=30), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
              obj=pod, node=node, count=4)
    svc.replica_gone()


@fault("driver_stack_mismatch", "inference")
def driver_stack_mismatch_inference(svc: Service) -> None:
    """Unattended upgrades replaced one node's NVIDIA user-space libraries without a reboot; when its vLLM container restarts CUDA cannot start there."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff"
    upgrade = svc.t0 - timedelta(hours=d.rng.randint(2, 9), minutes=d.rng.randint(0, 59))
    old, new = "550.90.07-0ubuntu0.22.04.1", "550.107.02-0ubuntu0.22.04.1"
    for host in d.hosts:
        routine = upgrade + timedelta(minutes=d.hosts.index(host) * 3 + 1)
        log = [f"{routine:%Y-%m-%d %H:%M:%S} startup archives unpack",
               f"{routine:%Y-%m-%d %H:%M:%S} upgrade tzdata:all 2024a-0ubuntu0.22.04 2025a-0ubuntu0.22.04",
               f"{routine:%Y-%m-%d %H:%M:%S} status installed tzdata:all 2025a-0ubuntu0.22.04"]
        if host == d.culprit:
            for i, pkg in enumerate(("libnvidia-compute-550", "nvidia-utils-550", "libnvidia-extra-550")):
                when = upgrade + timedelta(seconds=i * 1.3)
                log += [f"{when:%Y-%m-%d %H:%M:%S} upgrade {pkg}:amd64 {old} {new}",
                        f"{when:%Y-%m-%d %H:%M:%S} status installed {pkg}:amd64 {new}"]
        d.add(f"{host}/dpkg.log", *sorted(log))
    d.first_sign = upgrade.replace(microsecond=0)
    svc.kernel(d.culprit, d.fault + timedelta(seconds=3), "NVRM: API mismatch: the client has the version 550.107.02, but",
               "NVRM: this kernel module has the version 550.90.07.  Please",
               "NVRM: make sure that this kernel module and all NVIDIA driver",
               "NVRM: components have the same version.")
    svc.event(d.fault, "Killing", "Stopping container vllm", obj=svc.pods[svc.victim],
              node=d.culprit, typ="Normal")
    _crashloop(svc, d.fault + timedelta(seconds=3),
               "worker.py:101] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported display driver / cuda driver combination")


@fault("fabric_manager_down", "inference")
def fabric_manager_down_inference(svc: Service) -> None:
    """A node reboots into a new driver its Fabric Manager does not match; FM refuses to start and the vLLM pod there fails CUDA init with 802."""
    d = svc.d
    d.title = f"{svc.model}: a replica in CrashLoopBackOff after a node reboot"
    boot = d.fault - timedelta(seconds=d.rng.randint(60, 120))
    d.add(f"{d.culprit}/journal-nvidia-fabricmanager.txt",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: Starting NVIDIA fabric manager service...",
          f"{boot:%b %d %H:%M:%S} {d.culprit} nv-fabricmanager[{d.rng.randint(2000, 5000)}]: fabric manager NVIDIA GPU driver interface version 550.90.07 don't match with driver version 550.107.02. Please update with matching NVIDIA driver package.",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
          f"{boot:%b %d %H:%M:%S} {d.culprit} systemd[1]: Failed to start NVIDIA fabric manager service.")
    # Fabric Manager refusing to start, as the journal stamps it (as in the training drill): the node
    # going NotReady for its reboot is routine maintenance, and nothing here says it booted a new
    # driver (no dpkg line) until Fabric Manager reports the mismatch
    d.first_sign = boot.replace(microsecond=0)
    svc.event(d.fault - timedelta(seconds=150), "NodeNotReady", f"Node {d.culprit} status is now: NodeNotReady", kind="Node",
              obj=d.culprit, node=d.culprit, typ="Normal", component="node-controller")
    svc.event(boot + timedelta(seconds=40), "Rebooted", f"Node {d.culprit} has been rebooted, boot id: {d.rng.randint(0, 0xffffffff):08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
              kind="Node", obj=d.culprit, node=d.culprit)

    def down(p: int, t: datetime, s: dict[str, float]) -> None:  # the node was rebooting before the pod failed
        if p == svc.victim and d.fault - timedelta(seconds=150) <= t < d.fault:
            s["up"] = 0.0
    svc.effects.append(down)
    _crashloop(svc, d.fault,
               "worker.py:101] RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 802: system not yet initialized")


@fault("gpu_hang", "inference")
def gpu_hang_inference(svc: Service) -> None:
    """A replica's GPU stops answering its GSP firmware (Xid 119): the engine stalls, its liveness probe fails and the kubelet restarts it."""
    d = svc.d
    d.title = f"{svc.model}: requests time out on one replica"
    d.place_gpu = True
    for k in range(3):
        svc.kernel(d.culprit, d.fault + timedelta(seconds=45 * k),
                   f"NVRM: Xid (PCI:0000:{d.buses[d.local]}:00): 119, pid={d.rng.randint(2000, 9000)}, name=python3, Timeout after 45s of "
                   f"waiting for RPC response from GPU{d.local} GSP! Expected function 76 (GSP_RM_CONTROL) sequence "
                   f"{24174 + k * 7} (0x20801322 0x808).")
    d.first_sign = d.fault.replace(microsecond=0)
    pod, node = svc.pods[svc.victim], d.culprit
    svc.event(d.fault + timedelta(seconds=30), "Unhealthy",
              f'Liveness probe failed: Get "http://10.42.{svc.victim + 3}.17:8000/health": context deadline exceeded (Client.Timeout exceeded while awaiting headers)',
              obj=pod, node=node, count=3)
    svc.event(d.fault + timedelta(seconds=95), "Killing", "Container vllm failed liveness probe, will be restarted", obj=pod,
              node=node, typ="Normal")

    def stall(p: int, t: datetime, s: dict[str, float]) -> None:
        if p == svc.victim and t >= d.fault:
            s["rate"] *= 0.02
            s["waiting"] += 150
            s["slow"] = 1.0
    svc.effects.append(stall)


@fault("gpu_contention", "training")
def gpu_contention_training(job: Job) -> None:
    """Another user's process, started outside Slurm, holds most of one of the job's GPUs: that rank runs out of memory."""
    d = job.d
    d.title = f"Job {d.job} failed: a rank died"
    stray, held = d.rng.randint(10_000, 60_000), d.rng.randint(40, 52)
    job.log(d.rank, fmt.pylog(d.fault, f"[rank{d.rank}] evaluation: building the eval dataloader"),
            *_traceback(d.rank, f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {d.rng.randint(2, 6)}.00 GiB. "
                        f"GPU {d.local} has a total capacity of 79.11 GiB of which {d.rng.randint(200, 900)}.06 MiB is free. "
                        f"Process {stray} has {held}.20 GiB memory in use. Including non-PyTorch memory, this process has "
                        f"{78 - held}.{d.rng.randint(10, 90)} GiB memory in use. Of the allocated memory {76 - held}.80 GiB is "
                        "allocated by PyTorch, and 1.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
                        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."))
    job.smi_edit = _stray_process(job, stray, held * 1024 + 205)
    job.stop(d.fault)


def _stray_process(job: Job, pid: int, mib: int) -> Callable[[str], str]:
    """The culprit host's nvidia-smi -q at capture: the job is gone, the stray process still holds its GPU."""
    target = f"GPU 0000:{job.d.buses[job.d.local]}:00.0".upper()
    block = "\n".join(["    Processes", _kv(8, "GPU instance ID", "N/A"), _kv(8, "Compute instance ID", "N/A"),
                       _kv(8, "Process ID", pid), _kv(12, "Type", "C"), _kv(12, "Name", "python"),
                       _kv(12, "Used GPU Memory", f"{mib} MiB")])

    def edit(text: str) -> str:
        head, sep, rest = text.partition(target)
        return head + sep + rest.replace("    Processes                             : None", block, 1)
    return edit


@fault("gpu_runtime_misconfigured", "training")
def gpu_runtime_misconfigured_training(job: Job) -> None:
    """A node reimaged without enroot's NVIDIA hook starts the job's container without the GPU libraries: its ranks find no GPU."""
    d = job.d
    d.title = f"Job {d.job} failed at start"
    d.place_gpu = False
    # CUDA initialises right after the process group's init line, whose time the traceback follows
    d.fault = d.start + timedelta(milliseconds=d.rng.randint(200, 900))
    dead = {r for r in range(d.nranks) if d.host_of(r) == d.culprit}
    for rank in sorted(dead):
        job.log(rank, *_traceback(rank, f'  File "{SITE}/torch/cuda/__init__.py", line 314, in _lazy_init',
                                  "    torch._C._cuda_init()",
                                  "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and "
                                  "installed a driver from http://www.nvidia.com/Download/index.aspx"))
    d.add(f"slurm/job-{d.job}.err",
          "pyxis: importing docker image: nvcr.io#nvidia/pytorch:24.05-py3")
    job.stop(d.fault, dead=dead)


@fault("numeric_instability", "inference")
def numeric_instability_inference(svc: Service) -> None:
    """The FP16 model overflows on a new kind of long prompt: its logits turn NaN, the sampler raises and each replica's engine dies in turn."""
    d = svc.d
    d.title = f"{svc.model}: 5xx errors on every replica"
    d.place_host = False
    start = svc.t0 - timedelta(hours=20)
    downs: list[tuple[datetime, datetime]] = []
    for p, (pod, node) in enumerate(zip(svc.pods, svc.nodes)):
        when = d.fault + timedelta(seconds=p * d.rng.randint(25, 70))
        downs.append((when, when + timedelta(seconds=90)))
        d.add(f"{node}/logs/{pod}.log",
              f"INFO {start:%m-%d %H:%M:%S} api_server.py:585] vLLM API server version 0.6.3",
              f"INFO {start:%m-%d %H:%M:%S} config.py:1652] Downcasting torch.float32 to torch.float16.",
              f"ERROR {when:%m-%d %H:%M:%S} async_llm_engine.py:64] Engine background task failed",
              f"ERROR {when:%m-%d %H:%M:%S} async_llm_engine.py:64] RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
              f"ERROR {when:%m-%d %H:%M:%S} client.py:269] AsyncEngineDeadError: Background loop has errored already.")
        svc.event(when + timedelta(seconds=35), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
                  obj=pod, node=node, count=1)
    d.first_sign = d.fault
    restarted: set[int] = set()

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        down, back = downs[p]
        if down <= t < back:
            s["up"] = 0.0
        elif t >= back and p not in restarted:
            restarted.add(p)
            s["restart"] = 1.0
        elif t >= d.fault:
            s["fail"] = 0.04
    svc.effects.append(effect)
