"""Native line formats of the tools a drill's evidence comes from.

The shapes (stamps, prefixes, field order, separators) are the tools' own, as the real-log corpus
(tests/corpus, sources in its INDEX.tsv) and the parsers in collectors/ know them; the words inside
are the drill's. Each shape names where it was copied from. The test scenarios write through these
too (tests/scenarios/formats.py imports them; workbench code never imports tests), and
tests/scenarios/test_formats.py checks each against the real line it cites.
"""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

import json
from datetime import datetime, timedelta

from workbench import times


def dmesg(boot: datetime, when: datetime, text: str) -> str:
    """dmesg without -T: seconds since boot, ``[%5lu.%06lu]``
    (tests/corpus/kernel/collenchyma_14_xid31_mmu_fault_dmesg.log)."""
    micros = round((when - boot).total_seconds() * 1e6)
    return f"[{micros // 1_000_000:5d}.{micros % 1_000_000:06d}] {text}"


def dmesg_ctime(when: datetime, text: str) -> str:
    """dmesg -T: ``[Sun Feb 23 16:24:18 2025] …`` (the day of month space-padded)
    (tests/corpus/kernel/gpud_xid119_gsp_rpc_timeout_dmesg_ctime.log)."""
    return f"[{when:%a %b} {when.day:2d} {when:%H:%M:%S %Y}] {text}"


def pylog(when: datetime, text: str, level: str = "INFO") -> str:
    """Python logging's ``%(asctime)s - %(levelname)s - %(message)s``: ``2025-11-12 20:42:20,261 - INFO - …``
    (https://github.com/modelscope/easydistill/issues/4)."""
    return f"{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - {level} - {text}"


def glog(rank: int, when: datetime, level: str, where: str, text: str) -> str:
    """A ProcessGroupNCCL line under torchrun's ``--tee`` prefix: ``[rank1]:[E626 06:24:44.903881913
    ProcessGroupNCCL.cpp:616] …`` (tests/corpus/nccl/basicsr_737_watchdog_allreduce_pg_guid.log)."""
    stamp = f"{when.month}{when.day:02d} {when:%H:%M:%S}.{when.microsecond:06d}{(rank * 317) % 1000:03d}"
    return f"[rank{rank}]:[{level}{stamp} {where}] {text}"


def watchdog(rank: int, when: datetime, seq: int, op: str, numel: int, timeout_ms: int, elapsed_ms: int) -> list[str]:
    """The NCCL watchdog's collective timeout, its ``last enqueued / last completed`` line (both in
    tests/corpus/nccl/basicsr_737_watchdog_allreduce_pg_guid.log) and ``Some NCCL operations have failed or
    timed out`` (https://github.com/hiyouga/LlamaFactory/issues/6269), as PyTorch 2.4+ prints them."""
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


def nccl_init(host: str, pid: int, rank: int, nranks: int, dev: int, bus: str, comm: str, ip: str,
              version: str = "2.21.5+cuda12.4", topology: bool = False) -> list[str]:
    """NCCL INFO init lines of one rank (NCCL 2.2x wording); ``bus`` as NCCL prints it (``2a000``). Bootstrap,
    NET/IB, network and ``ncclCommInitRank … Init START`` as in https://github.com/NVIDIA/nccl-tests/issues/373;
    ``cudaDriverVersion`` https://github.com/NVIDIA/nccl-tests/issues/185; ``NCCL INFO NCCL version``
    https://github.com/NVIDIA/nccl/issues/1038; ``… - Init COMPLETE`` https://github.com/NVIDIA/nccl/issues/1814.
    With ``topology`` also the non-device plugin, ``comm … nRanks … MNNVL 0`` and ``Channel 00/0 : 1[0] ->
    2[0] via NET/…`` lines of the same nccl-tests issue (2 ranks a node)."""
    p, t = f"{host}:{pid}:{pid}", f"{host}:{pid}:{pid + 131}"
    comm_id = f"comm 0x55d7{comm}{rank:02x}0"
    init = (f"{t} [{dev}] NCCL INFO ncclCommInitRank {comm_id} rank {rank} nranks {nranks} cudaDev {dev} "
            f"nvmlDev {dev} busId {bus} commId 0x3e1a2b7c9d4f5e60 - Init")
    lines = [f"{p} [{dev}] NCCL INFO Bootstrap : Using ibp12s0:{ip}<0>",
             f"{p} [{dev}] NCCL INFO cudaDriverVersion 12040"]
    if rank == 0:
        lines.append(f"{p} [{dev}] NCCL INFO NCCL version {version}")
    lines.append(f"{t} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ibp12s0:{ip}<0>")
    if topology:
        lines.append(f"{t} [{dev}] NCCL INFO Using non-device net plugin version 0")
    lines += [f"{t} [{dev}] NCCL INFO Using network IB", f"{init} START"]
    if topology:
        lines += [f"{t} [{dev}] NCCL INFO {comm_id} rank {rank} nRanks {nranks} nNodes {nranks // 2} localRanks 2 "
                  f"localRank {dev} MNNVL 0",
                  f"{t} [{dev}] NCCL INFO Channel 00/0 : {rank}[{dev}] -> {(rank + 1) % nranks}[{(dev + 1) % 2}] via NET/IB/0"]
    return lines + [f"{init} COMPLETE"]


