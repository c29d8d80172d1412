"""What a PyTorch-distributed, torchrun or trainer line says, for the NCCL log reader.

Not a collector of its own (it declares no NAME): a rank's log interleaves these lines with
NCCL's, and a ProcessGroupNCCL watchdog's rank only becomes a host and a GPU through the NCCL
init lines of the same file, so ``collectors/nccl/reader.py`` walks the file once and asks this module
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

The readers, one module per idea: finding.py (what a reader returns), rank_prefix.py (``[PG ...]`` /
``[Rank N]``), watchdog.py, nccl_errors.py, store_errors.py, cuda_errors.py, nan_losses.py, step_timing.py,
elastic.py, flight_recorder.py; ``classify`` here tries them in turn, each only when a literal it needs is
in the line.
"""

from __future__ import annotations

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.cuda_errors import APP_FAULTS, cuda_error, to_mib
from collectors.framework.torch_dist.elastic import elastic_line, signal_name
from collectors.framework.torch_dist.finding import Continuation, Finding
from collectors.framework.torch_dist.flight_recorder import flight_recorder
from collectors.framework.torch_dist.nan_losses import nan_loss
from collectors.framework.torch_dist.nccl_errors import (
    NCCL_RESULTS,
    NETWORK_RESULTS,
    nccl_error,
    nccl_result_from_text,
)
from collectors.framework.torch_dist.rank_prefix import pg_info
from collectors.framework.torch_dist.step_timing import STEP_NEEDLES, step_time
from collectors.framework.torch_dist.store_errors import dist_error, store_error
from collectors.framework.torch_dist.watchdog import watchdog_died, watchdog_other, watchdog_timeout

__all__ = ["APP_FAULTS", "NCCL_RESULTS", "NETWORK_RESULTS", "STEP_NEEDLES", "Continuation", "Finding", "classify",
           "nccl_result_from_text", "pg_info", "signal_name", "step_time", "to_mib"]
"""What the NCCL reader and nccl-tests use of this package (the names they used when it was one module)."""


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


def classify(msg: str, lineno: int, exception: str | None = None) -> tuple[Finding | None, Continuation | None]:
    """What one message says, and whether the next lines belong to it."""
    if "WorkNCCL" in msg and (finding := watchdog_timeout(msg)):
        return finding, None
    if ("watchdog" in msg or "NCCL work" in msg or "Heartbeat" in msg or "mismatch between" in msg
            or "last enqueued" in msg or "dump debug info" in msg):
        died = watchdog_died(msg)
        if died is None and (finding := watchdog_other(msg)):
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
    if ("NCCL error" in msg or "NCCL Error" in msg) and (found := nccl_error(msg, exception)):
        return found
    if finding := store_error(msg):
        return finding, None
    if ("CUDA" in msg or "CUBLAS_STATUS" in msg or "CUDNN_STATUS" in msg or "cudaError" in msg) and (
            found := cuda_error(msg, exception)):
        return found
    if "thread terminated" in msg and (died := watchdog_died(msg)):
        pg, rank = pg_info(msg)
        attrs = {"error": died.group("what").strip()[:500], "origin": "ProcessGroupNCCL watchdog", **pg}
        return Finding("nccl_error", "error", attrs, layer="gpu", rank=rank), None
    if finding := dist_error(msg):
        return finding, None
    if found := flight_recorder(msg):
        return found
    if any(word in msg for word in _ELASTIC_WORDS) and (found := elastic_line(msg, lineno)):
        return found
    low = msg.lower()
    if ("nan" in low or "overflow" in low or "inf" in low and _INF.search(low)) and (finding := nan_loss(msg)):
        return finding, None
    return step_time(msg), None


_ELASTIC_WORDS = ("exitcode", "signal", "exit barrier", "ChildFailedError", "Root Cause", "Failures:")
_INF = lazy_regex(r"inf\b")
"""What every torchrun and NaN/overflow reader above needs in the line: most lines (step logs) are
turned away by a substring test instead of a dozen regex searches."""
