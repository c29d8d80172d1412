"""The demo's training incident, written as the raw files a responder would be handed.

Job 48213 trains on node01..node04 (8 x H100 each, 32 ranks). On node03 the PCIe link of GPU 3
(0000:5d:00.0) throws AER errors from 09:10, then the GPU falls off the bus at 09:21:16 (Xid 79);
its rank dies, the other 31 ranks block in an ALLREDUCE and the NCCL watchdog kills them ten
minutes later; Slurm marks the job FAILED, and node health checks had already drained node03.
Benign noise a responder must not chase: an Xid 13 on node02 from another user's job the
evening before, and corrected AER errors on a root port of node04.

Every file is in its tool's native format (dmesg seconds since boot next to ``uptime -s`` and
``date``, nvidia-smi -q, torchrun/NCCL/PyTorch logs, sacct -P, sinfo -R, slurmctld.log, a
checkpoint directory listing), so the demo exercises the same sniffing and parsing as real
evidence does.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench.prevention.drill.nvsmi import Gpu, page

TITLE = "Training job 48213 (llm-pretrain-70b) failed: GPU lost on node03"
CULPRIT_HOST = "node03"
CULPRIT_GPU = "0000:5d:00.0"
CAPTURED = datetime(2026, 3, 14, 9, 40, 12, tzinfo=timezone.utc)
HOSTS = ("node01", "node02", "node03", "node04")
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
BOOTS = {"node01": datetime(2026, 3, 2, 3, 11, 52, tzinfo=timezone.utc),
         "node02": datetime(2026, 3, 2, 3, 12, 30, tzinfo=timezone.utc),
         "node03": datetime(2026, 3, 2, 3, 14, 7, tzinfo=timezone.utc),
         "node04": datetime(2026, 3, 2, 3, 13, 41, tzinfo=timezone.utc)}
JOB = "48213"
START = datetime(2026, 3, 14, 6, 0, 5, tzinfo=timezone.utc)
AER_FIRST = datetime(2026, 3, 14, 9, 10, 52, tzinfo=timezone.utc)
FELL_OFF = datetime(2026, 3, 14, 9, 21, 16, 402000, tzinfo=timezone.utc)
DRAINED = datetime(2026, 3, 14, 9, 26, 3, 118000, tzinfo=timezone.utc)
WATCHDOG = FELL_OFF + timedelta(milliseconds=600_000 + 1_350)
JOB_END = datetime(2026, 3, 14, 9, 31, 52, tzinfo=timezone.utc)
SEQ = 184203
CULPRIT_RANK = 19

MILESTONES = {"detection": datetime(2026, 3, 14, 9, 33, 40, tzinfo=timezone.utc),
              "mitigation": datetime(2026, 3, 14, 9, 52, 41, tzinfo=timezone.utc),
              "recovery": datetime(2026, 3, 14, 10, 6, 15, tzinfo=timezone.utc)}
"""When the on-call engineer was paged, requeued the job without node03, and saw it training again."""


def _uuid(host: int, gpu: int) -> str:
    return f"GPU-{0x8d3f2a61 + host * 0x1111 + gpu * 0x101:08x}-5b7c-4e0a-9c21-7f44d0e1{host:02x}{gpu:02x}"


def _serial(host: int, gpu: int) -> str:
    return f"16544220{51230 + host * 10 + gpu}"


def _pid(host: int, local: int) -> int:
    return 4101 + host * 7 + local


def _write(path: Path, text: str, when: datetime = CAPTURED) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (when.timestamp(), when.timestamp()))


def _dmesg_line(host: str, when: datetime, text: str) -> str:
    seconds = (when - BOOTS[host]).total_seconds()
    return f"[{seconds:>12.6f}] {text}"


def write(root: Path) -> None:
    """Write the incident's evidence folder tree under ``root`` (one folder per host plus shared ones)."""
    for n, host in enumerate(HOSTS):
        folder = root / host
        _write(folder / "uptime-s.txt", f"{BOOTS[host]:%Y-%m-%d %H:%M:%S}\n")
        _write(folder / "date.txt", f"{CAPTURED:%a %b %d %H:%M:%S} UTC {CAPTURED:%Y}\n")
        _write(folder / "dmesg.txt", _dmesg(host))
        _write(folder / "nvidia-smi-q.txt", _nvsmi(n, host))
        _write(folder / f"torchrun-{JOB}.log", _torchrun_log(n, host))
    _write(root / "slurm" / "sacct.txt", _sacct())
    _write(root / "slurm" / "sinfo-R.txt", "REASON               USER      TIMESTAMP           NODELIST\n"
                                          f"NHC: GPU 0000:5d:00. root      {DRAINED:%Y-%m-%dT%H:%M:%S} node03\n")
    _write(root / "slurm" / "slurmctld.log", _slurmctld())
    _write(root / "storage" / "checkpoints.txt", _checkpoints())


