"""Training incidents: one function per scenario folder, each with realistic noise around the fault."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from tests.scenarios.formats import (
    ctime,
    deepspeed_steps,
    elastic,
    env_dump,
    etc_hosts,
    expected,
    journal,
    nccl_init,
    pylog,
    raw,
    rendezvous,
    sacct,
    scenario,
    srun_labelled,
    steps,
    uptime_s,
    watchdog,
    write,
)


def sec(base: datetime, seconds: float) -> datetime:
    return base + timedelta(seconds=seconds)


BOOT_LINES = [
    "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-054) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024 (Ubuntu 5.15.0-105.115-generic 5.15.148)",
    "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=3f1c9e2a-5d1b-4b8e-9c7a-2f6e1d0b8a41 ro pci=realloc=off iommu=pt",
    "DMI: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 11/20/2023",
]


def booted(boot: datetime, nvidia_at: float) -> list[str]:
    """A raw dmesg from power-on: the kernel's boot lines, then the NVIDIA driver ``nvidia_at`` s later."""
    lines = [raw(boot, sec(boot, 0), t) for t in BOOT_LINES]
    return lines + [raw(boot, sec(boot, nvidia_at + i * 0.01), t) for i, t in enumerate(nvidia_boot())]


def nvidia_boot(driver: str = "535.183.01") -> list[str]:
    return ["nvidia: module license 'NVIDIA' taints kernel.",
            "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
            f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {driver}  Sun May 12 19:39:15 UTC 2024",
            "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  535.183.01  Sun May 12 19:29:14 UTC 2024",
            "mlx5_core 0000:0c:00.0: firmware version: 28.39.2048",
            "mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged"]


@scenario
def train_pcie_xid79_nodefail(folder: Path) -> None:
    """PCIe fatal error -> Xid 79 on node07's GPU 0000:2a:00.0 -> rank 1 stops -> ranks 0, 2, 3 time out
    -> NODE_FAIL. Noise: an Xid 13 two hours earlier from another user's job on node08's GPU
    0000:ab:00.0 (not used by this job) and corrected AER errors that node08 logs all day."""
    boot7 = datetime(2025, 3, 1, 2, 11, 40)
    fault = datetime(2025, 3, 1, 14, 2, 11, 402117)
    start = datetime(2025, 3, 1, 13, 5, 10)
    hang = datetime(2025, 3, 1, 14, 2, 13, 88000)  # the collective every rank entered, never finished
    dm7 = booted(boot7, nvidia_at=4.1)
    dm7 += [
        raw(boot7, fault, "pcieport 0000:27:01.0: AER: Uncorrected (Fatal) error received: 0000:2a:00.0"),
        raw(boot7, fault, "nvidia 0000:2a:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)"),
        raw(boot7, fault, "nvidia 0000:2a:00.0: AER:   device [10de:2330] error status/mask=00040000/00000000"),
        raw(boot7, fault, "nvidia 0000:2a:00.0: AER:    [18] MalfTLP                (First)"),
        raw(boot7, sec(fault, 1.515), "NVRM: GPU at PCI:0000:2a:00: GPU-4f0e1b9a-7c2d-11ee-8c90-0242ac120002"),
        raw(boot7, sec(fault, 1.515), "NVRM: GPU Board Serial Number: 1652123019187"),
        raw(boot7, sec(fault, 1.515), "NVRM: Xid (PCI:0000:2a:00): 79, pid=48211, name=python3, GPU has fallen off the bus."),
        raw(boot7, sec(fault, 1.515), "NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus."),
        raw(boot7, sec(fault, 1.515), "NVRM: GPU 0000:2a:00.0: GPU serial number is 1652123019187."),
        raw(boot7, sec(fault, 1.516), "NVRM: A GPU crash dump has been created. If possible, please run"),
        "                 NVRM: nvidia-bug-report.sh as root to collect this data before",
        "                 NVRM: the NVIDIA kernel module is unloaded.",
    ]
    write(folder, "node07/dmesg.txt", "\n".join(dm7) + "\n")
    write(folder, "node07/uptime.txt", uptime_s(boot7))
    write(folder, "node07/nvidia-smi.txt",
          "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n"
          "No devices were found\n")
    dm8 = [ctime(datetime(2025, 3, 1, 2, 9, 58), t) for t in BOOT_LINES + nvidia_boot()]
    for i in range(16):
        when = datetime(2025, 3, 1, 8, 0, 3) + timedelta(minutes=23 * i, seconds=i * 7)
        dm8.append(ctime(when, "pcieport 0000:5c:00.0: AER: Corrected error received: 0000:5d:00.0"))
        dm8.append(ctime(when, "nvidia 0000:5d:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"))
        dm8.append(ctime(when, "nvidia 0000:5d:00.0: AER:   device [10de:2330] error status/mask=00000001/0000e000"))
        dm8.append(ctime(when, "nvidia 0000:5d:00.0: AER:    [ 0] RxErr                  (First)"))
        if i == 9:
            other = datetime(2025, 3, 1, 11, 58, 41)
            dm8.append(ctime(other, "NVRM: Xid (PCI:0000:ab:00): 13, pid=30112, name=python, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address"))
            dm8.append(ctime(other, "NVRM: Xid (PCI:0000:ab:00): 13, pid=30112, name=python, Graphics Exception: ESR 0x51e730=0x201000e 0x51e734=0x0 0x51e728=0x4c1eb72 0x51e72c=0x174"))
    dm8.sort(key=lambda line: datetime.strptime(line[1:25].replace("  ", " "), "%a %b %d %H:%M:%S %Y"))
    write(folder, "node08/dmesg.txt", "\n".join(dm8) + "\n")
    places = {0: ("node07", 0, "18000", 48207), 1: ("node07", 1, "2a000", 48211),
              2: ("node08", 0, "18000", 51877), 3: ("node08", 1, "2a000", 51880)}
    tasks = {}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl")]
        lines += nccl_init(host, pid, rank, 4, dev, bus, "a3c1", ip=f"10.10.0.{7 if host == 'node07' else 8}")
        lines += steps(start + timedelta(minutes=2), 21000, 6, 600.0, 1.8921, rank, step_time=1.21)
        lines.append(pylog(datetime(2025, 3, 1, 14, 1, 58, 412000), f"[rank{rank}] step 21876 | loss 1.8702 | lr 2.40e-04 | step_time 1.21s | tokens/s 433295"))
        if rank != 1:
            lines += watchdog(rank, hang + timedelta(seconds=600, milliseconds=89 + rank * 3), 21876, "ALLREDUCE",
                              262144, 600000, 600089 + rank * 3)
        tasks[rank] = lines
    write(folder, "slurm/slurm-91842.out", srun_labelled(tasks))
    monitor = ["timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W]"]
    for i in range(6):
        when = datetime(2025, 3, 1, 13, 10, 0) + timedelta(minutes=10 * i)
        monitor += [f"{when.strftime('%Y/%m/%d %H:%M:%S')}.{200 + i:03d}, 0, 00000000:18:00.0, 99 %, {66 + i % 3}, 651.20 W",
                    f"{when.strftime('%Y/%m/%d %H:%M:%S')}.{200 + i:03d}, 1, 00000000:2A:00.0, 99 %, {67 + i % 2}, 648.75 W"]
    write(folder, "node07/gpu-monitor.csv", "\n".join(monitor) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "91790|eval-sweep|gpu|vision|16|FAILED|1:0|2025-03-01T11:40:12|2025-03-01T11:58:44|node08",
        "91790.batch|batch||vision|16|FAILED|1:0|2025-03-01T11:40:12|2025-03-01T11:58:44|node08",
        "91842|llama-ft|gpu|ml-research|64|NODE_FAIL|0:0|2025-03-01T13:05:02|2025-03-01T14:13:05|node[07-08]",
        "91842.batch|batch||ml-research|32|CANCELLED|0:15|2025-03-01T13:05:02|2025-03-01T14:13:05|node07",
        "91842.extern|extern||ml-research|64|COMPLETED|0:0|2025-03-01T13:05:02|2025-03-01T14:13:06|node[07-08]",
        "91842.0|python3||ml-research|64|CANCELLED|0:15|2025-03-01T13:05:04|2025-03-01T14:13:05|node[07-08]",
    ]))
    write(folder, "slurm/slurmctld.log", "\n".join([
        "[2025-03-01T13:05:02.311] sched: Allocate JobId=91842 NodeList=node[07-08] #CPUs=64 Partition=gpu",
        "[2025-03-01T14:03:10.448] update_node: node node07 reason set to: NHC: check_nv_healthmon: GPU 0000:2a:00.0 is lost",
        "[2025-03-01T14:03:10.448] update_node: node node07 state set to DRAINING",
        "[2025-03-01T14:13:05.020] Killing JobId=91842 on failed node node07",
        "[2025-03-01T14:13:05.317] _job_complete: JobId=91842 WTERMSIG 9",
    ]) + "\n")
    expected(folder, description="PCIe fatal error then Xid 79 on node07 GPU 0000:2a:00.0; rank 1 dies, the other ranks' watchdogs fire, NODE_FAIL",
             captured_at="2025-03-01T14:40:00Z", workload="training", layer="hardware", cause="gpu_fell_off_bus",
             host="node07", gpu="0000:2a:00.0", rank=1,
             first_anomaly={"kind": "pcie_aer", "host": "node07"})


