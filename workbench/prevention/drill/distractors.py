"""What makes a drill harder than its cause alone: the distractors and gaps of the real evidence a
responder is handed (other jobs' old failures, a second fault that is not the cause, a source nobody
collected, hosts whose clocks disagree, ranks' output only as one ``srun -l`` file).

Each distractor is one function declared with :func:`distractor` (its name, the levels it joins, its
doc); :func:`apply` runs the level's distractors in declaration order after the fault generator and
the workload scaffold and before anything is written. They draw from their own
``random.Random(f"{cause}/{workload}/{seed}/{level}")``, never from the drill's, so the ``default``
level stays byte-identical to a drill written before levels existed, and a level is as deterministic
as the drill itself. Each returns what it did (its answer.json entry) or None where it does not apply.

A distractor never removes or hides the culprit's own decisive evidence: what the fault generator wrote
is recorded as it writes it (:class:`Touched`), and a gap that would take it away is not made. The
truth stays on the reference clock (the scheduler, Kubernetes and the hosts whose clocks are right).
"""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill import stamps
from workbench.prevention.drill.incident import Drill
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.training import Job
from workbench.times import iso

LEVELS = ("default", "hard", "hardest")
"""``default``: the cause and the scaffold's own benign noise; ``hard``: plus other jobs' old failures
and one source missing; ``hardest``: every distractor."""


@dataclass
class Touched:
    """What the fault generator itself wrote: evidence a gap must not take away."""

    files: set[str] = field(default_factory=set)
    """Raw paths the generator added lines to or wrote."""
    kernel_hosts: set[str] = field(default_factory=set)
    nccl_info: bool = False
    """Whether the generator's own lines include NCCL INFO lines (then they are its evidence)."""
    scheduler: bool = False
    """Whether the generator wrote slurmctld events."""
    events: bool = False
    changes: bool = False
    restart: bool = False


Snapshot = dict[str, Any]


def snapshot(d: Drill, work: Job | Service) -> Snapshot:
    """What the evidence holds before the fault generator runs (sizes only; draws nothing)."""
    snap: Snapshot = {"files": {rel: len(lines) for rel, lines in d.files.items()}, "texts": set(d.texts)}
    if isinstance(work, Job):
        snap.update(kernel={h: len(v) for h, v in work.kernel.items()}, slurmctld=len(work.slurmctld),
                    ranks={r: len(v) for r, v in work.rank_lines.items()})
    else:
        snap.update(events=len(work.events), changes=len(work.changes), restart=work.restart)
    return snap


def touched(before: Snapshot, d: Drill, work: Job | Service) -> Touched:
    """What the fault generator wrote since ``before``."""
    t = Touched(files={rel for rel, lines in d.files.items() if len(lines) > before["files"].get(rel, 0)}
                | (set(d.texts) - before["texts"]))
    if isinstance(work, Job):
        t.kernel_hosts = {h for h, v in work.kernel.items() if len(v) > before["kernel"].get(h, 0)}
        t.scheduler = len(work.slurmctld) > before["slurmctld"]
        t.nccl_info = any(" NCCL INFO " in line for r, v in work.rank_lines.items()
                          for line in v[before["ranks"].get(r, 0):])
    else:
        t.events = len(work.events) > before["events"]
        t.changes = len(work.changes) > before["changes"]
        t.restart = work.restart is not None and work.restart != before["restart"]
    t.kernel_hosts |= {rel.split("/")[0] for rel in t.files if rel.endswith(("dmesg.txt", "dmesg-T.txt"))}
    return t


