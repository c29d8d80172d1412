"""NCCL and PyTorch-distributed logs: who ran where, what failed on which rank, and when.

A distributed job that dies prints the same watchdog timeout on every rank; the cause is one rank,
one host, one GPU. This collector reads the ranks' logs (``--nccl-log GLOB`` at capture; sniffed
at ingest) into:

- ``topology`` rows from NCCL's init lines (``comm 0x… rank 3 nranks 16 cudaDev 3 busId 19000
  commId 0x… - Init COMPLETE``; NCCL version; ``Channel 00/0 : 3[3] -> 4[4] via P2P/IPC`` transports;
  the NET/IB devices and bootstrap interface), mapping rank <-> host <-> cudaDev <-> PCI bus id;
- events (kinds and attrs in collectors/catalog/events.yaml) from NCCL's WARN lines and error-propagation
  chains, and from the
  PyTorch / torchrun / trainer lines that ``collectors/framework/torch_dist.py`` reads;
- a ``versions.nccl`` host fact per host.

Lines come with or without torchrun/mpirun/srun prefixes (``[rank3]:``, ``[default0]:``,
``[1,3]<stderr>:``, ``3: ``), glog-style stamps (``[E1129 10:01:02.123456 1234 file.cpp:12]``, year from
``ctx.reference_for``), NCCL's own ``NCCL_DEBUG_TIMESTAMP_FORMAT`` stamp (``[2024-03-01 10:00:00]``),
ISO and Python-logging stamps, or none at all: a line without a time takes the time of the dated
line before it in the same file (or, before the first dated line, of the next one), marked
approximate with origin ``neighbour``; a file with no dated line at all is anchored on its mtime.

Why it reads blocks, not lines: NCCL INFO logs run to gigabytes and almost every line is
uninteresting. Each 4 MiB block is split once and a line costs a substring test or two (``NCCL
INFO`` followed by one of the few prefixes topology needs, else a compiled keyword alternation)
before any decoding; times of the skipped lines are only looked for, with a C-speed search over
the raw bytes, when an undated line that matters needs a neighbour. Memory stays bounded: state is
per process and per pending event, each capped.
"""

from __future__ import annotations

import glob
import os
import re
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache
from typing import Any, BinaryIO

from collectors import storage
from collectors.base import (
    MAX_LINE_BYTES,
    Artifact,
    CaptureContext,
    Event,
    HostFact,
    ParseContext,
    Row,
    Skipped,
    Topology,
    infer_year,
    normalize_pci,
    to_utc,
)
from collectors.framework import torch_dist as torch_dist
from collectors.framework.launcher_places import (
    ENV_NEEDLES,
    RENDEZVOUS,
    TRACE_NAME,
    LauncherPlaces,
    Rendezvous,
    trace_rows,
)
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist import Continuation, Finding

NAME = "nccl"
LAYER = "network_storage"
KINDS = ("nccl_log", "nccl_trace")
TIMEOUT = 20.0
PRIORITY = 60

IB_WC_STATUS = {
    0: "success", 1: "local length error", 2: "local QP operation error", 3: "local EE context operation error",
    4: "local protection error", 5: "work request flushed error", 6: "memory management operation error",
    7: "bad response error", 8: "local access error", 9: "remote invalid request error", 10: "remote access error",
    11: "remote operation error", 12: "transport retry counter exceeded", 13: "RNR retry counter exceeded",
    14: "local RDD violation error", 15: "remote invalid RD request", 16: "operation aborted",
    17: "invalid EE context number", 18: "invalid EE context state", 19: "fatal error", 20: "response timeout error",
    21: "general error",
}
"""ibv_wc_status values as ibv_wc_status_str() names them: NCCL prints only the number."""

_BLOCK = 4 << 20
_MAX_TEXT = 8192
_MAX_MESSAGE = 2000
_MAX_PROCS = 65536
_MAX_COMMS = 200_000
_MAX_WAITING = 20_000
_MAX_HELD = 4096
_MAX_CHANNELS = 32
_HOLD_LINES = 200
STEP_BUDGET = 2000
"""Step-time events kept per rank at full resolution; past that every second step number, then every
fourth, and so on: a week of per-step logging stays a few thousand rows per rank, and ranks that log the
same steps keep the same ones (a rank at a coarser stride keeps a subset of a finer one's)."""
_MAX_FILES = 10_000
_CAPTURE_BYTES = 256 << 20
_HEAD_BYTES = 16 << 20
"""A log longer than _CAPTURE_BYTES is kept as its head (the init lines that map rank -> host -> GPU)
and its tail (where the incident is)."""

# -- the prefilter: what a line must contain to be decoded at all ------------------------------------------------

_INFO_KEEP = ("comm 0x", "ncclComm", "Channel [0-9]", "NCCL version", "NET/IB", "NET/Socket", "Using network",
              "Bootstrap")
"""What follows ``NCCL INFO `` on the init lines topology needs (plus ``file:line -> N`` error chains)."""


WRITE_NEEDLES = ("Errno", "StreamWriter", "space left", "Input/output error", "unexpected pos", "write(): fd")
"""What a failed checkpoint or data write prints (``collectors.storage.write_failure`` reads the line)."""
NEEDLES = ("exitcode", "signal", "exit barrier", "ChildFailedError", "Root Cause", "Failures:", "nan", "NaN",
           "verflow", "Skipping step", "DistNetworkError", "DistStoreError", "Not all ranks joining",
           "mismatch between collectives", "terminate called", "[c10d]", RENDEZVOUS, *torch_dist.STEP_NEEDLES,
           *WRITE_NEEDLES, *ENV_NEEDLES)
"""Literal words for the rest (torchrun, NaN losses, overflows, flight recorder, step timing, write
errors): alternatives of the one RE2 pass of _hits_regex."""
_CKPT_CONTEXT = lazy_regex(rb"torch\.save|save_checkpoint|serialization\.py|checkpoint|ckpt|safetensors|state_dict|"
                           rb"save_pretrained|dcp\.save|\.pth?\b", re.I)
"""A write error with one of these in the lines before it (a ``torch.save`` traceback, ``Saving
checkpoint to …``) is a checkpoint write failure."""
_CKPT_LOOKBACK = 40
_NEEDLES = tuple(n.encode() for n in NEEDLES)

GREP_PATTERN = "|".join(
    ["NCCL ([^I]|I[^N]|IN[^F]|INF[^O]|INFO[^ ])", "NCCL[.(']", "NCCLUtils",
     "NCCL INFO (" + "|".join(_INFO_KEEP) + "|[^ :]+:[0-9]+ -> [0-9])",
     "CU(DA (error|out of memory|driver error)|BLAS_STATUS_|DNN_STATUS_)"]
    + [re.escape(n).replace("\\ ", " ") for n in NEEDLES])
"""The same selection as an ERE, for ``grep -cE`` (the benchmark's baseline)."""

_TIME_CORE = lazy_regex(rb":[0-5]\d:[0-5]\d")
_DATED = lazy_regex(rb"\s*(?:\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d|\[?[EWIFD]\d{4} \d\d:\d\d:\d\d)")
"""A line that starts with its own time: the skipped lines before it need not be searched for one, its
own stamp supersedes theirs (unless undated events are still waiting for the first time in the file)."""
"""Every supported timestamp has HH:MM:SS; ':' makes this a literal-led, C-speed search."""

# -- line prefixes and timestamps ------------------------------------------------------------------------------