@scenario
def train_ib_link_flap(folder: Path) -> None:
    """node03's IB port flaps -> NCCL completion errors status=12 on node02 and node03 -> every rank's
    watchdog fires -> the job fails. node03's clock runs 40 s ahead: only the collective timeouts,
    seen on all three hosts, show that its link went down first. Noise: a few symbol errors on node01."""
    skew = timedelta(seconds=40)
    down = datetime(2025, 3, 4, 9, 12, 1, 314000)
    start = datetime(2025, 3, 4, 7, 30, 5)
    hang = datetime(2025, 3, 4, 9, 11, 59, 870000)
    kern3 = [journal(datetime(2025, 3, 4, 7, 2, 11) + skew, "node03", t) for t in nvidia_boot()[-2:]]
    flap = [(0.0, "down"), (3.6, "up"), (7.9, "down"), (10.2, "up"), (31.5, "down"), (33.0, "up")]
    for offset, state in flap:
        kern3.append(journal(sec(down, offset) + skew, "node03", f"mlx5_core 0000:5e:00.0 ibp94s0: Link {state}"))
        if state == "down" and offset == 0.0:
            kern3.append(journal(sec(down, offset) + skew, "node03",
                                 "mlx5_core 0000:5e:00.0: Port module event[error]: module 0, Cable error, Bad cable"))
    write(folder, "node03/kern.log", "\n".join(kern3) + "\n")
    write(folder, "node03/perfquery.txt", "\n".join([
        "# Port counters: Lid 31 port 1 (CapMask: 0x5300)",
        "PortSelect:......................1", "CounterSelect:...................0x0000",
        "SymbolErrorCounter:..............1187", "LinkErrorRecoveryCounter:........3", "LinkDownedCounter:...............3",
        "PortRcvErrors:...................412", "PortRcvRemotePhysicalErrors:.....0", "PortRcvSwitchRelayErrors:........0",
        "PortXmitDiscards:................96", "PortXmitConstraintErrors:........0", "PortRcvConstraintErrors:.........0",
        "CounterSelect2:..................0x00", "LocalLinkIntegrityErrors:........2", "ExcessiveBufferOverrunErrors:....0",
        "VL15Dropped:.....................0", "PortXmitData:....................3894172615", "PortRcvData:.....................3894020118",
        "PortXmitPkts:....................16311029", "PortRcvPkts:.....................16310874", "PortXmitWait:....................8812",
    ]) + "\n")
    write(folder, "node01/perfquery.txt", "\n".join([
        "# Port counters: Lid 12 port 1 (CapMask: 0x5300)",
        "PortSelect:......................1", "CounterSelect:...................0x0000",
        "SymbolErrorCounter:..............3", "LinkErrorRecoveryCounter:........0", "LinkDownedCounter:...............0",
        "PortRcvErrors:...................0", "PortRcvRemotePhysicalErrors:.....0", "PortRcvSwitchRelayErrors:........0",
        "PortXmitDiscards:................0", "PortXmitConstraintErrors:........0", "PortRcvConstraintErrors:.........0",
        "CounterSelect2:..................0x00", "LocalLinkIntegrityErrors:........0", "ExcessiveBufferOverrunErrors:....0",
        "VL15Dropped:.....................0", "PortXmitData:....................3901122818", "PortRcvData:.....................3900991002",
        "PortXmitPkts:....................16398710", "PortRcvPkts:.....................16398112", "PortXmitWait:....................120",
    ]) + "\n")
    write(folder, "node03/ibstat.txt", "\n".join([
        "CA 'mlx5_0'", "\tCA type: MT4129", "\tNumber of ports: 1", "\tFirmware version: 28.39.2048",
        "\tHardware version: 0", "\tNode GUID: 0xa088c20300f1e2b4", "\tSystem image GUID: 0xa088c20300f1e2b4",
        "\tPort 1:", "\t\tState: Down", "\t\tPhysical state: Polling", "\t\tRate: 10", "\t\tBase lid: 31",
        "\t\tLMC: 0", "\t\tSM lid: 1", "\t\tCapability mask: 0xa651e848", "\t\tPort GUID: 0xa088c20300f1e2b4",
        "\t\tLink layer: InfiniBand",
    ]) + "\n")
    places = {0: ("node01", 0, "18000", 40121), 1: ("node01", 1, "2a000", 40125), 2: ("node02", 0, "18000", 33118),
              3: ("node02", 1, "2a000", 33121), 4: ("node03", 0, "18000", 29870), 5: ("node03", 1, "2a000", 29874)}
    for rank, (host, dev, bus, pid) in places.items():
        clock = skew if host == "node03" else timedelta(0)
        lines = [pylog(start + clock, f"[rank{rank}] torch.distributed initialized: world_size=6 backend=nccl")]
        lines += nccl_init(host, pid, rank, 6, dev, bus, "b7d2", ip=f"10.10.3.{10 + int(host[-1])}")
        lines += steps(start + timedelta(minutes=3) + clock, 5000, 6, 900.0, 2.1034, rank, step_time=0.98)
        if host in ("node02", "node03"):
            peer = "10.10.3.13" if host == "node02" else "10.10.3.12"
            when = down + timedelta(seconds=4.7 if host == "node02" else 4.1) + clock
            lines.append(pylog(when, f"[rank{rank}] NCCL_DEBUG_SUBSYS=NET warning follows"))
            lines.append(f"{host}:{pid}:{pid + 177} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer {peer}<40312> with status=12 opcode=129 len=0 vendor err 129 (Recv) localGid fe80::a088:c203:f1:e2{rank:02x} remoteGids fe80::a088:c203:f1:e2b4 hca mlx5_0")
            lines.append(f"{host}:{pid}:{pid + 177} [{dev}] NCCL INFO transport/net.cc:1298 -> 6")
            lines.append(f"{host}:{pid}:{pid + 177} [{dev}] NCCL INFO proxy.cc:694 -> 6")
            lines.append(f"{host}:{pid}:{pid + 177} [{dev}] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]")
        lines += watchdog(rank, hang + timedelta(seconds=600, milliseconds=140 + 11 * rank) + clock, 5521,
                          "ALLREDUCE", 524288, 600000, 600140 + 11 * rank)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    for node in range(3):
        clock = skew if node == 2 else timedelta(0)
        write(folder, f"node0{node + 1}/torchrun.log", "\n".join(
            rendezvous(start + clock - timedelta(seconds=2), 40100 + 37 * node, node, 3, 2, "node01")) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "88120|gpt-pretrain|gpu|llm|96|FAILED|1:0|2025-03-04T07:30:01|2025-03-04T09:22:41|node[01-03]",
        "88120.batch|batch||llm|32|FAILED|1:0|2025-03-04T07:30:01|2025-03-04T09:22:41|node01",
        "88120.0|torchrun||llm|96|FAILED|1:0|2025-03-04T07:30:03|2025-03-04T09:22:40|node[01-03]",
    ]))
    expected(folder, description="node03 IB link flaps; NCCL status=12 on its peers; every rank times out; node03's clock is 40 s ahead",
             captured_at="2025-03-04T09:40:00Z", workload="training", layer="network_storage",
             cause="network_fabric_errors", host="node03", ranks=[4, 5],
             first_anomaly={"kind": "link_down", "host": "node03"}, clock_offsets={"node03": 40})


