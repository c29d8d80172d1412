"""The training job every training drill happens to: a torchrun/DeepSpeed job under Slurm on a few
hosts, with the evidence a responder is handed afterwards.

Per host: ``dmesg.txt`` (seconds since boot, next to ``uptime-s.txt`` and ``date.txt``), one log per
rank (NCCL init lines, DeepSpeed's step timers), ``gpu-query.csv`` (nvidia-smi --query-gpu samples)
and ``nvidia-smi-q.txt`` taken at capture; shared: ``slurm/sacct.txt`` and ``slurm/slurmctld.log``.
A fault generator adds the cause's own lines and says how the job ended; the scaffold then writes
what every other rank saw: the peers of a rank that stopped wait in their next collective until the
NCCL watchdog kills them, a slow GPU makes every rank's step slower.
"""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill import stamps
from workbench.prevention.drill.incident import Drill
from workbench.prevention.drill.nvsmi import Gpu, page

WATCHDOG_S = 600
STEP_S = 1.05
STEP_EVERY = 500
LABELLED_SHARE = 0.5
"""The share of drills whose ranks' output is one ``srun -l`` file (the job's slurm-JOB.out, each line
under its task number) instead of one log per rank in its host's folder."""

BOOT_CHATTER = (
    "Linux version 5.15.0-105-generic (buildd@lcy02-amd64-054) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) #115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024 (Ubuntu 5.15.0-105.115-generic 5.15.148)",
    "Command line: BOOT_IMAGE=/vmlinuz-5.15.0-105-generic root=UUID=3f1c9e2a-5d1b-4b8e-9c7a-2f6e1d0b8a41 ro pci=realloc=off iommu=pt",
    "DMI: Supermicro SYS-821GE-TNHR/X13DEG-OAD, BIOS 2.1 11/20/2023",
    "nvidia: module license 'NVIDIA' taints kernel.",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Thu Jun 20 18:22:31 UTC 2024",
    "mlx5_core 0000:0c:00.0: firmware version: 28.39.2048",
    "mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ibp12s0: link becomes ready",
)
NOISE = (
    ("EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none.",),
    ("pcieport 0000:00:01.1: AER: Corrected error received: 0000:00:01.1",
     "pcieport 0000:00:01.1: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
     "pcieport 0000:00:01.1:   device [1022:1483] error status/mask=00000001/00002000",
     "pcieport 0000:00:01.1:    [ 0] RxErr"),
    ("perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",),
    ("systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0 (8535 of 11377 items, 6553600 file size, 767 bytes per hash table item), suggesting rotation.",),
    ("nfs: server nfs-home01 OK",),
)
"""Benign kernel chatter a responder must not chase; each host gets a few, at random times."""


@dataclass
class Job:
    """The training job's story; a fault generator fills in the culprit's part."""

    d: Drill
    boots: dict[str, datetime] = field(default_factory=dict)
    kernel: dict[str, list[tuple[datetime, str]]] = field(default_factory=dict)
    rank_lines: dict[int, list[str]] = field(default_factory=dict)
    hang_at: datetime | None = None
    """When the culprit rank stopped taking part: the others' next collective never completes."""
    dead_ranks: set[int] = field(default_factory=set)
    """Ranks that print no watchdog timeout (their process died or hung with the culprit)."""
    state: str = "FAILED"
    exit_code: str = "1:0"
    end: datetime | None = None
    slurmctld: list[tuple[datetime, str]] = field(default_factory=list)
    slow_from: datetime | None = None
    slow_s: float = 0.0
    samples: Callable[[datetime, dict[str, object]], None] | None = None
    """Edits the culprit GPU's nvidia-smi --query-gpu row (a dict of its columns) at a time."""
    smi_edit: Callable[[str], str] | None = None
    """Edits the culprit host's nvidia-smi -q page."""
    missing_gpu: bool = False

    def dmesg(self, host: str, when: datetime, *texts: str) -> None:
        """Kernel lines on a host, all stamped ``when`` (one record and its continuation lines)."""
        self.kernel.setdefault(host, []).extend((when, text) for text in texts)

    def log(self, rank: int, *lines: str) -> None:
        """Lines of a rank's own log, after its last step line."""
        self.rank_lines.setdefault(rank, []).extend(lines)

    def stop(self, when: datetime, *, dead: set[int] | None = None) -> None:
        """The culprit rank (and ``dead``) stop at ``when``: every other rank times out in its collective."""
        self.hang_at = when
        self.dead_ranks |= dead if dead is not None else {self.d.rank}

    def finish(self, when: datetime) -> None:
        """The job ends at ``when`` without a hang (no watchdog to wait for); its end is what gets noticed."""
        self.end = self.d.detected = when

    def drain(self, host: str, when: datetime, reason: str, state: str = "DRAINING") -> None:
        self.slurmctld += [(when, f"update_node: node {host} reason set to: {reason}"),
                           (when, f"update_node: node {host} state set to {state}")]

    @property
    def watchdog_at(self) -> datetime | None:
        return self.hang_at + timedelta(seconds=WATCHDOG_S, milliseconds=137) if self.hang_at else None


