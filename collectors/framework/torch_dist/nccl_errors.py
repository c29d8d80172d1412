"""NCCL errors raised into Python or C++ (``NCCL error in: FILE:LINE, unhandled system error, NCCL version X``,
as RuntimeError, DistBackendError or ``what():``), with the ``ncclSystemError:`` / ``Last error:`` lines and the
collective call that follow them; and the ncclResult_t codes they name."""

from __future__ import annotations

from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Continuation, Finding, exception_named
from collectors.framework.torch_dist.rank_prefix import pg_info

NCCL_RESULTS = {0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
                4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress"}
"""ncclResult_t codes, as the ``-> N`` error-propagation lines print them."""

_RESULT_TEXT = {"unhandled cuda error": 1, "unhandled system error": 2, "internal error": 3,
                "invalid argument": 4, "invalid usage": 5,
                "remote process exited or there was a network error": 6}
"""ncclGetErrorString() wordings, which PyTorch puts in its NCCL error messages."""

NETWORK_RESULTS = {2, 6}
"""System (socket, ibverbs calls) and remote (peer exited, network) errors: the fabric's side."""

_NCCL_ERROR = lazy_regex(r"NCCL [Ee]rror(?: (?P<code>\d+))?(?: in: (?P<path>[^,\s]+?):(?P<lineno>\d+))?[,:]\s*"
                         r"(?P<text>[^,]+)"
                         r"(?:, NCCL version (?P<version>[\w.+\-]*\w))?")
_NCCL_RESULT_NAME = lazy_regex(r"\b(?P<name>nccl(?:UnhandledCuda|System|Internal|InvalidArgument|InvalidUsage|Remote)"
                               r"Error)\b(?::\s*(?P<desc>.*?)(?=\s+Last error:|$))?")
_LAST_ERROR = lazy_regex(r"Last error:\s*(?P<text>.*)$")
_COLLECTIVE_CALL = lazy_regex(r"\b(?:dist|group|pg|process_group|torch\.distributed|c10d|self\.\w+)\."
                              r"(?P<op>all_?reduce\w*|all_?gather\w*|reduce_scatter\w*|broadcast\w*|barrier|"
                              r"all_to_all\w*|alltoall\w*|send|recv|isend|irecv|reduce|gather|scatter)\(")


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


def nccl_error(msg: str, exception: str | None = None) -> tuple[Finding, Continuation] | None:
    """An NCCL error raised into Python or C++, its kind by the ncclResult_t it names, and the reader of the
    result-name, ``Last error:`` and traceback lines after it."""
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
    if e := exception_named(msg[:m.start()]):
        attrs["exception"] = e
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