@scenario
def train_ib_peer_errors_only(folder: Path) -> None:
    """node14's HCA port dies and node14 hangs: nothing of its kernel log or port counters reached the
    responder. Ranks on node11, node12 and node13 report IB completion errors (status=12) against
    10.10.7.14, the address node14's NCCL init lines give; node14's own ranks report errors against their
    two ring neighbours. Every rank's watchdog fires and the job fails. Only the peer addresses, mapped to
    hosts through the init lines, show that node14 is the host the errors have in common. Noise: a few
    symbol errors on node12's port, a boot-time link up on node13."""
    start = datetime(2025, 3, 9, 6, 10, 2)
    down = datetime(2025, 3, 9, 9, 12, 1, 514000)
    hang = datetime(2025, 3, 9, 9, 12, 0, 930000)
    hosts = {11: "node11", 12: "node12", 13: "node13", 14: "node14"}
    places = {r: (hosts[11 + r // 2], r % 2, ("18000", "2a000")[r % 2], 61200 + 37 * r) for r in range(8)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=8 backend=nccl")]
        lines += nccl_init(host, pid, rank, 8, dev, bus, "d2f7", ip=f"10.10.7.{host[-2:]}")
        lines += steps(start + timedelta(minutes=2), 31000, 6, 1800.0, 1.8342, rank, step_time=1.12)
        if host != "node14":
            peer, delay = "10.10.7.14", 4.1 + 0.37 * rank
        else:
            peer, delay = ("10.10.7.13" if dev == 0 else "10.10.7.11"), 9.8 + 0.2 * dev
        when = down + timedelta(seconds=delay)
        tid = pid + 177
        lines.append(pylog(when - timedelta(milliseconds=3), f"[rank{rank}] NCCL_DEBUG_SUBSYS=NET warning follows"))
        lines.append(f"{host}:{pid}:{tid} [{dev}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer {peer}<{40100 + rank}> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid fe80::a088:c203:f1:{rank:04x} remoteGids fe80::a088:c203:f1:e20e hca mlx5_0")
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO transport/net.cc:1298 -> 6")
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO proxy.cc:694 -> 6")
        lines.append(f"{host}:{pid}:{tid} [{dev}] NCCL INFO proxy.cc:874 -> 6 [Progress Thread]")
        lines += watchdog(rank, hang + timedelta(seconds=600, milliseconds=120 + 9 * rank), 61877, "ALLREDUCE",
                          1048576, 600000, 600120 + 9 * rank)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    for node in range(3):
        write(folder, f"node1{node + 1}/torchrun.log", "\n".join(
            rendezvous(start - timedelta(seconds=3), 61100 + 41 * node, node, 4, 2, "node11")) + "\n")
    write(folder, "node11/etc-hosts.txt", etc_hosts(
        [(f"10.0.7.{n}", f"node{n}.cluster node{n}") for n in range(11, 15)]
        + [(f"10.10.7.{n}", f"node{n}-ib") for n in range(11, 15)]))
    write(folder, "node12/perfquery.txt", "\n".join([
        "# Port counters: Lid 22 port 1 (CapMask: 0x5300)",
        "PortSelect:......................1", "CounterSelect:...................0x0000",
        "SymbolErrorCounter:..............5", "LinkErrorRecoveryCounter:........0", "LinkDownedCounter:...............0",
        "PortRcvErrors:...................0", "PortRcvRemotePhysicalErrors:.....0", "PortRcvSwitchRelayErrors:........0",
        "PortXmitDiscards:................0", "PortXmitConstraintErrors:........0", "PortRcvConstraintErrors:.........0",
        "CounterSelect2:..................0x00", "LocalLinkIntegrityErrors:........0", "ExcessiveBufferOverrunErrors:....0",
        "VL15Dropped:.....................0", "PortXmitData:....................4101122818", "PortRcvData:.....................4100991002",
        "PortXmitPkts:....................17398710", "PortRcvPkts:.....................17398112", "PortXmitWait:....................3120",
    ]) + "\n")
    boot13 = datetime(2025, 3, 9, 5, 58, 40)
    kern13 = [journal(sec(boot13, 3.2 + i * 0.01), "node13", t) for i, t in enumerate(nvidia_boot())]
    kern13.append(journal(sec(boot13, 9.7), "node13", "mlx5_core 0000:5e:00.0 ibp94s0: Link up"))
    write(folder, "node13/kern.log", "\n".join(kern13) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "88512|moe-pretrain|gpu|llm|128|FAILED|1:0|2025-03-09T06:10:00|2025-03-09T09:23:02|node[11-14]",
        "88512.batch|batch||llm|32|FAILED|1:0|2025-03-09T06:10:00|2025-03-09T09:23:02|node11",
        "88512.0|torchrun||llm|128|FAILED|1:0|2025-03-09T06:10:01|2025-03-09T09:23:01|node[11-14]",
    ]))
    expected(folder, description="node14's IB port dies; only its peers' status=12 reports against its address name it",
             captured_at="2025-03-09T09:40:00Z", workload="training", layer="network_storage",
             cause="network_fabric_errors", host="node14", ranks=[6, 7],
             first_anomaly={"kind": "fabric_peer_errors", "host": "node14"}, symptoms=["nccl_timeout", "job_failed"])


@scenario
def train_nfs_checkpoint_stall(folder: Path) -> None:
    """Rank 0 writes a checkpoint to NFS; the server stops responding; rank 0 blocks in D state and
    the other ranks time out in the next all-reduce. A partial checkpoint is left behind."""
    boot1 = datetime(2025, 3, 7, 1, 3, 22)
    start = datetime(2025, 3, 7, 8, 0, 4)
    save = datetime(2025, 3, 7, 10, 0, 0, 118000)
    stall = datetime(2025, 3, 7, 10, 0, 37, 520000)
    dm1 = booted(boot1, nvidia_at=4.3)
    for i in range(3):
        dm1.append(raw(boot1, sec(stall, i * 31.2), "nfs: server nfs-ckpt01 not responding, still trying"))
    blocked = sec(stall, 125.3)
    dm1 += [raw(boot1, blocked, t) for t in [
        "INFO: task python3:51203 blocked for more than 120 seconds.",
        "      Tainted: P           OE     5.15.0-105-generic #115-Ubuntu",
        "\"echo 0 > /proc/sys/kernel/hung_task_timeout_secs\" disables this message.",
        "task:python3         state:D stack:    0 pid:51203 ppid: 51190 flags:0x00004002",
        "Call Trace:", " <TASK>", " __schedule+0x2cd/0x890", " schedule+0x69/0x110",
        " rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]", " __wait_on_bit+0x42/0x110",
        " out_of_line_wait_on_bit+0x8d/0xb0", " nfs_wait_on_request+0x42/0x50 [nfs]",
        " nfs_writepages+0x13a/0x1f0 [nfs]", " do_writepages+0xd1/0x200", " filemap_fdatawrite_wbc+0x63/0x90",
        " nfs_file_flush+0x2b/0x40 [nfs]", " filp_close+0x36/0x80", " __x64_sys_close+0x2e/0x70", " </TASK>"]]
    dm1.append(raw(boot1, datetime(2025, 3, 7, 10, 14, 12, 8000), "nfs: server nfs-ckpt01 OK"))
    write(folder, "node01/dmesg.txt", "\n".join(dm1) + "\n")
    write(folder, "node01/uptime.txt", uptime_s(boot1))
    write(folder, "node01/ckpt-ls.txt", "\n".join([
        "/mnt/ckpt/run42:",
        "total 8",
        "drwxr-xr-x 2 mlops mlops 4096 2025-03-07 09:00:41.127303022 +0000 step_11000",
        "drwxr-xr-x 2 mlops mlops 4096 2025-03-07 10:00:00.201918311 +0000 step_12000",
        "",
        "/mnt/ckpt/run42/step_11000:",
        "total 27262980",
        "-rw-r--r-- 1 mlops mlops 13958643712 2025-03-07 09:00:37.902114215 +0000 model.pt",
        "-rw-r--r-- 1 mlops mlops     2048311 2025-03-07 09:00:38.311281109 +0000 optim_rank0.pt",
        "-rw-r--r-- 1 mlops mlops         412 2025-03-07 09:00:41.127303022 +0000 meta.json",
        "",
        "/mnt/ckpt/run42/step_12000:",
        "total 4194304",
        "-rw-r--r-- 1 mlops mlops  4294967296 2025-03-07 10:00:37.489920117 +0000 model.pt.tmp",
    ]) + "\n")
    boot2 = datetime(2025, 3, 7, 1, 2, 57)
    dm2 = booted(boot2, nvidia_at=4.2)
    dm2.append(raw(boot2, datetime(2025, 3, 7, 6, 12, 40), "mlx5_core 0000:0c:00.0 ibp12s0: Link up"))
    write(folder, "node02/dmesg.txt", "\n".join(dm2) + "\n")
    write(folder, "node02/uptime.txt", uptime_s(boot2))
    places = {0: ("node01", 0, "18000", 51203), 1: ("node01", 1, "2a000", 51207), 2: ("node02", 0, "18000", 47710),
              3: ("node02", 1, "2a000", 47713)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = env_dump({"SLURM_JOB_ID": 90211, "SLURM_PROCID": rank, "SLURM_LOCALID": dev, "SLURMD_NODENAME": host,
                          "CUDA_VISIBLE_DEVICES": "0,1", "WORLD_SIZE": 4})
        lines.append(pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl"))
        lines += nccl_init(host, pid, rank, 4, dev, bus, "c4e9", ip=f"10.10.5.{int(host[-1])}")
        lines += steps(start + timedelta(minutes=1), 9600, 8, 900.0, 1.9971, rank, step_time=1.05)
        if rank == 0:
            lines.append(pylog(save, "[rank0] Saving checkpoint to /mnt/ckpt/run42/step_12000 ..."))
        else:
            lines += watchdog(rank, save + timedelta(seconds=600, milliseconds=311 + rank * 5), 38411, "ALLREDUCE",
                              1048576, 600000, 600311 + rank * 5)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "90211|llm-7b-ft|gpu|ml-research|64|FAILED|6:0|2025-03-07T08:00:01|2025-03-07T10:10:31|node[01-02]",
        "90211.batch|batch||ml-research|32|FAILED|6:0|2025-03-07T08:00:01|2025-03-07T10:10:31|node01",
        "90211.0|python3||ml-research|64|CANCELLED|0:15|2025-03-07T08:00:02|2025-03-07T10:10:31|node[01-02]",
    ]))
    expected(folder, description="NFS stops responding while rank 0 writes a checkpoint; rank 0 hangs in D state, the others time out",
             captured_at="2025-03-07T10:30:00Z", workload="training", layer="network_storage",
             cause="storage_stall", host="node01", rank=0,
             first_anomaly={"kind": "nfs_not_responding", "host": "node01"})