def build(d: Drill, fault: Callable[[Job], None]) -> Job:
    """Draw the job's hosts, let ``fault`` write the cause, then write what everybody saw."""
    rng = d.rng
    job = Job(d)
    for host in d.hosts:
        job.boots[host] = d.start - timedelta(days=rng.randint(1, 20), seconds=rng.randint(0, 86_399))
        for i, text in enumerate(BOOT_CHATTER):
            job.dmesg(host, job.boots[host] + timedelta(seconds=max(0, i - 2) * 1.37 + rng.random() / 10), text)
        for noise in rng.sample(NOISE, 2):
            when = d.start - timedelta(minutes=rng.randint(5, 600), seconds=rng.random() * 60)
            job.dmesg(host, when, *noise)
    _old_xid(job)
    _port_counters(job)
    fault(job)
    end = job.end or (job.watchdog_at + timedelta(seconds=rng.randint(8, 40)) if job.hang_at else d.fault
                      + timedelta(minutes=20))
    job.end = end
    d.detected = d.detected or job.watchdog_at or end
    _rank_logs(job)
    _gpu_samples(job)
    _slurm(job)
    for host in d.hosts:
        lines = sorted(job.kernel[host], key=lambda item: item[0])
        d.add(f"{host}/dmesg.txt", *(fmt.dmesg(job.boots[host], when, text) for when, text in lines))
        d.texts[f"{host}/uptime-s.txt"] = f"{job.boots[host]:%Y-%m-%d %H:%M:%S}\n"
        d.texts[f"{host}/date.txt"] = f"{capture(d):%a %b %d %H:%M:%S} UTC {capture(d):%Y}\n"
        d.texts[f"{host}/nvidia-smi-q.txt"] = _nvsmi(job, host)
    return job


def _old_xid(job: Job) -> None:
    """Half the drills: an Xid 13 from another user's job on another host the evening before, the
    kind of line a responder finds first and must not chase."""
    d, rng = job.d, job.d.rng
    others = [h for h in d.hosts if h != d.culprit]
    if rng.random() < 0.5 or not others:
        return
    host, bus = rng.choice(others), rng.choice(d.buses)
    when = d.start - timedelta(hours=rng.randint(6, 30), seconds=rng.random() * 3600)
    pid = rng.randint(20_000, 90_000)
    job.dmesg(host, when, f"NVRM: Xid (PCI:0000:{bus}:00): 13, pid={pid}, name=python3, Graphics SM Warp Exception on "
                          f"(GPC {rng.randint(0, 7)}, TPC {rng.randint(0, 8)}, SM {rng.randint(0, 1)}): Out Of Range Address",
              f"NVRM: Xid (PCI:0000:{bus}:00): 13, pid={pid}, name=python3, Graphics Exception: ESR 0x50e730=0x20 "
              "0x50e734=0x0 0x50e728=0xf81eb60 0x50e72c=0x1174")


