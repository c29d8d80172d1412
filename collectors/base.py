"""The contract every collector module shares.

A collector is a module (or a package) directly under ``collectors/`` that declares NAME;
``collectors.framework.registry`` finds it, so adding a source is adding one module and touching no other.
It declares what it is and offers up to four functions:

    NAME: str                  short source name, used as the event's ``source`` and by ``--only``/``--skip``
    LAYER: str                 default layer of its events (business, scheduling, gpu,
                               network_storage, hardware)
    KINDS: tuple[str, ...]     artifact kinds it parses; no two collectors share a kind
    TIMEOUT: float             seconds its live capture may take before it is cut off; its
                               commands share it (ctx.run gives each at most what is left)
    PRIORITY: int              parse order at ingest (lower first, default 50; host facts go first so
                               that boot times and years are known to later parsers)
    TOUCHES_GPU: bool          optional, default False. True when live capture talks to the GPUs (NVML,
                               nvidia-smi, dcgmi): on a GPU that fell off the bus such a call can hang
                               the host, so ``gpuwb capture --safe`` skips the collector, and
                               ``capture --list`` never dry-runs it (it must declare COMMANDS, or is
                               listed as in-process)
    STRUCTURED_KINDS: tuple    optional: those of its KINDS whose parser reads a structure (XML, JSON,
                               CSV, a table of numbers), not lines of text. The signature matcher
                               (collectors/framework/signatures.py) does not run its catalog over
                               them, and the recorder reads a followed stream of them one document per
                               line; every kind declared here must be in signatures.STRUCTURED_KINDS
                               (tests/collectors/test_registry.py)
    COMMANDS: tuple            optional: ``((command line, kind), ...)`` that live capture may run, in
                               order. What ``gpuwb capture --list`` prints; without it the list comes
                               from a dry run of capture that runs nothing. No two collectors may run
                               the same command (tests/collectors/test_registry.py)
    OPENERS: tuple             optional, for tools whose outputs get pasted together: the line openers
                               of collectors.framework.text_blocks, in the order they are tried

    def capture(ctx: CaptureContext) -> Iterator[Artifact]        optional: live host
    def sniff(name: str, head: str) -> dict[str, int]             kind -> confidence 0..100
    def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]
    def add_capture_arguments(parser) -> None                     optional CLI options

``sniff`` sees a file's name and first 64 KiB and scores only its own tool's output: a file is parsed by
the collector that scores it highest, so one that also scores another's files takes them silently.
tests/collectors/test_registry.py therefore requires every evidence file of tests/corpus and
tests/collectors/fixtures to be claimed (score > 0) by exactly one collector, or the overlap declared.
``parse`` never raises on bad input: a line it cannot use is a Skipped row (counted, with a reason).

Collectors never open the bundle: they yield raw artifacts and rows, and the framework
stores them, so provenance (argv, exit code, duration, truncation) is recorded uniformly.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO, Protocol

from collectors.framework.vocabulary import LAYERS as LAYERS  # re-exported: collectors name an event's layer
from collectors.framework.vocabulary import SEVERITIES as SEVERITIES

MAX_LINE_BYTES = 1 << 20
"""A line longer than this is cut to this length and counted as skipped: one 10 MB line
must not cost 10 MB per row."""


@dataclass
class Artifact:
    """Raw evidence exactly as captured: the bytes are never edited afterwards."""

    source: str
    kind: str
    path: str | None = None
    data: bytes | None = None
    host: str | None = None
    captured_at: datetime | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Event:
    """One line of the merged timeline. ``ts`` is UTC (aware or naive-UTC) or None."""

    kind: str
    message: str
    ts: datetime | None = None
    ts_origin: str = "none"
    ts_approx: bool = False
    ts_raw: str | None = None
    host: str | None = None
    source: str | None = None
    layer: str | None = None
    severity: str = "info"
    gpu: str | None = None
    rank: int | None = None
    job: str | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    line: int | None = None


@dataclass
class GpuSample:
    """One NVML/nvidia-smi reading of one GPU; None means not supported or not reported."""

    ts: datetime | None
    gpu: str
    host: str | None = None
    uuid: str | None = None
    util_gpu: float | None = None
    util_mem: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: list[str] | None = None
    ecc_volatile_corrected: int | None = None
    ecc_volatile_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_replay: int | None = None
    nvlink_errors: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    line: int | None = None


@dataclass
class GpuInventory:
    """Identity and static configuration of one GPU."""

    gpu: str
    host: str | None = None
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    serial: str | None = None
    vbios: str | None = None
    driver: str | None = None
    cuda: str | None = None
    persistence: str | None = None
    mig_mode: str | None = None
    power_limit_w: float | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    memory_total_mib: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Topology:
    """Who ran where: rank <-> host <-> GPU <-> PCI bus, from NCCL init lines or the scheduler."""

    rank: int | None
    host: str | None = None
    nranks: int | None = None
    comm_id: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    gpu: str | None = None
    nccl_version: str | None = None
    job: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    line: int | None = None


@dataclass
class SeriesPoint:
    """One value of a metric series (latency, queue depth, KV-cache usage, counters)."""

    ts: datetime
    name: str
    value: float
    host: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class HostFact:
    """A fact about a host: kernel, OS, boot time, a software version, a redacted env var."""

    key: str
    value: str
    host: str | None = None


@dataclass
class Skipped:
    """A line the parser could not use: counted per artifact, never fatal."""

    line: int | None
    reason: str


Row = Event | GpuSample | GpuInventory | Topology | SeriesPoint | HostFact | Skipped


class CaptureContext(Protocol):
    """What a collector's live capture may use; the framework records provenance itself."""

    host: str
    since: datetime | None
    options: dict[str, Any]

    def run(self, argv: list[str], *, kind: str, timeout: float | None = None,
            max_bytes: int | None = None) -> Artifact:
        """``timeout`` is an upper bound: a command gets no more than is left of the collector's TIMEOUT
        (less a margin to spool its output), and none is started when nothing is left."""
        ...

    def read_file(self, path: str, *, kind: str, max_bytes: int | None = None,
                  tail: bool = False) -> Artifact | None: ...

    def which(self, name: str) -> str | None: ...

    def missing(self, what: str, reason: str) -> None: ...


