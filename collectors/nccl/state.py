"""What the NCCL reader keeps while it reads a file: per process its communicators and transports, the
events held back while the next lines may add to them, and the caps that keep all of it bounded."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collectors.base import Event, ParseContext
from collectors.framework.launcher_places import LauncherPlaces
from collectors.framework.torch_dist import Continuation

if TYPE_CHECKING:
    from collectors.nccl.times import Prefix, Stamp

MAX_PROCS = 65536
HOLD_LINES = 200


@dataclass
class Comm:
    rank: int
    nranks: int
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    state: str = "INIT"


@dataclass
class Proc:
    """One NCCL process (host:pid) as its init lines describe it."""

    host: str
    pid: int
    rank: int | None = None
    nranks: int = 0
    version: str | None = None
    devs: dict[int, str] = field(default_factory=dict)
    comms: dict[str, Comm] = field(default_factory=dict)
    transports: Counter[str] = field(default_factory=Counter)
    channels: list[dict[str, Any]] = field(default_factory=list)
    net: str | None = None
    net_devices: str | None = None
    oob: str | None = None


@dataclass
class Held:
    """An event kept back while the next lines may still add to it (error chain, watchdog progress)."""

    event: Event
    line: int


class ReaderState:
    """The state every part of the NCCL reader works on (times, init lines, findings)."""

    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.procs: dict[tuple[str, int], Proc] = {}
        self.rank_home: dict[int, tuple[int, str | None, str | None]] = {}
        self.comms_total = 0
        self.file_version: str | None = None
        self.versions_told: set[tuple[str | None, str]] = set()
        self.addresses_told: set[tuple[str, str]] = set()
        self.task_procs: dict[int, set[tuple[str, int]]] = {}
        """The NCCL processes (host, pid) seen under each launcher task number (collectors/nccl/tasks.py)."""
        self.last: Stamp | None = None
        self.waiting: list[Event] = []
        self.cont: Continuation | None = None
        self.cont_start: tuple[int, str, Prefix, Stamp | None] | None = None
        self.chains: dict[tuple[str, int, int], Held] = {}
        self.timeouts: dict[int | None, Held] = {}
        self.recent_cuda: deque[tuple[str, int | None, int]] = deque(maxlen=16)
        self.hosts: set[str] = set()
        self.learned: set[str] = set()
        self.checked = 0
        self.block = b""
        self.line_start = 0
        """the block being read, and where in it the line being read starts (a write failure looks back)"""
        self.step_marks: dict[tuple[int | None, Any], int] = {}
        self.step_count: Counter[tuple[int | None, Any]] = Counter()
        self.step_stride: dict[tuple[int | None, Any], list[int]] = {}
        self.sole: tuple[int, int | None] = (0, None)
        self.places = LauncherPlaces(ctx.host, ctx.source_name)