@dataclass
class Scene:
    """One drill while its distractors are applied."""

    d: Drill
    work: Job | Service
    touched: Touched
    rng: random.Random
    level: str
    labels: str = "rank"
    """What the ``N: `` labels of the job's srun -l file count: ``rank`` (one task a rank, the
    scaffold's) or ``node`` (one task a node, torchrun's ``[defaultK]:`` inside)."""

    @property
    def training(self) -> bool:
        return isinstance(self.work, Job)

    @property
    def others(self) -> list[str]:
        """The hosts that are not the culprit."""
        return [h for h in self.d.hosts if h != self.d.culprit]

    @property
    def out(self) -> str:
        return f"slurm/slurm-{self.d.job}.out"

    def kernel(self, host: str, when: datetime, *texts: str) -> None:
        """Kernel lines on a host, in its own kernel log's shape and time order."""
        d = self.d
        if isinstance(self.work, Job):
            self.work.dmesg(host, when, *texts)
            entries = sorted(self.work.kernel[host], key=lambda item: item[0])
            d.files[f"{host}/dmesg.txt"] = [fmt.dmesg(self.work.boots[host], w, t) for w, t in entries]
        else:
            rel = f"{host}/dmesg-T.txt"
            merged = d.files.get(rel, []) + [fmt.dmesg_ctime(when, text) for text in texts]
            d.files[rel] = _in_time_order(merged, d.start)

    def event(self, when: datetime, reason: str, message: str, kind: str, obj: str, namespace: str, node: str,
              typ: str = "Warning", component: str = "kubelet") -> None:
        """One more Kubernetes event, kubectl's list rewritten as the scaffold writes it."""
        assert isinstance(self.work, Service)
        svc = self.work
        uid = f"{0x2a07c3d1e9f4b000 + len(svc.events) * 0x2b9 + self.d.job:x}"
        svc.events.append(fmt.k8s_event(uid, when, reason, message, kind, obj, namespace, node, typ=typ, component=component))
        self.d.texts["k8s/events.json"] = fmt.k8s_list(
            sorted(svc.events, key=lambda e: (e["lastTimestamp"], e["metadata"]["name"])))

    def slurmctld(self, *events: tuple[datetime, str]) -> None:
        """More slurmctld.log lines, in time order among the scaffold's."""
        rel = "slurm/slurmctld.log"
        self.d.files[rel] = _in_time_order(self.d.files.get(rel, []) + [fmt.slurmctld(w, t) for w, t in events],
                                           self.d.start)


def _in_time_order(lines: list[str], start: datetime) -> list[str]:
    times = stamps.timeline(lines, start.year, start)
    return [line for _, line in sorted(zip(times, lines), key=lambda item: item[0])]


@dataclass(frozen=True)
class Distractor:
    """One distractor: what it adds, removes or shifts, and at which levels."""

    name: str
    levels: tuple[str, ...]
    apply: Callable[[Scene], dict[str, Any] | None]
    doc: str


REGISTRY: list[Distractor] = []
"""Every distractor in the order :func:`apply` runs them (a gap after the noise it could hide, the
``srun -l`` merge before the clock skew, so merged lines keep the order they were printed in)."""


def distractor(name: str, *levels: str) -> Callable[[Callable[[Scene], dict[str, Any] | None]],
                                                     Callable[[Scene], dict[str, Any] | None]]:
    """Declare the decorated function as the distractor ``name`` of ``levels``."""
    def register(func: Callable[[Scene], dict[str, Any] | None]) -> Callable[[Scene], dict[str, Any] | None]:
        REGISTRY.append(Distractor(name, levels, func, (func.__doc__ or "").strip().split("\n")[0]))
        return func
    return register


def of_level(level: str) -> list[Distractor]:
    """The distractors a level applies, in order."""
    return [x for x in REGISTRY if level in x.levels]


def apply(d: Drill, work: Job | Service, done: Touched, level: str) -> list[dict[str, Any]]:
    """Apply ``level``'s distractors to the drill's evidence; what each did, for the truth."""
    scene = Scene(d, work, done, random.Random(f"{d.cause}/{d.workload}/{d.seed}/{level}"), level)
    applied = []
    for x in of_level(level):
        entry = x.apply(scene)
        if entry is not None:
            applied.append({"name": x.name, "description": x.doc, **entry})
    return applied


# -- other jobs' old failures ---------------------------------------------------------------------
ROUTINE_KERNEL = (
    "loop5: detected capacity change from 0 to 130960",
    'audit: type=1400 audit(0.0:412): apparmor="STATUS" operation="profile_replace" info="same as current profile, skipping" profile="unconfined" name="docker-default" pid=48213 comm="apparmor_parser"',
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth3f2a1c9: link becomes ready",
    "docker0: port 2(veth3f2a1c9) entered forwarding state",
)


