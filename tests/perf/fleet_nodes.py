"""Small node evidence folders of one fleet training job, as a per-node capture hands them over.

Each node: ``uptime -s`` and ``date``, a few ``dmesg`` lines, ``nvidia-smi -q`` for 8 GPUs, a few NCCL
and PyTorch lines of its 8 ranks, and the job's ``sacct -P`` output. One node's GPU falls off the
bus (AER, Xid 79) and its rank dies; every other node's first rank hits the NCCL watchdog ten
minutes later. Shared by tests/perf/merge_bench.py and the fleet-size tests of merge, analysis and
report.
"""

# ruff: noqa: E501  (log lines are kept whole)

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench.prevention.drill.nvsmi import Gpu, page


def culprit_of(nodes: int) -> int:
    """Index of the node whose GPU falls off the bus: one in the middle, neither the first nor the last."""
    return nodes * 417 // 1000
JOB = "77031"
BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
BAD_GPU = 3
CAPTURED = datetime(2026, 5, 20, 4, 40, 0, tzinfo=timezone.utc)
START = datetime(2026, 5, 20, 1, 0, 5, tzinfo=timezone.utc)
FELL_OFF = datetime(2026, 5, 20, 4, 1, 16, 402000, tzinfo=timezone.utc)
WATCHDOG = FELL_OFF + timedelta(milliseconds=601_350)
JOB_END = datetime(2026, 5, 20, 4, 12, 52, tzinfo=timezone.utc)


def host_name(n: int) -> str:
    return f"gpu{n + 1:04d}"


def _boot(n: int) -> datetime:
    return datetime(2026, 5, 2, 3, 0, 0, tzinfo=timezone.utc) + timedelta(seconds=37 * n)


def _dmesg(n: int, nodes: int) -> str:
    boot = _boot(n)

    def line(when: datetime, text: str) -> str:
        return f"[{(when - boot).total_seconds():>12.6f}] {text}"

    lines = [
        line(boot + timedelta(seconds=21.4), "nvidia-nvlink: Nvlink Core is being initialized, major device number 508"),
        line(boot + timedelta(seconds=21.9), "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16-I3-B07-3-1)  Thu Jun 20 18:22:31 UTC 2024"),
        line(boot + timedelta(seconds=34.1), "mlx5_core 0000:0c:00.0: mlx5_port_module_event:1151:(pid 0): Port module event: module 0, Cable plugged"),
        line(boot + timedelta(seconds=36.7), "IPv6: ADDRCONF(NETDEV_CHANGE): ibp12s0: link becomes ready"),
    ]
    if n == culprit_of(nodes):
        bus = BUSES[BAD_GPU]
        lines += [
            line(FELL_OFF, f"pcieport 0000:5c:00.0: AER: Uncorrected (Fatal) error received: 0000:{bus}:00.0"),
            line(FELL_OFF, f"nvidia 0000:{bus}:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)"),
            line(FELL_OFF + timedelta(microseconds=920), f"NVRM: Xid (PCI:0000:{bus}:00): 79, pid=0, GPU has fallen off the bus."),
            line(FELL_OFF + timedelta(microseconds=924), f"NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus."),
        ]
    return "\n".join(lines) + "\n"


def _nvsmi(n: int, nodes: int) -> str:
    gpus, missing = [], []
    for i, bus in enumerate(BUSES):
        if n == culprit_of(nodes) and i == BAD_GPU:
            missing.append(f"0000:{bus}:00.0")
            continue
        gpus.append(Gpu(index=i, bus=f":{bus}:00.0", uuid=f"GPU-{n:08x}-5b7c-4e0a-9c21-{i:012x}",
                        serial=f"1654{n:06d}{i}", util=0, mem_used=1, temp=31 + (i + n) % 5, power=71.0 + (i + n) % 9))
    return page(gpus, CAPTURED - timedelta(seconds=7), missing=missing)


def _ranks_log(n: int, nodes: int) -> str:
    host = host_name(n)
    ip = f"10.{10 + n // 250}.{n % 250}.11"
    lines = []
    for local in range(8):
        rank, pid = n * 8 + local, 4101 + local
        lines.append(f"{host}:{pid}:{pid} [{local}] NCCL INFO Bootstrap : Using ibp12s0:{ip}<0>")
        lines.append(f"{host}:{pid}:{pid + 209} [{local}] NCCL INFO comm 0x55d5c8f0{rank:06x} rank {rank} nranks {nodes * 8} "
                     f"cudaDev {local} nvmlDev {local} busId {BUSES[local]}000 commId 0x7a3f5c21d9e84b06 - Init COMPLETE")
    for local in range(8):
        rank = n * 8 + local
        if n == culprit_of(nodes) and local == BAD_GPU:
            when = FELL_OFF + timedelta(milliseconds=702)
            stamp = f"E{when.month}{when:%d %H:%M:%S}.{when.microsecond:06d}113"
            lines.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] "
                         "Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure")
            continue
        if local:
            continue
        when = WATCHDOG + timedelta(milliseconds=3 * n)
        stamp = f"E{when.month}{when:%d %H:%M:%S}.{when.microsecond:06d}000"
        lines.append(f"[rank{rank}]:[{stamp} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
                     "timeout: WorkNCCL(SeqNum=184203, OpType=ALLREDUCE, NumelIn=67108864, NumelOut=67108864, "
                     f"Timeout(ms)=600000) ran for {601350 + 3 * n} milliseconds before timing out.")
    return "\n".join(lines) + "\n"


def _sacct(nodes: int) -> str:
    span = f"2026-05-20T00:58:12|{START:%Y-%m-%dT%H:%M:%S}|{JOB_END:%Y-%m-%dT%H:%M:%S}|03:12:47"
    nodelist = f"gpu[0001-{nodes:04d}]"
    return ("JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Submit|Start|End|Elapsed|NodeList|AllocTRES\n"
            f"{JOB}|llm-pretrain-405b|gpu|foundation|{nodes * 192}|FAILED|1:0|{span}|{nodelist}|"
            f"billing={nodes * 192},cpu={nodes * 192},gres/gpu={nodes * 8},node={nodes}\n")


def write_node(folder: Path, n: int, nodes: int) -> None:
    """One node's evidence folder, as a per-node capture would hand it over."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "uptime-s.txt": f"{_boot(n):%Y-%m-%d %H:%M:%S}\n",
        "date.txt": f"{CAPTURED:%a %b %d %H:%M:%S} UTC {CAPTURED:%Y}\n",
        "dmesg.txt": _dmesg(n, nodes),
        "nvidia-smi-q.txt": _nvsmi(n, nodes),
        f"torchrun-{JOB}.log": _ranks_log(n, nodes),
        "sacct.txt": _sacct(nodes),
    }
    for name, text in files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        os.utime(path, (CAPTURED.timestamp(), CAPTURED.timestamp()))


def node_bundle(where: Path, n: int, nodes: int) -> Path:
    """Node ``n``'s files ingested into ``where/HOST.duckdb`` (written under a hidden name, then renamed,
    so that a folder of bundles never holds a half-made one)."""
    from workbench.ingest.session import ingest_paths
    from workbench.store.bundle import Bundle

    host = host_name(n)
    out = where / f"{host}.duckdb"
    with tempfile.TemporaryDirectory(prefix="gpuwb-node-") as tmp:
        folder = Path(tmp) / host
        write_node(folder, n, nodes)
        partial = where / f".{host}.duckdb"
        partial.unlink(missing_ok=True)
        with Bundle.create(partial, title=f"job {JOB} on {host}") as bundle:
            ingest_paths(bundle, [str(folder)], host=host)
        partial.rename(out)
    return out