def _dmesg(host: str) -> str:
    boot = BOOTS[host]
    lines = [
        _dmesg_line(host, boot + timedelta(seconds=21.402113),
                    "nvidia-nvlink: Nvlink Core is being initialized, major device number 508"),
        _dmesg_line(host, boot + timedelta(seconds=21.902551),
                    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  "
                    "(dvs-builder@U16-I3-B07-3-1)  Thu Jun 20 18:22:31 UTC 2024"),
        _dmesg_line(host, boot + timedelta(seconds=34.118204),
                    "mlx5_core 0000:0c:00.0: mlx5_port_module_event:1151:(pid 0): Port module event: "
                    "module 0, Cable plugged"),
        _dmesg_line(host, boot + timedelta(seconds=36.771092),
                    "IPv6: ADDRCONF(NETDEV_CHANGE): ibp12s0: link becomes ready"),
    ]
    if host == "node02":
        when = datetime(2026, 3, 13, 22, 41, 9, 118000, tzinfo=timezone.utc)
        lines += [_dmesg_line(host, when, "NVRM: Xid (PCI:0000:2a:00): 13, pid=48211, name=python3, Graphics SM Warp "
                                          "Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address"),
                  _dmesg_line(host, when + timedelta(microseconds=214),
                              "NVRM: Xid (PCI:0000:2a:00): 13, pid=48211, name=python3, Graphics Exception: "
                              "ESR 0x50e730=0x20 0x50e734=0x0 0x50e728=0xf81eb60 0x50e72c=0x1174")]
    if host == "node04":
        when = datetime(2026, 3, 14, 7, 15, 33, 640000, tzinfo=timezone.utc)
        lines += [_dmesg_line(host, when, "pcieport 0000:00:01.1: AER: Corrected error received: 0000:00:01.1"),
                  _dmesg_line(host, when, "pcieport 0000:00:01.1: PCIe Bus Error: severity=Corrected, "
                                          "type=Physical Layer, (Receiver ID)"),
                  _dmesg_line(host, when, "pcieport 0000:00:01.1:   device [1022:1483] error status/mask="
                                          "00000001/00002000"),
                  _dmesg_line(host, when, "pcieport 0000:00:01.1:    [ 0] RxErr")]
    if host == "node03":
        lines += _culprit_dmesg(host)
    return "\n".join(lines) + "\n"


