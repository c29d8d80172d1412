"""What a PyTorch-distributed, torchrun or trainer line says, for the NCCL log reader.

Not a collector of its own (it declares no NAME): a rank's log interleaves these lines with
NCCL's, and a ProcessGroupNCCL watchdog's rank only becomes a host and a GPU through the NCCL
init lines of the same file, so ``collectors/nccl.py`` walks the file once and asks this module
about every line that is not NCCL's own. Each reader takes the message with its prefixes
(``[rank3]:``, glog header, timestamp) already removed and returns a ``Finding`` (an event not yet
placed in time) and, for messages that go on over the next lines (tracebacks, the torchrun
failure table, a flight-recorder report), a ``Continuation`` that takes those lines.

Formats read (old and new spellings, from real logs):
- ProcessGroupNCCL watchdog: ``Watchdog caught collective operation timeout: WorkNCCL(SeqNum=…,
  OpType=…, NumelIn=…, NumelOut=…, Timeout(ms)=…) ran for … milliseconds``, the ``last enqueued /
  last completed NCCL work`` line, heartbeat monitor and stuck watchdog, collective mismatch
  (TORCH_DISTRIBUTED_DEBUG=DETAIL), ``Process group watchdog thread terminated with exception``.
- ``NCCL error in: FILE:LINE, unhandled system error, NCCL version X`` (RuntimeError,
  DistBackendError, ``what():``) with its ``ncclSystemError:`` / ``Last error:`` lines.
- CUDA errors (``CUDA error: …``, ``torch.AcceleratorError``, cuBLAS status) and CUDA
  out-of-memory in the PyTorch 1.x and 2.x wordings, with the allocator's numbers.
- NaN/Inf losses: HF Trainer dicts, Lightning progress bars, Megatron iteration lines and ``found
  NaN``, DeepSpeed/apex loss-scale overflows (skipped steps).
- torchrun / elastic: ``failed (exitcode: N) local_rank: N (pid: N)``, ``Sending process N closing
  signal SIGTERM``, exit-barrier timeouts, the ChildFailedError ``Failures`` / ``Root Cause`` table.
- flight recorder analysis (``fr_trace``): ``Not all ranks joining collective`` reports.
"""

from __future__ import annotations

import re
import signal
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from collectors.framework.lazy_re import lazy_regex

NCCL_RESULTS = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
"""ncclResult_t codes, as the ``-> N`` error-propagation lines print them."""

_RESULT_TEXT = {"unhandled cuda error": 1, "unhandled system error": 2, "internal error": 3,
                "invalid argument": 4, "invalid usage": 5,
                "remote process exited or there was a network error": 6}
"""ncclGetErrorString() wordings, which PyTorch puts in its NCCL error messages."""

NETWORK_RESULTS = {2, 6}
"""System (socket, ibverbs calls) and remote (peer exited, network) errors: the fabric's side."""

APP_FAULTS = ("illegal memory access", "misaligned address", "illegal instruction", "invalid program counter",
              "device-side assert", "illegal address")
"""CUDA errors that are the application's own kernel faulting (the Xid 13/31/43 family), not the GPU."""


@dataclass
class Finding:
    """An event read from one line, not yet placed in time or on a host: the reader does that."""

    kind: str
    severity: str
    attrs: dict[str, Any] = field(default_factory=dict)
    layer: str | None = None
    rank: int | None = None
    host: str | None = None
    line: int | None = None
    message: str | None = None


class Continuation(ABC):
    """Lines that belong to a finding already begun. The reader feeds it each next line: ``feed``
    returns False for a line that does not belong (the reader then reads that line on its own and
    calls ``finish``); each line taken costs one of ``budget``, and at zero the reader finishes it."""

    budget = 8

    @abstractmethod
    def feed(self, text: str, lineno: int) -> bool:
        """Take one more line, or say it is not part of this finding."""

    @abstractmethod
    def finish(self) -> list[Finding]:
        """The findings, complete with what the following lines added."""


# -- rank and process-group prefixes inside messages ----------------------------------------------------

_PG = lazy_regex(r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s(\]]+))?\s*(?:\((?P<name>[^)\]]*)\))?"
                 r"(?: Rank (?P<rank>\d+))?\]")
_RANK = lazy_regex(r"\[Rank (?P<rank>\d+)\]")


def pg_info(text: str) -> tuple[dict[str, Any], int | None]:
    """Process-group attrs and the rank to give the event: a sub-group's rank is not a global rank,
    so only the default group's (or a line without a group) names the event's rank."""
    attrs: dict[str, Any] = {}
    if m := _PG.search(text):
        pg_id = int(m.group("pg"))
        attrs["pg_id"] = pg_id
        name = m.group("name") or ("default_pg" if pg_id == 0 else None)
        attrs["pg"] = name or str(pg_id)
        if m.group("guid"):
            attrs["pg_guid"] = m.group("guid")
        if m.group("rank") is not None:
            attrs["pg_rank"] = int(m.group("rank"))
            return attrs, attrs["pg_rank"] if pg_id == 0 or name == "default_pg" else None
        return attrs, None
    if m := _RANK.search(text):
        attrs["pg_rank"] = int(m.group("rank"))
        return attrs, attrs["pg_rank"]
    return attrs, None


# -- ProcessGroupNCCL watchdog ---------------------------------------------------------------------------

_WATCHDOG = lazy_regex(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\)"
                       r"(?: ran for (?P<ran>\d+) milliseconds)?")
_WORK_FIELD = lazy_regex(r"(\w+(?:\(ms\))?)=([^,]+)")
_PROGRESS = lazy_regex(r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work|"
                       r"at work sequence id)[: ]+(?P<seq>\d+)")
_LAST_WORK = lazy_regex(r"[Ll]ast (?P<what>enqueued|started|completed)(?: NCCL)? work: (?P<seq>-?\d+)")
_BLOCKING = lazy_regex(r"Work WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\) timed out in blocking wait")
_DUMP_SIGNAL = lazy_regex(r"Received a (?:dump signal|global timeout)(?: due to a collective timeout)? from "
                          r"(?:this local rank|another rank|\s*rank (?P<src>-?\d+))")