@scenario
def train_checkpoint_disk_full(folder: Path) -> None:
    """An HF Trainer job (torchrun --tee, so every line carries ``[rankN]:``) saves checkpoint-24000 to
    node21's local scratch disk, which is full: safetensors fails with "No space left on device" on rank 0,
    rank 0 dies, the other ranks time out in the next all-reduce and the job fails. Only rank 0's log
    says why: no df output was taken. Noise: an Xid 31 from another user's job on node22 two days earlier."""
    start = datetime(2025, 3, 14, 1, 2, 10)
    save = datetime(2025, 3, 14, 3, 0, 1, 118000)
    places = {0: ("node21", 0, "18000", 70110), 1: ("node21", 1, "2a000", 70114), 2: ("node22", 0, "18000", 66290),
              3: ("node22", 1, "2a000", 66293)}
    site = "/opt/conda/lib/python3.11/site-packages"
    for rank, (host, dev, bus, pid) in places.items():
        lines = [f"[INFO|trainer.py:2128] {start.strftime('%Y-%m-%d %H:%M:%S')},204 >> ***** Running training *****"] if rank == 0 else []
        lines += nccl_init(host, pid, rank, 4, dev, bus, "71c3", ip=f"10.10.9.{host[-2:]}")
        if rank == 0:
            for i in range(6):
                lines.append(f"{{'loss': {1.9123 - i * 0.013:.4f}, 'grad_norm': {0.41 + i * 0.01:.2f}, 'learning_rate': 2.4e-05, 'epoch': {1.1 + i * 0.02:.2f}}}")
                lines.append(f" {48 + i}%|█████     | {23000 + i * 200}/48000 [{1 + i // 3}:{(i * 19) % 60:02d}:11<1:58:02,  1.18s/it]")
            lines += [
                f"[INFO|trainer.py:3410] {save.strftime('%Y-%m-%d %H:%M:%S')},118 >> Saving model checkpoint to /scratch/run7/checkpoint-24000",
                f"[INFO|configuration_utils.py:472] {save.strftime('%Y-%m-%d %H:%M:%S')},402 >> Configuration saved in /scratch/run7/checkpoint-24000/config.json",
                "Traceback (most recent call last):",
                '  File "/opt/train/run_clm.py", line 655, in <module>',
                "    main()",
                '  File "/opt/train/run_clm.py", line 603, in main',
                "    train_result = trainer.train(resume_from_checkpoint=checkpoint)",
                f'  File "{site}/transformers/trainer.py", line 2052, in train',
                "    return inner_training_loop(",
                f'  File "{site}/transformers/trainer.py", line 2487, in _inner_training_loop',
                "    self._maybe_log_save_evaluate(tr_loss, grad_norm, model, trial, epoch, ignore_keys_for_eval)",
                f'  File "{site}/transformers/trainer.py", line 2918, in _maybe_log_save_evaluate',
                "    self._save_checkpoint(model, trial, metrics=metrics)",
                f'  File "{site}/transformers/trainer.py", line 3008, in _save_checkpoint',
                "    self.save_model(output_dir, _internal_call=True)",
                f'  File "{site}/transformers/trainer.py", line 3421, in _save',
                "    self.model.save_pretrained(",
                f'  File "{site}/transformers/modeling_utils.py", line 2793, in save_pretrained',
                '    safe_save_file(shard, os.path.join(save_directory, shard_file), metadata={"format": "pt"})',
                f'  File "{site}/safetensors/torch.py", line 286, in save_file',
                "    serialize_file(_flatten(tensors), filename, metadata=metadata)",
                'safetensors_rust.SafetensorError: Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
            ]
        else:
            lines += steps(start + timedelta(minutes=3), 23000, 4, 1500.0, 1.9123, rank, step_time=1.18)
            lines += watchdog(rank, save + timedelta(seconds=600, milliseconds=204 + 7 * rank), 97113, "ALLREDUCE",
                              2097152, 600000, 600204 + 7 * rank)
        write(folder, f"logs/rank{rank}.log", "\n".join(line if line.startswith("[rank") else f"[rank{rank}]:{line}"
                                                       for line in lines) + "\n")
    for node in range(2):
        write(folder, f"node2{node + 1}/torchrun.log", "\n".join(
            rendezvous(start - timedelta(seconds=4), 70090 + 53 * node, node, 2, 2, "node21")) + "\n")
    kern22 = [journal(datetime(2025, 3, 12, 0, 41, 7) + timedelta(seconds=i * 0.01), "node22", t)
              for i, t in enumerate(nvidia_boot())]
    kern22.append(journal(datetime(2025, 3, 12, 2, 17, 44), "node22",
                          "NVRM: Xid (PCI:0000:2a:00): 31, pid=401877, name=python, Ch 00000008, intr 00000000. "
                          "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2a_8c000000. Fault is of type "
                          "FAULT_PDE ACCESS_TYPE_VIRT_READ"))
    write(folder, "node22/kern.log", "\n".join(kern22) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "90877|llama-13b-ft|gpu|ml-research|64|FAILED|1:0|2025-03-14T01:02:03|2025-03-14T03:10:44|node[21-22]",
        "90877.batch|batch||ml-research|32|FAILED|1:0|2025-03-14T01:02:03|2025-03-14T03:10:44|node21",
        "90877.0|torchrun||ml-research|64|FAILED|1:0|2025-03-14T01:02:05|2025-03-14T03:10:43|node[21-22]",
    ]))
    expected(folder, description="rank 0's checkpoint write fails on node21's full scratch disk; the other ranks time out",
             captured_at="2025-03-14T03:30:00Z", workload="training", layer="network_storage", cause="disk_full",
             host="node21", rank=0, first_anomaly={"kind": "checkpoint_write_failed", "host": "node21"},
             symptoms=["nccl_timeout", "job_failed"])