def srun_labelled(per_task: dict[int, list[str]]) -> list[str]:
    """``srun -l`` output: every task's lines under its ``N: `` label (``-l, --label: Prepend task number to
    lines of stdout/err``, srun(1)), interleaved as the tasks print them."""
    out = []
    for i in range(max(len(lines) for lines in per_task.values())):
        out += [f"{task}: {lines[i]}" for task, lines in sorted(per_task.items()) if i < len(lines)]
    return out


def titan_step(rank: int, when: datetime, step: int, loss: float, tps: int) -> str:
    """torchtitan's step line under torchrun's prefix: ``[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO -
    step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%``
    (https://github.com/pytorch/torchtitan/pull/950)."""
    return (f"[rank{rank}]:[titan] {when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - root - INFO - "
            f"step: {step}  loss: {loss:7.4f}  memory: 61.27GiB(77.43%)  tps: {tps:,}  tflops: 402.18  mfu: 40.67%")


def elastic(when: datetime, level: str, pid: int, where: str, text: str) -> str:
    """torch elastic's logger since torch 2.4, glog style: ``E0213 12:07:20.086000 870572
    torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 876053) of
    binary: …`` (https://github.com/pytorch/pytorch/issues/147064)."""
    return (f"{level}{when.month:02d}{when.day:02d} {when:%H:%M:%S}.{when.microsecond:06d} {pid} "
            f"torch/distributed/elastic/{where}] {text}")


def slurm_time(when: datetime) -> str:
    """An ISO-8601 time without zone, as sacct and slurmctld print it."""
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def slurmctld(when: datetime, text: str) -> str:
    """A slurmctld.log line: ``[2025-03-01T14:03:10.448] …``."""
    return f"[{slurm_time(when)}.{when.microsecond // 1000:03d}] {text}"


def sacct(rows: list[str]) -> str:
    """``sacct -P`` with a --format list: ``|``-separated, a header row, steps as ``JobID.batch`` / ``JobID.0``
    (tests/corpus/scheduler/cluster_utils_87_sacct_parsable_steps_cancelled_sig10.txt)."""
    return "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|NodeList\n" + "\n".join(rows) + "\n"


def k8s_event(name: str, when: datetime, reason: str, message: str, kind: str, obj: str, namespace: str,
              node: str | None, typ: str = "Warning", count: int = 1, component: str = "kubelet",
              object_uid: str | None = None, field_path: str | None = None,
              resource_version: str | None = None) -> dict:
    """One core/v1 Event as ``kubectl get events -o json`` lists it (the fields of
    https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/; count, timestamps and
    involvedObject as https://github.com/sapcc/helm-charts/pull/548 shows an event); ``name`` is the part
    after ``obj.`` in the event's own name. The optional fields are written only when given."""
    stamp = times.iso(when, "seconds")
    involved = {"apiVersion": "v1" if kind == "Pod" else "apps/v1", "kind": kind, "name": obj, "namespace": namespace}
    metadata = {"creationTimestamp": stamp, "name": f"{obj}.{name}", "namespace": namespace}
    if object_uid:
        involved["uid"] = object_uid
    if field_path:
        involved["fieldPath"] = field_path
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "count": count, "eventTime": None, "firstTimestamp": stamp,
            "involvedObject": involved, "kind": "Event", "lastTimestamp": stamp, "message": message,
            "metadata": metadata, "reason": reason, "reportingComponent": component, "reportingInstance": node or "",
            "source": {"component": component, **({"host": node} if node else {})}, "type": typ}