def _culprit_dmesg(host: str) -> list[str]:
    lines = []
    for i, offset in enumerate((0, 195, 398)):
        when = AER_FIRST + timedelta(seconds=offset, microseconds=113 * i)
        lines += [_dmesg_line(host, when, "pcieport 0000:5c:00.0: AER: Corrected error received: 0000:5d:00.0"),
                  _dmesg_line(host, when, "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, "
                                          "type=Data Link Layer, (Transmitter ID)"),
                  _dmesg_line(host, when, "nvidia 0000:5d:00.0:   device [10de:2330] error status/mask="
                                          "00001000/0000e000"),
                  _dmesg_line(host, when, "nvidia 0000:5d:00.0:    [12] Timeout               "),
                  _dmesg_line(host, when + timedelta(milliseconds=3),
                              "pcieport 0000:5c:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:5d:00.0"),
                  _dmesg_line(host, when + timedelta(milliseconds=3),
                              "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), "
                              "type=Transaction Layer, (Requester ID)"),
                  _dmesg_line(host, when + timedelta(milliseconds=3),
                              "nvidia 0000:5d:00.0:   device [10de:2330] error status/mask=00004000/00000000"),
                  _dmesg_line(host, when + timedelta(milliseconds=3),
                              "nvidia 0000:5d:00.0:    [14] CmpltTO                (First)")]
    when = FELL_OFF
    lines += [
        _dmesg_line(host, when, "pcieport 0000:5c:00.0: AER: Uncorrected (Fatal) error received: 0000:5d:00.0"),
        _dmesg_line(host, when, "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                                "type=Transaction Layer, (Receiver ID)"),
        _dmesg_line(host, when, "nvidia 0000:5d:00.0:   device [10de:2330] error status/mask=00000020/00000000"),
        _dmesg_line(host, when, "nvidia 0000:5d:00.0:    [ 5] SDES                   (First)"),
        _dmesg_line(host, when + timedelta(microseconds=912), f"NVRM: GPU at PCI:0000:5d:00: {_uuid(2, 3)}"),
        _dmesg_line(host, when + timedelta(microseconds=917), f"NVRM: GPU Board Serial Number: {_serial(2, 3)}"),
        _dmesg_line(host, when + timedelta(microseconds=920),
                    "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus."),
        _dmesg_line(host, when + timedelta(microseconds=924), "NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."),
        _dmesg_line(host, when + timedelta(microseconds=925),
                    f"NVRM: GPU 0000:5d:00.0: GPU serial number is {_serial(2, 3)}."),
        _dmesg_line(host, when + timedelta(microseconds=950),
                    "NVRM: A GPU crash dump has been created. If possible, please run"),
        "                 NVRM: nvidia-bug-report.sh as root to collect this data before",
        "                 NVRM: the NVIDIA kernel module is unloaded.",
    ]
    return lines


def _nvsmi(n: int, host: str) -> str:
    gpus = []
    missing = []
    for i, bus in enumerate(BUSES):
        full = f":{bus}:00.0"
        if host == CULPRIT_HOST and i == 3:
            missing.append(f"0000{full}")
            continue
        # snapshot taken after the job died: the GPUs that still answer are idle
        gpus.append(Gpu(index=i, bus=full, uuid=_uuid(n, i), serial=_serial(n, i), util=0, mem_used=1,
                        temp=31 + (i * 3 + n) % 5, power=71.0 + (i * 7 + n) % 9))
    return page(gpus, CAPTURED - timedelta(seconds=7), missing=missing)


def _torchrun_log(n: int, host: str) -> str:
    ip = f"10.10.1.{11 + n}"
    head = START + timedelta(seconds=4.4)
    glog = f"{head:%m%d %H:%M:%S}.{head.microsecond:06d} {4021 + n}"
    lines = [f"W{glog} torch/distributed/run.py:793] ",
             f"W{glog} torch/distributed/run.py:793] *****************************************",
             f"W{glog} torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each process "
             "to be 1 in default, to avoid your system being overloaded, please further tune the variable for "
             "optimal performance in your application as needed. ",
             f"W{glog} torch/distributed/run.py:793] *****************************************"]
    comm = "0x7a3f5c21d9e84b06"
    for local in range(8):
        pid = _pid(n, local)
        rank = n * 8 + local
        lines.append(f"{host}:{pid}:{pid} [{local}] NCCL INFO Bootstrap : Using ibp12s0:{ip}<0>")
        lines.append(f"{host}:{pid}:{pid} [{local}] NCCL INFO cudaDriverVersion 12040")
        if rank == 0:
            lines.append("NCCL version 2.21.5+cuda12.4")
        tid = pid + 209
        lines.append(f"{host}:{pid}:{tid} [{local}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB "
                     f"[2]mlx5_2:1/IB [3]mlx5_3:1/IB [RO]; OOB ibp12s0:{ip}<0>")
        lines.append(f"{host}:{pid}:{tid} [{local}] NCCL INFO Using network IB")
        lines.append(f"{host}:{pid}:{tid} [{local}] NCCL INFO comm 0x55d5c8f0{0xa8e0 + rank * 0x100:04x} rank {rank} "
                     f"nranks 32 cudaDev {local} nvmlDev {local} busId {BUSES[local]}000 commId {comm} - Init START")
    for local in range(8):
        pid = _pid(n, local)
        rank = n * 8 + local
        lines.append(f"{host}:{pid}:{pid + 209} [{local}] NCCL INFO comm 0x55d5c8f0{0xa8e0 + rank * 0x100:04x} "
                     f"rank {rank} nranks 32 cudaDev {local} nvmlDev {local} busId {BUSES[local]}000 commId {comm} "
                     "- Init COMPLETE")
    if n == 0:
        lines += _progress()
    lines += _failure(n, host)
    return "\n".join(lines) + "\n"



def _steps() -> list[tuple[int, datetime, datetime | None]]:
    """(step, logged at, checkpoint saved at or None): one step line every ~3 minutes, a checkpoint
    at the first step of each half hour, until the GPU is lost."""
    out = []
    when, step, mark = START + timedelta(seconds=55), 39000, START.replace(minute=30, second=0)
    while when < FELL_OFF:
        saved = None
        if when >= mark:
            saved, mark = when + timedelta(seconds=38.2), mark + timedelta(minutes=30)
        out.append((step, when, saved))
        step, when = step + 50, when + timedelta(minutes=3, seconds=1.3)
    return out


def _progress() -> list[str]:
    """Rank 0's training log: steps and checkpoint saves, every line dated."""
    out = []
    for step, when, saved in _steps():
        out.append(f"[rank0]:{when:%Y-%m-%d %H:%M:%S},{when.microsecond // 1000:03d} - INFO - step {step} | "
                   f"loss {2.05 - (step - 39000) * 0.00009:.4f} | lr 1.50e-04 | 411.{step % 9}k tok/s")
        if saved:
            out.append(f"[rank0]:{saved:%Y-%m-%d %H:%M:%S},{saved.microsecond // 1000:03d} - INFO - saved "
                       f"checkpoint step {step} to /lustre/ckpt/llm-pretrain-70b/step_{step} in 38.2 s")
    return out


def _failure(n: int, host: str) -> list[str]:
    """The end of each rank's log. PyTorch's c10 logger stamps lines like glog but prints the month
    without a leading zero (``E314`` is 14 March), with nanoseconds."""
    out = []
    for local in range(8):
        rank = n * 8 + local
        if rank == CULPRIT_RANK:
            when = FELL_OFF + timedelta(milliseconds=702 + local)
            stamp = f"E{when.month}{when:%d %H:%M:%S}.{when.microsecond:06d}113"
            out.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
                       "Process group watchdog thread terminated with exception: "
                       "CUDA error: unspecified launch failure")
            out.append(f"[rank{rank}]:CUDA kernel errors might be asynchronously reported at some other API call, "
                       "so the stacktrace below might be incorrect.")
            continue
        when = WATCHDOG + timedelta(milliseconds=37 * rank)
        stamp = f"E{when.month}{when:%d %H:%M:%S}.{when.microsecond:06d}{(rank * 7919) % 1000:03d}"
        ran = int((when - FELL_OFF).total_seconds() * 1000)
        out.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective "
                   f"operation timeout: WorkNCCL(SeqNum={SEQ}, OpType=ALLREDUCE, NumelIn=67108864, "
                   f"NumelOut=67108864, Timeout(ms)=600000) ran for {ran} milliseconds before timing out.")
        out.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
                   f"Exception (either an error or timeout) detected by watchdog at work: {SEQ}, last enqueued NCCL "
                   f"work: {SEQ + 1}, last completed NCCL work: {SEQ - 1}.")
        out.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:630] [Rank {rank}] Some NCCL operations have failed "
                   "or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run "
                   "on corrupted/incomplete data.")
    exit_at = JOB_END - timedelta(seconds=10)
    out.append(f"E{exit_at:%m%d %H:%M:%S}.{exit_at.microsecond:06d} {4021 + n} "
               "torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
               f"local_rank: 0 (pid: {_pid(n, 0)}) of binary: /usr/bin/python3")
    return out


