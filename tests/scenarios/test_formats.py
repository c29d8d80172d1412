"""Every line shape of tests/scenarios/formats.py against the real line it cites: one pattern per shape
must match both the real line (from tests/corpus, or copied here with its public URL) and what the
generator writes, so a scenario cannot drift into a format no tool prints."""

# ruff: noqa: E501  (real lines are kept whole)

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from tests.scenarios import formats

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
WHEN = datetime(2025, 3, 1, 14, 2, 11, 402117)


def corpus_line(rel: str, contains: str = "") -> str:
    return next(line for line in (CORPUS / rel).read_text().splitlines() if contains in line)


NCCL_HEAD = r"^[\w.\-<>]+:\d+:\d+ \[\d+\] NCCL INFO "
CASES = [
    ("raw", r"^\[\s*\d+\.\d{6}\] \S", corpus_line("kernel/collenchyma_14_xid31_mmu_fault_dmesg.log"),
     formats.raw(datetime(2025, 3, 1, 2, 11, 40), WHEN, "NVRM: Xid (PCI:0000:2a:00): 79, pid=48211")),
    ("ctime", r"^\[[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\] \S",
     corpus_line("kernel/gpud_xid119_gsp_rpc_timeout_dmesg_ctime.log"), formats.ctime(WHEN, "NVRM: GPU at PCI")),
    ("journal", r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} [\w.\-]+ kernel: \S",
     corpus_line("kernel/gpud_nvidia_peermem_invalid_context_journalctl_iso.log"),
     formats.journal(WHEN, "node03", "mlx5_core 0000:5e:00.0 ibp94s0: Link down")),
    ("pylog", r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - (?:INFO|WARNING|ERROR) - \S",
     # https://github.com/modelscope/easydistill/issues/4
     "2025-11-12 20:42:20,261 - INFO - g340-cd51-4900-b72a-d104-a9bf-df48:4447:4883 [2] NCCL INFO Channel 27/1 : 2[2] -> 0[0] via P2P/IPC",
     formats.pylog(WHEN, "[rank1] torch.distributed initialized")),
    ("glog", r"^\[rank\d+\]:\[[EWI]\d{3,4} \d\d:\d\d:\d\d\.\d{9} ProcessGroupNCCL\.cpp:\d+\] \[Rank \d+\] Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=\d+, OpType=\w+, NumelIn=\d+, NumelOut=\d+, Timeout\(ms\)=\d+\) ran for \d+ milliseconds before timing out\.$",
     corpus_line("nccl/basicsr_737_watchdog_allreduce_pg_guid.log"),
     formats.watchdog(1, WHEN, 808, "ALLREDUCE", 9801523, 600000, 600020)[0]),
    ("watchdog progress", r"^\[rank\d+\]:\[E\d{3,4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\] \[PG ID 0 PG GUID 0\(default_pg\) Rank \d+\] Exception \(either an error or timeout\) detected by watchdog at work: \d+, last enqueued NCCL work: \d+, last completed NCCL work: \d+\.$",
     corpus_line("nccl/basicsr_737_watchdog_allreduce_pg_guid.log", "last enqueued"),
     formats.watchdog(1, WHEN, 808, "ALLREDUCE", 9801523, 600000, 600020)[1]),
    ("watchdog failed", r"^\[rank\d+\]:\[E\d{3,4} [\d:.]+ ProcessGroupNCCL\.cpp:\d+\] \[Rank \d+\] Some NCCL operations have failed or timed out\. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data\.$",
     # https://github.com/hiyouga/LlamaFactory/issues/6269
     "[rank0]:[E1206 18:44:16.994957078 ProcessGroupNCCL.cpp:621] [Rank 0] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
     formats.watchdog(1, WHEN, 808, "ALLREDUCE", 9801523, 600000, 600020)[2]),
    ("steps", r"^\[rank\d+\]:\[titan\] \d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} - root - INFO - step: +\d+  loss: +[\d.]+  memory: +[\d.]+GiB\([\d.]+%\)  tps: [\d,]+  tflops: [\d.]+  mfu: [\d.]+%$",
     # https://github.com/pytorch/torchtitan/pull/950
     "[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO - step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%",
     formats.steps(WHEN, 21000, 1, 600.0, 1.8921, 3, step_time=1.21)[0]),
    ("deepspeed progress", r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\] \[INFO\] \[logging\.py:\d+:log_dist\] \[Rank \d+\] step=\d+, skipped=\d+, lr=\[[^\]]*\], mom=\[.*\]$",
     # https://github.com/deepspeedai/DeepSpeed/issues/1825
     "[2022-03-11 02:06:58,985] [INFO] [logging.py:69:log_dist] [Rank 0] step=40, skipped=2, lr=[5e-05], mom=[[0.9, 0.999]]",
     formats.deepspeed_steps(1, WHEN, WHEN, datetime(2025, 3, 2), 1, 1.0, 1.4)[0]),
    ("deepspeed timers", r"^\[[\d\- :,]+\] \[INFO\] \[logging\.py:\d+:log_dist\] \[Rank \d+\] rank=\d+ time \(ms\) \| forward: [\d.]+ \| backward: [\d.]+ \| backward_inner: [\d.]+ \| backward_allreduce: [\d.]+ \| step: [\d.]+$",
     # https://github.com/huggingface/accelerate/issues/1589
     "[2023-06-21 07:39:09,443] [INFO] [logging.py:96:log_dist] [Rank 0] rank=0 time (ms) | forward: 27.41 | backward: 73.44 | backward_inner: 50.99 | backward_allreduce: 22.40 | step: 72.82",
     formats.deepspeed_steps(1, WHEN, WHEN, datetime(2025, 3, 2), 1, 1.0, 1.4)[1]),
    ("deepspeed throughput", r"^\[[\d\- :,]+\] \[INFO\] \[timer\.py:\d+:stop\] epoch=\d+/micro_step=\d+/global_step=\d+, RunningAvgSamplesPerSec=[\d.]+, CurrSamplesPerSec=[\d.]+, MemAllocated=[\d.]+GB, MaxMemAllocated=[\d.]+GB$",
     # the line deepspeed/utils/timer.py prints, as a DeepSpeed-Chat run logged it (found with find_string)
     "[2023-11-07 01:55:23,714] [INFO] [timer.py:260:stop] epoch=0/micro_step=40/global_step=10, RunningAvgSamplesPerSec=25.025771473496132, CurrSamplesPerSec=25.704280480541442, MemAllocated=4.32GB, MaxMemAllocated=38.49GB",
     formats.deepspeed_steps(1, WHEN, WHEN, datetime(2025, 3, 2), 1, 1.0, 1.4)[2]),
    ("elastic", r"^[IWE]\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ torch/distributed/elastic/[\w/]+\.py:\d+\] \S",
     # https://github.com/pytorch/pytorch/issues/147064
     "E0213 12:07:20.086000 870572 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 (pid: 876053) of binary: /usr/local/google/home/kiuk/.pyenv/versions/3.11.4/envs/venv311/bin/python3.11",
     formats.elastic(WHEN, "E", 90360, "multiprocessing/api.py:869", "failed (exitcode: -9) local_rank: 0 (pid: 90377) of binary: /usr/bin/python3")),
    ("uptime -s", r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$", "2025-02-27 18:40:05",  # uptime(1): yyyy-mm-dd HH:MM:SS
     formats.uptime_s(WHEN).strip()),
    ("prom sample", r"^[a-zA-Z_:][\w:]*(?:\{[^}]*\})? -?[\d.e+\-]+$",
     corpus_line("latency/ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom", "_bucket"),
     formats.prom([("vllm:num_requests_running", "gauge", "Requests running", [('{model_name="m"}', 3.0)])]).splitlines()[2]),
    ("prom help", r"^# HELP [a-zA-Z_:][\w:]* \S",
     corpus_line("latency/triton_3569_nv_inference_counters_multi_model.prom", "# HELP"),
     formats.prom([("vllm:num_requests_running", "gauge", "Requests running", [])]).splitlines()[0]),
    ("histogram bucket", r'^[\w:]+_bucket\{le="[^"]+",[^}]*\} [\d.]+$',
     corpus_line("latency/ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom", "_bucket"),
     formats.prom([formats.histogram("vllm:time_to_first_token_seconds", "TTFT", 'model_name="m"', [0.001],
                                     [0], 2, 0.3)]).splitlines()[2]),
]