@distractor("other_jobs", "hard", "hardest")
def other_jobs(s: Scene) -> dict[str, Any] | None:
    """Another job's failure on another host hours before (an Xid 13, a CUDA OOM or an NCCL watchdog timeout), and routine lines."""
    d, rng = s.d, s.rng
    host = rng.choice(s.others)
    kind = rng.choice(("xid13", "cuda_oom", "nccl_timeout"))
    when = d.start - timedelta(seconds=rng.randint(3 * 3600, 9 * 3600), milliseconds=rng.randint(0, 999))
    old = d.job - 17
    pid = rng.randint(20_000, 90_000)
    for h in d.hosts:
        for text in rng.sample(ROUTINE_KERNEL, 2):
            s.kernel(h, d.start + (d.fault - d.start) * rng.uniform(0.05, 0.9), text)
    if kind == "xid13":
        s.kernel(host, when, f"NVRM: Xid (PCI:0000:{rng.choice(d.buses)}:00): 13, pid={pid}, name=python3, Graphics SM Warp "
                             f"Exception on (GPC {rng.randint(0, 7)}, TPC {rng.randint(0, 8)}, SM {rng.randint(0, 1)}): Illegal Instruction Encoding")
    return (_old_job_training if s.training else _old_job_serving)(s, host, kind, when, old, pid)


def _old_job_training(s: Scene, host: str, kind: str, when: datetime, old: int, pid: int) -> dict[str, Any]:
    d, rng = s.d, s.rng
    began = when - timedelta(minutes=rng.randint(20, 90), seconds=rng.randint(0, 59))
    rows = d.texts["slurm/sacct.txt"].split("\n")
    rows.insert(1, f"{old}|ablation-{rng.randint(1, 9)}|gpu|nlp|32|FAILED|1:0|{fmt.slurm_time(began)}|"
                   f"{fmt.slurm_time(when + timedelta(seconds=6))}|{host}")
    d.texts["slurm/sacct.txt"] = "\n".join(rows)
    if "slurm/slurmctld.log" in d.files:
        s.slurmctld((began - timedelta(seconds=rng.randint(5, 300)), f"_slurm_rpc_submit_batch_job: JobId={old} InitPrio=4294901730 usec=611"),
                    (began, f"sched: Allocate JobId={old} NodeList={host} #CPUs=32 Partition=gpu"),
                    (when + timedelta(seconds=6), f"_job_complete: JobId={old} WEXITSTATUS 1"),
                    (when + timedelta(seconds=6, milliseconds=2), f"_job_complete: JobId={old} done"),
                    (d.start + (d.fault - d.start) / 3, f"_slurm_rpc_submit_batch_job: JobId={d.job + 3} InitPrio=4294901700 usec=702"),
                    (d.start + (d.fault - d.start) / 2, f"backfill: beginning, {rng.randint(2, 9)} jobs pending"))
    lines = [fmt.pylog(began, f"[rank0] torch.distributed initialized: world_size={len(d.buses)} backend=nccl")]
    if kind == "cuda_oom":
        lines += [f"[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.randint(2, 9)}.00 GiB. GPU 1 has a "
                  f"total capacity of 79.11 GiB of which {rng.randint(100, 900)}.06 MiB is free. Including non-PyTorch memory, this "
                  "process has 78.80 GiB memory in use. Of the allocated memory 75.12 GiB is allocated by PyTorch, and 1.93 GiB "
                  "is reserved by PyTorch but unallocated."]
    elif kind == "nccl_timeout":
        lines += fmt.watchdog(1, when, 5_000 + old % 900, "ALLGATHER", 1 << 18, 1_800_000, 1_800_412)
    else:
        lines += [f"[rank0]: RuntimeError: CUDA error: an illegal instruction was encountered (pid {pid})"]
    d.add(f"slurm/slurm-{old}.out", *lines)
    return {"job": old, "host": host, "kind": kind, "at": stamps_iso(when)}