@scenario
def train_driver_upgrade_one_node(folder: Path) -> None:
    """Unattended-upgrades replaced the NVIDIA user-space libraries on node09 (535.161.08 -> 535.183.01)
    without a reboot: the loaded kernel module is still the old one, CUDA cannot initialize there,
    and the job fails only because node09 is in it. Noise: routine package updates on every node."""
    upgrade = datetime(2025, 3, 5, 6, 25, 14)
    start = datetime(2025, 3, 5, 9, 40, 2)
    pkgs = ["libnvidia-compute-535", "libnvidia-extra-535", "nvidia-utils-535", "libnvidia-decode-535",
            "libnvidia-encode-535", "nvidia-compute-utils-535"]
    old, new = "535.161.08-0ubuntu0.22.04.1", "535.183.01-0ubuntu0.22.04.1"
    dpkg = ["2025-03-05 06:25:02 startup archives unpack",
            "2025-03-05 06:25:02 upgrade tzdata:all 2024a-0ubuntu0.22.04 2025a-0ubuntu0.22.04",
            "2025-03-05 06:25:02 status half-configured tzdata:all 2024a-0ubuntu0.22.04",
            "2025-03-05 06:25:03 status unpacked tzdata:all 2025a-0ubuntu0.22.04"]
    for i, pkg in enumerate(pkgs):
        when = sec(upgrade, i * 1.3).strftime("%Y-%m-%d %H:%M:%S")
        dpkg += [f"{when} upgrade {pkg}:amd64 {old} {new}", f"{when} status half-configured {pkg}:amd64 {old}",
                 f"{when} status unpacked {pkg}:amd64 {new}"]
    dpkg.append("2025-03-05 06:25:24 startup packages configure")
    for i, pkg in enumerate(pkgs):
        when = sec(upgrade, 10 + i * 0.4).strftime("%Y-%m-%d %H:%M:%S")
        dpkg += [f"{when} configure {pkg}:amd64 {new} <none>", f"{when} status installed {pkg}:amd64 {new}"]
    dpkg += ["2025-03-05 06:25:31 configure tzdata:all 2025a-0ubuntu0.22.04 <none>",
             "2025-03-05 06:25:31 status installed tzdata:all 2025a-0ubuntu0.22.04"]
    write(folder, "node09/dpkg.log", "\n".join(dpkg) + "\n")
    for n, host in enumerate(("node10", "node11")):
        lines = [f"2025-02-12 04:1{n}:{11 + i:02d} status installed {pkg}:amd64 {old}" for i, pkg in enumerate(pkgs)]
        lines += [f"2025-03-05 06:3{n}:40 startup archives unpack",
                  f"2025-03-05 06:3{n}:40 upgrade tzdata:all 2024a-0ubuntu0.22.04 2025a-0ubuntu0.22.04",
                  f"2025-03-05 06:3{n}:41 status unpacked tzdata:all 2025a-0ubuntu0.22.04",
                  f"2025-03-05 06:3{n}:42 startup packages configure",
                  f"2025-03-05 06:3{n}:42 configure tzdata:all 2025a-0ubuntu0.22.04 <none>",
                  f"2025-03-05 06:3{n}:42 status installed tzdata:all 2025a-0ubuntu0.22.04"]
        write(folder, f"{host}/dpkg.log", "\n".join(lines) + "\n")
    boot9 = datetime(2025, 2, 27, 18, 40, 5)
    dm9 = [raw(boot9, sec(boot9, 0), t) for t in BOOT_LINES]
    dm9 += [raw(boot9, sec(boot9, 4.0 + i * 0.01), t) for i, t in enumerate(nvidia_boot("535.161.08"))]
    for k in range(2):
        when = start + timedelta(seconds=9.2 + k * 0.4)
        dm9 += [raw(boot9, when, "NVRM: API mismatch: the client has the version 535.183.01, but"),
                "               NVRM: this kernel module has the version 535.161.08.  Please",
                "               NVRM: make sure that this kernel module and all NVIDIA driver",
                "               NVRM: components have the same version."]
    write(folder, "node09/dmesg.txt", "\n".join(dm9) + "\n")
    write(folder, "node09/uptime.txt", uptime_s(boot9))
    write(folder, "node09/nvidia-smi.txt", "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.183\n")
    hosts = {0: "node10", 1: "node10", 2: "node09", 3: "node09", 4: "node11", 5: "node11"}
    for rank, host in hosts.items():
        lines = [pylog(start + timedelta(seconds=7), f"[rank{rank}] initializing torch.distributed: world_size=6 backend=nccl")]
        if host == "node09":
            lines += [f"[rank{rank}]: {text}" for text in (
                "Traceback (most recent call last):",
                '  File "/workspace/train.py", line 412, in <module>',
                "    main()",
                '  File "/workspace/train.py", line 97, in main',
                "    torch.cuda.set_device(local_rank)",
                '  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py", line 408, in set_device',
                "    torch._C._cuda_setDevice(device)",
                "RuntimeError: CUDA error: system has unsupported display driver / cuda driver combination",
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.")]
        else:
            lines += [pylog(start + timedelta(seconds=8), f"[rank{rank}] waiting for all ranks at the NCCL rendezvous")]
        write(folder, f"{host}/train_rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "node09/torchrun.log", "\n".join([
        elastic(start + timedelta(seconds=10), "W", 70302, "multiprocessing/api.py:897", "Sending process 70314 closing signal SIGTERM"),
        elastic(start + timedelta(seconds=10, milliseconds=400), "E", 70302, "multiprocessing/api.py:869", "failed (exitcode: 1) local_rank: 0 (pid: 70311) of binary: /usr/bin/python3"),
    ]) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "77298|sft-7b|gpu|ml-research|96|COMPLETED|0:0|2025-03-04T21:10:00|2025-03-05T05:58:12|node[09-11]",
        "77311|sft-7b|gpu|ml-research|96|FAILED|1:0|2025-03-05T09:40:02|2025-03-05T09:41:37|node[09-11]",
        "77311.batch|batch||ml-research|32|FAILED|1:0|2025-03-05T09:40:02|2025-03-05T09:41:37|node09",
        "77311.0|torchrun||ml-research|96|FAILED|1:0|2025-03-05T09:40:03|2025-03-05T09:41:36|node[09-11]",
    ]))
    expected(folder, description="unattended-upgrades put new NVIDIA user-space libraries on node09 only; API mismatch with the loaded module; the job fails there",
             captured_at="2025-03-05T10:05:00Z", workload="training", layer="gpu", cause="driver_stack_mismatch",
             host="node09", ranks=[2, 3], first_anomaly={"kind": "change", "host": "node09"})