@pytest.mark.parametrize(("shape", "pattern", "real", "ours"), CASES, ids=[c[0] for c in CASES])
def test_shape_matches_the_real_line(shape: str, pattern: str, real: str, ours: str) -> None:
    assert re.match(pattern, real), f"{shape}: the pattern does not describe the cited line"
    assert re.match(pattern, ours), f"{shape}: the generator drifted from the cited format: {ours!r}"


NCCL_REAL = {
    # https://github.com/NVIDIA/nccl-tests/issues/373 (one rank's init, NCCL 2.2x)
    "Bootstrap": "bigo:1884:1884 [0] NCCL INFO Bootstrap : Using bond0.526:169.136.106.9<0>",
    "plugin": "bigo:1884:2298 [0] NCCL INFO Using non-device net plugin version 0",
    "network": "bigo:1884:2298 [0] NCCL INFO Using network IBext_v8",
    "start": "bigo:1884:2298 [0] NCCL INFO ncclCommInitRank comm 0x564531f27c80 rank 2 nranks 3 cudaDev 0 nvmlDev 0 busId 31000 commId 0x9ca74fa6e40df7f4 - Init START",
    "summary": "bigo:1884:2298 [0] NCCL INFO comm 0x564531f27c80 rank 2 nRanks 3 nNodes 3 localRanks 1 localRank 0 MNNVL 0",
    "channel": "bigo:1884:2298 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1",
    # https://github.com/NVIDIA/nccl-tests/issues/185
    "net_ib": "dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>",
    "driver": "dgxh100-4:460770:460770 [0] NCCL INFO cudaDriverVersion 12000",
    # https://github.com/NVIDIA/nccl/issues/1038
    "version": "host-2:38610:38610 [0] NCCL INFO NCCL version 2.18.3+cuda12.2",
    # https://github.com/NVIDIA/nccl/issues/1814
    "complete": "hostname-test:984:1257 [4] NCCL INFO comm 0x557fe785f7a0 rank 36 nranks 64 cudaDev 4 nvmlDev 4 busId 9b000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE",
}
NCCL_SHAPES = {
    "Bootstrap": r"Bootstrap : Using [\w.]+:[\d.]+<0>$",
    "plugin": r"Using non-device net plugin version \d+$",
    "network": r"Using network IB\w*$",
    "start": r"ncclCommInitRank comm 0x[0-9a-f]+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ busId [0-9a-f]+ commId 0x[0-9a-f]+ - Init START$",
    "summary": r"comm 0x[0-9a-f]+ rank \d+ nRanks \d+ nNodes \d+ localRanks \d+ localRank \d+ MNNVL \d$",
    "channel": r"Channel \d\d/\d : \d+\[\d+\] -> \d+\[\d+\] (?:\[(?:send|receive)\] )?via NET/IB\w*/\d+$",
    "net_ib": r"NET/IB : Using (?:\[\d\][\w]+:\d/(?:IB|RoCE) ?)+(?:\[RO\])?; OOB [\w.]+:[\d.]+<0>$",
    "driver": r"cudaDriverVersion \d+$",
    "version": r"NCCL version [\d.]+\+cuda[\d.]+$",
    "complete": r"(?:ncclCommInitRank )?comm 0x[0-9a-f]+ rank \d+ nranks \d+ cudaDev \d+ nvmlDev \d+ busId [0-9a-f]+ commId 0x[0-9a-f]+ - Init COMPLETE$",
}