def _old_job_serving(s: Scene, host: str, kind: str, when: datetime, old: int, pid: int) -> dict[str, Any]:
    rng = s.rng
    pod = f"nightly-eval-{old}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
    began = when - timedelta(minutes=rng.randint(20, 90))
    s.event(began, "Scheduled", f"Successfully assigned batch/{pod} to {host}", "Pod", pod, "batch", host, typ="Normal",
            component="default-scheduler")
    s.event(began + timedelta(seconds=3), "Started", "Started container eval", "Pod", pod, "batch", host, typ="Normal")
    if kind == "cuda_oom":
        s.event(when, "OOMKilling", f"Memory cgroup out of memory: Killed process {pid} (python3) total-vm:98765432kB, "
                                    "anon-rss:67108864kB, file-rss:0kB, shmem-rss:0kB", "Node", host, "default", host,
                component="kernel-monitor")
    s.event(when + timedelta(seconds=30), "BackOff", f"Back-off restarting failed container eval in pod {pod}_batch", "Pod", pod,
            "batch", host)
    return {"job": old, "host": host, "kind": kind, "pod": pod, "at": stamps_iso(when)}


def stamps_iso(when: datetime) -> str:
    return iso(when, "microseconds")


# -- a second fault that is not the cause ---------------------------------------------------------
SECOND_FAULTS: dict[str, tuple[str, ...]] = {
    "ecc_corrected": ("ecc", "row_remap", "host_hardware"),
    "aer_corrected": ("pcie", "fell_off_bus", "host_hardware", "nvlink"),
    "idle_throttle": ("throttl",),
    "tmp_full": ("disk_full", "storage", "shm"),
}
"""Each second fault, and the causes it would be too like (a drill of one of those does not get it)."""


@distractor("second_fault", "hardest")
def second_fault(s: Scene) -> dict[str, Any] | None:
    """A second, unrelated fault on a host that is not the culprit (corrected ECC, corrected AER, a throttle reason on an idle GPU, a full /tmp)."""
    d, rng = s.d, s.rng
    host = rng.choice(s.others)
    kinds = [k for k, like in SECOND_FAULTS.items() if not any(word in d.cause for word in like)]
    idle = [i for i, row in enumerate(d.files.get(f"{host}/gpu-query.csv", [])) if ", 0 %, " in row]
    if not idle:  # the throttle reason shows on a GPU the hang left idle
        kinds = [k for k in kinds if k != "idle_throttle"]
    kind = rng.choice(kinds)
    when = d.start + (d.fault - d.start) * rng.uniform(0.2, 0.8)
    if kind == "ecc_corrected":
        s.kernel(host, when, f"EDAC MC{rng.randint(0, 1)}: 1 CE memory read error on CPU_SrcID#{rng.randint(0, 1)}_MC#0_Chan#{rng.randint(0, 3)}_DIMM#0 "
                             f"(channel:{rng.randint(0, 3)} slot:0 page:0x{rng.randint(0x10000, 0xfffff):x} offset:0x0 grain:32 syndrome:0x0 - "
                             "err_code:0x0000:0x009f socket:0 imc:0 rank:0 bg:1 ba:2 row:0x1f2e col:0x3c8)")
    elif kind == "aer_corrected":
        port = f"0000:{rng.choice(('15', '37', '48', '97')):s}:01.0"
        for k in range(3):
            s.kernel(host, when + timedelta(seconds=k * rng.randint(20, 90)),
                     f"pcieport {port}: AER: Corrected error received: {port}",
                     f"pcieport {port}: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
                     f"pcieport {port}:   device [8086:352a] error status/mask=00001000/00002000",
                     f"pcieport {port}:    [12] Timeout")
    elif kind == "idle_throttle":
        rows = d.files[f"{host}/gpu-query.csv"]
        bus = rows[rng.choice(idle)].split(", ")[2]
        changed = []
        for i in idle:
            cells = rows[i].split(", ")
            if cells[2] == bus:
                cells[6], cells[7] = "1005 MHz", "Active"
                rows[i] = ", ".join(cells)
                changed.append(i)
        when = stamps.stamp(rows[changed[0]], d.start.year) or when
    else:
        d.texts[f"{host}/df-h.txt"] = (
            "Filesystem      Size  Used Avail Use% Mounted on\n"
            f"/dev/nvme0n1p2  1.8T  {rng.randint(300, 900)}G  1.0T  {rng.randint(20, 50)}% /\n"
            "tmpfs           1.0T   12M  1.0T   1% /dev/shm\n"
            f"/dev/md127      28T   {rng.randint(4, 14)}T   14T  {rng.randint(20, 50)}% /scratch\n"
            "/dev/nvme1n1p1   64G   64G     0 100% /tmp\n")
    return {"kind": kind, "host": host, "at": stamps_iso(when)}


