"""CUDA errors in a rank's log (``CUDA error: ...``, ``torch.AcceleratorError``, cuBLAS / cuDNN status) and CUDA
out-of-memory in the PyTorch 1.x and 2.x wordings, with the allocator's numbers and the lines PyTorch adds under
them."""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Continuation, Finding, exception_named
from collectors.framework.torch_dist.rank_prefix import pg_info
from collectors.framework.torch_dist.watchdog import watchdog_died

APP_FAULTS = ("illegal memory access", "misaligned address", "illegal instruction", "invalid program counter",
              "device-side assert", "illegal address")
"""CUDA errors that are the application's own kernel faulting (the Xid 13/31/43 family), not the GPU."""

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


def cuda_error(msg: str, exception: str | None = None) -> tuple[Finding, Continuation] | None:
    """A CUDA error or out-of-memory (``exception``: the type a ``terminate called`` line named), and the reader of
    the lines PyTorch adds under it."""
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
    if e := exception_named(msg[:m.start()]):
        attrs["exception"] = e
    elif exception:
        attrs["exception"] = exception
    if watchdog_died(msg):
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
