"""Where a log's ranks ran, as the launcher's lines say it when NCCL's init lines are missing.

Most jobs run with NCCL_DEBUG unset: no ``Init COMPLETE`` line maps rank -> host -> GPU. The launchers
still leave that map behind, and the NCCL log reader (collectors/nccl/reader.py) hands each line it reads here:

- a launcher prefix on the line (``[rank3]:`` torchrun --tee, ``3: `` srun -l, ``[1,3]<stderr>:`` mpirun)
  and an NCCL WARN header on it or in the same one-rank file (``node07:48211:48388 [1] NCCL WARN …``):
  rank, host, pid and CUDA device (``placed_by`` ``nccl_header``); under torchrun's ``[default3]:`` the
  prefix is a local rank, turned global by the agent's rendezvous table in the same file;
- ``srun -l`` task numbers with no host anywhere: rows without a host (``srun_label``), which
  workbench/query/rank_places.py lays over the Slurm job's node list; a task (or an mpirun rank)
  is the line's rank only when no torchrun ``[defaultN]:`` follows it: over torchrun it numbers the
  node's agent, and the global rank comes from the agent's rendezvous table or the line itself;
- torch elastic's rendezvous table (``[default] Rendezvous complete for workers. Result:`` then
  ``group_rank=1``, ``local_ranks=[0, 1]``, ``global_ranks=[2, 3]``, …) in an agent log of a known host
  (``torchelastic``);
- an environment dump (``SLURM_PROCID=3``, ``SLURM_LOCALID=1``, ``RANK``, ``LOCAL_RANK``, ``SLURMD_NODENAME``,
  ``CUDA_VISIBLE_DEVICES``, ``export``/``declare -x`` forms and a printed ``os.environ``'s ``'SLURM_PROCID':
  '0',``, one dump per prefix rank) (``environment``);
- fairseq's and metaseq's ``initialized host fairwus3-1-htc-337 as rank 0`` (``trainer_log``);
- torchrun's failure table (``rank: 1 (local_rank: 1)``, ``host: node07``, ``pid: 48211``)
  (``failure_table``);
- a flight-recorder dump taken from a host: PyTorch writes one per rank, named by the rank
  (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, default ``/tmp/nccl_trace_rank_<rank>``,
  https://docs.pytorch.org/tutorials/prototype/flight_recorder_tutorial.html) (``flight_recorder``). The
  dump itself is a pickle and is never loaded: the name and the host it came from are the evidence.

Each becomes a ``topology`` row at the end of the file, marked ``extra.placed_by``; a CUDA device the
evidence pins to a physical GPU (CUDA_VISIBLE_DEVICES with the local rank) is ``extra.gpu_index``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from collectors.base import Topology
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Continuation, Finding

MAX_RANKS = 65536
_JOB_IN_NAME = lazy_regex(r"(?:slurm|job)[-_.]?(?P<job>\d{2,})")
_ENV = lazy_regex(r"^\s*(?:export\s+|declare -x\s+)?['\"]?(?P<key>SLURM_PROCID|SLURM_LOCALID|SLURMD_NODENAME|"
                  r"SLURM_JOB_ID|SLURM_JOBID|RANK|LOCAL_RANK|GROUP_RANK|WORLD_SIZE|CUDA_VISIBLE_DEVICES|HOSTNAME)"
                  r"['\"]?(?:=|:\s*)"
                  r"[\"']?(?P<value>[^\"'\s]*?)[\"']?,?\s*$")
"""``KEY=value`` (printenv, ``export``, ``declare -x``) or ``'KEY': 'value',`` (a printed ``os.environ``)."""
ENV_NEEDLES = ("RANK=", "RANK'", 'RANK"', "SLURM_PROCID", "SLURM_LOCALID", "NODENAME", "CUDA_VISIBLE_DEVICES",
               "HOSTNAME", "JOB_ID", "SLURM_JOBID", "WORLD_SIZE", "initialized host")
"""What an environment dump line (and fairseq's placement line) holds: the reader's prefilter needles."""
_INITIALIZED_HOST = lazy_regex(r"initialized host (?P<host>[\w.\-]+) as rank (?P<rank>\d+)")
"""fairseq / metaseq: ``metaseq.distributed.utils | initialized host fairwus3-1-htc-337 as rank 0``
(https://github.com/facebookresearch/metaseq/pull/291)."""
RENDEZVOUS = "Rendezvous complete for workers"
TRACE_NAME = lazy_regex(r"(?:^|/)nccl_trace_rank_(?P<rank>\d{1,6})(?:\.\w{1,8})?$")
_TABLE_ROW = lazy_regex(r"^(?:\d{1,5}: )?\s*(?P<key>[a-z_]+)=(?P<value>.*?)\s*$")
"""One ``key=value`` row of the table; under ``srun -l`` its label stays on (``1:   group_rank=1``: the
prefix reader leaves a label followed by spaces, the table's indentation, on the line)."""
_INTS = lazy_regex(r"\d+")


def _ints(text: str) -> list[int]:
    return [int(v) for v in _INTS.findall(text)]


class Rendezvous(Continuation):
    """torch elastic's ``Rendezvous complete for workers. Result:`` block, one ``key=value`` a line."""

    budget = 16

    def __init__(self, places: LauncherPlaces) -> None:
        self.places = places
        self.fields: dict[str, str] = {}
        self.task = places.last_task
        """The ``srun -l`` task the agent printed the block under: the node the table's ranks ran on."""

    def feed(self, text: str, lineno: int) -> bool:
        m = _TABLE_ROW.match(text)
        if m is None:
            return not text.strip() and not self.fields
        self.fields[m.group("key")] = m.group("value")
        return True

    def finish(self) -> list[Finding]:
        self.places.rendezvous(self.fields, self.task)
        return []


@dataclass
class _Header:
    host: str
    pid: int
    dev: int
    ranks: set[int] = field(default_factory=set)
    local_ranks: set[int] = field(default_factory=set)
    task_ranks: set[int] = field(default_factory=set)
    """ranks a launcher's task number gave (srun -l, mpirun): ranks unless the task is a node's"""


class LauncherPlaces:
    """Collects one log's launcher evidence; ``rows`` turns it into topology rows at the end."""

    def __init__(self, host: str | None, source_name: str) -> None:
        self.host = host
        m = _JOB_IN_NAME.search(source_name.rsplit("/", 1)[-1])
        self.job = m.group("job") if m else None
        self.file_ranks: set[int] = set()
        self.task_ranks: set[int] = set()
        self.tasks: set[int] = set()
        self.node_tasks: set[int] = set()
        """Task numbers under which two or more NCCL processes printed: a per-node launcher's, not ranks."""
        self.headers: dict[tuple[str, int, int], _Header] = {}
        self.env: dict[int | None, dict[str, str]] = {}
        self.conflicts: set[int | None] = set()
        self.tables: list[dict[str, str]] = []
        self.failures: list[Topology] = []
        self.local_failures: list[tuple[str, int, int]] = []
        self.last_task: int | None = None
        self.task_locals: dict[tuple[int, int], set[int]] = {}
        """(node task, local rank) -> the global ranks its lines named (``0: [default3]:[rank3]:``)."""

    def prefix(self, rank: int | None, task: int | None, local_rank: int | None = None,
               from_launcher: bool = False) -> None:
        """A line's launcher prefix: the rank it names and ``srun -l``'s task number. A task followed by
        torchrun's ``[default3]:`` numbers the node's agent (srun started one torchrun per node), not a
        rank: it places nobody. ``from_launcher``: the rank is the task number itself."""
        if rank is not None and len(self.file_ranks) + len(self.task_ranks) < MAX_RANKS:
            (self.task_ranks if from_launcher else self.file_ranks).add(rank)
        self.last_task = task
        if task is not None and local_rank is None and len(self.tasks) < MAX_RANKS:
            self.tasks.add(task)
        if task is not None and local_rank is not None:
            self.node_task(task)  # torchrun's [defaultK]: under the task: srun started a node's agent
            if rank is not None and not from_launcher and len(self.task_locals) < MAX_RANKS:
                ranks = self.task_locals.setdefault((task, local_rank), set())
                if len(ranks) < 2:
                    ranks.add(rank)

    def node_task(self, task: int) -> None:
        """``task`` numbers a node's launcher (collectors/nccl/tasks.py): it is nobody's rank."""
        if len(self.node_tasks) < MAX_RANKS:
            self.node_tasks.add(task)

    def header(self, rank: int | None, host: str, pid: int, dev: int, local_rank: int | None = None,
               from_launcher: bool = False) -> None:
        """An NCCL ``host:pid:tid [dev]`` header, with the rank (or torchrun's ``[default3]:`` local rank) its
        line's prefix names; ``from_launcher``: that rank is a launcher's task number."""
        key = (host, pid, dev)
        entry = self.headers.get(key)
        if entry is None:
            if len(self.headers) >= MAX_RANKS:
                return
            entry = self.headers[key] = _Header(host, pid, dev)
        if rank is not None:
            (entry.task_ranks if from_launcher else entry.ranks).add(rank)
        if local_rank is not None:
            entry.local_ranks.add(local_rank)

    def env_line(self, rank: int | None, text: str) -> bool:
        """One line of an environment dump (under its prefix rank), or a trainer's ``initialized host H as
        rank N``; False if it is neither."""
        if "initialized host" in text and (found := _INITIALIZED_HOST.search(text)):
            if len(self.failures) < MAX_RANKS:
                self.failures.append(Topology(rank=int(found.group("rank")), host=found.group("host"), job=self.job,
                                              extra={"placed_by": "trainer_log"}))
            return True
        m = _ENV.match(text)
        if m is None:
            return False
        dump = self.env.setdefault(rank, {}) if len(self.env) < MAX_RANKS else {}
        key, value = m.group("key"), m.group("value")
        if dump.get(key, value) != value:
            self.conflicts.add(rank)
        dump[key] = value
        return True

    def declared_rank(self) -> int | None:
        """The rank the file's one unprefixed environment dump says this process is."""
        dump = self.env.get(None)
        text = (dump.get("SLURM_PROCID") or dump.get("RANK") or "") if dump and None not in self.conflicts else ""
        return int(text) if text.isdigit() else None

    def rendezvous(self, fields: dict[str, str], task: int | None = None) -> None:
        """An agent's rendezvous table; printed under an ``srun -l`` task, that task numbers the node its
        ranks ran on (one agent a node)."""
        if "global_ranks" in fields and len(self.tables) < 1024:
            if task is not None:
                fields = {**fields, "_task": str(task)}
                self.node_task(task)
            self.tables.append(fields)

    def failure(self, finding: Finding, host: str | None) -> None:
        """torchrun's root-cause / failure table names rank, host and pid together."""
        a = finding.attrs
        rank, local, pid = a.get("rank"), a.get("local_rank"), a.get("pid")
        host = host or self.host
        if not host or len(self.failures) >= MAX_RANKS:
            return
        if isinstance(rank, int):
            self.failures.append(Topology(rank=rank, host=host, pid=pid if isinstance(pid, int) else None,
                                          job=self.job, extra=_extra("failure_table", local)))
        elif isinstance(local, int) and isinstance(pid, int):
            self.local_failures.append((host, local, pid))

    def rows(self, nccl_placed: set[tuple[str, int]]) -> Iterator[Topology]:
        """The topology rows, leaving out processes NCCL's own init lines already placed."""
        ranks_told = self.file_ranks | (self.task_ranks - self.node_tasks)
        sole = next(iter(ranks_told)) if len(ranks_told) == 1 else None
        hosted: set[int] = set()
        for entry in self.headers.values():
            if (entry.host, entry.pid) in nccl_placed:
                continue
            entry.ranks |= entry.task_ranks - self.node_tasks
            rank = next(iter(entry.ranks)) if len(entry.ranks) == 1 else (sole if not entry.ranks else None)
            if rank is None and not entry.ranks and len(entry.local_ranks) == 1 and entry.host == self.host:
                rank = self._global(next(iter(entry.local_ranks)))
            if rank is None:
                continue
            hosted.add(rank)
            yield Topology(rank=rank, host=entry.host, pid=entry.pid, cuda_dev=entry.dev, job=self.job,
                           extra={"placed_by": "nccl_header"})
        for task in sorted(self.tasks - hosted - self.node_tasks):
            yield Topology(rank=task, job=self.job, extra={"placed_by": "srun_label"})
        tabled: set[tuple[int, int]] = set()
        for fields in self.tables:
            yield from self._table_rows(fields, tabled)
        for (task, local), ranks in sorted(self.task_locals.items()):
            if len(ranks) == 1 and (task, local) not in tabled and not self.host:
                yield Topology(rank=next(iter(ranks)), job=self.job,
                               extra={**_extra("srun_node_task", local), "task": task})
        yield from self._local_failure_rows()
        for rank_key, dump in self.env.items():
            if rank_key not in self.conflicts and (row := self._env_row(rank_key, dump)) is not None:
                yield row
        yield from self.failures

    def _table_rows(self, fields: dict[str, str], tabled: set[tuple[int, int]]) -> Iterator[Topology]:
        """The table's ranks on this log's host; in a host-less ``srun -l`` output, on the node its task
        numbers (``srun_node_task``: rank_places takes the node from the job's node list)."""
        globals_, locals_ = _ints(fields.get("global_ranks", "")), _ints(fields.get("local_ranks", ""))
        sizes = _ints(fields.get("global_world_sizes", ""))
        task = int(fields["_task"]) if fields.get("_task", "").isdigit() else None
        if (not self.host and task is None) or len(globals_) != len(locals_):
            return
        for rank, local in zip(globals_, locals_):
            extra = _extra("torchelastic" if self.host else "srun_node_task", local)
            if not self.host:
                extra["task"] = task
                tabled.add((task or 0, local))
            if fields.get("group_rank", "").isdigit():
                extra["group_rank"] = int(fields["group_rank"])
            yield Topology(rank=rank, host=self.host, nranks=max(sizes) if sizes else None, job=self.job,
                           extra=extra)

    def _global(self, local: int) -> int | None:
        """The global rank of this host's local rank, as the agent's rendezvous tables in this file say."""
        ranks = {dict(zip(_ints(t.get("local_ranks", "")), _ints(t.get("global_ranks", "")))).get(local)
                 for t in self.tables} - {None}
        return ranks.pop() if len(ranks) == 1 else None

    def _local_failure_rows(self) -> Iterator[Topology]:
        """``failed (exitcode: 1) local_rank: 1 (pid: 20931)``: the agent's own table says which global
        rank its local rank 1 was."""
        for host, local, pid in self.local_failures:
            rank = self._global(local) if host == self.host else None
            if rank is not None:
                yield Topology(rank=rank, host=host, pid=pid, job=self.job, extra=_extra("failure_table", local))

    def _env_row(self, prefix_rank: int | None, dump: dict[str, str]) -> Topology | None:
        rank_text = dump.get("SLURM_PROCID") or dump.get("RANK")
        rank = int(rank_text) if rank_text and rank_text.isdigit() else prefix_rank
        host = dump.get("SLURMD_NODENAME") or dump.get("HOSTNAME") or self.host
        if rank is None or not host:
            return None
        local_text = dump.get("LOCAL_RANK") or dump.get("SLURM_LOCALID")
        local = int(local_text) if local_text and local_text.isdigit() else None
        extra = _extra("environment", local)
        visible = [v for v in dump.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
        if visible and all(v.isdigit() for v in visible):
            if len(visible) == 1:
                extra["gpu_index"] = int(visible[0])
            elif local is not None and local < len(visible):
                extra["gpu_index"] = int(visible[local])
        world = dump.get("WORLD_SIZE") or ""
        return Topology(rank=rank, host=host.split(".", 1)[0] if host != self.host else host,
                        nranks=int(world) if world.isdigit() else None,
                        job=dump.get("SLURM_JOB_ID") or dump.get("SLURM_JOBID") or self.job, extra=extra)


def trace_rows(source_name: str, host: str | None) -> Iterator[Topology]:
    """The rank a flight-recorder dump belongs to, on the host it was collected from."""
    m = TRACE_NAME.search(source_name)
    if m and host:
        yield Topology(rank=int(m.group("rank")), host=host, extra={"placed_by": "flight_recorder"})


def _extra(placed_by: str, local_rank: Any) -> dict[str, Any]:
    extra: dict[str, Any] = {"placed_by": placed_by}
    if isinstance(local_rank, int):
        extra["local_rank"] = local_rank
    return extra