"""The heartbeat monitor learning of a failure: its own rank's (``this local rank``) or the rank that
wrote the dump flag in the TCPStore first (2.4+ names it; 2.3 said ``a global timeout from another rank``)."""
_TERMINATING = lazy_regex(r"Terminating the process after attempting to dump debug info, due to (?P<why>.+?)\.?\s*$")
_HEARTBEAT = lazy_regex(r"Heartbeat monitor timed out!.*?(?:workMetaList_\.size\(\)\s*=\s*(?P<n>\d+))?$")
_STUCK = lazy_regex(r"watchdog got stuck for (?P<s>\d+) seconds")
_MISMATCH = lazy_regex(r"Detected mismatch between collectives on ranks\. Rank (?P<r1>\d+) is running collective: "
                       r"CollectiveFingerPrint\((?P<f1>.*?)\)+, but Rank (?P<r2>\d+) is running collective: "
                       r"CollectiveFingerPrint\((?P<f2>.*)\)")
_FP_FIELD = lazy_regex(r"(SequenceNumber|OpType|TensorShape|TensorDtypes)=(\[[^\]]*\]|[^,)]+)")
_WATCHDOG_DIED = lazy_regex(r"(?:Process group watchdog thread terminated with exception|"
                            r"NCCL watchdog thread terminated with exception): (?P<what>.*)")


def _int(text: str | None) -> int | None:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


def _watchdog(msg: str) -> Finding | None:
    m = _WATCHDOG.search(msg)
    reason = "watchdog_timeout"
    if not m:
        if not (m := _BLOCKING.search(msg)):
            return None
        reason = "blocking_wait"
    fields = dict(_WORK_FIELD.findall(m.group("fields")))
    attrs: dict[str, Any] = {"reason": reason, "seq": _int(fields.get("SeqNum")),
                             "op": (fields.get("OpType") or "").strip() or None,
                             "timeout_ms": _int(fields.get("Timeout(ms)")),
                             "elapsed_ms": _int(m.groupdict().get("ran"))}
    for key, name in (("NumelIn", "numel_in"), ("NumelOut", "numel_out")):
        if key in fields:
            attrs[name] = _int(fields[key])
    pg, rank = pg_info(msg)
    attrs.update(pg)
    attrs.update(_last_work(msg))
    return Finding("nccl_timeout", "error", attrs, rank=rank)


def _last_work(msg: str) -> dict[str, int]:
    return {f"last_{m.group('what')}": int(m.group("seq")) for m in _LAST_WORK.finditer(msg)}


def _watchdog_other(msg: str) -> Finding | None:
    if (m := _PROGRESS.search(msg)) or "last enqueued" in msg and _LAST_WORK.search(msg):
        attrs: dict[str, Any] = {"reason": "watchdog_progress"}
        if m:
            attrs["seq"] = int(m.group("seq"))
        attrs.update(_last_work(msg))
        pg, rank = pg_info(msg)
        attrs.update(pg)
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _DUMP_SIGNAL.search(msg):
        pg, rank = pg_info(msg)
        attrs = {"reason": "dump_signal", **_last_work(msg), **pg}
        if m.group("src") is not None:
            attrs["src_rank"] = int(m.group("src"))
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _TERMINATING.search(msg):
        pg, rank = pg_info(msg)
        return Finding("nccl_timeout", "critical", {"reason": "monitor_terminate", "error": m.group("why"), **pg},
                       rank=rank)
    if m := _HEARTBEAT.search(msg):
        pg, rank = pg_info(msg)
        attrs = {"reason": "heartbeat_monitor", "seq": None, "op": None, "timeout_ms": None, "elapsed_ms": None,
                 "pending_works": _int(m.group("n")), **pg}
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _STUCK.search(msg):
        pg, rank = pg_info(msg)
        seconds = int(m.group("s"))
        attrs = {"reason": "watchdog_stuck", "seq": None, "op": None, "timeout_ms": seconds * 1000,
                 "elapsed_ms": seconds * 1000, **pg}
        return Finding("nccl_timeout", "critical", attrs, rank=rank)
    if m := _MISMATCH.search(msg):
        mine = dict(_FP_FIELD.findall(m.group("f1")))
        theirs = dict(_FP_FIELD.findall(m.group("f2")))
        attrs = {"reason": "collective_mismatch", "seq": _int(mine.get("SequenceNumber")),
                 "op": mine.get("OpType"), "timeout_ms": None, "elapsed_ms": None,
                 "peer_rank": int(m.group("r2")), "peer_seq": _int(theirs.get("SequenceNumber")),
                 "peer_op": theirs.get("OpType")}
        for key in ("TensorShape", "TensorDtypes"):
            if key in mine:
                attrs[key.lower()] = mine[key]
            if key in theirs:
                attrs["peer_" + key.lower()] = theirs[key]
        return Finding("nccl_timeout", "error", attrs, rank=int(m.group("r1")))
    return None


# -- NCCL errors raised into Python / C++ ------------------------------------------------------------------

_NCCL_ERROR = lazy_regex(r"NCCL [Ee]rror(?: (?P<code>\d+))?(?: in: (?P<path>[^,\s]+?):(?P<lineno>\d+))?[,:]\s*"
                         r"(?P<text>[^,]+)"
                         r"(?:, NCCL version (?P<version>[\w.+\-]*\w))?")
_NCCL_RESULT_NAME = lazy_regex(r"\b(?P<name>nccl(?:UnhandledCuda|System|Internal|InvalidArgument|InvalidUsage|Remote)"
                               r"Error)\b(?::\s*(?P<desc>.*?)(?=\s+Last error:|$))?")
_LAST_ERROR = lazy_regex(r"Last error:\s*(?P<text>.*)$")
_EXCEPTION = lazy_regex(r"(?P<exc>(?:[A-Za-z_][\w]*(?:\.|::))*[A-Z]\w*(?:Error|Exception))\s*:")
_COLLECTIVE_CALL = lazy_regex(r"\b(?:dist|group|pg|process_group|torch\.distributed|c10d|self\.\w+)\."
                              r"(?P<op>all_?reduce\w*|all_?gather\w*|reduce_scatter\w*|broadcast\w*|barrier|"
                              r"all_to_all\w*|alltoall\w*|send|recv|isend|irecv|reduce|gather|scatter)\(")