@scenario
def train_host_oom_dataloader(folder: Path) -> None:
    """Dataloader workers on node02 leak host memory until the kernel OOM killer takes rank 2's
    process; ranks 0, 1 and 3 wait in the next collective until their 30-minute watchdog fires."""
    start = datetime(2025, 3, 8, 12, 0, 5)
    oom = datetime(2025, 3, 8, 16, 40, 11)
    hang = datetime(2025, 3, 8, 16, 40, 9, 310000)
    boot = datetime(2025, 3, 8, 0, 2, 13)
    dm2 = [ctime(boot, t) for t in BOOT_LINES + nvidia_boot()]
    dm2 += [ctime(oom, t) for t in [
        "pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0",
        "CPU: 37 PID: 90412 Comm: pt_data_worker Tainted: P           OE     5.15.0-105-generic #115-Ubuntu",
        "Hardware name: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 11/20/2023",
        "Call Trace:", " <TASK>", " dump_stack_lvl+0x4a/0x63", " dump_header+0x4a/0x1f4", " oom_kill_process.cold+0xb/0x10",
        " out_of_memory+0x106/0x2e0", " __alloc_pages_slowpath.constprop.0+0x97a/0xa40", " </TASK>",
        "Mem-Info:",
        "active_anon:41923310 inactive_anon:6201811 isolated_anon:0",
        "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,task_memcg=/slurm/uid_1001/job_88312/step_0,task=python3,pid=90377,uid=1001",
        "Out of memory: Killed process 90377 (python3) total-vm:187421320kB, anon-rss:142371844kB, file-rss:81920kB, shmem-rss:2097152kB, UID:1001 pgtables:289412kB oom_score_adj:0"]]
    dm2.append(ctime(sec(oom, 1), "oom_reaper: reaped process 90377 (python3), now anon-rss:0kB, file-rss:81792kB, shmem-rss:2097152kB"))
    write(folder, "node02/dmesg.txt", "\n".join(dm2) + "\n")
    boot1 = datetime(2025, 3, 8, 0, 1, 50)
    dm1 = [ctime(boot1, t) for t in BOOT_LINES + nvidia_boot()]
    dm1 += [ctime(datetime(2025, 3, 8, 9 + i, 17, 2), "pcieport 0000:00:01.1: AER: Corrected error received: 0000:00:01.1") for i in range(5)]
    dm1 += [ctime(datetime(2025, 3, 8, 9 + i, 17, 2), "pcieport 0000:00:01.1: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)") for i in range(5)]
    dm1.sort(key=lambda line: datetime.strptime(line[1:25].replace("  ", " "), "%a %b %d %H:%M:%S %Y"))
    write(folder, "node01/dmesg.txt", "\n".join(dm1) + "\n")
    places = {0: ("node01", 0, "18000", 88120), 1: ("node01", 1, "2a000", 88124), 2: ("node02", 0, "18000", 90377),
              3: ("node02", 1, "2a000", 90381)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl")]
        lines += nccl_init(host, pid, rank, 4, dev, bus, "d1f0", ip=f"10.10.7.{int(host[-1])}")
        lines += steps(start + timedelta(minutes=1), 100, 16, 1000.0, 2.4410, rank, step_time=0.87)
        if rank != 2:
            lines += watchdog(rank, hang + timedelta(seconds=1800, milliseconds=55 + rank * 4), 60219, "ALLREDUCE",
                              2097152, 1800000, 1800055 + rank * 4)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "node01/torchrun.log", "\n".join(rendezvous(start - timedelta(seconds=3), 88101, 0, 2, 2, "node01")) + "\n")
    write(folder, "node02/torchrun.log", "\n".join(rendezvous(start - timedelta(seconds=3), 90360, 1, 2, 2, "node01") + [
        elastic(sec(oom, 2), "E", 90360, "multiprocessing/api.py:869",
                "failed (exitcode: -9) local_rank: 0 (pid: 90377) of binary: /usr/bin/python3"),
    ]) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "88312|vit-h-pretrain|gpu|vision|64|FAILED|1:0|2025-03-08T12:00:01|2025-03-08T17:10:12|node[01-02]",
        "88312.batch|batch||vision|32|FAILED|1:0|2025-03-08T12:00:01|2025-03-08T17:10:12|node01",
        "88312.0|torchrun||vision|64|FAILED|1:0|2025-03-08T12:00:02|2025-03-08T17:10:11|node[01-02]",
    ]))
    expected(folder, description="host OOM killer takes rank 2's process on node02 (dataloader leak); the other ranks time out after 30 min",
             captured_at="2025-03-08T17:30:00Z", workload="training", layer="scheduling", cause="host_oom_kill",
             host="node02", rank=2, first_anomaly={"kind": "oom_invoked", "host": "node02"})


@scenario
def train_nan_loss_bf16(folder: Path) -> None:
    """Loss diverges after a learning-rate warm-up ends and turns NaN on every rank at the same step;
    Megatron's NaN check aborts the job. Noise: an idle GPU on node06 reports a power cap."""
    start = datetime(2025, 3, 9, 6, 0, 3)
    blow = datetime(2025, 3, 9, 11, 20, 31)
    places = {0: ("node05", 0, "18000", 71020), 1: ("node05", 1, "2a000", 71024), 2: ("node06", 0, "18000", 66310),
              3: ("node06", 1, "2a000", 66314)}
    losses = [1.874512, 1.869901, 1.902433, 2.817764, 9.733120]
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl")]
        lines += nccl_init(host, pid, rank, 4, dev, bus, "e2a8", ip=f"10.10.9.{int(host[-1])}")
        if rank == 3:
            for i, loss in enumerate(losses):
                when = blow - timedelta(seconds=(len(losses) - i) * 60)
                lines.append(f" [{when.strftime('%Y-%m-%d %H:%M:%S')}] iteration     {8350 + i * 50}/  100000 | consumed samples:      {(8350 + i * 50) * 512} | elapsed time per iteration (ms): 1210.4 | learning rate: 3.000E-04 | global batch size:   512 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {0.9 + i * 3.1:.3f} | number of skipped iterations:   0 | number of nan iterations:   0 |")
            lines.append(f" [{blow.strftime('%Y-%m-%d %H:%M:%S')}] iteration     8600/  100000 | consumed samples:      4403200 | elapsed time per iteration (ms): 1208.9 | learning rate: 3.000E-04 | global batch size:   512 | lm loss: nan | loss scale: 1.0 | grad norm: nan | number of skipped iterations:   0 | number of nan iterations:   1 |")
        when = blow + timedelta(seconds=1, milliseconds=200 + rank)
        lines.append(pylog(when, f"[rank{rank}] AssertionError: Rank {rank}: found NaN in local grad norm in backward pass before data-parallel communication collective. Device: {dev}, node: {host}", "ERROR"))
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "node06/nvidia-smi-query.csv", "\n".join(
        ["timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W], clocks.sm [MHz], clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_thermal_slowdown"]
        + [f"{(blow - timedelta(minutes=20 - 5 * i)).strftime('%Y/%m/%d %H:%M:%S')}.{101 + i:03d}, 7, 00000000:DB:00.0, 0 %, 31, 71.42 W, 345 MHz, Active, Not Active" for i in range(5)]) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "93001|gpt-13b|gpu|llm|64|FAILED|1:0|2025-03-09T06:00:01|2025-03-09T11:20:40|node[05-06]",
        "93001.batch|batch||llm|32|FAILED|1:0|2025-03-09T06:00:01|2025-03-09T11:20:40|node05",
    ]))
    expected(folder, description="loss diverges and becomes NaN on every rank at iteration 8600; Megatron aborts",
             captured_at="2025-03-09T11:45:00Z", workload="training", layer="gpu", cause="numeric_instability",
             first_anomaly={"kind": "nan_loss"})