class ParseContext:
    """Per-artifact knowledge a parser needs to turn local text into UTC evidence."""

    def __init__(self, *, host: str | None = None, boot_time: datetime | None = None,
                 reference_time: datetime | None = None, mtime: datetime | None = None,
                 source_name: str = "", boot_times: dict[str, datetime] | None = None,
                 reference_times: dict[str, datetime] | None = None,
                 captured_at: datetime | None = None) -> None:
        self.host = host
        self.captured_at = captured_at
        self.boot_time = boot_time
        self.reference_time = reference_time
        self.mtime = mtime
        self.source_name = source_name
        self.boot_times = boot_times if boot_times is not None else {}
        self.reference_times = reference_times if reference_times is not None else {}
        self.lines_read = 0

    def boot_time_for(self, host: str | None) -> datetime | None:
        """Boot time of ``host`` if some artifact of it said so, else this artifact's default."""
        if host and host in self.boot_times:
            return self.boot_times[host]
        return self.boot_time

    def learn_reference_time(self, host: str | None, when: datetime) -> None:
        """Record dated evidence so year-less timestamps (syslog, glog) can take its year."""
        key = host or self.host or ""
        self.reference_times.setdefault(key, to_utc(when))

    def reference_for(self, host: str | None) -> datetime | None:
        if host and host in self.reference_times:
            return self.reference_times[host]
        return self.reference_time or next(iter(self.reference_times.values()), None) or self.mtime

    def snapshot_time(self) -> tuple[datetime | None, str]:
        """When a point-in-time output without its own clock (ibstat, lspci, df) was taken, and how
        that is known: the live capture's time, else the handed-over file's mtime, else unknown."""
        if self.captured_at is not None:
            return to_utc(self.captured_at), "captured"
        if self.mtime is not None:
            return to_utc(self.mtime), "mtime"
        return None, "none"

    def lines(self, stream: BinaryIO) -> Iterator[tuple[int, str]]:
        """Numbered, decoded lines; invalid UTF-8 is replaced, giant lines are cut."""
        for n, raw in enumerate(iter_lines(stream), start=1):
            self.lines_read = n
            yield n, raw.decode("utf-8", "replace").rstrip("\r\n")


def iter_lines(stream: BinaryIO, max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Lines of a binary stream, each at most ``max_line`` bytes (the rest of a longer line is dropped)."""
    while True:
        line = stream.readline(max_line)
        if not line:
            return
        if len(line) == max_line and not line.endswith(b"\n"):
            while True:
                rest = stream.readline(max_line)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC already; aware ones are converted."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def from_monotonic(seconds: float, boot: datetime | None) -> datetime | None:
    """Kernel seconds-since-boot to UTC, or None when the boot time is unknown."""
    if boot is None:
        return None
    return to_utc(boot) + timedelta(seconds=seconds)


MONTHS = {m: i for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], start=1)}


def infer_year(month: int, day: int, reference: datetime | None) -> tuple[int, bool]:
    """Year for a date printed without one, from dated evidence of the same incident.

    Returns (year, approximate). A month after the reference month belongs to the year before
    (a December line read in January); without any reference the current year is a guess."""
    if reference is None:
        return datetime.now(timezone.utc).year, True
    year = reference.year
    if month > reference.month + 1:
        year -= 1
    return year, False


_PCI_RE = re.compile(r"(?:(?P<dom>[0-9a-fA-F]{3,8}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})"
                     r"(?:\.(?P<fn>[0-7]))?")


def normalize_pci(text: str | None) -> str | None:
    """PCI bus ids in one spelling, ``0000:19:00.0``: NVML's 8-digit domain, a tool's 3-digit one
    (``000:BA:80.0``) and the Xid line's missing function all map to it, so a GPU is one key across
    sources. This is THE GPU-id normaliser: every reader of a bus id goes through it (or gpu_id)."""
    if not text:
        return None
    m = _PCI_RE.search(text.strip())
    if not m:
        return None
    dom = (m.group("dom") or "0000").zfill(4)[-4:].lower()
    return f"{dom}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn') or '0'}"


def gpu_id(text: str | None) -> str | None:
    """A stored GPU column as one comparable key: its bus id normalised (normalize_pci), else the text
    as given (a UUID or ``index:N`` key where no bus id was known); None for none. Readers that join
    GPUs named by different sources (hypotheses, rank places, the GPU screen) use this, so
    ``00000000:5D:00.0`` and ``0000:5d:00.0`` meet while a UUID-keyed GPU is kept, not dropped."""
    return (normalize_pci(text) or text) if text else None