_STORE_ERROR = lazy_regex(r"(?:store->get\('[^']*'\)|c10d key-value store).*?got error: (?P<text>.+)$")
_C10D_SOCKET = lazy_regex(r"\[c10d\] (?P<text>.*?(?:timed out|has failed|[Rr]efused|reset by peer|[Bb]roken pipe|"
                          r"unreachable|[Nn]o route).*)$")
_DIST_ERROR = lazy_regex(r"(?P<exc>torch\.distributed\.Dist(?:Backend|Network|Store)Error|Dist(?:Network|Store)Error)"
                         r":\s*(?P<text>.*)")


def nccl_result_from_text(text: str) -> int | None:
    low = text.lower()
    for words, code in _RESULT_TEXT.items():
        if words in low:
            return code
    return None


def _kind_for_result(code: int | None) -> tuple[str, str]:
    if code == 1:
        return "cuda_error", "gpu"
    if code in NETWORK_RESULTS or code is None:
        return "nccl_net_error", "network_storage"
    return "nccl_error", "gpu"


def _nccl_error(msg: str, exception: str | None = None) -> tuple[Finding, Continuation] | None:
    m = _NCCL_ERROR.search(msg)
    if not m:
        return None
    text = m.group("text").split(" (run with")[0].strip().rstrip(".")
    code = nccl_result_from_text(text)
    if code is None and m.group("code"):
        code = int(m.group("code"))
    attrs: dict[str, Any] = {"error": text}
    if m.group("path"):
        attrs["file"] = f"{m.group('path').rsplit('/', 1)[-1]}:{m.group('lineno')}"
    if m.group("version"):
        attrs["nccl_version"] = m.group("version")
    if e := _EXCEPTION.search(msg[:m.start()]):
        attrs["exception"] = e.group("exc")
    elif exception:
        attrs["exception"] = exception
    if r := _NCCL_RESULT_NAME.search(msg, m.end()):
        attrs["nccl_error"] = r.group("name")
        code = code if code is not None else _code_of(r.group("name"))
    if code is not None:
        attrs["nccl_result"] = code
        attrs.setdefault("nccl_error", NCCL_RESULTS.get(code))
    if last := _LAST_ERROR.search(msg):
        attrs["last_error"] = last.group("text").strip()
    if "taking the entire process down" in msg:
        attrs["action"] = "terminate"
    pg, rank = pg_info(msg)
    attrs.update(pg)
    kind, layer = _kind_for_result(code)
    if kind == "cuda_error":
        attrs["error"] = f"NCCL {text}"
    finding = Finding(kind, "error", attrs, layer=layer, rank=rank)
    return finding, _NcclErrorTrace(finding)


def _code_of(name: str) -> int | None:
    for code, known in NCCL_RESULTS.items():
        if known == name:
            return code
    return None


class _NcclErrorTrace(Continuation):
    """``ncclSystemError: …``, ``Last error:`` and the next line, and the collective call of the
    traceback, which PyTorch prints on the lines after an NCCL error."""

    budget = 6

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        self.last_pending = False

    def feed(self, text: str, lineno: int) -> bool:
        attrs = self.finding.attrs
        stripped = text.strip()
        if self.last_pending:
            self.last_pending = False
            attrs["last_error"] = stripped
            return True
        if m := _NCCL_RESULT_NAME.match(stripped):
            attrs["nccl_error"] = m.group("name")
            if m.group("desc"):
                attrs["nccl_error_text"] = m.group("desc").strip()
            code = _code_of(m.group("name"))
            if code is not None and "nccl_result" not in attrs:
                attrs["nccl_result"] = code
            return True
        if stripped.startswith("Last error:"):
            rest = stripped[len("Last error:"):].strip()
            if rest:
                attrs["last_error"] = rest
            else:
                self.last_pending = True
            return True
        if m := _COLLECTIVE_CALL.search(text):
            attrs.setdefault("collective", m.group("op"))
            return True
        return False

    def finish(self) -> list[Finding]:
        return [self.finding]


# -- CUDA errors and out-of-memory ---------------------------------------------------------------------------

_CUDA_ERROR = lazy_regex(r"(?P<err>CUDA error: (?P<what>[^.\n]*?(?:\.\.\.)?)|CUDA driver error: [^.\n]*|"
                         r"CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|cudaError\w+)"
                         r"(?=\s*(?:\(|$|\.|,|;|\n|CUDA kernel errors|Search for|For debugging|Compile with|"
                         r"Exception raised))")
_OOM = lazy_regex(r"CUDA out of memory\. Tried to allocate (?P<tried>[\d.]+ [KMGT]?i?B)")
_OOM_FIELDS = (
    ("gpu_index", re.compile(r"\(?GPU (\d+)[;)]? (?:has a total|[\d.]+ [KMGT]i?B total)")),
    ("total_capacity", re.compile(r"total capac(?:i)?ty of ([\d.]+ [KMGT]?i?B)|([\d.]+ [KMGT]?i?B) total capacity")),
    ("free", re.compile(r"of which ([\d.]+ [KMGT]?i?B) is free|([\d.]+ [KMGT]?i?B) free")),
    ("process_in_use", re.compile(r"this process has ([\d.]+ [KMGT]?i?B) memory in use")),
    ("allocated_by_pytorch", re.compile(r"([\d.]+ [KMGT]?i?B) is allocated by PyTorch|"
                                        r"([\d.]+ [KMGT]?i?B) already allocated")),
    ("reserved_unallocated", re.compile(r"([\d.]+ [KMGT]?i?B) is reserved by PyTorch but unallocated")),
    ("reserved_total", re.compile(r"([\d.]+ [KMGT]?i?B) reserved in total by PyTorch")),
)
_UNITS = {"B": 1 / (1 << 20), "KB": 1 / 1024, "KiB": 1 / 1024, "MB": 1.0, "MiB": 1.0, "GB": 1024.0, "GiB": 1024.0,
          "TB": 1 << 20, "TiB": 1 << 20}