def _port_counters(job: Job) -> None:
    """Half the drills: ``perfquery`` of one host's IB port, taken at capture, with a few symbol errors
    that have been there for weeks (noise next to a flapping link's thousands)."""
    d, rng = job.d, job.d.rng
    if rng.random() < 0.5:
        return
    host = rng.choice(d.hosts)
    counters = (("SymbolErrorCounter", rng.randint(1, 9)), ("LinkErrorRecoveryCounter", 0), ("LinkDownedCounter", 0),
                ("PortRcvErrors", 0), ("PortRcvRemotePhysicalErrors", 0), ("PortRcvSwitchRelayErrors", 0),
                ("PortXmitDiscards", 0), ("PortXmitConstraintErrors", 0), ("PortRcvConstraintErrors", 0),
                ("CounterSelect2", "0x00"), ("LocalLinkIntegrityErrors", 0), ("ExcessiveBufferOverrunErrors", 0),
                ("VL15Dropped", 0), ("PortXmitData", rng.randint(10**9, 4 * 10**9)),
                ("PortRcvData", rng.randint(10**9, 4 * 10**9)), ("PortXmitPkts", rng.randint(10**7, 9 * 10**7)),
                ("PortRcvPkts", rng.randint(10**7, 9 * 10**7)), ("PortXmitWait", rng.randint(100, 9000)))
    d.add(f"{host}/perfquery.txt", f"# Port counters: Lid {rng.randint(2, 200)} port 1 (CapMask: 0x5300)",
          f"{'PortSelect:':.<33}1", f"{'CounterSelect:':.<33}0x0000", *(f"{name + ':':.<33}{value}" for name, value in counters))


def capture(d: Drill) -> datetime:
    """When the responder's evidence was taken: a while after detection."""
    return (d.detected or d.fault) + timedelta(minutes=17, seconds=12)


def _rank_logs(job: Job) -> None:
    d = job.d
    comm = f"{d.job % 0xFFFF:04x}"
    stop = job.hang_at or job.end
    labelled = d.rng.random() < LABELLED_SHARE
    per_task: dict[int, list[str]] = {}
    for rank in range(d.nranks):
        host, dev = d.host_of(rank), rank % d.gpus_per_host
        lines = [fmt.pylog(d.start, f"[rank{rank}] torch.distributed initialized: world_size={d.nranks} backend=nccl")]
        lines += nccl_lines(d, rank, host, dev, comm)
        first = d.start + timedelta(seconds=50, milliseconds=d.rng.randint(0, 999))
        lines += fmt.deepspeed_steps(rank, first, stop, STEP_S, STEP_EVERY,
                                     slow_rank=d.rank, slow_from=job.slow_from, slow_s=job.slow_s)
        lines += job.rank_lines.get(rank, [])
        if job.hang_at and rank not in job.dead_ranks:
            when = job.watchdog_at + timedelta(milliseconds=31 * rank)
            lines += fmt.watchdog(rank, when, 40_000 + d.job % 9000, "ALLREDUCE", 1 << 20, WATCHDOG_S * 1000,
                                  int((when - job.hang_at).total_seconds() * 1000))
        if labelled:
            per_task[rank] = lines
        else:
            d.add(f"{host}/rank{rank}.log", *lines)
    if labelled:
        # in time order, as srun relays the tasks' output: a traceback's untimed lines land after the
        # stamped line before them, not beside another task's line printed ten minutes later
        d.add(f"slurm/slurm-{d.job}.out",
              *stamps.merge([(f"{task}: ", lines) for task, lines in sorted(per_task.items())], d.start.year, d.start))


def nccl_lines(d: Drill, rank: int, host: str, dev: int, comm: str) -> list[str]:
    return fmt.nccl_init(host, d.pid(rank), rank, d.nranks, dev, f"{d.buses[dev]}000", comm, d.ip(host))