def test_nccl_init_lines_are_nccls_own() -> None:
    ours = formats.nccl_init("node07", 48211, 0, 4, 1, "2a000", "a3c1", ip="10.10.0.7")
    for name, shape in NCCL_SHAPES.items():
        pattern = NCCL_HEAD + shape
        assert re.match(pattern, NCCL_REAL[name]), name
        assert any(re.match(pattern, line) for line in ours), (name, ours)
    assert all(any(re.match(NCCL_HEAD + shape, line) for shape in NCCL_SHAPES.values()) for line in ours), ours


def test_launcher_shapes() -> None:
    """The rendezvous block is torch elastic's (https://github.com/meta-pytorch/torchx/pull/492: ``[] Rendezvous
    complete for workers. Result:`` then ``  restart_count=0`` … ``  global_world_sizes=[2]``), the labels are
    srun -l's ``N: ``, the dump is ``KEY=value`` and the hosts file is address then names."""
    block = formats.rendezvous(WHEN, 80190, 1, 2, 2, "node05")
    assert block[0].endswith("[default] Rendezvous complete for workers. Result:")
    keys = [line.split("=", 1)[0].strip() for line in block[1:11]]
    assert keys == ["restart_count", "master_addr", "master_port", "group_rank", "group_world_size", "local_ranks",
                    "role_ranks", "global_ranks", "role_world_sizes", "global_world_sizes"]
    assert all(re.match(r"^  \w+=\S", line) for line in block[1:11]) and block[11] == ""
    assert "  global_ranks=[2, 3]" in block
    labelled = formats.srun_labelled({0: ["a", "b"], 1: ["c"]}).splitlines()
    assert labelled == ["0: a", "1: c", "0: b"]
    assert formats.env_dump({"SLURM_PROCID": 3}) == ["SLURM_PROCID=3"]
    hosts = formats.etc_hosts([("10.10.7.14", "node14-ib")]).splitlines()
    assert hosts[0] == "127.0.0.1\tlocalhost" and hosts[-1] == "10.10.7.14\tnode14-ib"


def test_k8s_event_has_the_api_fields() -> None:
    event = formats.k8s_event("17a2", WHEN, "Evicted", "The node was low on resource: ephemeral-storage.", "Pod",
                              "vllm-0", "serving", "gpu-node-3")
    listed = json.loads(formats.k8s_list([event]))
    assert listed["kind"] == "List" and listed["items"][0]["kind"] == "Event"
    assert {"count", "firstTimestamp", "lastTimestamp", "involvedObject", "reason", "message", "type", "source",
            "reportingComponent", "metadata"} <= set(event)
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", event["firstTimestamp"])


def test_sacct_header_is_parsable_output() -> None:
    real = (CORPUS / "scheduler/cluster_utils_87_sacct_parsable_steps_cancelled_sig10.txt").read_text().splitlines()
    ours = formats.sacct(["91842|llama-ft|gpu|ml|64|NODE_FAIL|0:0|2025-03-01T13:05:02|2025-03-01T14:13:05|node[07-08]"])
    for text in (real[0], ours.splitlines()[0]):
        assert re.match(r"^JobID(?:\|\w+)+$", text)
    for text in (real[2], ours.splitlines()[1]):
        assert re.match(r"^\d+(?:\.\w+)?\|", text)