def to_mib(text: str) -> float | None:
    """``30.29 GiB`` -> 31016.96 (PyTorch prints binary units, sometimes spelled GB)."""
    parts = text.split()
    if len(parts) != 2 or parts[1] not in _UNITS:
        return None
    try:
        return round(float(parts[0]) * _UNITS[parts[1]], 2)
    except ValueError:
        return None


def _cuda_error(msg: str, exception: str | None = None) -> tuple[Finding, Continuation] | None:
    if m := _OOM.search(msg):
        attrs: dict[str, Any] = {"error": "CUDA out of memory", "oom": True, "tried_alloc": m.group("tried"),
                                 "tried_alloc_mib": to_mib(m.group("tried"))}
        for name, pattern in _OOM_FIELDS:
            if f := pattern.search(msg):
                value = next(g for g in f.groups() if g is not None)
                if name == "gpu_index":
                    attrs[name] = int(value)
                else:
                    attrs[name] = value
                    attrs[f"{name}_mib"] = to_mib(value)
    elif m := _CUDA_ERROR.search(msg):
        error = m.group("err").strip().rstrip(".")
        attrs = {"error": error}
        low = error.lower()
        if "out of memory" in low:
            attrs["oom"] = True
        if any(words in low for words in APP_FAULTS):
            attrs["app_fault"] = True
        if "uncorrectable ecc" in low:
            attrs["ecc"] = True
    else:
        return None
    if e := _EXCEPTION.search(msg[:m.start()]):
        attrs["exception"] = e.group("exc")
    elif exception:
        attrs["exception"] = exception
    if _WATCHDOG_DIED.search(msg):
        attrs["origin"] = "ProcessGroupNCCL watchdog"
    pg, rank = pg_info(msg)
    attrs.update(pg)
    finding = Finding("cuda_error", "error", attrs, layer="gpu", rank=rank)
    return finding, _CudaErrorTrace(finding)


_CUDA_TRAILER = ("CUDA kernel errors might be", "For debugging consider passing", "Compile with `TORCH_USE_CUDA_DSA`",
                 "Device-side assertion", "Device-side assertions")
_SEARCH_FOR = lazy_regex(r"Search for `(?P<name>\w+)'")
_RAISED = lazy_regex(r"Exception raised from (?P<func>\S+) at (?P<path>\S+?):(?P<line>\d+)")


class _CudaErrorTrace(Continuation):
    """The fixed sentences PyTorch adds under a CUDA error, the CUDA enum name, and the C++ frame
    that raised it."""

    budget = 8

    def __init__(self, finding: Finding) -> None:
        self.finding = finding

    def feed(self, text: str, lineno: int) -> bool:
        stripped = text.strip()
        if not stripped or stripped.startswith(_CUDA_TRAILER):
            return True
        if m := _SEARCH_FOR.search(stripped):
            self.finding.attrs["cuda_error_name"] = m.group("name")
            return True
        if m := _RAISED.search(stripped):
            self.finding.attrs["raised_from"] = m.group("func")
            self.finding.attrs.setdefault("file", f"{m.group('path').rsplit('/', 1)[-1]}:{m.group('line')}")
            self.budget = 0
            return True
        return False

    def finish(self) -> list[Finding]:
        return [self.finding]


class _Terminate(Continuation):
    """``terminate called after throwing an instance of 'X'`` names the exception of the
    ``what():`` line that follows; that line is then read like any other, knowing its type."""

    budget = 3

    def __init__(self, exception: str) -> None:
        self.exception = exception
        self.inner: Continuation | None = None
        self.findings: list[Finding] = []

    def feed(self, text: str, lineno: int) -> bool:
        if self.inner is not None:
            if not self.inner.feed(text, lineno):
                return False
            self.inner.budget -= 1
            self.budget = self.inner.budget + 1
            return True
        stripped = text.strip()
        if not stripped.startswith("what():"):
            return False
        finding, cont = classify(stripped[len("what():"):].strip(), lineno, exception=self.exception)
        if finding is not None:
            finding.attrs.setdefault("exception", self.exception)
            self.findings.append(finding)
        self.inner = cont
        self.budget = cont.budget + 1 if cont else 1
        return True

    def finish(self) -> list[Finding]:
        if self.inner is not None:
            inner = self.inner.finish()
            return inner or self.findings
        return self.findings


_TERMINATE = lazy_regex(r"terminate called after throwing an instance of '(?P<exc>[^']+)'")


# -- NaN / Inf losses and loss-scale overflows -----------------------------------------------------------------

_NAN_READERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hf_trainer", re.compile(r"""['"](?P<metric>\w*loss\w*|grad_norm)['"]\s*:\s*(?P<value>-?(?:nan|inf))\b""", re.I)),
    ("megatron", re.compile(r"(?:^|\|)\s*(?P<metric>lm loss|[\w ]*loss|grad norm)\s*:\s*(?P<value>-?(?:nan|inf))\b",
                            re.I)),
    ("lightning", re.compile(r"\b(?P<metric>\w*loss\w*|grad_norm\w*)=(?P<value>-?(?:nan|inf))\b", re.I)),
    ("generic", re.compile(r"\b(?P<metric>loss)\s+(?:is|=|became)\s+(?P<value>-?(?:nan|inf))\b", re.I)),
    ("megatron", re.compile(r"found (?P<value>NaN|Inf|nan|inf) in (?P<metric>local [\w ]+?)(?: calculation|\.|,|$)")),
    ("megatron", re.compile(r"number of (?P<value>nan) iterations:\s*(?P<count>[1-9]\d*)")),
)
_OVERFLOW = (
    ("deepspeed", re.compile(r"OVERFLOW! Rank (?P<rank>\d+) Skipping step\."
                             r"(?: Attempted loss scale: (?P<scale>[\d.e+]+), reducing to (?P<new>[\d.e+]+))?")),
    ("deepspeed", re.compile(r"(?:dynamic loss scale|Grad) overflow!?.{0,40}?Skipping step"
                             r"(?:\. Attempted loss scale: (?P<scale>[\d.e+]+), reducing to (?P<new>[\d.e+]+))?")),
    ("apex", re.compile(r"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to "
                        r"(?P<new>[\d.e+]+)")),
)
_STEP = lazy_regex(r"\b(?:global_step|iteration|step|iter)\b\D{0,3}(?P<step>\d+)", re.I)