def _gpu_samples(job: Job) -> None:
    """nvidia-smi --query-gpu every 10 minutes on every host while the job ran (busy GPUs)."""
    d = job.d
    header = ("timestamp, index, pci.bus_id, utilization.gpu [%], temperature.gpu, power.draw [W], clocks.sm [MHz], "
              "clocks_throttle_reasons.sw_power_cap, clocks_throttle_reasons.hw_thermal_slowdown, "
              "clocks_throttle_reasons.sw_thermal_slowdown, clocks_throttle_reasons.hw_power_brake_slowdown")
    for h, host in enumerate(d.hosts):
        rows = [header]
        when = d.start + timedelta(minutes=5, seconds=h * 3)
        k = 0
        while when < job.end:
            for i, bus in enumerate(d.buses):
                row: dict[str, object] = {"util": 100 - (k + i) % 3, "temp": 68 + (k * 3 + i + h) % 7,
                                          "power": 680.0 + (k * 7 + i * 3) % 19, "clock": 1980,
                                          "sw_power_cap": "Not Active", "hw_thermal": "Not Active",
                                          "sw_thermal": "Not Active", "hw_power_brake": "Not Active"}
                if job.hang_at and when >= job.hang_at:
                    row.update(util=100 if i == d.local and host == d.culprit else 0, power=118.0 + i)
                if job.samples and host == d.culprit and i == d.local:
                    job.samples(when, row)
                stamp = f"{when:%Y/%m/%d %H:%M:%S}.{(k * 37 + i) % 1000:03d}"
                rows.append(f"{stamp}, {i}, 00000000:{bus.upper()}:00.0, {row['util']} %, {row['temp']}, "
                            f"{row['power']:.2f} W, {row['clock']} MHz, {row['sw_power_cap']}, {row['hw_thermal']}, "
                            f"{row['sw_thermal']}, {row['hw_power_brake']}")
            when += timedelta(minutes=10)
            k += 1
        if len(rows) > 1:  # a job that died at start left the monitor nothing to sample
            d.add(f"{host}/gpu-query.csv", *rows)


def _slurm(job: Job) -> None:
    d = job.d
    submit = d.start - timedelta(seconds=d.rng.randint(20, 900))
    cpus = 32 * len(d.hosts)
    name = d.rng.choice(("llm-pretrain", "moe-sft", "gpt-ft", "llama-pretrain", "vit-huge"))
    step_state = "CANCELLED" if job.state in ("TIMEOUT", "PREEMPTED", "NODE_FAIL") else job.state
    step_exit = "0:15" if step_state == "CANCELLED" else job.exit_code
    span = f"{fmt.slurm_time(d.start)}|{fmt.slurm_time(job.end)}"
    d.texts["slurm/sacct.txt"] = fmt.sacct([
        f"{d.job - 7}|eval-sweep|gpu|vision|16|COMPLETED|0:0|{fmt.slurm_time(submit - timedelta(hours=5))}|"
        f"{fmt.slurm_time(submit - timedelta(hours=3, minutes=12))}|{d.hosts[-1]}",
        f"{d.job}|{name}|gpu|ml-research|{cpus}|{job.state}|{job.exit_code}|{span}|{d.hostlist()}",
        f"{d.job}.batch|batch||ml-research|32|{step_state}|{step_exit}|{span}|{d.hosts[0]}",
        f"{d.job}.0|torchrun||ml-research|{cpus}|{step_state}|{step_exit}|{span}|{d.hostlist()}",
    ])
    events = [(submit, f"_slurm_rpc_submit_batch_job: JobId={d.job} InitPrio=4294901712 usec=873"),
              (d.start, f"sched: Allocate JobId={d.job} NodeList={d.hostlist()} #CPUs={cpus} Partition=gpu")]
    events += job.slurmctld
    if job.state == "FAILED":
        events.append((job.end, f"_job_complete: JobId={d.job} WEXITSTATUS 1"))
    events.append((job.end + timedelta(milliseconds=2), f"_job_complete: JobId={d.job} done"))
    d.add("slurm/slurmctld.log", *(fmt.slurmctld(when, text) for when, text in sorted(events, key=lambda e: e[0])))


def _nvsmi(job: Job, host: str) -> str:
    d = job.d
    n = d.hosts.index(host)
    gpus, missing = [], []
    for i, bus in enumerate(d.buses):
        if job.missing_gpu and host == d.culprit and i == d.local:
            missing.append(f"0000:{bus}:00.0")
            continue
        gpus.append(Gpu(index=i, bus=f":{bus}:00.0", uuid=uuid(d, host, i), serial=f"16544220{51230 + n * 10 + i}",
                        util=0, mem_used=1, temp=31 + (i * 3 + n) % 5, power=71.0 + (i * 7 + n) % 9))
    text = page(gpus, capture(d) - timedelta(seconds=7), missing=missing)
    return job.smi_edit(text) if job.smi_edit and host == d.culprit else text


def uuid(d: Drill, host: str, index: int) -> str:
    n = d.hosts.index(host)
    return f"GPU-{(0x8d3f2a61 + d.job * 17 + n * 0x1111 + index * 0x101) % 0xFFFFFFFF:08x}-5b7c-4e0a-9c21-7f44d0e1{n:02x}{index:02x}"