def _sacct() -> str:
    rows = ["JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Submit|Start|End|Elapsed|NodeList|AllocTRES"]
    older = ("2026-03-13T21:01:52", "2026-03-13T21:02:11", "2026-03-13T22:41:30", "01:39:19")
    rows.append(f"48190|finetune-7b|gpu|nlp|16|FAILED|1:0|{'|'.join(older)}|node02|"
                "billing=16,cpu=16,gres/gpu=1,mem=128G,node=1")
    rows.append(f"48190.batch|batch||nlp|16|FAILED|1:0|{older[1]}|{'|'.join(older[1:])}|node02|"
                "cpu=16,gres/gpu=1,mem=128G,node=1")
    span = (f"2026-03-14T05:58:12|{START:%Y-%m-%dT%H:%M:%S}|{JOB_END:%Y-%m-%dT%H:%M:%S}|"
            f"{str(JOB_END - START).zfill(8)}")
    step = f"{START:%Y-%m-%dT%H:%M:%S}|{START:%Y-%m-%dT%H:%M:%S}|{JOB_END:%Y-%m-%dT%H:%M:%S}|" \
           f"{str(JOB_END - START).zfill(8)}"
    rows.append(f"{JOB}|llm-pretrain-70b|gpu|foundation|768|FAILED|1:0|{span}|node[01-04]|"
                "billing=768,cpu=768,gres/gpu=32,mem=7680G,node=4")
    rows.append(f"{JOB}.batch|batch||foundation|192|FAILED|1:0|{step}|node01|cpu=192,gres/gpu=8,mem=1920G,node=1")
    rows.append(f"{JOB}.extern|extern||foundation|768|COMPLETED|0:0|{step}|node[01-04]|"
                "billing=768,cpu=768,gres/gpu=32,mem=7680G,node=4")
    rows.append(f"{JOB}.0|torchrun||foundation|768|FAILED|1:0|{step}|node[01-04]|cpu=768,gres/gpu=32,mem=7680G,node=4")
    return "\n".join(rows) + "\n"


