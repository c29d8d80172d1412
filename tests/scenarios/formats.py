"""Line formats of the tools whose output the scenarios hold, and the scenario registry.

Every shape names where it was copied from: a file of the real-log corpus (tests/corpus, each file's
public source in its INDEX.tsv) or a public URL where the tool printed it. The words inside a line are
the scenario's; the shape around them (stamps, prefixes, field order, separators) is the tool's.
tests/scenarios/test_formats.py checks each function's output against the real line it cites.
"""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIOS: dict[str, Callable[[Path], None]] = {}


def scenario(func: Callable[[Path], None]) -> Callable[[Path], None]:
    SCENARIOS[func.__name__] = func
    return func


def write(folder: Path, rel: str, text: str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def expected(folder: Path, **fields: object) -> None:
    lines = ["# What the analysis must find (see tests/scenarios/test_scenarios.py)."]
    for key, value in fields.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    write(folder, "expected.yaml", "\n".join(lines) + "\n")


# -- line formats ------------------------------------------------------------------------------
def raw(boot: datetime, when: datetime, text: str) -> str:
    """dmesg without -T: seconds since boot, ``[%5lu.%06lu]``
    (tests/corpus/kernel/collenchyma_14_xid31_mmu_fault_dmesg.log)."""
    s = (when - boot).total_seconds()
    whole = int(s)
    return f"[{whole:5d}.{int(round((s - whole) * 1e6)) % 1000000:06d}] {text}"


def ctime(when: datetime, text: str) -> str:
    """dmesg -T (tests/corpus/kernel/gpud_xid119_gsp_rpc_timeout_dmesg_ctime.log)."""
    return f"[{when.strftime('%a %b')} {when.day:2d} {when.strftime('%H:%M:%S %Y')}] {text}"


def journal(when: datetime, host: str, text: str, ident: str = "kernel") -> str:
    """journalctl -o short-iso (tests/corpus/kernel/gpud_nvidia_peermem_invalid_context_journalctl_iso.log)."""
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {host} {ident}: {text}"


def pylog(when: datetime, text: str, level: str = "INFO") -> str:
    """Python logging's ``%(asctime)s - %(levelname)s - %(message)s``: ``2025-11-12 20:42:20,261 - INFO - …``
    (https://github.com/modelscope/easydistill/issues/4)."""
    return f"{when.strftime('%Y-%m-%d %H:%M:%S')},{when.microsecond // 1000:03d} - {level} - {text}"


def glog(rank: int, when: datetime, level: str, where: str, text: str) -> str:
    """A ProcessGroupNCCL line under torchrun's --tee prefix: ``[rank1]:[E626 06:24:44.903881913
    ProcessGroupNCCL.cpp:616] …`` (tests/corpus/nccl/basicsr_737_watchdog_allreduce_pg_guid.log)."""
    stamp = f"{when.month}{when.day:02d} {when.strftime('%H:%M:%S')}.{when.microsecond:06d}{(rank * 317) % 1000:03d}"
    return f"[rank{rank}]:[{level}{stamp} {where}] {text}"


def watchdog(rank: int, when: datetime, seq: int, op: str, numel: int, timeout_ms: int, elapsed_ms: int) -> list[str]:
    """The watchdog's timeout, its ``last enqueued / last completed`` line (both in
    tests/corpus/nccl/basicsr_737_watchdog_allreduce_pg_guid.log) and ``Some NCCL operations have failed or
    timed out`` (https://github.com/hiyouga/LlamaFactory/issues/6269)."""
    return [
        glog(rank, when, "E", "ProcessGroupNCCL.cpp:616",
             f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
             f"NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout_ms}) ran for {elapsed_ms} milliseconds before timing out."),
        glog(rank, when + timedelta(microseconds=1580), "E", "ProcessGroupNCCL.cpp:1785",
             f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at "
             f"work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {seq - 1}."),
        glog(rank, when + timedelta(microseconds=1640), "E", "ProcessGroupNCCL.cpp:630",
             f"[Rank {rank}] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
             "kernels, subsequent GPU operations might run on corrupted/incomplete data."),
    ]


def nccl_init(host: str, pid: int, rank: int, nranks: int, dev: int, bus: str, comm: str, version: str = "2.21.5+cuda12.4",
              ip: str = "10.10.0.1") -> list[str]:
    """NCCL INFO init lines of one rank (NCCL 2.2x wording); ``bus`` as NCCL prints it (``2a000``). Bootstrap,
    NET/IB, non-device plugin, network, ``ncclCommInitRank … Init START``, ``comm … nRanks … MNNVL 0`` and
    ``Channel 00/0 : 1[0] -> 2[0] [receive] via NET/…`` as in https://github.com/NVIDIA/nccl-tests/issues/373;
    ``cudaDriverVersion`` https://github.com/NVIDIA/nccl-tests/issues/185; ``NCCL INFO NCCL version``
    https://github.com/NVIDIA/nccl/issues/1038; ``comm … commId … - Init COMPLETE``
    https://github.com/NVIDIA/nccl/issues/1814."""
    p = f"{host}:{pid}:{pid}"
    t = f"{host}:{pid}:{pid + 131}"
    lines = [f"{p} [{dev}] NCCL INFO Bootstrap : Using ibp12s0:{ip}<0>",
             f"{p} [{dev}] NCCL INFO cudaDriverVersion 12040"]
    if rank == 0:
        lines.append(f"{p} [{dev}] NCCL INFO NCCL version {version}")
    lines += [f"{t} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ibp12s0:{ip}<0>",
              f"{t} [{dev}] NCCL INFO Using non-device net plugin version 0",
              f"{t} [{dev}] NCCL INFO Using network IB",
              f"{t} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d7{comm}{rank:02x}0 rank {rank} nranks {nranks} cudaDev {dev} "
              f"nvmlDev {dev} busId {bus} commId 0x3e1a2b7c9d4f5e60 - Init START",
              f"{t} [{dev}] NCCL INFO comm 0x55d7{comm}{rank:02x}0 rank {rank} nRanks {nranks} nNodes {nranks // 2} localRanks 2 "
              f"localRank {dev} MNNVL 0",
              f"{t} [{dev}] NCCL INFO Channel 00/0 : {rank}[{dev}] -> {(rank + 1) % nranks}[{(dev + 1) % 2}] via NET/IB/0",
              f"{t} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d7{comm}{rank:02x}0 rank {rank} nranks {nranks} cudaDev {dev} "
              f"nvmlDev {dev} busId {bus} commId 0x3e1a2b7c9d4f5e60 - Init COMPLETE"]
    return lines


def elastic(when: datetime, level: str, pid: int, where: str, text: str) -> str:
    """torch elastic's logger since torch 2.4, glog style: ``E0213 12:07:20.086000 870572
    torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 876053) of
    binary: …`` (https://github.com/pytorch/pytorch/issues/147064)."""
    return (f"{level}{when.month:02d}{when.day:02d} {when.strftime('%H:%M:%S')}.{when.microsecond:06d} {pid} "
            f"torch/distributed/elastic/{where}] {text}")


def rendezvous(when: datetime, pid: int, group_rank: int, nodes: int, per_node: int, master: str) -> list[str]:
    """The agent's rendezvous result, one ``key=value`` a line (the block as
    https://github.com/meta-pytorch/torchx/pull/492 shows it, under the torch 2.4 logger)."""
    world = nodes * per_node
    ranks = [group_rank * per_node + i for i in range(per_node)]
    table = [("restart_count", 0), ("master_addr", master), ("master_port", 29500), ("group_rank", group_rank),
             ("group_world_size", nodes), ("local_ranks", list(range(per_node))), ("role_ranks", ranks),
             ("global_ranks", ranks), ("role_world_sizes", [world] * per_node),
             ("global_world_sizes", [world] * per_node)]
    return ([elastic(when, "I", pid, "agent/server/api.py:525", "[default] Rendezvous complete for workers. Result:")]
            + [f"  {key}={value}" for key, value in table] + [""]
            + [elastic(when + timedelta(milliseconds=2), "I", pid, "agent/server/api.py:533",
                       "[default] Starting worker group")])


def srun_labelled(per_task: dict[int, list[str]]) -> str:
    """One ``srun -l`` output file: every task's lines under its ``N: `` label (``-l, --label: Prepend task
    number to lines of stdout/err``, srun(1)), interleaved as the tasks print them."""
    out = []
    for i in range(max(len(lines) for lines in per_task.values())):
        out += [f"{task}: {lines[i]}" for task, lines in sorted(per_task.items()) if i < len(lines)]
    return "\n".join(out) + "\n"


def env_dump(values: dict[str, object]) -> list[str]:
    """``printenv`` lines a launch wrapper prints before the trainer starts (SLURM_PROCID, SLURM_LOCALID,
    SLURMD_NODENAME and CUDA_VISIBLE_DEVICES as srun(1) OUTPUT ENVIRONMENT VARIABLES defines them)."""
    return [f"{key}={value}" for key, value in values.items()]


def etc_hosts(entries: list[tuple[str, str]]) -> str:
    """A cluster's /etc/hosts (hosts(5): address, canonical name, aliases)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", ""]
    return "\n".join(lines + [f"{ip}\t{names}" for ip, names in entries]) + "\n"


def steps(start: datetime, first_step: int, count: int, every_s: float, loss: float, rank: int,
          step_time: float | None = None) -> list[str]:
    """torchtitan's step line under torchrun's prefix: ``[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO -
    step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%``
    (https://github.com/pytorch/torchtitan/pull/950)."""
    out = []
    for i in range(count):
        when = start + timedelta(seconds=i * every_s)
        tps = int(524288 / (step_time if step_time is not None else every_s))
        out.append(f"[rank{rank}]:[titan] {when.strftime('%Y-%m-%d %H:%M:%S')},{when.microsecond // 1000:03d} - root - "
                   f"INFO - step: {first_step + i * 50}  loss: {loss - i * 0.002:7.4f}  memory: 61.27GiB(77.43%)  "
                   f"tps: {tps:,}  tflops: 402.18  mfu: 40.67%")
    return out


def deepspeed_log(when: datetime, where: str, text: str) -> str:
    """DeepSpeed's logger: ``[2023-06-21 07:39:09,443] [INFO] [logging.py:96:log_dist] …``
    (https://github.com/huggingface/accelerate/issues/1589)."""
    return f"[{when.strftime('%Y-%m-%d %H:%M:%S')},{when.microsecond // 1000:03d}] [INFO] [{where}] {text}"


def deepspeed_steps(rank: int, start: datetime, onset: datetime, end: datetime, slow_rank: int, normal_s: float,
                    slow_s: float, every: int = 1000, batch: int = 64) -> list[str]:
    """What each rank of a DeepSpeed job prints every ``every`` steps with ``wall_clock_breakdown``: the
    progress line (``[Rank 0] step=40, skipped=2, lr=…``, https://github.com/deepspeedai/DeepSpeed/issues/1825),
    the timers (forward, backward without / with the gradient all-reduce, optimizer step, in ms: ``[Rank 0]
    rank=0 time (ms) | forward: 27.41 | backward: 73.44 | backward_inner: 50.99 | backward_allreduce: 22.40 |
    step: 72.82``, https://github.com/huggingface/accelerate/issues/1589) and the throughput timer
    (``epoch=…/micro_step=…/global_step=…, RunningAvgSamplesPerSec=…``, as
    https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/utils/timer.py prints it). From ``onset`` on, ``slow_rank`` computes slow_s/normal_s longer
    and the others wait for it in the all-reduce, so every step takes ``slow_s``."""
    out, when, step = [], start, 0
    fwd, bwd, opt = 0.296 * normal_s * 1000, 0.560 * normal_s * 1000, 0.118 * normal_s * 1000
    samples = 0.0
    while True:
        slow = when >= onset
        step_s = slow_s if slow else normal_s
        when += timedelta(seconds=every * step_s)
        if when >= end:
            return out
        step += every
        samples += every * batch
        factor = slow_s / normal_s if slow and rank == slow_rank else 1.0
        jitter = 1 + ((rank * 7 + step // every * 3) % 5 - 2) / 200
        f, b, o = fwd * factor * jitter, bwd * factor * jitter, opt * factor
        wait = step_s * 1000 - f - b - o
        out.append(deepspeed_log(when, "logging.py:96:log_dist",
                                 f"[Rank {rank}] step={step}, skipped=0, lr=[0.00024], mom=[(0.9, 0.95)]"))
        out.append(deepspeed_log(when, "logging.py:96:log_dist",
                                 f"[Rank {rank}] rank={rank} time (ms) | forward: {f:.2f} | backward: {b + wait:.2f} | "
                                 f"backward_inner: {b:.2f} | backward_allreduce: {wait:.2f} | step: {o:.2f}"))
        elapsed = (when - start).total_seconds()
        out.append(deepspeed_log(when, "timer.py:260:stop",
                                 f"epoch=0/micro_step={step}/global_step={step}, RunningAvgSamplesPerSec="
                                 f"{samples / elapsed:.6f}, CurrSamplesPerSec={batch / step_s:.6f}, "
                                 f"MemAllocated=31.2GB, MaxMemAllocated=58.9GB"))


def sacct(rows: list[str]) -> str:
    """``sacct -P`` with a --format list: ``|``-separated, a header row, steps as ``JobID.batch`` / ``JobID.0``
    (tests/corpus/scheduler/cluster_utils_87_sacct_parsable_steps_cancelled_sig10.txt)."""
    return "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|NodeList\n" + "\n".join(rows) + "\n"


def uptime_s(boot: datetime) -> str:
    """``uptime -s``: ``yyyy-mm-dd HH:MM:SS`` (https://man7.org/linux/man-pages/man1/uptime.1.html)."""
    return boot.strftime("%Y-%m-%d %H:%M:%S") + "\n"


def iso(when: datetime) -> str:
    """An ISO-8601 time without zone, as sacct prints Start and End."""
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def k8s_event(name: str, when: datetime, reason: str, message: str, kind: str, obj: str, namespace: str,
              node: str | None, typ: str = "Warning", count: int = 1, component: str = "kubelet",
              field_path: str | None = None) -> dict:
    """One core/v1 Event as ``kubectl get events -o json`` lists it (the fields of
    https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/; count, timestamps and
    involvedObject as https://github.com/sapcc/helm-charts/pull/548 shows an event)."""
    involved = {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, "name": obj,
                "namespace": namespace, "uid": f"6c1f{zlib.crc32(obj.encode()) % 10**8:08d}-0c1e-4a53-9a1d-5d2b6e8f1a{count:02d}"}
    if field_path:
        involved["fieldPath"] = field_path
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"apiVersion": "v1", "count": count, "eventTime": None, "firstTimestamp": stamp,
            "involvedObject": involved, "kind": "Event", "lastTimestamp": stamp, "message": message,
            "metadata": {"creationTimestamp": stamp, "name": f"{obj}.{name}", "namespace": namespace,
                         "resourceVersion": str(48211000 + count)},
            "reason": reason, "reportingComponent": component, "reportingInstance": node or "",
            "source": {"component": component, **({"host": node} if node else {})}, "type": typ}


def k8s_list(items: list[dict]) -> str:
    """kubectl's ``-o json`` wrapper, ``{"apiVersion": "v1", "items": […], "kind": "List", …}``, indented by 4
    (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/)."""
    return json.dumps({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}},
                      indent=4) + "\n"


def prom(families: list[tuple[str, str, str, list[tuple[str, float]]]]) -> str:
    """Prometheus text exposition: (name, type, help, [(labels, value)])
    (tests/corpus/latency/triton_3569_nv_inference_counters_multi_model.prom)."""
    out = []
    for name, typ, text, samples in families:
        out.append(f"# HELP {name} {text}")
        out.append(f"# TYPE {name} {typ}")
        for labels, value in samples:
            out.append(f"{name}{labels} {value!r}" if isinstance(value, float) else f"{name}{labels} {value}")
    return "\n".join(out) + "\n"


def histogram(name: str, text: str, labels: str, bounds: list[float], counts: list[float], count: float,
              total: float) -> tuple:
    """One histogram family: cumulative ``counts`` per bound, then +Inf, _count and _sum
    (tests/corpus/latency/ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom)."""
    samples = [(f'_bucket{{le="{b}",{labels}}}', float(c)) for b, c in zip(bounds, counts)]
    samples.append((f'_bucket{{le="+Inf",{labels}}}', float(count)))
    samples.append((f"_count{{{labels}}}", float(count)))
    samples.append((f"_sum{{{labels}}}", round(total, 3)))
    return name, "histogram", text, samples


def stamp(when: datetime) -> str:
    """A capture's time in a file name (``20250301T144000Z``), not a log line."""
    return when.strftime("%Y%m%dT%H%M%SZ")