# -- a source missing -----------------------------------------------------------------------------
def _rank_files(d: Drill) -> list[str]:
    return [rel for rel in d.files if re.fullmatch(r"[^/]+/rank\d+\.log", rel) or re.fullmatch(r"slurm/slurm-\d+\.out", rel)]


@distractor("missing_source", "hard", "hardest")
def missing_source(s: Scene) -> dict[str, Any] | None:
    """A source nobody collected: the NCCL INFO lines (NCCL_DEBUG unset), one non-culprit host's kernel log, or the scheduler's log; never the culprit's decisive evidence."""
    d, t, rng = s.d, s.touched, s.rng
    options: dict[str, Callable[[], list[str]]] = {}
    if s.training:
        per_host_logs = any(re.fullmatch(r"[^/]+/rank\d+\.log", rel) for rel in d.files)
        merged_by_node = "slurm_out" in [x.name for x in of_level(s.level)]
        if not t.nccl_info and (per_host_logs or merged_by_node):  # else rank -> host would be known from nowhere

            def nccl() -> list[str]:
                stripped = []
                for rel in _rank_files(d):
                    before = len(d.files[rel])
                    d.files[rel] = [line for line in d.files[rel] if " NCCL INFO " not in line]
                    if len(d.files[rel]) < before:
                        stripped.append(rel)
                return stripped
            options["nccl_info"] = nccl
        if "slurm/slurmctld.log" in d.files and not t.scheduler and "slurm/slurmctld.log" not in t.files:
            options["scheduler_log"] = lambda: [_drop(d, "slurm/slurmctld.log")]
    else:
        if "k8s/pods.json" in d.texts and not t.restart and "k8s/pods.json" not in t.files:
            options["pods_listing"] = lambda: [_drop(d, "k8s/pods.json")]
        if "changes/deploys.json" in d.texts and not t.changes:
            options["change_log"] = lambda: [_drop(d, "changes/deploys.json")]
    quiet = [h for h in s.others if h not in t.kernel_hosts
             and any(rel in d.files for rel in (f"{h}/dmesg.txt", f"{h}/dmesg-T.txt"))]
    if quiet:
        host = rng.choice(quiet)
        options["kernel_log"] = lambda: [_drop(d, rel) for rel in (f"{host}/dmesg.txt", f"{host}/dmesg-T.txt") if rel in d.files]
    if not options:
        return None
    names = sorted(options) if s.level == "hardest" else [rng.choice(sorted(options))]
    return {"sources": names, "removed": {name: options[name]() for name in names}}


def _drop(d: Drill, rel: str) -> str:
    d.files.pop(rel, None)
    d.texts.pop(rel, None)
    return rel


# -- the ranks' output only as one srun -l file ---------------------------------------------------
LABEL = re.compile(r"^(\d+): (.*)$")


def rank_logs(d: Drill) -> dict[int, list[str]]:
    """Each rank's lines, from its own log or from the scaffold's srun -l file (task = rank); removed
    from the evidence, to be written back in another shape."""
    per_rank: dict[int, list[str]] = {}
    for rel in sorted(d.files):
        m = re.fullmatch(r"[^/]+/rank(\d+)\.log", rel)
        if m:
            per_rank[int(m.group(1))] = d.files.pop(rel)
    labelled = d.files.pop(f"slurm/slurm-{d.job}.out", None)
    for line in labelled or []:
        m = LABEL.match(line)
        if m:
            per_rank.setdefault(int(m.group(1)), []).append(m.group(2))
    return per_rank