@scenario
def train_ecc_xid94(folder: Path) -> None:
    """A contained uncorrectable ECC error (Xid 94) on node04's GPU 0000:9b:00.0 kills rank 3's
    process; nvidia-smi shows the volatile DBE and a pending row remap; the other ranks time out."""
    start = datetime(2025, 3, 10, 1, 0, 2)
    hit = datetime(2025, 3, 10, 3, 47, 20, 660000)
    hang = datetime(2025, 3, 10, 3, 47, 20, 500000)
    boot4 = datetime(2025, 3, 9, 22, 15, 31)
    dm4 = booted(boot4, nvidia_at=4.4)
    dm4 += [raw(boot4, hit, "NVRM: Xid (PCI:0000:9b:00): 94, pid=20931, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No"),
            raw(boot4, sec(hit, 0.004), "NVRM: Xid (PCI:0000:9b:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row (0x0000000000a1f3c0) Marked for Remapping, reset gpu to activate."),
            raw(boot4, sec(hit, 0.2), "NVRM: Xid (PCI:0000:9b:00): 45, pid=20931, name=python3, Ch 00000010")]
    write(folder, "node04/dmesg.txt", "\n".join(dm4) + "\n")
    write(folder, "node04/uptime.txt", uptime_s(boot4))
    write(folder, "node04/nvidia-smi-q.txt", "\n".join([
        "", "==============NVSMI LOG==============", "",
        "Timestamp                                 : Mon Mar 10 04:05:12 2025",
        "Driver Version                            : 535.183.01",
        "CUDA Version                              : 12.2", "",
        "Attached GPUs                             : 2",
        "GPU 00000000:9A:00.0",
        "    Product Name                          : NVIDIA H100 80GB HBM3",
        "    Serial Number                         : 1652123019044",
        "    GPU UUID                              : GPU-0a1b2c3d-1111-2222-3333-444455556666",
        "    Ecc Errors",
        "        Volatile",
        "            SRAM Correctable              : 0",
        "            SRAM Uncorrectable Parity     : 0",
        "            SRAM Uncorrectable SEC-DED    : 0",
        "            DRAM Correctable              : 0",
        "            DRAM Uncorrectable            : 0",
        "    Remapped Rows",
        "        Correctable Error                 : 0",
        "        Uncorrectable Error               : 0",
        "        Pending                           : No",
        "        Remapping Failure Occurred        : No",
        "    Temperature",
        "        GPU Current Temp                  : 41 C",
        "GPU 00000000:9B:00.0",
        "    Product Name                          : NVIDIA H100 80GB HBM3",
        "    Serial Number                         : 1652123019187",
        "    GPU UUID                              : GPU-7e8f9a0b-1111-2222-3333-444455557777",
        "    Ecc Errors",
        "        Volatile",
        "            SRAM Correctable              : 0",
        "            SRAM Uncorrectable Parity     : 0",
        "            SRAM Uncorrectable SEC-DED    : 0",
        "            DRAM Correctable              : 0",
        "            DRAM Uncorrectable            : 1",
        "    Remapped Rows",
        "        Correctable Error                 : 0",
        "        Uncorrectable Error               : 1",
        "        Pending                           : Yes",
        "        Remapping Failure Occurred        : No",
        "    Temperature",
        "        GPU Current Temp                  : 39 C",
    ]) + "\n")
    boot3 = datetime(2025, 3, 9, 22, 14, 50)
    dm3 = booted(boot3, nvidia_at=4.4)
    dm3 += [raw(boot3, datetime(2025, 3, 10, 0, 12, 9), "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79750")]
    write(folder, "node03/dmesg.txt", "\n".join(dm3) + "\n")
    write(folder, "node03/uptime.txt", uptime_s(boot3))
    places = {0: ("node03", 0, "9a000", 19840), 1: ("node03", 1, "9b000", 19844), 2: ("node04", 0, "9a000", 20927),
              3: ("node04", 1, "9b000", 20931)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl")]
        lines += nccl_init(host, pid, rank, 4, dev, bus, "f3b6", ip=f"10.10.11.{int(host[-1])}")
        lines += steps(start + timedelta(minutes=2), 300, 10, 960.0, 2.0108, rank, step_time=1.12)
        if rank == 3:
            lines.append(pylog(sec(hit, 0.31), "[rank3] RuntimeError: CUDA error: uncorrectable ECC error encountered", "ERROR"))
        else:
            lines += watchdog(rank, hang + timedelta(seconds=600, milliseconds=21 + rank * 6), 14402, "REDUCE_SCATTER",
                              4194304, 600000, 600021 + rank * 6)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "node03/torchrun.log", "\n".join(rendezvous(start - timedelta(seconds=2), 19800, 0, 2, 2, "node03")) + "\n")
    write(folder, "node04/torchrun.log", "\n".join(rendezvous(start - timedelta(seconds=2), 20900, 1, 2, 2, "node03") + [
        elastic(sec(hit, 2.1), "W", 20900, "multiprocessing/api.py:897", "Sending process 20927 closing signal SIGTERM"),
        elastic(sec(hit, 2.5), "E", 20900, "multiprocessing/api.py:869",
                "failed (exitcode: 1) local_rank: 1 (pid: 20931) of binary: /usr/bin/python3"),
    ]) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "95120|mixtral-ft|gpu|llm|64|FAILED|1:0|2025-03-10T01:00:01|2025-03-10T03:57:41|node[03-04]",
        "95120.batch|batch||llm|32|FAILED|1:0|2025-03-10T01:00:01|2025-03-10T03:57:41|node03",
    ]))
    expected(folder, description="contained uncorrectable ECC error (Xid 94) on node04 GPU 0000:9b:00.0 kills rank 3; row remap pending",
             captured_at="2025-03-10T04:05:12Z", workload="training", layer="gpu", cause="ecc_uncorrectable",
             host="node04", gpu="0000:9b:00.0", rank=3, first_anomaly={"kind": "xid", "host": "node04"})