def _slurmctld() -> str:
    def at(when: datetime) -> str:
        return f"[{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 1000:03d}]"

    submit = datetime(2026, 3, 14, 5, 58, 12, 331000, tzinfo=timezone.utc)
    lines = [f"{at(submit)} _slurm_rpc_submit_batch_job: JobId={JOB} InitPrio=4294901712 usec=873",
             f"{at(START)} sched: Allocate JobId={JOB} NodeList=node[01-04] #CPUs=768 Partition=gpu",
             f"{at(DRAINED)} update_node: node node03 reason set to: NHC: GPU 0000:5d:00.0 missing "
             "(nvidia-smi: Unknown Error)",
             f"{at(DRAINED)} update_node: node node03 state set to DRAINING",
             f"{at(JOB_END)} _job_complete: JobId={JOB} WEXITSTATUS 1",
             f"{at(JOB_END + timedelta(milliseconds=1))} _job_complete: JobId={JOB} done"]
    return "\n".join(lines) + "\n"


def _checkpoints() -> str:
    lines = [f"# checkpoint listing of /lustre/ckpt/llm-pretrain-70b at {CAPTURED.isoformat()}"]
    for step, _, saved in _steps():
        if saved is None:
            continue
        base = f"/lustre/ckpt/llm-pretrain-70b/step_{step}"
        lines.append(f"{saved.timestamp():.3f} 4096 d {base}")
        for shard in range(4):
            lines.append(f"{saved.timestamp() - 3 + shard:.3f} 35433480192 f {base}/model_{shard:02d}-of-04.pt")
        lines.append(f"{saved.timestamp() + 0.4:.3f} 1893 f {base}/trainer_state.json")
    return "\n".join(lines) + "\n"