@distractor("slurm_out", "hardest")
def slurm_out(s: Scene) -> dict[str, Any] | None:
    """The ranks' output only as the job's slurm-JOB.out: srun -l labels count tasks (one torchrun a node), torchrun's [defaultK]: prefix inside."""
    d = s.d
    if not s.training:
        return None
    per_rank = rank_logs(d)
    streams = [(f"{node}: ", _rendezvous(d, node)) for node in range(len(d.hosts))]
    for rank in sorted(per_rank):
        node, local = rank // d.gpus_per_host, rank % d.gpus_per_host
        streams.append((f"{node}: [default{local}]:", per_rank[rank]))
    d.files[s.out] = stamps.merge(streams, d.start.year, d.start)
    s.labels = "node"
    return {"file": s.out, "tasks": {str(n): h for n, h in enumerate(d.hosts)}}


def _rendezvous(d: Drill, node: int) -> list[str]:
    """What each node's torchrun agent prints before it starts its workers (torch elastic's
    ``Rendezvous complete for workers. Result:`` and its fields, as in
    https://github.com/pytorch/pytorch/issues/147064's logs): the node's group rank and its workers'
    global ranks, the one place a task number and the ranks it runs meet."""
    n, g = d.gpus_per_host, len(d.hosts)
    ranks = list(range(node * n, node * n + n))
    when = d.start - timedelta(seconds=2, milliseconds=node * 37)
    return [fmt.elastic(when, "I", 4100 + node * 11, "agent/server/api.py:525",
                        "[default] Rendezvous complete for workers. Result:"),
            "  restart_count=0", f"  master_addr={d.hosts[0]}", "  master_port=29500", f"  group_rank={node}",
            f"  group_world_size={g}", f"  local_ranks={list(range(n))}", f"  role_ranks={ranks}",
            f"  global_ranks={ranks}", f"  role_world_sizes={[n * g] * n}", f"  global_world_sizes={[n * g] * n}"]


# -- clocks that disagree -------------------------------------------------------------------------
@distractor("clock_skew", "hardest")
def clock_skew(s: Scene) -> dict[str, Any] | None:
    """Some hosts' clocks are off by 5-90 s: every line such a host wrote is shifted; the truth stays on the reference clock."""
    d, rng = s.d, s.rng
    count = rng.randint(1, max(1, len(d.hosts) - 1))
    skews = {h: rng.choice((-1, 1)) * rng.randint(5, 90) for h in sorted(rng.sample(d.hosts, count))}
    year = d.start.year
    for host, seconds in skews.items():
        by = timedelta(seconds=seconds)
        for rel in [r for r in d.files if r.startswith(f"{host}/")]:
            if not rel.endswith("/dmesg.txt"):  # seconds since boot: the boot time below moves instead
                d.files[rel] = [stamps.shift(line, by, year) for line in d.files[rel]]
        for rel in [r for r in d.texts if r.startswith(f"{host}/")]:
            if rel.endswith("/date.txt"):
                d.texts[rel] = _shift_date(d.texts[rel], by)
            elif not rel.endswith((".json", ".prom")):
                d.texts[rel] = "\n".join(stamps.shift(line, by, year) for line in d.texts[rel].split("\n"))
    if s.out in d.files:
        d.files[s.out] = [_shift_labelled(s, line, skews) for line in d.files[s.out]]
    return {"skews_s": skews, "reference": "the scheduler, Kubernetes and the hosts not listed"}


def _shift_labelled(s: Scene, line: str, skews: dict[str, int]) -> str:
    m = LABEL.match(line)
    if not m:
        return line
    task = int(m.group(1))
    host = s.d.hosts[task] if s.labels == "node" else s.d.host_of(task)
    if host not in skews:
        return line
    return f"{task}: " + stamps.shift(m.group(2), timedelta(seconds=skews[host]), s.d.start.year)


def _shift_date(text: str, by: timedelta) -> str:
    """``date``'s output (``Tue Mar 03 14:10:07 UTC 2026``) as a clock ``by`` off would print it."""
    when = datetime.strptime(text.strip(), "%a %b %d %H:%M:%S UTC %Y") + by
    return f"{when:%a %b %d %H:%M:%S} UTC {when:%Y}\n"