@scenario
def train_healthy_with_noise(folder: Path) -> None:
    """No incident: a job that completed, with the background every cluster has: corrected AER errors,
    an idle GPU at its power cap, a few symbol errors, routine package updates, NCCL INFO chatter."""
    start = datetime(2025, 3, 11, 0, 0, 4)
    boot = datetime(2025, 3, 10, 20, 1, 7)
    dm = booted(boot, nvidia_at=4.1)
    dm += [raw(boot, datetime(2025, 3, 11, 1 + i, 7, 41), t) for i in range(6) for t in (
        "pcieport 0000:00:01.1: AER: Corrected error received: 0000:00:01.1",
        "pcieport 0000:00:01.1: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)")]
    dm.append(raw(boot, datetime(2025, 3, 11, 2, 30, 0), "mlx5_core 0000:0c:00.0 ibp12s0: Link up"))
    write(folder, "node12/dmesg.txt", "\n".join(dm) + "\n")
    write(folder, "node12/uptime.txt", uptime_s(boot))
    write(folder, "node12/nvidia-smi-query.csv", "\n".join(
        ["timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W], clocks.sm [MHz], clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_thermal_slowdown"]
        + [f"2025/03/11 0{1 + i}:00:0{i}.000, {g}, 00000000:{bus}:00.0, {util} %, {temp}, {power} W, {clock} MHz, {cap}, Not Active"
           for i in range(5) for g, bus, util, temp, power, clock, cap in (
               (0, "18", 97, 71, "611.20", 1980, "Not Active"), (1, "2A", 96, 69, "598.04", 1980, "Not Active"),
               (7, "DB", 0, 30, "70.91", 345, "Active"))]) + "\n")
    write(folder, "node12/perfquery.txt", "\n".join([
        "# Port counters: Lid 44 port 1 (CapMask: 0x5300)", "PortSelect:......................1",
        "CounterSelect:...................0x0000", "SymbolErrorCounter:..............4",
        "LinkErrorRecoveryCounter:........0", "LinkDownedCounter:...............0", "PortRcvErrors:...................0",
        "PortXmitDiscards:................0", "LocalLinkIntegrityErrors:........0", "VL15Dropped:.....................0",
        "PortXmitData:....................911872615", "PortRcvData:.....................911820118",
    ]) + "\n")
    write(folder, "node12/dpkg.log", "\n".join([
        "2025-03-11 06:12:01 startup archives unpack",
        "2025-03-11 06:12:01 upgrade vim-common:all 2:8.2.3995-1ubuntu2.21 2:8.2.3995-1ubuntu2.22",
        "2025-03-11 06:12:02 status unpacked vim-common:all 2:8.2.3995-1ubuntu2.22",
        "2025-03-11 06:12:02 upgrade libssl3:amd64 3.0.2-0ubuntu1.18 3.0.2-0ubuntu1.19",
        "2025-03-11 06:12:03 status unpacked libssl3:amd64 3.0.2-0ubuntu1.19",
        "2025-03-11 06:12:04 startup packages configure",
        "2025-03-11 06:12:04 configure libssl3:amd64 3.0.2-0ubuntu1.19 <none>",
        "2025-03-11 06:12:04 status installed libssl3:amd64 3.0.2-0ubuntu1.19",
        "2025-03-11 06:12:05 configure vim-common:all 2:8.2.3995-1ubuntu2.22 <none>",
        "2025-03-11 06:12:05 status installed vim-common:all 2:8.2.3995-1ubuntu2.22",
    ]) + "\n")
    places = {0: ("node12", 0, "18000", 31101), 1: ("node12", 1, "2a000", 31105)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=2 backend=nccl")]
        lines += nccl_init(host, pid, rank, 2, dev, bus, "a0a0", ip="10.10.12.12")
        lines += steps(start + timedelta(minutes=1), 0, 12, 1200.0, 2.6110, rank, step_time=0.91)
        lines.append(pylog(datetime(2025, 3, 11, 4, 1, 12), f"[rank{rank}] training finished: 12000 steps"))
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    write(folder, "slurm/sacct.txt", sacct([
        "96002|resnet-sweep|gpu|vision|32|COMPLETED|0:0|2025-03-11T00:00:01|2025-03-11T04:01:20|node12",
        "96002.batch|batch||vision|32|COMPLETED|0:0|2025-03-11T00:00:01|2025-03-11T04:01:20|node12",
    ]))
    expected(folder, description="a healthy job with background noise: no root cause must be named",
             captured_at="2025-03-11T04:30:00Z", workload="training", no_anomaly=True)



@scenario
def train_thermal_straggler(folder: Path) -> None:
    """GPU 0000:2a:00.0 on node05 runs hot and clocks down (HW thermal slowdown) under full load: rank 1
    becomes the straggler. DeepSpeed's wall-clock breakdown on every rank shows it: rank 1's forward and
    backward take 1.4x longer, the others wait for it in the gradient all-reduce; every step slows from
    1.02 s to 1.43 s (samples/s drop) and the job runs into its time limit. Noise: an idle GPU on node06
    sits at its power cap, its busy GPUs run normally."""
    start = datetime(2025, 3, 12, 6, 0, 5)
    hot = datetime(2025, 3, 12, 9, 31, 0)
    header = ("timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W], clocks.sm [MHz], "
              "clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_thermal_slowdown, "
              "clocks_throttle_reasons.sw_thermal_slowdown")
    rows5, rows6 = [header], [header]
    for i in range(24):
        when = datetime(2025, 3, 12, 8, 0, 0) + timedelta(minutes=10 * i)
        stamp = f"{when.strftime('%Y/%m/%d %H:%M:%S')}.{(i * 37) % 1000:03d}"
        throttled = when >= hot
        temp1 = 91 if throttled else 78 + i % 3
        rows5.append(f"{stamp}, 0, 00000000:18:00.0, 100 %, {70 + i % 4}, 688.10 W, 1980 MHz, Not Active, Not Active, Not Active")
        rows5.append(f"{stamp}, 1, 00000000:2A:00.0, 100 %, {temp1}, {'521.33' if throttled else '690.02'} W, "
                     f"{'1410' if throttled else '1980'} MHz, Not Active, {'Active' if throttled else 'Not Active'}, "
                     f"{'Active' if throttled else 'Not Active'}")
        rows6.append(f"{stamp}, 0, 00000000:18:00.0, 99 %, {69 + i % 3}, 684.71 W, 1980 MHz, Not Active, Not Active, Not Active")
        rows6.append(f"{stamp}, 1, 00000000:2A:00.0, 99 %, {71 + i % 2}, 679.30 W, 1980 MHz, Not Active, Not Active, Not Active")
        rows6.append(f"{stamp}, 7, 00000000:DB:00.0, 0 %, 29, 70.12 W, 345 MHz, Active, Not Active, Not Active")
    write(folder, "node05/gpu-query.csv", "\n".join(rows5) + "\n")
    write(folder, "node06/gpu-query.csv", "\n".join(rows6) + "\n")
    places = {0: ("node05", 0, "18000", 80210), 1: ("node05", 1, "2a000", 80214), 2: ("node06", 0, "18000", 77101),
              3: ("node06", 1, "2a000", 77105)}
    for rank, (host, dev, bus, pid) in places.items():
        lines = [pylog(start, f"[rank{rank}] torch.distributed initialized: world_size=4 backend=nccl")]
        lines += nccl_init(host, pid, rank, 4, dev, bus, "9e41", ip=f"10.10.13.{int(host[-1])}")
        lines += deepspeed_steps(rank, start + timedelta(minutes=1), hot, datetime(2025, 3, 12, 12, 0, 7),
                                 slow_rank=1, normal_s=1.02, slow_s=1.43)
        write(folder, f"logs/rank{rank}.log", "\n".join(lines) + "\n")
    for node in range(2):
        write(folder, f"node0{node + 5}/torchrun.log", "\n".join(
            rendezvous(start - timedelta(seconds=2), 80190 + 2900 * node, node, 2, 2, "node05")) + "\n")
    write(folder, "slurm/job-97120.err", "slurmstepd: error: *** JOB 97120 ON node05 CANCELLED AT 2025-03-12T12:00:07 DUE TO TIME LIMIT ***\n")
    write(folder, "slurm/sacct.txt", sacct([
        "97120|llama-70b-sft|gpu|llm|64|TIMEOUT|0:0|2025-03-12T06:00:01|2025-03-12T12:00:07|node[05-06]",
        "97120.batch|batch||llm|32|CANCELLED|0:15|2025-03-12T06:00:01|2025-03-12T12:00:08|node05",
        "97120.0|torchrun||llm|64|CANCELLED|0:15|2025-03-12T06:00:03|2025-03-12T12:00:08|node[05-06]",
    ]))
    expected(folder, description="node05 GPU 0000:2a:00.0 thermal-throttles under load; rank 1 paces every step; the job hits its time limit",
             captured_at="2025-03-12T12:20:00Z", workload="training", layer="hardware", cause="thermal_throttling",
             host="node05", gpu="0000:2a:00.0", rank=1, first_anomaly={"kind": "gpu_throttle", "host": "node05"},
             symptoms=["straggler_rank", "throughput_drop"])