def _nan_loss(msg: str) -> Finding | None:
    for framework, pattern in _NAN_READERS:
        if m := pattern.search(msg):
            attrs: dict[str, Any] = {"value": m.group("value").lower(), "metric": m.group("metric").strip(),
                                     "framework": framework}
            if "count" in m.groupdict() and m.group("count"):
                attrs["count"] = int(m.group("count"))
            if s := _STEP.search(msg):
                attrs["step"] = int(s.group("step"))
            rank = int(r.group(1)) if (r := re.search(r"\bRank (\d+):", msg)) else None
            return Finding("nan_loss", "warning", attrs, layer="gpu", rank=rank)
    for framework, pattern in _OVERFLOW:
        if m := pattern.search(msg):
            groups = m.groupdict()
            attrs = {"value": "overflow", "overflow": True, "skipped_step": True, "framework": framework}
            if groups.get("scale"):
                attrs["loss_scale"] = float(groups["scale"])
            if groups.get("new"):
                attrs["new_loss_scale"] = float(groups["new"])
            rank = int(groups["rank"]) if groups.get("rank") else None
            return Finding("nan_loss", "info", attrs, layer="gpu", rank=rank)
    return None


# -- step timing: how long each training step took, per rank ---------------------------------------------------

STEP_NEEDLES = ("time", "it/s", "s/it", "SamplesPerSec", "ps: ", "skipped=")
"""Literal words every step-timing line below contains (``time`` covers Megatron's ``elapsed time per
iteration``, DeepSpeed's ``time (ms)``, ``step_time``, ``iter time``, HF's ``train_runtime``;
``skipped=`` DeepSpeed's progress line): the NCCL reader's prefilter sweeps the raw bytes for them."""

_ANSI = lazy_regex(r"\x1b\[[0-9;]*m")
_NUM = r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?"
_MEGATRON = lazy_regex(rf"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|.*?"
                       rf"elapsed time per iteration \(ms\):\s*(?P<v>{_NUM})")
_MEGATRON_TFLOPS = lazy_regex(rf"throughput per GPU \(TFLOP/s/GPU\):\s*(?P<v>{_NUM})")
_DS_PROGRESS = lazy_regex(r"\bstep=(?P<step>\d+), skipped=\d+")
_DS_TIMES = lazy_regex(r"time \(ms\) \|(?P<fields>.*)$")
_DS_FIELD = lazy_regex(rf"(?P<name>[a-z_]+):\s*(?P<v>{_NUM})")
_DS_RATE = lazy_regex(rf"(?:epoch=(?P<epoch>\d+)/micro_step=\d+/global_step=(?P<step>\d+)|\b(?P<epoch2>\d+)/"
                      rf"(?P<step2>\d+)),\s*(?:RunningAvg)?SamplesPerSec=(?P<avg>{_NUM})"
                      rf"(?:,\s*CurrSamplesPerSec=(?P<cur>{_NUM}))?")
_TITAN = lazy_regex(rf"\bstep:\s*(?P<step>\d+)\s+loss:.*?\b(?P<unit>tps|wps):\s*(?P<v>{_NUM})")
_TITAN_MFU = lazy_regex(rf"\bmfu:\s*(?P<v>{_NUM})%")
_TQDM = lazy_regex(rf"(?:\b[Ee]poch\s+(?P<epoch>\d+)\b[^|]*)?\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+|\?)\s*"
                   rf"\[[\d:]+<[^,\]]*,\s*(?P<v>{_NUM})(?P<unit>s/it|it/s)")
_HF_RUNTIME = lazy_regex(rf"""['"]train(?P<per_step>_step)?_runtime['"]:\s*(?P<v>{_NUM})""")
_HF_FIELD = lazy_regex(rf"""['"](?P<name>train_steps_per_second|train_samples_per_second|epoch|step)['"]:\s*"""
                       rf"(?P<v>{_NUM})")
_PLAIN_KEY = lazy_regex(r"(?P<key>step[_ ]time|per[-_ ]step time|time[_ ]per[_ ](?:step|iter(?:ation)?)|time/step|"
                        r"iter(?:ation)?[_ ]time|batch[_ ]time)"
                        rf"(?:\s*\((?P<paren>ms|s)\))?(?P<ms_key>_ms)?[\s:=]*(?P<v>{_NUM})\s*(?P<unit>ms|s|sec)?\b")
_PLAIN_STEP = lazy_regex(r"\b(?:global[_ ]step|steps?|iteration|iter)\b[\s:=#]*(?P<step>\d+)(?:\s*/\s*\d+)?\b")
"""``step N … step_time X`` and its spellings, matched on the lower-cased line: the key after the step."""
_MSG_RANK = lazy_regex(r"\[[Rr]ank ?(\d+)\]|\brank=(\d+)")