_ISO = r"\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_PREFIX = lazy_regex(rf"""\s*(?:
    (?P<iso>{_ISO})(?:\s*[:|]\s+|\s+-\s+|\s+|$)
  | \[(?P<biso>{_ISO})\](?::\s*|\s*)
  | \[(?P<hflvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\|(?P<hffile>[^\]\s]+)\]\s+(?P<hfiso>{_ISO})\s*(?:>>\s*)?
  | \[(?P<bglog>[EWIFD]\d{{3,4}}\ \d\d:\d\d:\d\d(?:\.\d{{1,9}})?)(?:\s+\d+)?\s+(?P<bfile>[^\]\s]+)\]\s*
  | (?P<glog>[EWIFD]\d{{4}}\ \d\d:\d\d:\d\d(?:\.\d{{1,9}})?)\s+\d+\s+(?P<gfile>[^\]\s]+)\]\s*
  | \[(?P<llvl>[EWIF])\ (?P<lfile>[\w.\-/]+:\d+)\]\s*
  | \[rank(?P<rank>\d+)\]:\s?
  | \[[A-Za-z][\w.\-]{{0,30}}\]\s+(?=\d{{4}}-\d\d-\d\d[T\ _]\d\d:)
  | \[(?P<role>[A-Za-z_][A-Za-z_\-]*?)(?P<lrank>\d+)\]:\s?
  | \[(?P<mjob>\d+),(?P<mrank>\d+)\]<(?:stdout|stderr)>:\s?
  | (?P<vlvl>DEBUG|INFO|WARNING|ERROR|CRITICAL)\ (?P<vdate>\d\d-\d\d\ \d\d:\d\d:\d\d)(?:\.\d+)?\s+
        (?:\[?[\w.\-]+:\d+\]\s*)?
  | (?P<plvl>DEBUG|INFO|WARNING|ERROR|CRITICAL):(?P<logger>[\w.]+):
  | (?P<syslog>[A-Z][a-z]{{2}}\ [\ \d]\d\ \d\d:\d\d:\d\d)\ (?P<shost>[\w.\-]+)\ (?P<sproc>[^\s:\[]+)(?:\[\d+\])?:\s
  | (?P<srun>\d{{1,5}}):\ (?=\S)
)""", re.X)
_GLOG_PARTS = lazy_regex(r"[EWIFD](\d{3,4}) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")
_VDATE_PARTS = lazy_regex(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)()")
_SYSLOG_PARTS = lazy_regex(r"([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)()")
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}


@dataclass
class _Stamp:
    ts: datetime
    origin: str
    raw: str
    approx: bool = False


@dataclass
class _Prefix:
    rest: str
    stamp: _Stamp | None = None
    rank: int | None = None
    local_rank: int | None = None
    mpi_rank: int | None = None
    task: int | None = None
    src: str | None = None
    host: str | None = None


_ISO_PARTS = lazy_regex(r"(\d{4}-\d\d-\d\d)[T _](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$")


def iso_stamp(text: str) -> _Stamp | None:
    """ISO-8601-like text (``,`` or ``.`` fraction, nanoseconds, ``_`` as torchelastic writes it) as UTC."""
    m = _ISO_PARTS.match(text.strip())
    if not m:
        return None
    day, clock, frac, zone = m.groups()
    iso = f"{day}T{clock}" + (f".{(frac + '000000')[:6]}" if frac else "")
    if zone and zone != "Z":
        iso += zone if ":" in zone else f"{zone[:3]}:{zone[3:]}"
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return _Stamp(to_utc(when), "iso", text.strip())


# -- NCCL's own lines ------------------------------------------------------------------------------------------

_NCCL_HDR = lazy_regex(r"(?<![\w.\-])(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                       r"(?:(?P<src>[^\s]+?:\d+)(?: \((?P<func>[^)]*)\))? )?"
                       r"NCCL (?P<lvl>INFO|WARN|ERROR|ABORT|TRACE|CALL)(?: |$)")
_NCCL_BARE = lazy_regex(r"(?:(?P<src>[^\s]+?:\d+) )?NCCL (?P<lvl>WARN|ERROR|ABORT) (?P<msg>.*)")
_BARE_VERSION = lazy_regex(r"NCCL version (?P<ver>\S+)")
_INIT = lazy_regex(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)")
_INIT_FIELDS = {name: re.compile(rf"\b{name} (?P<v>[0-9a-fA-Fx]+)") for name in
                ("cudaDev", "nvmlDev", "busId", "commId", "nNodes", "localRanks", "localRank")}
_INIT_STATE = lazy_regex(r"Init (?P<state>START|COMPLETE)")
_VERSION = lazy_regex(r"NCCL version (?P<v>[\w.+\-]+)")
_CHANNEL = lazy_regex(r"Channel (?P<ch>\d+(?:/\d+)?) : (?P<src>\d+)\[(?P<sdev>[\da-fA-F]+)\] -> (?P<dst>\d+)"
                      r"\[(?P<ddev>[\da-fA-F]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
_CHANNEL_LINE = lazy_regex(rb"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO Channel (?P<ch>\d+(?:/\d+)?) : "
                           rb"(?P<src>\d+)\[[\da-fA-F]+\] -> (?P<dst>\d+)\[[\da-fA-F]+\]"
                           rb"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
"""A bare channel-connect line (no prefix, so no time to learn from it): read without decoding."""
_NET_USING = lazy_regex(r"NET/(?P<net>IB|Socket)\s*: Using (?P<devs>.*?)(?:\s*;\s*OOB (?P<oob>\S+))?\s*$")
_BOOTSTRAP = lazy_regex(r"Bootstrap\s*: Using (?P<oob>\S+)")
_NETWORK = lazy_regex(r"Using network (?P<net>\S+)")
_CHAIN = lazy_regex(r"(?P<src>\S+?:\d+) -> (?P<code>\d+)(?: \[(?P<thread>[^\]]+)\])?\s*$")

_IB_WC = lazy_regex(r"Got completion from peer (?P<peer>\S+?) with (?:status=|error )(?:(?P<sname>IBV_WC_\w+)\()?"
                    r"(?P<status>\d+)")
_WC_FIELDS = {
    "opcode": re.compile(r"opcode[= ](?:IBV_WC_\w+\()?(?P<v>\d+)"),
    "len": re.compile(r"\blen[= ](?P<v>\d+)"),
    "vendor_err": re.compile(r"vendor[ _]err[= ]?\s*(?P<v>\d+)"),
}
_WC_DIR = lazy_regex(r"\((?P<v>Send|Recv|Flush|Read|Write|Unused|Unknown|Put|Get)\)")
_GIDS = lazy_regex(r"localGid\s*(?P<local>\S+)|remoteGids?\s*(?P<remote>\S+)|\bhca (?P<hca>\S+)")
_ASYNC = lazy_regex(r"Got async event\s*:\s*(?P<v>[^,;]+?)\s*(?:$|[,;])")
_IBV_CALL = lazy_regex(r"Call to (?P<call>ibv_\w+) failed(?:\s*(?:with error|:)\s*(?P<err>.+))?")
_SOCKET_CALL = lazy_regex(r"Call to (?P<op>recv|send|connect|accept|poll|read|write|socket)\b(?: (?:from|to) "
                          r"(?P<peer>\S+))? ?failed\s*:?\s*(?P<err>.*)$")
_CONNECT = lazy_regex(r"Connect to (?P<peer>\S+) failed\s*:\s*(?P<err>.*)$")
_CLOSED = lazy_regex(r"Connection closed by remote peer (?P<peer>\S+)")
_SOCK_ERR = lazy_regex(r"Connection reset by peer|Broken pipe|Connection refused|Connection timed out|"
                       r"No route to host|Network is unreachable|Connection closed by remote peer")
_PROXY = lazy_regex(r"\[Proxy Service (?P<svc>\d+)\] Failed to execute operation (?P<op>\w+) from rank "
                    r"(?P<rank>\d+), retcode (?P<code>\d+)")
_CUDA_FAILURE = lazy_regex(r"Cuda failure (?:(?P<code>\d+) )?'(?P<text>[^']*)'")
_NET_WORDS = lazy_regex(r"NET/|\bIB\b|ibv_|[Ss]ocket|[Bb]ootstrap|[Cc]onnect|[Pp]roxy|remote|network|peer", re.I)
_STRONG = lazy_regex(r"WorkNCCL\(|Watchdog caught|NCCL (?:WARN|ERROR|ABORT)|Init COMPLETE|CUDA error|exitcode|"
                     r"NCCL error")
"""Markers that mean a line should have parsed: one that did not was cut or garbled, and is counted."""


def _nccl_headers(text: str) -> list[re.Match[str]]:
    """The NCCL headers in a message, as ``finditer`` finds them: after one, the next is looked for only when
    `` NCCL `` follows it (lines of two processes run together). A header starts where a host name does (the
    lookbehind), so a search is not retried at every character of every word."""
    found = []
    m = _NCCL_HDR.search(text)
    while m is not None:
        found.append(m)
        m = _NCCL_HDR.search(text, m.end()) if text.find(" NCCL ", m.end()) >= 0 else None
    return found


def nccl_bus_id(text: str) -> str | None:
    """NCCL prints busId as a 64-bit int in hex: ``19000`` is 0000:19:00.0 (domain<<20 | bus<<12 |
    device<<4 | function)."""
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return normalize_pci(f"{value >> 20:04x}:{(value >> 12) & 0xff:02x}:{(value >> 4) & 0xff:02x}.{value & 0xf:x}")


def net_details(text: str) -> dict[str, Any]:
    """What an NCCL network message says: IB work completion, async event, verbs call, socket error."""
    attrs: dict[str, Any] = {}
    if m := _IB_WC.search(text):
        status = int(m.group("status"))
        attrs.update(status=status, status_name=IB_WC_STATUS.get(status, m.group("sname") or "unknown"),
                     peer=m.group("peer"))
        for name, pattern in _WC_FIELDS.items():
            if f := pattern.search(text, m.end()):
                attrs[name] = int(f.group("v"))
        if d := _WC_DIR.search(text, m.end()):
            attrs["direction"] = d.group("v")
        for g in _GIDS.finditer(text, m.end()):
            for key, name in (("local", "local_gid"), ("remote", "remote_gid"), ("hca", "hca")):
                if g.group(key):
                    attrs[name] = g.group(key)
    if m := _ASYNC.search(text):
        attrs["async_event"] = m.group("v").strip()
    if m := _IBV_CALL.search(text):
        attrs["ibv_call"] = m.group("call")
        if m.group("err"):
            attrs["error"] = m.group("err").strip()[:200]
    if m := _SOCKET_CALL.search(text):
        attrs.setdefault("operation", m.group("op"))
        if m.group("peer"):
            attrs.setdefault("peer", m.group("peer"))
        if m.group("err"):
            attrs.setdefault("error", m.group("err").strip()[:200])
    elif m := _CONNECT.search(text):
        attrs.setdefault("peer", m.group("peer"))
        attrs.setdefault("error", m.group("err").strip()[:200])
    if m := _CLOSED.search(text):
        attrs.setdefault("peer", m.group("peer"))
        attrs.setdefault("error", "Connection closed by remote peer")
    if "error" not in attrs and (m := _SOCK_ERR.search(text)):
        attrs["error"] = m.group(0)
    if m := _PROXY.search(text):
        attrs.update(proxy_rank=int(m.group("rank")), operation=m.group("op"), nccl_result=int(m.group("code")))
        attrs["nccl_error"] = torch_dist.NCCL_RESULTS.get(attrs["nccl_result"])
    if isinstance(attrs.get("peer"), str):
        attrs["peer_ip"] = attrs["peer"].split("<", 1)[0]
    return attrs


_MEANINGS = frozenset({"nccl_setup_error", "nccl_shm_error", "nccl_alloc_failed", "nccl_nvls_error"})
"""Kinds of NCCL's own signatures that say what a message means even where the words alone would read
as a network or CUDA error (no interface found, /dev/shm full, Failed to CUDA calloc, NVLS bind)."""


@cache
def _own_catalog() -> tuple[Any, Any]:
    """NCCL's own signatures (collectors/catalog/signatures/nccl.yaml but the bare WARN and the interface
    list), built once, as two matchers: the messages with anchors of their own (setup, /dev/shm, NVLS, IB
    completions), and the families any WARN may belong to (topology, invalid usage, internal: anchored on
    ``NCCL WARN`` itself), tried only on a WARN the words left plain. Taken from the process's catalog, not
    loaded again: a second load_signatures (every YAML file parsed again) cost a WARN ~0.07 s CPU."""
    from collectors.framework.signatures import Matcher, catalog

    own = [s for s in catalog().signatures if s.family == "nccl" and s.kind not in ("nccl_warn", "nccl_net_interfaces")]
    return (Matcher(tuple(s for s in own if "NCCL WARN" not in s.anchors)),
            Matcher(tuple(s for s in own if "NCCL WARN" in s.anchors)))


def _meaning(msg: str, finding: Finding) -> Finding:
    """The finding of a WARN message as NCCL's catalog reads it: a setup mistake, /dev/shm, an
    allocation or NVLS failure becomes its own kind and cause; a message the words read as a network or
    CUDA error keeps that kind and takes the signature's cause; a plain WARN takes the family's kind."""
    specific, families = _own_catalog()
    found = specific.match(msg)
    if found is None and finding.kind == "nccl_warn":
        found = families.match(f"NCCL WARN {msg}")
    if found is None:
        return finding
    sig, attrs = found
    if sig.kind in _MEANINGS or finding.kind == "nccl_warn":
        severity = "critical" if finding.severity == "critical" else sig.severity
        return Finding(sig.kind, severity, {**attrs, "text": msg.strip()[:500]}, layer=sig.layer)
    if sig.kind == finding.kind:
        for key, value in attrs.items():
            finding.attrs.setdefault(key, value)
    return finding


def _nccl_warn(msg: str, level: str) -> Finding:
    return _meaning(msg, _nccl_warn_words(msg, level))


def meaning_of(message: str) -> Finding | None:
    """What an NCCL message quoted by another program (PyTorch's ``Last error:``, nccl-tests' ``'... / last
    error'``) means when it says more than its result code: a setup, /dev/shm, allocation or NVLS failure,
    or a CUDA error; None when it says no more than the code."""
    said = _nccl_warn(message, "WARN")
    return said if said.kind in _MEANINGS or said.kind == "cuda_error" else None


def _nccl_warn_words(msg: str, level: str) -> Finding:
    severity = "critical" if level == "ABORT" else "error"
    if m := _CUDA_FAILURE.search(msg):
        text = m.group("text")
        attrs: dict[str, Any] = {"error": text}
        if m.group("code"):
            attrs["cuda_error_code"] = int(m.group("code"))
        low = text.lower()
        if "out of memory" in low:
            attrs["oom"] = True
        if any(words in low for words in torch_dist.APP_FAULTS):
            attrs["app_fault"] = True
        return Finding("cuda_error", severity, attrs, layer="gpu")
    attrs = net_details(msg)
    if attrs or _NET_WORDS.search(msg):
        attrs.setdefault("text", msg.strip()[:500])
        return Finding("nccl_net_error", severity, attrs, layer="network_storage")
    return Finding("nccl_warn", "warning" if level == "WARN" else severity, {"text": msg.strip()[:500]})


# -- reader state ---------------------------------------------------------------------------------------------


@dataclass
class _Comm:
    rank: int
    nranks: int
    line: int
    fields: dict[str, str] = field(default_factory=dict)
    state: str = "INIT"


@dataclass
class _Proc:
    """One NCCL process (host:pid) as its init lines describe it."""

    host: str
    pid: int
    rank: int | None = None
    nranks: int = 0
    version: str | None = None
    devs: dict[int, str] = field(default_factory=dict)
    comms: dict[str, _Comm] = field(default_factory=dict)
    transports: Counter[str] = field(default_factory=Counter)
    channels: list[dict[str, Any]] = field(default_factory=list)
    net: str | None = None
    net_devices: str | None = None
    oob: str | None = None


@dataclass
class _Held:
    """An event kept back while the next lines may still add to it (error chain, watchdog progress)."""

    event: Event
    line: int


class _Reader:
    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.procs: dict[tuple[str, int], _Proc] = {}
        self.rank_home: dict[int, tuple[int, str | None, str | None]] = {}
        self.comms_total = 0
        self.file_version: str | None = None
        self.versions_told: set[tuple[str | None, str]] = set()
        self.last: _Stamp | None = None
        self.waiting: list[Event] = []
        self.cont: Continuation | None = None
        self.cont_start: tuple[int, str, _Prefix, _Stamp | None] | None = None
        self.chains: dict[tuple[str, int, int], _Held] = {}
        self.timeouts: dict[int | None, _Held] = {}
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

    # -- the block loop ---------------------------------------------------------------------------------------

    def rows(self, stream: BinaryIO) -> Iterator[Row]:
        carry = b""
        base = 0
        giant = False
        while True:
            chunk = stream.read(_BLOCK)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            end = data.rfind(b"\n") + 1
            carry = data[end:]
            if giant:
                if not end:
                    carry = b""
                    continue
                cut = data.find(b"\n") + 1
                data, end, giant = data[cut:], end - cut, False
                base += 1
            if len(carry) > MAX_LINE_BYTES:
                yield Skipped(base + data.count(b"\n", 0, end) + 1, "line longer than 1 MiB")
                carry, giant = b"", True
            base = yield from self._block(data, end, base)
            self.ctx.lines_read = base
        if carry and not giant:
            base = yield from self._block(carry + b"\n", len(carry) + 1, base)
        if giant:
            base += 1
        self.ctx.lines_read = base
        yield from self._finish()

    def _block(self, data: bytes, end: int, base: int) -> Iterator[Row]:
        """Read the lines of ``data[:end]`` that the prefilter selects; returns the line count after them.
        A line is found by its offset, the block is never split into lines (a list of every line cost
        more than the prefilter itself on a block of NCCL INFO lines)."""
        self.block = data
        giants = _giant_starts(data, end) if end > MAX_LINE_BYTES else []
        for start in giants:
            yield Skipped(base + data.count(b"\n", 0, start) + 1, "line longer than 1 MiB")
        newlines = _newline_counter(data, end)
        gap = pos = counted = 0
        lineno = base
        if self.cont is not None:
            pos = gap = yield from self._follow(data, 0, end, base + 1)
        for start in _hit_starts(data, end):
            lineno += newlines(counted, start)
            counted = start
            if start < pos or (giants and start in giants):
                continue
            stop = data.find(b"\n", start, end)
            if start > gap and (self.waiting or not _DATED.match(data, start, stop)):
                yield from self._date_gap(data, gap, start)
            self.line_start = start
            yield from self._line(lineno + 1, data[start:stop])
            pos = stop + 1
            if self.cont is not None:
                pos = yield from self._follow(data, pos, end, lineno + 2)
            gap = pos
        if gap < end:
            yield from self._date_gap(data, gap, end)
        return lineno + newlines(counted, end)

    def _follow(self, data: bytes, pos: int, end: int, lineno: int) -> Iterator[Row]:
        """A continuation is open: every next line (the first at ``pos``, numbered ``lineno``) goes to it,
        selected or not, until it closes. Returns where the lines it did not take begin."""
        while self.cont is not None and pos < end:
            stop = data.find(b"\n", pos, end)
            self.line_start = pos
            yield from self._line(lineno, data[pos:stop])
            pos, lineno = stop + 1, lineno + 1
        return pos

    # -- time of the lines in between ---------------------------------------------------------------------------

    def _date_gap(self, data: bytes, start: int, end: int) -> Iterator[Row]:
        """Lines skipped without reading still carry time for their undated neighbours."""
        if self.waiting:
            for m in _TIME_CORE.finditer(data, start, end):
                stamp = self._stamp_at(data, m.start(), start)
                if stamp is not None:
                    yield from self._dated(stamp)
                    break
            else:
                return
        hi, window = end, 4096
        while hi > start:
            lo = max(start, hi - window)
            for m in reversed(list(_TIME_CORE.finditer(data, lo, hi))):
                stamp = self._stamp_at(data, m.start(), start)
                if stamp is not None:
                    self.last = stamp
                    return
            if lo == start:
                return
            hi, window = lo + 16, window * 8

    def _stamp_at(self, data: bytes, pos: int, floor: int) -> _Stamp | None:
        begin = max(floor, data.rfind(b"\n", floor, pos) + 1)
        if pos - begin > 100:
            return None
        head = data[begin:begin + 200]
        return self._prefix(head.decode("utf-8", "replace")).stamp

    def _dated(self, stamp: _Stamp) -> Iterator[Row]:
        self.last = stamp
        if self.waiting:
            for event in self.waiting:
                self._neighbour(event, stamp)
            yield from self.waiting
            self.waiting = []

    @staticmethod
    def _neighbour(event: Event, stamp: _Stamp) -> None:
        event.ts, event.ts_approx, event.ts_origin = stamp.ts, True, "neighbour"

    def _prefix(self, text: str) -> _Prefix:
        """Strip launcher prefixes and timestamps off the front of a line, remembering what they said."""
        out = _Prefix(rest=text)
        first = text.lstrip()[:1]
        if not (first.isdigit() or first == "[" or "A" <= first <= "Z"):
            return out  # every prefix starts with a digit, '[' or a capital (an NCCL line with its host does not)
        pos = 0
        for _ in range(8):
            m = _PREFIX.match(text, pos)
            if not m or m.end() == pos:
                break
            pos = m.end()
            g = m.groupdict()
            if g["rank"] is not None:
                out.rank = int(g["rank"])
            elif g["lrank"] is not None:
                out.local_rank = int(g["lrank"])
            elif g["mrank"] is not None:
                out.mpi_rank = int(g["mrank"])
            elif g["srun"] is not None:
                out.task = int(g["srun"])
            elif g["shost"]:
                out.host = g["shost"]
            src = g["bfile"] or g["gfile"] or g["lfile"] or g["hffile"]
            if src:
                out.src = src
            if out.stamp is None:
                out.stamp = self._stamp_from(g, out.host)
        out.rest = text[pos:]
        if out.rank is None and out.local_rank is None:
            # srun's task / mpirun's rank is the global rank only when the launcher started the ranks
            # itself; over torchrun ('0: [default3]:') it numbers the node's agent, not a rank
            out.rank = out.mpi_rank if out.mpi_rank is not None else out.task
        return out

    def _stamp_from(self, g: dict[str, str | None], host: str | None) -> _Stamp | None:
        if text := g["iso"] or g["biso"] or g["hfiso"]:
            return iso_stamp(text)
        if text := g["bglog"] or g["glog"]:
            m = _GLOG_PARTS.match(text)
            if not m:
                return None
            mmdd = m.group(1)
            return self._yearless(int(mmdd[:-2]), int(mmdd[-2:]), m, 2, "glog_noyear", text, host)
        if text := g["vdate"]:
            m = _VDATE_PARTS.match(text)
            return self._yearless(int(m.group(1)), int(m.group(2)), m, 3, "mmdd_noyear", text, host) if m else None
        if text := g["syslog"]:
            m = _SYSLOG_PARTS.match(text)
            if m and m.group(1) in _MONTHS:
                return self._yearless(_MONTHS[m.group(1)], int(m.group(2)), m, 3, "syslog_noyear", text, host)
        return None

    def _yearless(self, month: int, day: int, m: re.Match[str], first: int, origin: str, raw: str,
                  host: str | None) -> _Stamp | None:
        if not (1 <= month <= 12 and 1 <= day <= 31):
            return None
        year, approx = infer_year(month, day, self.ctx.reference_for(host or self.ctx.host))
        hour, minute, sec = (int(m.group(first + k)) for k in range(3))
        frac = m.group(first + 3) or ""
        try:
            when = datetime(year, month, day, hour, minute, sec, int((frac + "000000")[:6]), tzinfo=timezone.utc)
        except ValueError:
            return None
        return _Stamp(when, origin, raw, approx)

    # -- one line ----------------------------------------------------------------------------------------------

    def _line(self, lineno: int, raw: bytes) -> Iterator[Row]:
        if len(raw) > MAX_LINE_BYTES:
            return
        if self.cont is None and (m := _CHANNEL_LINE.match(raw)):
            self._channel(m)
            return
        if b"\x00" in raw:
            yield Skipped(lineno, "binary data (NUL bytes)")
            return
        text = raw[:_MAX_TEXT].decode("utf-8", "replace").rstrip("\r")
        pre = self._prefix(text)
        self.places.prefix(pre.rank, pre.task, pre.local_rank)
        if pre.stamp is not None:
            if pre.stamp.origin == "iso" and (self.ctx.host or "") not in self.learned:
                self.learned.add(self.ctx.host or "")
                self.ctx.learn_reference_time(self.ctx.host, pre.stamp.ts)
            yield from self._dated(pre.stamp)
        if self.cont is not None:
            if self.cont.feed(pre.rest, lineno):
                self.cont.budget -= 1
                if self.cont.budget <= 0:
                    yield from self._end_cont()
                return
            yield from self._end_cont()
        if lineno - self.checked > _HOLD_LINES:
            self.checked = lineno
            yield from self._release_stale(lineno)
        yield from self._message(lineno, text, pre)

    def _message(self, lineno: int, text: str, pre: _Prefix) -> Iterator[Row]:
        rest = pre.rest
        headers = _nccl_headers(rest) if " NCCL " in rest and " [" in rest else []
        if headers:
            for k, m in enumerate(headers):
                end = headers[k + 1].start() if k + 1 < len(headers) else len(rest)
                got = list(self._nccl(lineno, text, pre, m, rest[m.end():end], interleaved=len(headers) > 1))
                if not got and k + 1 < len(headers):
                    yield Skipped(lineno, "interleaved or cut NCCL line")
                yield from got
            return
        if m := _BARE_VERSION.match(rest):
            self.file_version = self.file_version or m.group("ver")
            yield from self._tell_version(pre.host or self.ctx.host, m.group("ver"))
            return
        if ("NCCL WARN " in rest or "NCCL ERROR " in rest or "NCCL ABORT " in rest) and (m := _NCCL_BARE.search(rest)):
            finding = _nccl_warn(m.group("msg"), m.group("lvl"))
            if m.group("src"):
                finding.attrs.setdefault("file", m.group("src").rsplit("/", 1)[-1])
            yield from self._emit(finding, lineno, text, pre)
            return
        if ("=" in rest or "':" in rest or '":' in rest or "initialized host" in rest) and self.places.env_line(
                pre.rank, rest):
            return
        finding, cont = (None, Rendezvous(self.places)) if RENDEZVOUS in rest else torch_dist.classify(rest, lineno)
        if cont is not None:
            self.cont = cont
            self.cont_start = (lineno, text, pre, self.last)
            return
        if finding is None and any(needle in rest for needle in WRITE_NEEDLES):
            finding = self._write_failure(lineno, rest)
        if finding is not None:
            yield from self._emit(finding, lineno, text, pre)
        elif _STRONG.search(rest):
            yield Skipped(lineno, "cut or unrecognised NCCL/PyTorch line")

    def _write_failure(self, lineno: int, rest: str) -> Finding | None:
        """A failed write in a rank's log; a checkpoint's when the line is torch's serializer or the lines
        before it show a save in progress (the traceback through torch.save, a ``Saving checkpoint`` line)."""
        failure = storage.write_failure(rest)
        if failure is None:
            return None
        before = _lines_before(self.block, self.line_start, _CKPT_LOOKBACK)
        saving = failure["checkpoint_api"] or bool(_CKPT_CONTEXT.search(rest.encode("utf-8", "replace"))) or any(
            _CKPT_CONTEXT.search(line) for line in before)
        attrs = {key: value for key, value in failure.items() if key != "checkpoint_api" and value is not None}
        errno = f" ({failure['errno']})" if failure["errno"] else ""
        what = "checkpoint write failed" if saving else "storage error"
        return Finding("checkpoint_write_failed" if saving else "storage_error", "error", attrs,
                       layer="network_storage", message=f"{what}{errno}: {failure['error']}")

    def _end_cont(self) -> Iterator[Row]:
        cont, start = self.cont, self.cont_start
        self.cont, self.cont_start = None, None
        if cont is None or start is None:
            return
        lineno, text, pre, neighbour = start
        for finding in cont.finish():
            finding.message = finding.message or _summary_text(finding)
            yield from self._emit(finding, finding.line or lineno, text, pre, neighbour=neighbour)

    # -- NCCL lines ---------------------------------------------------------------------------------------------

    def _proc(self, host: str, pid: int) -> _Proc | None:
        proc = self.procs.get((host, pid))
        if proc is None and len(self.procs) < _MAX_PROCS:
            proc = self.procs[(host, pid)] = _Proc(host, pid, version=self.file_version)
        return proc

    def _known_host(self, host: str) -> str:
        """A host glued to the end of a cut line (``Chanhost07``) is the known host it ends with."""
        if host in self.hosts or not self.hosts:
            return host
        for known in self.hosts:
            if host.endswith(known):
                return known
        return host

    def _nccl(self, lineno: int, text: str, pre: _Prefix, m: re.Match[str], msg: str,
              interleaved: bool) -> Iterator[Row]:
        host = self._known_host(m.group("host")) if interleaved else m.group("host")
        if len(self.hosts) < 4096:
            self.hosts.add(host)
        pid, tid, dev, level = int(m.group("pid")), int(m.group("tid")), int(m.group("dev")), m.group("lvl")
        proc = self._proc(host, pid)
        self.places.header(pre.rank, host, pid, dev, pre.local_rank)
        key = (host, pid, tid)
        if level == "INFO":
            if " -> " in msg and (c := _CHAIN.match(msg)):
                yield from self._chain(lineno, text, pre, key, dev, c)
                return
            if key in self.chains:
                yield from self._out(self.chains.pop(key).event)
            if proc is None:
                return
            # Each pattern is tried only when its literal is in the message (a substring test, not a search).
            if "comm 0x" in msg and (c := _INIT.search(msg)):
                yield from self._init(lineno, proc, tid, c, msg)
            elif "NCCL version " in msg and (c := _VERSION.search(msg)):
                proc.version = c.group("v")
                yield from self._tell_version(host, proc.version)
            elif "Channel " in msg and (c := _CHANNEL.search(msg)):
                self._add_channel(proc, c.group("ch"), c.group("src"), c.group("dst"), c.group("via"), c.group("dir"))
            elif "NET/" in msg and (c := _NET_USING.search(msg)):
                proc.net, proc.net_devices = c.group("net"), c.group("devs").strip()[:300]
                proc.oob = c.group("oob") or proc.oob
            elif "Bootstrap" in msg and (c := _BOOTSTRAP.search(msg)):
                proc.oob = c.group("oob")
            elif "Using network " in msg and (c := _NETWORK.search(msg)):
                proc.net = c.group("net")
            return
        if level in ("TRACE", "CALL"):
            return
        if key in self.chains:
            yield from self._out(self.chains.pop(key).event)
        finding = _nccl_warn(msg, level)
        if m.group("src"):
            finding.attrs.setdefault("file", m.group("src").rsplit("/", 1)[-1])
        if m.group("func"):
            finding.attrs["function"] = m.group("func")
        event = self._event(finding, lineno, text, pre, host=host, pid=pid, tid=tid, dev=dev)
        if event is not None:
            yield from self._hold(self.chains, key, event, lineno)

    def _chain(self, lineno: int, text: str, pre: _Prefix, key: tuple[str, int, int], dev: int,
               c: re.Match[str]) -> Iterator[Row]:
        code = int(c.group("code"))
        held = self.chains.get(key)
        if held is None:
            kind = "nccl_net_error" if code in torch_dist.NETWORK_RESULTS else "nccl_error"
            finding = Finding(kind, "error", {"error": torch_dist.NCCL_RESULTS.get(code, f"result {code}")},
                              layer="network_storage" if kind == "nccl_net_error" else "gpu")
            event = self._event(finding, lineno, text, pre, host=key[0], pid=key[1], tid=key[2], dev=dev)
            if event is None:
                return
            yield from self._hold(self.chains, key, event, lineno)
            held = self.chains.get(key)
            if held is None:
                return
        attrs = held.event.attrs
        attrs.setdefault("nccl_result", code)
        attrs.setdefault("nccl_error", torch_dist.NCCL_RESULTS.get(code))
        chain = attrs.setdefault("chain", [])
        if len(chain) < 16:
            chain.append(c.group("src"))
        if c.group("thread"):
            attrs.setdefault("thread", c.group("thread"))
        held.line = lineno

    def _channel(self, m: re.Match[bytes]) -> None:
        host = m.group("host").decode("utf-8", "replace")
        proc = self._proc(host, int(m.group("pid")))
        if proc is not None:
            if len(self.hosts) < 4096:
                self.hosts.add(host)
            ch, src, dst, via, direction = m.group("ch", "src", "dst", "via", "dir")
            self._add_channel(proc, ch.decode(), src.decode(), dst.decode(), via.decode("utf-8", "replace"),
                              direction.decode() if direction else None)

    @staticmethod
    def _add_channel(proc: _Proc, ch: str, src: str, dst: str, via: str, direction: str | None) -> None:
        proc.transports[via] += 1
        if len(proc.channels) < _MAX_CHANNELS:
            proc.channels.append({"channel": ch, "from": int(src), "to": int(dst), "via": via,
                                  **({"dir": direction} if direction else {})})

    def _init(self, lineno: int, proc: _Proc, tid: int, c: re.Match[str], msg: str) -> Iterator[Row]:
        comm_ptr = c.group("comm")
        rank, nranks = int(c.group("rank")), int(c.group("nranks"))
        comm = proc.comms.get(comm_ptr)
        if comm is None:
            if self.comms_total >= _MAX_COMMS:
                return
            self.comms_total += 1
            comm = proc.comms[comm_ptr] = _Comm(rank, nranks, lineno)
        for name, pattern in _INIT_FIELDS.items():
            if name in msg and (f := pattern.search(msg)):
                comm.fields[name] = f.group("v")
        gpu = nccl_bus_id(comm.fields["busId"]) if "busId" in comm.fields else None
        if gpu and "cudaDev" in comm.fields and comm.fields["cudaDev"].isdigit():
            proc.devs[int(comm.fields["cudaDev"])] = gpu
        if nranks > proc.nranks:
            proc.rank, proc.nranks = rank, nranks
        home = self.rank_home.get(rank)
        if (home is None or nranks > home[0]) and len(self.rank_home) < _MAX_PROCS:
            self.rank_home[rank] = (nranks, proc.host, gpu)
        state = _INIT_STATE.search(msg)
        if state and state.group("state") == "COMPLETE" and comm.state != "COMPLETE":
            comm.state = "COMPLETE"
            yield self._topology(proc, comm_ptr, comm, tid)
        elif state and comm.state == "INIT":
            comm.state = state.group("state")

    def _topology(self, proc: _Proc, comm_ptr: str, comm: _Comm, tid: int | None = None) -> Topology:
        f = comm.fields
        gpu = nccl_bus_id(f["busId"]) if "busId" in f else None
        extra: dict[str, Any] = {"comm": comm_ptr, "init": comm.state}
        for name, key in (("nvmlDev", "nvml_dev"), ("localRank", "local_rank"), ("localRanks", "local_ranks"),
                          ("nNodes", "nnodes")):
            if name in f and f[name].isdigit():
                extra[key] = int(f[name])
        if proc.transports:
            extra["transports"] = dict(proc.transports)
            extra["channels"] = list(proc.channels)
            proc.transports.clear()
            proc.channels.clear()
        for name in ("net", "net_devices", "oob"):
            if getattr(proc, name):
                extra[name] = getattr(proc, name)
        if tid is not None:
            extra["tid"] = tid
        cuda_dev = int(f["cudaDev"]) if f.get("cudaDev", "").isdigit() else None
        return Topology(rank=comm.rank, host=proc.host, nranks=comm.nranks, comm_id=f.get("commId") or comm_ptr,
                        pid=proc.pid, cuda_dev=cuda_dev, gpu=gpu, nccl_version=proc.version or self.file_version,
                        extra=extra, line=comm.line)

    def _tell_version(self, host: str | None, version: str) -> Iterator[Row]:
        if (host, version) not in self.versions_told and len(self.versions_told) < 1024:
            self.versions_told.add((host, version))
            yield HostFact("versions.nccl", version, host=host)

    # -- findings become events -----------------------------------------------------------------------------

    def _event(self, finding: Finding, lineno: int, text: str, pre: _Prefix, *, host: str | None = None,
               pid: int | None = None, tid: int | None = None, dev: int | None = None,
               neighbour: _Stamp | None = None) -> Event | None:
        attrs = finding.attrs
        if isinstance(attrs.get("last_error"), str) and finding.kind in ("nccl_net_error", "nccl_error", "cuda_error"):
            # PyTorch's "Last error:" is the WARN NCCL printed: it means what the bare WARN means
            said = meaning_of(attrs["last_error"])
            if said is not None:
                finding.kind, finding.layer = said.kind, said.layer
                for key, value in said.attrs.items():
                    if key != "text":
                        attrs.setdefault(key, value)
        if finding.kind == "nccl_net_error" and "last_error" in attrs:
            cause = net_details(attrs["last_error"])
            if "error" in cause and "error" in attrs:
                attrs["nccl_message"] = attrs.pop("error")
            for key, value in cause.items():
                attrs.setdefault(key, value)
        if finding.kind in ("nccl_net_error", "nccl_error") and "nccl_version" not in attrs:
            version = (self.procs[(host, pid)].version if (host, pid) in self.procs else None) or self.file_version
            if version:
                attrs["nccl_version"] = version
        rank = pre.rank if pre.rank is not None else finding.rank
        proc = self.procs.get((host, pid)) if host is not None and pid is not None else None
        if rank is None and proc is not None:
            rank = proc.rank
        if rank is None and host is None:
            rank = self._sole_rank()
        home = self.rank_home.get(rank) if rank is not None else None
        gpu = proc.devs.get(dev) if proc is not None and dev is not None else None
        if gpu is None and home is not None and (host is None or home[1] == host):
            gpu = home[2]
        where = finding.host or host or pre.host or (home[1] if home else None)
        for key, value in (("pid", pid), ("tid", tid), ("cuda_dev", dev), ("local_rank", pre.local_rank),
                           ("mpi_rank", pre.mpi_rank)):
            if value is not None:
                attrs.setdefault(key, value)
        if pre.src and "file" not in attrs:
            attrs["file"] = pre.src.rsplit("/", 1)[-1]
        if finding.kind == "cuda_error" and self._repeated(attrs.get("error"), rank, lineno):
            return None
        if finding.kind == "rank_failed":
            self.places.failure(finding, where)
        event = Event(kind=finding.kind, message=(finding.message or text).strip()[:_MAX_MESSAGE],
                      severity=finding.severity, layer=finding.layer, host=where, rank=rank, gpu=gpu,
                      attrs=attrs, line=lineno)
        own = pre.stamp
        table_time = attrs.get("time") or attrs.get("root_cause_time")
        if finding.kind in ("rank_failed", "job_failed") and isinstance(table_time, str):
            if table := iso_stamp(table_time):
                own = _Stamp(table.ts, "torchelastic", table.raw)
        if own is not None:
            event.ts, event.ts_origin, event.ts_raw, event.ts_approx = own.ts, own.origin, own.raw, own.approx
        elif (neighbour or self.last) is not None:
            self._neighbour(event, neighbour or self.last)
        return event

    def _repeated(self, error: Any, rank: int | None, lineno: int) -> bool:
        """PyTorch prints one CUDA error twice (the Python exception, then C++ ``what():``): keep one."""
        for seen, seen_rank, seen_line in self.recent_cuda:
            if seen == error and (seen_rank == rank or seen_rank is None or rank is None) and lineno - seen_line < 40:
                return True
        self.recent_cuda.append((error, rank, lineno))
        return False

    def _sole_rank(self) -> int | None:
        """The rank of a one-rank log (its NCCL init lines name one rank, else its one environment dump
        does): the owner of its unprefixed lines (tracebacks, trainer output)."""
        if self.sole[0] != len(self.procs):
            ranks = {proc.rank for proc in self.procs.values() if proc.rank is not None}
            self.sole = (len(self.procs), next(iter(ranks)) if len(ranks) == 1 else None)
        return self.sole[1] if self.sole[1] is not None or self.procs else self.places.declared_rank()

    def _step(self, finding: Finding, pre: _Prefix) -> bool:
        """Give a step-time finding its rank's step and ordinal, or drop it: a progress marker (DeepSpeed
        prints ``step=N`` apart from its timers) only moves the rank's step mark, and past STEP_BUDGET
        steps only every n-th step number is kept."""
        rank = pre.rank if pre.rank is not None else finding.rank
        if rank is None:
            rank = self._sole_rank()
        attrs = finding.attrs
        key = (rank, attrs.get("framework"))
        if attrs.pop("progress", False):
            if key in self.step_marks or len(self.step_marks) < _MAX_PROCS:
                self.step_marks[key] = attrs["step"]
            return False
        if attrs.get("step") is None and key in self.step_marks:
            attrs["step"] = self.step_marks[key]
        if key not in self.step_count and len(self.step_count) >= _MAX_PROCS:
            return True
        self.step_count[key] += 1
        attrs["index"] = self.step_count[key]
        number = attrs["step"] if isinstance(attrs.get("step"), int) else attrs["index"]
        stride = self.step_stride.setdefault(key, [1, 0])
        if number % stride[0]:
            return False
        stride[1] += 1
        if stride[1] >= STEP_BUDGET:
            stride[0], stride[1] = stride[0] * 2, 0
        return True

    def _emit(self, finding: Finding, lineno: int, text: str, pre: _Prefix,
              neighbour: _Stamp | None = None) -> Iterator[Row]:
        if finding.kind == "step_time" and not self._step(finding, pre):
            return
        event = self._event(finding, lineno, text, pre, neighbour=neighbour)
        if event is None:
            return
        if event.kind == "nccl_timeout":
            yield from self._timeout(event, lineno)
            return
        yield from self._out(event)

    def _timeout(self, event: Event, lineno: int) -> Iterator[Row]:
        """The watchdog's timeout line and its ``last enqueued / last completed`` line are one event."""
        attrs = event.attrs
        key = attrs.get("pg_rank", event.rank)
        if attrs.get("reason") == "watchdog_progress":
            held = self.timeouts.pop(key, None)
            if held is not None and (held.event.attrs.get("seq") in (None, attrs.get("seq"))
                                     or attrs.get("seq") is None):
                for name, value in attrs.items():
                    if name != "reason":
                        held.event.attrs.setdefault(name, value)
                yield from self._out(held.event)
                return
            if held is not None:
                yield from self._out(held.event)
            yield from self._out(event)
            return
        if attrs.get("reason") == "watchdog_timeout":
            yield from self._hold(self.timeouts, key, event, lineno)
            return
        yield from self._out(event)

    def _hold(self, table: dict[Any, _Held], key: Any, event: Event, lineno: int) -> Iterator[Row]:
        previous = table.pop(key, None)
        if previous is not None:
            yield from self._out(previous.event)
        if len(table) >= _MAX_HELD:
            oldest = next(iter(table))
            yield from self._out(table.pop(oldest).event)
        table[key] = _Held(event, lineno)

    def _release_stale(self, lineno: int) -> Iterator[Row]:
        for table in (self.chains, self.timeouts):
            for key in [k for k, held in table.items() if lineno - held.line > _HOLD_LINES]:
                yield from self._out(table.pop(key).event)

    def _out(self, event: Event) -> Iterator[Row]:
        if event.ts is None and event.ts_origin == "none":
            if self.last is not None:
                self._neighbour(event, self.last)
            else:
                self.waiting.append(event)
                if len(self.waiting) > _MAX_WAITING:
                    yield from self._anchor(self.waiting[:_MAX_WAITING // 2])
                    self.waiting = self.waiting[_MAX_WAITING // 2:]
                return
        yield event

    def _anchor(self, events: list[Event]) -> Iterator[Row]:
        """No dated line anywhere: the file's mtime is the only clock left (the end of the log)."""
        when, origin = (self.ctx.mtime, "mtime") if self.ctx.mtime else (self.ctx.captured_at, "captured")
        for event in events:
            if when is not None:
                event.ts, event.ts_origin = to_utc(when), origin
            event.ts_approx = True
            yield event

    def _finish(self) -> Iterator[Row]:
        if self.cont is not None:
            yield from self._end_cont()
        for table in (self.chains, self.timeouts):
            for held in list(table.values()):
                yield from self._out(held.event)
            table.clear()
        for proc in self.procs.values():
            for comm_ptr, comm in proc.comms.items():
                if comm.state != "COMPLETE":
                    yield self._topology(proc, comm_ptr, comm)
        yield from self.places.rows({key for key, proc in self.procs.items() if proc.rank is not None})
        if self.waiting:
            yield from self._anchor(self.waiting)
            self.waiting = []


def _summary_text(finding: Finding) -> str | None:
    """A message for findings gathered from a table rather than read off one line."""
    a = finding.attrs
    if finding.kind == "rank_failed":
        return (f"torchrun: rank {a.get('rank')} (local_rank {a.get('local_rank')}) on {finding.host} exited with "
                f"{a.get('exitcode')}" + (f" ({a['signal']})" if a.get("signal") else "")
                + (f" at {a['time']}" if a.get("time") else "") + (" [root cause]" if a.get("root_cause") else ""))
    if finding.kind == "job_failed":
        who = (f": root cause rank {a['root_cause_rank']} on {a.get('root_cause_host')} exit code {a.get('exitcode')}"
               + (f" ({a['signal']})" if a.get("signal") else "")) if "root_cause_rank" in a else ""
        return f"torchrun: {a.get('script') or 'job'} failed ({a.get('exception') or 'worker failure'}){who}"
    return None


def _hit_lines(data: bytes, end: int) -> list[int]:
    """Indexes of the lines worth decoding, in order (see _hit_starts)."""
    return _line_numbers(data, _hit_starts(data, end))


def _hit_starts(data: bytes, end: int) -> list[int]:
    """Offsets of the lines worth decoding, in order: one RE2 pass over the block (_hits_regex) for the NCCL
    INFO lines topology needs and everything else, a hit of the rest counting only off NCCL INFO lines."""
    from collectors.framework.signatures import spans

    find, rfind = data.find, data.rfind
    starts = set()
    for start, _ in spans(_hits_regex(), data[:end]):
        line = rfind(b"\n", 0, start) + 1
        if data.startswith(b"NCCL INFO ", start) or find(b"NCCL INFO", line, find(b"\n", start, end)) < 0:
            starts.add(line)
    return sorted(starts)


_NUMPY_BYTES = 1 << 20
"""From this block size on newlines are counted on one numpy compare of the block (3x bytes.count's speed at
2 MiB); a smaller block, as a small rank log is, does not pay numpy's import."""


def _newline_counter(data: bytes, end: int) -> Callable[[int, int], int]:
    """How many newlines ``data[a:b]`` holds, for offsets up to ``end``."""
    if end < _NUMPY_BYTES:
        count = data.count
        return lambda a, b: count(b"\n", a, b)
    import numpy as np

    newline = np.frombuffer(data, dtype=np.uint8, count=end) == 10
    return lambda a, b: int(np.count_nonzero(newline[a:b]))


def _giant_starts(data: bytes, end: int) -> list[int]:
    """Offsets of the lines of ``data[:end]`` (which ends with a newline) longer than MAX_LINE_BYTES: a
    window of MAX_LINE_BYTES + 1 bytes without a newline holds one, else the lines up to its last newline fit."""
    found = []
    pos = 0
    while pos < end:
        newline = data.rfind(b"\n", pos, min(end, pos + MAX_LINE_BYTES + 1))
        if newline < 0:
            found.append(pos)
            newline = data.find(b"\n", pos, end)
        pos = newline + 1
    return found


def _lines_before(data: bytes, start: int, count: int) -> list[bytes]:
    """Up to ``count`` lines of ``data`` before the line that starts at ``start``."""
    if start <= 0:
        return []
    cut = start - 1
    for _ in range(count):
        cut = data.rfind(b"\n", 0, cut)
        if cut < 0:
            break
    return data[cut + 1:start - 1].split(b"\n")


@cache
def _hits_regex() -> Any:
    """One RE2 alternation of what makes a line worth decoding: the few NCCL INFO lines topology needs
    (_INFO_KEEP, or a ``file:line -> N`` error chain), every other NCCL line (WARN, ``NCCL error``,
    ProcessGroupNCCL's), CUDA errors, the NEEDLES and NUL bytes; _hit_lines drops the hits of all but the
    first on NCCL INFO lines. One DFA pass replaced a ``bytes.find`` sweep per needle over a copy of the
    block with its NCCL INFO lines blanked and a Python object per NCCL INFO line (3.6 s of 4.8 s per GiB)."""
    import re2

    options = re2.Options()
    options.max_mem = 64 << 20
    options.encoding = re2.Options.Encoding.LATIN1  # a byte each: a class such as ``[^I]`` takes invalid UTF-8
    info = rb"NCCL INFO (?:" + "|".join(_INFO_KEEP).encode() + rb"|[^\t\n\v\f\r :]+:[0-9]+ -> [0-9])"
    rest = [rb"NCCL(?: (?:[^I]|I[^N]|IN[^F]|INF[^O]|INFO[^ ])|[.(']|Utils)",
            rb"CU(?:DA (?:error|out of memory|driver error)|BLAS_STATUS_|DNN_STATUS_)",
            *(re.escape(n) for n in _NEEDLES), rb"\x00"]
    return re2.compile(b"|".join([info, *rest]), options)


def _line_numbers(buf: bytes, starts: list[int]) -> list[int]:
    """0-based line numbers of sorted line-start offsets."""
    out = []
    pos = n = 0
    for start in starts:
        n += buf.count(b"\n", pos, start)
        pos = start
        out.append(n)
    return out


# -- the collector interface ---------------------------------------------------------------------------------------


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--nccl-log", action="append", default=[], metavar="GLOB",
                        help="NCCL / PyTorch distributed / trainer log files to freeze (repeatable; ** recurses)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Copy the logs the responder named; without ``--nccl-log`` there is nothing to guess at."""
    patterns = [p for p in (ctx.options.get("nccl_log") or []) if p]
    if not patterns:
        ctx.missing("nccl logs", "unavailable: no --nccl-log given")
        return
    seen: set[str] = set()
    for pattern in patterns:
        files = [p for p in sorted(glob.glob(os.path.expanduser(pattern), recursive=True)) if os.path.isfile(p)]
        if not files:
            ctx.missing(pattern, "unavailable: no file matches")
            continue
        if len(files) > _MAX_FILES:
            ctx.missing(pattern, f"partial: {len(files)} files match, kept the first {_MAX_FILES}")
        for path in files[:_MAX_FILES]:
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            if size <= _CAPTURE_BYTES:
                parts = [ctx.read_file(path, kind="nccl_log")]
            else:
                parts = [ctx.read_file(path, kind="nccl_log", max_bytes=_HEAD_BYTES),
                         ctx.read_file(path, kind="nccl_log", max_bytes=_CAPTURE_BYTES - _HEAD_BYTES, tail=True)]
            yield from (artifact for artifact in parts if artifact is not None)


_SNIFF_NCCL = lazy_regex(r"[\w.\-]+:\d+:\d+ \[\d+\] (?:\S+ )?NCCL (?:INFO|WARN|ERROR)|^NCCL version \d", re.M)
_SNIFF_TORCH = lazy_regex(r"ProcessGroupNCCL|WorkNCCL\(|NCCL error|torch[./]distributed[./]elastic|ChildFailedError|"
                          r"Root Cause \(first observed failure\)|CUDA out of memory|CUDA error: |OutOfMemoryError|"
                          r"DistBackendError|ncclSystemError|ncclRemoteError|Not all ranks joining collective")
_SNIFF_TRAIN = lazy_regex(r"""['"]loss['"]: (?:nan|inf)|lm loss: (?:nan|NaN)|loss=nan|found NaN in|OVERFLOW! Rank|"""
                          r"Gradient overflow\.|elapsed time per iteration \(ms\)|\] rank=\d+ time \(ms\) \||"
                          r"global_step=\d+, RunningAvgSamplesPerSec=|\bstep:\s*\d+\s+loss:.{0,80}\btps:|"
                          r"""['"]train_runtime['"]:|\bstep[ :=]+\d+\b.{0,120}\bstep[_ ]time\b""")
"""Trainer logs without NCCL lines: NaN losses, and the step-timing lines torch_dist.step_time reads."""
_SNIFF_ENV = lazy_regex(r"^(?:\d{1,5}: )?(?:export |declare -x )?(?:SLURM_PROCID|SLURM_LOCALID|LOCAL_RANK)=[\"']?\d",
                        re.M)
"""An environment dump that says which rank a process was (collectors/framework/launcher_places.py)."""
_SNIFF_RANK_PREFIX = lazy_regex(r"^\[(?:rank|[A-Za-z_]+)\d+\]:", re.M)
"""torchrun --tee's per-rank prefix: a rank's log, whatever it says (a storage error in it keeps its rank)."""


def sniff(name: str, head: str) -> dict[str, int]:
    if TRACE_NAME.search(name):
        return {"nccl_trace": 85}
    if _SNIFF_NCCL.search(head):
        return {"nccl_log": 90}
    if _SNIFF_TORCH.search(head):
        return {"nccl_log": 70}
    if len(_SNIFF_RANK_PREFIX.findall(head, 0, 16384)) >= 3:
        return {"nccl_log": 75}
    if _SNIFF_TRAIN.search(head):
        return {"nccl_log": 40}
    if _SNIFF_ENV.search(head):
        return {"nccl_log": 30}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "nccl_trace":
        yield from trace_rows(ctx.source_name, ctx.host)
        return
    yield from _Reader(ctx).rows(stream)
