"""What a line must contain to be decoded at all: one RE2 pass over a block finds the lines worth reading
(the few NCCL INFO lines topology needs, every other NCCL line, CUDA errors, the NEEDLES); the rest of a
block is only counted (its newlines) and searched for times."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from collectors.base import MAX_LINE_BYTES
from collectors.framework import torch_dist as torch_dist
from collectors.framework.launcher_places import ENV_NEEDLES, RENDEZVOUS

_INFO_KEEP = ("comm 0x", "ncclComm", "Channel [0-9]", "NCCL version", "NET/IB", "NET/Socket", "Using network",
              "Bootstrap")
"""What follows ``NCCL INFO `` on the init lines topology needs (plus ``file:line -> N`` error chains)."""


WRITE_NEEDLES = ("Errno", "StreamWriter", "space left", "Input/output error", "unexpected pos", "write(): fd")
"""What a failed checkpoint or data write prints (``collectors.storage.write_failures.write_failure`` reads
the line)."""
NEEDLES = ("exitcode", "signal", "exit barrier", "ChildFailedError", "Root Cause", "Failures:", "nan", "NaN",
           "verflow", "Skipping step", "DistNetworkError", "DistStoreError", "Not all ranks joining",
           "mismatch between collectives", "terminate called", "[c10d]", RENDEZVOUS, *torch_dist.STEP_NEEDLES,
           *WRITE_NEEDLES, *ENV_NEEDLES)
"""Literal words for the rest (torchrun, NaN losses, overflows, flight recorder, step timing, write
errors): alternatives of the one RE2 pass of _hits_regex."""
_NEEDLES = tuple(n.encode() for n in NEEDLES)

GREP_PATTERN = "|".join(
    ["NCCL ([^I]|I[^N]|IN[^F]|INF[^O]|INFO[^ ])", "NCCL[.(']", "NCCLUtils",
     "NCCL INFO (" + "|".join(_INFO_KEEP) + "|[^ :]+:[0-9]+ -> [0-9])",
     "CU(DA (error|out of memory|driver error)|BLAS_STATUS_|DNN_STATUS_)"]
    + [re.escape(n).replace("\\ ", " ") for n in NEEDLES])
"""The same selection as an ERE, for ``grep -cE`` (the benchmark's baseline)."""


def _hit_lines(data: bytes, end: int) -> list[int]:
    """Indexes of the lines worth decoding, in order (see hit_starts)."""
    return _line_numbers(data, hit_starts(data, end))


def hit_starts(data: bytes, end: int) -> list[int]:
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


def newline_counter(data: bytes, end: int) -> Callable[[int, int], int]:
    """How many newlines ``data[a:b]`` holds, for offsets up to ``end``."""
    if end < _NUMPY_BYTES:
        count = data.count
        return lambda a, b: count(b"\n", a, b)
    import numpy as np

    newline = np.frombuffer(data, dtype=np.uint8, count=end) == 10
    return lambda a, b: int(np.count_nonzero(newline[a:b]))


def giant_starts(data: bytes, end: int) -> list[int]:
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