def _num(text: str | None) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def step_time(msg: str) -> Finding | None:
    """A training step's duration (``seconds``) or throughput, as the common trainers log it::

        Megatron-LM   iteration     1200/    5000 | consumed samples: … | elapsed time per iteration (ms): 1432.1 | …
        DeepSpeed     [Rank 3] rank=3 time (ms) | forward: 402.1 | backward: 880.5 | backward_inner: 861.2 | …
                      epoch=0/micro_step=4500/global_step=4500, RunningAvgSamplesPerSec=16.1, CurrSamplesPerSec=16.8
                      [Rank 3] step=1200, skipped=0, lr=[…]   (progress true: no duration, only the step)
        torchtitan    step: 14  loss:  3.24405  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%
        HF / Lightning tqdm bars (`` 51%|█████ | 507/1000 [15:32<16:42,  2.03s/it]``) and the Trainer's
                      ``{'train_runtime': …, 'train_steps_per_second': …}`` summary
        plain         step 1200 | loss 2.27 | step_time 1.43s   /   Step 100 per-step time 0.813s

    attrs: step, seconds (per step) or throughput with unit, measure (``step``: the whole step's wall
    time, which every rank of a synchronous job shares; ``compute``: forward/backward/optimizer without
    the wait for the others, where a slow rank shows), framework, and what else the line gives."""
    if "\x1b" in msg:
        msg = _ANSI.sub("", msg)
    if "\r" in msg:
        msg = next((part for part in reversed(msg.split("\r")) if "/it" in part or "it/s" in part), msg)
    attrs: dict[str, Any] | None = None
    if "per iteration" in msg and (m := _MEGATRON.search(msg)):
        attrs = {"framework": "megatron", "step": int(m.group("step")), "total_steps": int(m.group("total")),
                 "seconds": round(_num(m.group("v")) / 1000, 6), "measure": "step"}
        if t := _MEGATRON_TFLOPS.search(msg, m.end()):
            attrs["tflops_per_gpu"] = _num(t.group("v"))
    elif "time (ms)" in msg and (m := _DS_TIMES.search(msg)):
        attrs = _deepspeed_times(m.group("fields"))
    elif "SamplesPerSec=" in msg and (m := _DS_RATE.search(msg)):
        rate = _num(m.group("cur") or m.group("avg"))
        attrs = {"framework": "deepspeed", "step": int(m.group("step") or m.group("step2")),
                 "epoch": int(m.group("epoch") or m.group("epoch2")), "throughput": rate, "unit": "samples/s",
                 "measure": "step"}
    elif "skipped=" in msg and (m := _DS_PROGRESS.search(msg)):
        attrs = {"framework": "deepspeed", "step": int(m.group("step")), "progress": True}
    elif "ps:" in msg and (m := _TITAN.search(msg)):
        attrs = {"framework": "torchtitan", "step": int(m.group("step")), "throughput": _num(m.group("v")),
                 "unit": "tokens/s" if m.group("unit") == "tps" else "words/s", "measure": "step"}
        if f := _TITAN_MFU.search(msg, m.end()):
            attrs["mfu_pct"] = _num(f.group("v"))
    elif ("/it" in msg or "it/s" in msg) and (m := _TQDM.search(msg)):
        rate = _num(m.group("v"))
        attrs = {"framework": "tqdm", "step": int(m.group("n")), "measure": "step",
                 "seconds": rate if m.group("unit") == "s/it" else (round(1 / rate, 6) if rate else None)}
        if m.group("total").isdigit():
            attrs["total_steps"] = int(m.group("total"))
        if m.group("epoch"):
            attrs["epoch"] = int(m.group("epoch"))
    elif "_runtime" in msg and (m := _HF_RUNTIME.search(msg)):
        attrs = _hf_metrics(msg, m)
    elif (m := _plain(msg)) is not None:
        key, step = m
        value = _num(key.group("v"))
        in_ms = key.group("unit") == "ms" or key.group("paren") == "ms" or bool(key.group("ms_key"))
        attrs = {"framework": "plain", "step": int(step.group("step")), "measure": "step",
                 "seconds": round(value / 1000, 6) if in_ms and value is not None else value}
    if attrs is None or (attrs.get("seconds") is None and attrs.get("throughput") is None
                         and not attrs.get("progress")):
        return None
    rank = None
    if r := _MSG_RANK.search(msg):
        rank = int(r.group(1) or r.group(2))
    return Finding("step_time", "info", attrs, layer="gpu", rank=rank)


def _plain(msg: str) -> tuple[re.Match[str], re.Match[str]] | None:
    low = msg.lower()
    at = low.find("time")
    if at < 0:
        return None
    key = _PLAIN_KEY.search(low, max(0, at - 10))
    step = _PLAIN_STEP.search(low, 0, key.start()) if key else None
    return (key, step) if key and step else None


def _deepspeed_times(fields: str) -> dict[str, Any] | None:
    """DeepSpeed's wall_clock_breakdown: the global timers (not the ``_microstep`` ones, not the
    optimizer's own). compute = forward + backward without the gradient all-reduce + optimizer step."""
    ms = {m.group("name"): _num(m.group("v")) for m in _DS_FIELD.finditer(fields)}
    ms = {name: value for name, value in ms.items() if value is not None and not name.endswith("_microstep")}
    forward = ms.get("forward", ms.get("fwd"))
    backward = ms.get("backward_inner", ms.get("bwd_inner", ms.get("backward", ms.get("bwd"))))
    if forward is None or backward is None:
        return None
    compute = forward + backward + ms.get("step", 0.0)
    return {"framework": "deepspeed", "step": None, "seconds": round(compute / 1000, 6), "measure": "compute",
            "breakdown_ms": ms}


def _hf_metrics(msg: str, m: re.Match[str]) -> dict[str, Any] | None:
    """The HF Trainer's ``train_runtime`` summary (the run's mean step time, no step) or a per-step
    ``train_step_runtime``."""
    fields = {f.group("name"): _num(f.group("v")) for f in _HF_FIELD.finditer(msg)}
    runtime = _num(m.group("v"))
    if m.group("per_step"):
        attrs: dict[str, Any] = {"framework": "hf_trainer", "step": None, "seconds": runtime, "measure": "step"}
    else:
        per_second = fields.get("train_steps_per_second")
        attrs = {"framework": "hf_trainer", "step": None, "summary": True, "train_runtime_s": runtime,
                 "measure": "step", "seconds": round(1 / per_second, 6) if per_second else None}
        if fields.get("train_samples_per_second") is not None:
            attrs["throughput"], attrs["unit"] = fields["train_samples_per_second"], "samples/s"
    if fields.get("step") is not None:
        attrs["step"] = int(fields["step"])
    if fields.get("epoch") is not None:
        attrs["epoch"] = fields["epoch"]
    return attrs if attrs.get("seconds") is not None or attrs.get("throughput") is not None else None


# -- torchrun / torch.distributed.elastic -------------------------------------------------------------------

_CHILD_FAILED = lazy_regex(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<lrank>\d+) \(pid: (?P<pid>\d+)\)"
                           r"(?: of (?:binary|fn): (?P<binary>\S+))?")