def kubelet_event(host: str, pid: int, when: datetime, reason: str, message: str, kind: str, obj: str,
                  namespace: str, typ: str = "Warning") -> str:
    """The kubelet's own log of an event it records (client-go's ``"Event occurred"``, as
    ``journalctl -u kubelet`` prints it; the form of collectors/catalog/harvest/kubernetes.yaml's sample):
    the node's clock, where the API server's copy is the reference's."""
    scoped = f"{namespace}/{obj}" if kind == "Pod" else obj
    klog = f"{'W' if typ == 'Warning' else 'I'}{when:%m%d %H:%M:%S}.{when.microsecond:06d}"
    return (f'{when:%b %d %H:%M:%S} {host} kubelet[{pid}]: {klog} {pid:>8} event.go:307] "Event occurred" '
            f'object="{scoped}" fieldPath="" kind="{kind}" apiVersion="v1" type="{typ}" reason="{reason}" '
            f'message="{message}"')


def k8s_list(items: list[dict]) -> str:
    """kubectl's ``-o json`` wrapper, ``{"apiVersion": "v1", "items": […], "kind": "List", …}``, indented by 4
    (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_get/)."""
    return json.dumps({"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}},
                      indent=4) + "\n"


def prom(families: list[tuple[str, str, str, list[tuple[str, float]]]], as_float: bool = True) -> str:
    """Prometheus text exposition: (name, type, help, [(labels, value)])
    (tests/corpus/latency/triton_3569_nv_inference_counters_multi_model.prom). With ``as_float`` every
    value is written as a float (``40.0``), as Python's prometheus_client (vLLM) does; without, an int
    stays bare, as Triton's C++ exporter writes its counters."""
    out = []
    for name, typ, text, samples in families:
        out += [f"# HELP {name} {text}", f"# TYPE {name} {typ}"]
        out += [f"{name}{labels} {float(value)!r}" if as_float or isinstance(value, float) else f"{name}{labels} {value}"
                for labels, value in samples]
    return "\n".join(out) + "\n"


def histogram(name: str, text: str, labels: str, bounds: list[float], counts: list[float], count: float,
              total: float) -> tuple[str, str, str, list[tuple[str, float]]]:
    """One histogram family: cumulative ``counts`` per bound, then +Inf, _count and _sum
    (tests/corpus/latency/ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom)."""
    samples = [(f'_bucket{{le="{b}",{labels}}}', float(c)) for b, c in zip(bounds, counts)]
    samples += [(f'_bucket{{le="+Inf",{labels}}}', float(count)), (f"_count{{{labels}}}", float(count)),
                (f"_sum{{{labels}}}", round(total, 3))]
    return name, "histogram", text, samples


def deepspeed_log(when: datetime, where: str, text: str) -> str:
    """DeepSpeed's logger: ``[2023-06-21 07:39:09,443] [INFO] [logging.py:96:log_dist] …``
    (https://github.com/huggingface/accelerate/issues/1589)."""
    return f"[{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d}] [INFO] [{where}] {text}"


def deepspeed_steps(rank: int, start: datetime, end: datetime, normal_s: float, every: int,
                    slow_rank: int | None = None, slow_from: datetime | None = None, slow_s: float = 0.0,
                    batch: int = 64) -> list[str]:
    """What a DeepSpeed rank prints every ``every`` steps with ``wall_clock_breakdown``: the progress
    line (``[Rank 0] step=40, skipped=2, lr=…``, https://github.com/deepspeedai/DeepSpeed/issues/1825),
    the timers (forward, backward without / with the gradient all-reduce, optimizer step, in ms: ``[Rank 0]
    rank=0 time (ms) | forward: 27.41 | backward: 73.44 | backward_inner: 50.99 | backward_allreduce: 22.40 |
    step: 72.82``, https://github.com/huggingface/accelerate/issues/1589) and the throughput timer
    (``epoch=…/micro_step=…/global_step=…, RunningAvgSamplesPerSec=…``, as
    https://github.com/deepspeedai/DeepSpeed/blob/master/deepspeed/utils/timer.py prints it). From
    ``slow_from`` on ``slow_rank`` computes slow_s/normal_s longer and the others wait for it in the
    all-reduce, so every step takes ``slow_s``."""
    out, when, step, samples = [], start, 0, 0.0
    fwd, bwd, opt = 0.296 * normal_s * 1000, 0.560 * normal_s * 1000, 0.118 * normal_s * 1000
    while True:
        slow = slow_from is not None and when >= slow_from
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
        out.append(deepspeed_log(when, "timer.py:260:stop",
                                 f"epoch=0/micro_step={step}/global_step={step}, RunningAvgSamplesPerSec="
                                 f"{samples / (when - start).total_seconds():.6f}, CurrSamplesPerSec="
                                 f"{batch / step_s:.6f}, MemAllocated=31.2GB, MaxMemAllocated=58.9GB"))