_SENDING = lazy_regex(r"Sending process (?P<pid>\d+) closing signal (?P<sig>SIG\w+)")
_GOT_SIGNAL = lazy_regex(r"(?:Process (?P<pid>\d+) got signal: (?P<num>\d+))|(?:Received (?P<sig>SIG\w+) death signal)")
_BARRIER = lazy_regex(r"Error waiting on exit barrier\. Elapsed: (?P<s>[\d.]+) seconds")
_SUMMARY_START = lazy_regex(r"ChildFailedError|^Root Cause \(first observed failure\):|^Failures:\s*$")


def signal_name(exitcode: int | None) -> str | None:
    """A negative torchrun exit code is the signal that killed the rank."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


def _elastic(msg: str, lineno: int) -> tuple[Finding | None, Continuation | None] | None:
    if m := _CHILD_FAILED.search(msg):
        code = int(m.group("code"))
        attrs: dict[str, Any] = {"exitcode": code, "local_rank": int(m.group("lrank")), "pid": int(m.group("pid"))}
        if m.group("binary"):
            attrs["binary"] = m.group("binary")
        if sig := signal_name(code):
            attrs["signal"] = sig
        return Finding("rank_failed", "error", attrs, layer="scheduling"), None
    if m := _SENDING.search(msg):
        return Finding("process_signal", "warning", {"pid": int(m.group("pid")), "signal": m.group("sig"),
                                                     "action": "sent"}, layer="scheduling"), None
    if m := _GOT_SIGNAL.search(msg):
        attrs = {"action": "received"}
        if m.group("pid"):
            attrs["pid"] = int(m.group("pid"))
            attrs["signal"] = signal_name(-int(m.group("num"))) or m.group("num")
        else:
            attrs["signal"] = m.group("sig")
        return Finding("process_signal", "warning", attrs, layer="scheduling"), None
    if m := _BARRIER.search(msg):
        return Finding("exit_barrier_timeout", "warning", {"elapsed_s": float(m.group("s"))}, layer="scheduling"), None
    if _SUMMARY_START.search(msg.strip()):
        summary = _ElasticSummary(lineno)
        summary.feed(msg, lineno)
        return None, summary
    return None


_ENTRY = lazy_regex(r"^\[(?P<n>\d+)\]:\s*$")
_FIELD = lazy_regex(r"^(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s*(?P<value>.*)$")
_RANK_FIELD = lazy_regex(r"(?P<rank>-?\d+)(?: \(local_rank: (?P<lrank>-?\d+)\))?")
_EXIT_FIELD = lazy_regex(r"(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_SIGNAL_TEXT = lazy_regex(r"Signal (?P<num>\d+) \((?P<sig>SIG\w+)\)")


class _ElasticSummary(Continuation):
    """The ChildFailedError report torchrun prints when a rank dies::

        torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
        ============================================================
        train.py FAILED
        ------------------------------------------------------------
        Failures:
          <NO_OTHER_FAILURES>
        ------------------------------------------------------------
        Root Cause (first observed failure):
        [0]:
          time      : 2026-08-13_08:21:19
          host      : zkrh-58
          rank      : 6 (local_rank: 6)
          exitcode  : -6 (pid: 1246013)
          error_file: <N/A>
          traceback : Signal 6 (SIGABRT) received by PID 1246013

    One ``rank_failed`` per entry (``root_cause`` true for the first observed failure) and one
    ``job_failed`` carrying the root cause's rank, host, exit code and signal."""

    budget = 80

    def __init__(self, lineno: int) -> None:
        self.first_line = lineno
        self.exception: str | None = None
        self.script: str | None = None
        self.section = "failures"
        self.entries: list[dict[str, Any]] = []
        self.in_traceback = False

    def feed(self, text: str, lineno: int) -> bool:
        stripped = text.strip()
        if "ChildFailedError" in stripped:
            self.exception = "ChildFailedError"
            return True
        if not stripped or set(stripped) <= {"=", "-"}:
            self.in_traceback = False
            return True
        if stripped.endswith(" FAILED") and " " not in stripped[:-7]:
            self.script = stripped[:-7]
            return True
        if stripped.startswith("Root Cause"):
            self.section = "root_cause"
            return True
        if stripped == "Failures:" or stripped == "<NO_OTHER_FAILURES>":
            self.section = "failures" if stripped == "Failures:" else self.section
            return True
        if m := _ENTRY.match(stripped):
            self.entries.append({"section": self.section, "line": lineno, "entry": int(m.group("n"))})
            self.in_traceback = False
            return True
        if self.entries and (m := _FIELD.match(stripped)):
            entry = self.entries[-1]
            entry[m.group("key")] = m.group("value").strip()
            self.in_traceback = m.group("key") == "traceback"
            return True
        if self.in_traceback and self.entries and text[:1].isspace():
            entry = self.entries[-1]
            if len(entry.get("traceback", "")) < 4000:
                entry["traceback"] = (entry.get("traceback", "") + "\n" + stripped).strip()
            return True
        return False

    def finish(self) -> list[Finding]:
        findings: list[Finding] = []
        root: Finding | None = None
        for entry in self.entries[:1024]:
            attrs: dict[str, Any] = {"root_cause": entry["section"] == "root_cause"}
            rank = None
            if m := _RANK_FIELD.match(entry.get("rank", "")):
                rank = int(m.group("rank"))
                attrs["rank"] = rank
                if m.group("lrank") is not None:
                    attrs["local_rank"] = int(m.group("lrank"))
            if m := _EXIT_FIELD.match(entry.get("exitcode", "")):
                attrs["exitcode"] = int(m.group("code"))
                if m.group("pid"):
                    attrs["pid"] = int(m.group("pid"))
            for key in ("time", "error_file", "traceback"):
                if entry.get(key):
                    attrs[key] = entry[key]
            sig = signal_name(attrs.get("exitcode"))
            if m := _SIGNAL_TEXT.search(entry.get("traceback", "")):
                sig = m.group("sig")
            if sig:
                attrs["signal"] = sig
            if self.script:
                attrs["script"] = self.script
            finding = Finding("rank_failed", "error", attrs, layer="scheduling", rank=rank,
                              host=entry.get("host") or None, line=entry["line"])
            findings.append(finding)
            if attrs["root_cause"] and root is None:
                root = finding
        if findings or self.exception or self.script:
            attrs = {"exception": self.exception, "script": self.script}
            if root is not None:
                for key in ("rank", "local_rank", "exitcode", "signal", "time", "pid"):
                    if key in root.attrs:
                        attrs[f"root_cause_{key}" if key != "signal" and key != "exitcode" else key] = root.attrs[key]
                attrs["root_cause_host"] = root.host
            findings.append(Finding("job_failed", "critical", {k: v for k, v in attrs.items() if v is not None},
                                    layer="scheduling", rank=root.rank if root else None,
                                    host=root.host if root else None, line=self.first_line))
        return findings


# -- flight recorder analysis ------------------------------------------------------------------------------------

_FR_START = lazy_regex(r"Not all ranks joining collective(?::? sequence number:? (?P<seq>\d+)|\s+(?P<seq2>\d+))?")
_FR_FIELD = lazy_regex(r"^(?P<key>internal record id|group info|collective|missing ranks|input sizes|output sizes|"
                       r"world size|expected ranks|collective state|sequence number)\s*:\s*(?P<value>.*)$")


class _FlightRecorder(Continuation):
    """An ``fr_trace`` report: which ranks never joined collective N of a process group."""

    budget = 14

    def __init__(self, finding: Finding) -> None:
        self.finding = finding

    def feed(self, text: str, lineno: int) -> bool:
        m = _FR_FIELD.match(text.strip())
        if not m:
            return False
        key, value = m.group("key"), m.group("value").strip()
        attrs = self.finding.attrs
        if key in ("missing ranks", "expected ranks"):
            attrs[key.replace(" ", "_")] = sorted(int(x) for x in re.findall(r"-?\d+", value))[:4096]
        elif key in ("world size", "sequence number", "internal record id"):
            attrs[{"world size": "world_size", "sequence number": "seq", "internal record id": "record_id"}[key]] = \
                _int(value)
        elif key == "group info":
            pg_id, _, name = value.partition(":")
            attrs["pg"] = name or pg_id
            if pg_id.isdigit():
                attrs["pg_id"] = int(pg_id)
        elif key == "collective":
            attrs["op"] = value
        elif key == "collective state":
            attrs["state"] = value
        else:
            attrs[key.replace(" ", "_")] = value[:200]
        return True

    def finish(self) -> list[Finding]:
        return [self.finding]


# -- entry point -------------------------------------------------------------------------------------------------


def classify(msg: str, lineno: int, exception: str | None = None) -> tuple[Finding | None, Continuation | None]:
    """What one message says, and whether the next lines belong to it."""
    if "WorkNCCL" in msg and (finding := _watchdog(msg)):
        return finding, None
    if ("watchdog" in msg or "NCCL work" in msg or "Heartbeat" in msg or "mismatch between" in msg
            or "last enqueued" in msg or "dump debug info" in msg):
        died = _WATCHDOG_DIED.search(msg)
        if died is None and (finding := _watchdog_other(msg)):
            return finding, None
    if "terminate called" in msg and (m := _TERMINATE.search(msg)):
        what = msg.find("what():", m.end())
        if what < 0:
            return None, _Terminate(m.group("exc"))
        finding, cont = classify(msg[what + len("what():"):].strip(), lineno, exception=m.group("exc"))
        if finding is not None:
            finding.attrs.setdefault("exception", m.group("exc"))
            finding.attrs["action"] = "terminate"
            finding.message = msg
        return finding, cont
    if ("NCCL error" in msg or "NCCL Error" in msg) and (found := _nccl_error(msg, exception)):
        return found
    if ("got error:" in msg and (m := _STORE_ERROR.search(msg))) or ("[c10d]" in msg
                                                                    and (m := _C10D_SOCKET.search(msg))):
        attrs = {"error": m.group("text").strip()[:500], "operation": "c10d store / rendezvous"}
        if e := _EXCEPTION.search(msg[:m.start()]):
            attrs["exception"] = e.group("exc")
        pg, rank = pg_info(msg)
        attrs.update(pg)
        return Finding("nccl_net_error", "error", attrs, layer="network_storage", rank=rank), None
    if ("CUDA" in msg or "CUBLAS_STATUS" in msg or "CUDNN_STATUS" in msg or "cudaError" in msg) and (
            found := _cuda_error(msg, exception)):
        return found
    if "thread terminated" in msg and (died := _WATCHDOG_DIED.search(msg)):
        pg, rank = pg_info(msg)
        attrs = {"error": died.group("what").strip()[:500], "origin": "ProcessGroupNCCL watchdog", **pg}
        return Finding("nccl_error", "error", attrs, layer="gpu", rank=rank), None
    if "Dist" in msg and (m := _DIST_ERROR.search(msg)):
        attrs = {"exception": m.group("exc").rsplit(".", 1)[-1], "error": m.group("text").strip()[:500]}
        pg, rank = pg_info(msg)
        attrs.update(pg)
        return Finding("nccl_net_error", "error", attrs, layer="network_storage", rank=rank), None
    if "Not all ranks" in msg and (m := _FR_START.search(msg)):
        seq = m.group("seq") or m.group("seq2")
        finding = Finding("nccl_flight_recorder", "error", {"seq": int(seq) if seq else None}, layer="network_storage")
        return finding, _FlightRecorder(finding)
    if any(word in msg for word in _ELASTIC_WORDS) and (found := _elastic(msg, lineno)):
        return found
    low = msg.lower()
    if ("nan" in low or "overflow" in low or "inf" in low and _INF.search(low)) and (finding := _nan_loss(msg)):
        return finding, None
    return step_time(msg), None


_ELASTIC_WORDS = ("exitcode", "signal", "exit barrier", "ChildFailedError", "Root Cause", "Failures:")
_INF = lazy_regex(r"inf\b")
"""What every torchrun and NaN/overflow reader above needs in the line: most lines (step logs) are
turned away by a substring test instead of a dozen regex searches."""
