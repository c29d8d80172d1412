"""nccl-tests output (``all_reduce_perf``, ``all_gather_perf``, ...): the bus bandwidth a node or a job
reached, the number acceptance tests sign off on and a later run is held against.

One ``nccl_test_result`` event per run, at the ``# Avg bus bandwidth`` line: attrs test (from
``# Collective test starting: all_reduce_perf`` or the ``# Collective test concluded:`` line, else
null), avg_busbw_gbps, peak_busbw_gbps (the best out-of-place or in-place busbw of any size),
peak_size_bytes, sizes (rows read), wrong (the sum of the ``#wrong`` columns, an integrity failure
when above 0), out_of_bounds_ok, nranks, hosts (from ``#  Rank  0 Group  0 Pid 895544 on h100-2
device  0 [0x18] NVIDIA H100 80GB HBM3``), gpus (model names), nccl_library (``nccl-library=23102``).
The event sits on the file's host, else on the only host the ranks ran on. Several runs pasted into
one file are several events. The output has no clock: the event takes the file's capture time.

A run that failed prints ``gpu-node-1: Test NCCL failure common.cu:958 'unhandled system error (run with
NCCL_DEBUG=INFO for details) / <NCCL's last error>'`` (or ``Test CUDA failure common.cu:732 'out of
memory'``), then `` .. gpu-node-1 pid 123: Test failure common.cu:891`` up its call stack: one event per
failure, of the kind NCCL's result names (nccl_error, nccl_net_error, cuda_error), or of the kind and
cause NCCL's last error names (collectors.nccl.warn.meaning_of: no interface, /dev/shm full, ...), with the
``Test failure`` lines as its chain.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import Event, ParseContext, Row, Skipped
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.nccl_errors import NCCL_RESULTS, NETWORK_RESULTS, nccl_result_from_text

NAME = "nccl_tests"
LAYER = "network_storage"
KINDS = ("nccl_tests",)

_START = lazy_regex(r"^#\s*Collective test starting:\s*(\w+)")
_END = lazy_regex(r"^#\s*Collective test concluded:\s*(\w+)")
_PARAMS = lazy_regex(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+\s+minBytes\s+\d+\s+maxBytes\s+\d+")
_VERSION = lazy_regex(r"^#\s*nccl-tests version\s+\S+.*?nccl-library=(\d+)")
_RANK = lazy_regex(r"^#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s+(.+?)\s*$")
_ROW = lazy_regex(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(.*)$")
"""size count type redop root, then per out-of-place and in-place: time algbw busbw #wrong (or N/A)."""
_ROW_OLD = lazy_regex(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(?=\d)(.*)$")
"""Before nccl-tests 2.10 there was no root column (``1048576  262144  float  sum  1626.5 ...``)."""
_AVG = lazy_regex(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_OOB = lazy_regex(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?", re.IGNORECASE)
_NCCL_FAIL = lazy_regex(r"^(?:(?P<host>[\w.\-]+): )?Test NCCL failure (?P<where>\S+:\d+) '(?P<error>.*?)"
                        r"(?: / (?P<last>.*))?'\s*$")
_CUDA_FAIL = re.compile(r"^(?:(?P<host>[\w.\-]+): )?Test CUDA failure (?P<where>\S+:\d+) '(?P<error>.*)'\s*$")
_CHAIN = lazy_regex(r"^\s*\.\. (?P<host>[\w.\-]+) pid (?P<pid>\d+): Test failure (?P<where>\S+:\d+)")
_LAUNCHER = lazy_regex(r"^\[\d+(?:,\d+)?\]<?\w*>?:?\s?|^\[\d+\]\s*")
"""A launcher's rank prefix (``[0]``, ``[1,0]<stdout>:``) in front of each line."""


def sniff(name: str, head: str) -> dict[str, int]:
    """Confident when the head shows the test's parameter line or its summary."""
    if not any(word in head for word in ("nThread", "Collective test starting", "Avg bus bandwidth")):
        return {}  # none of the three patterns can match: spares a launcher-prefix pass over every line
    lines = [_LAUNCHER.sub("", ln) for ln in head.splitlines()[:400]]
    if any(_PARAMS.match(ln) or _START.match(ln) for ln in lines[:80]):
        return {"nccl_tests": 90}
    if any(_AVG.match(ln) for ln in lines):
        return {"nccl_tests": 85}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    run = _Run()
    failure: Event | None = None
    for n, raw in ctx.lines(stream):
        line = _LAUNCHER.sub("", raw)
        if "failure" in line:
            if m := _CHAIN.match(line):
                if failure is None:
                    yield Skipped(n, "nccl-tests failure chain without its Test NCCL/CUDA failure line")
                else:
                    failure.attrs.setdefault("pid", int(m.group("pid")))
                    chain = failure.attrs.setdefault("chain", [])
                    if len(chain) < 16:
                        chain.append(m.group("where"))
                continue
            if (m := _NCCL_FAIL.match(line)) or (m := _CUDA_FAIL.match(line)):
                if failure is not None:
                    yield failure
                failure = _failure(m, n, ctx)
                continue
        if failure is not None:
            yield failure
            failure = None
        if m := _START.match(line):
            if run.rows or run.avg is not None:
                yield from run.events(ctx)
                run = _Run()
            run.test = m.group(1)
        elif m := _VERSION.match(line):
            run.library = m.group(1)
        elif _PARAMS.match(line):
            if run.rows:
                yield from run.events(ctx)
                run = _Run(test=run.test, library=run.library)
        elif m := _RANK.match(line):
            run.ranks[int(m.group(1))] = (m.group(2), m.group(3))
        elif m := _AVG.match(line):
            run.avg, run.avg_line = float(m.group(1)), n
        elif m := _OOB.match(line):
            run.oob_ok = m.group(1) == "0"
        elif m := _END.match(line):
            run.test = run.test or m.group(1)
            yield from run.events(ctx)
            run = _Run()
        elif (m := _ROW.match(line)) or (m := _ROW_OLD.match(line)):
            if not run.row(m):
                yield Skipped(n, "nccl-tests row without bandwidth columns")
        elif line.strip() and not line.lstrip().startswith("#"):
            yield Skipped(n, "not nccl-tests output")
    if failure is not None:
        yield failure
    yield from run.events(ctx)


def _failure(m: re.Match[str], n: int, ctx: ParseContext) -> Event:
    """The event of a ``Test NCCL failure`` / ``Test CUDA failure`` line: the kind NCCL's result names,
    or the kind and cause its last error names, as NCCL's own WARN would have said it."""
    from collectors.nccl.warn import meaning_of  # deferred: the NCCL collector's catalog is only needed here

    error, last = m.group("error").strip(), (m.groupdict().get("last") or "").strip()
    if m.re is _CUDA_FAIL:
        kind, layer = "cuda_error", "gpu"
        attrs: dict[str, Any] = {"error": error, "where": m.group("where")}
        if "out of memory" in error.lower():
            attrs["oom"] = True
    else:
        code = nccl_result_from_text(error)
        kind = "nccl_net_error" if code is None or code in NETWORK_RESULTS else "nccl_error"
        layer = "network_storage" if kind == "nccl_net_error" else "gpu"
        attrs = {"error": error, "where": m.group("where"), "nccl_result": code,
                 "nccl_error": NCCL_RESULTS.get(code) if code is not None else None}
        if last:
            attrs["last_error"] = last
            if (said := meaning_of(last)) is not None:
                kind, layer = said.kind, said.layer or layer
                attrs.update({k: v for k, v in said.attrs.items() if k != "text"})
    when, origin = ctx.snapshot_time()
    return Event(kind=kind, ts=when, ts_origin=origin if when else "none",
                 ts_approx=when is not None and origin != "captured", host=ctx.host or m.group("host"),
                 source=NAME, layer=layer, severity="error", line=n, message=m.group(0).strip()[:2000],
                 attrs={k: v for k, v in attrs.items() if v is not None})


class _Run:
    """One test run's lines until its summary."""

    def __init__(self, test: str | None = None, library: str | None = None) -> None:
        self.test = test
        self.library = library
        self.ranks: dict[int, tuple[str, str]] = {}
        self.rows = 0
        self.peak: tuple[float, int] | None = None
        self.wrong = 0
        self.avg: float | None = None
        self.avg_line: int | None = None
        self.oob_ok: bool | None = None
        self.done = False

    def row(self, m: re.Match[str]) -> bool:
        """Reads one size's row: out-of-place and in-place (time, algbw, busbw, #wrong) each."""
        rest = m.group(m.re.groups).split()
        if len(rest) < 3:
            return False
        self.rows += 1
        size = int(m.group(1))
        for start in (0, 4):
            cells = rest[start:start + 4]
            if len(cells) < 3:
                continue
            busbw = _float(cells[2])
            if busbw is not None and (self.peak is None or busbw > self.peak[0]):
                self.peak = (busbw, size)
            if len(cells) == 4 and cells[3].isdigit():
                self.wrong += int(cells[3])
        return True

    def events(self, ctx: ParseContext) -> Iterator[Row]:
        if self.done or self.avg is None:
            return
        self.done = True
        hosts = sorted({h for h, _ in self.ranks.values()})
        host = ctx.host or (hosts[0] if len(hosts) == 1 else None)
        when, origin = ctx.snapshot_time()
        attrs: dict[str, Any] = {
            "test": self.test, "avg_busbw_gbps": self.avg,
            "peak_busbw_gbps": self.peak[0] if self.peak else None,
            "peak_size_bytes": self.peak[1] if self.peak else None, "sizes": self.rows, "wrong": self.wrong,
            "out_of_bounds_ok": self.oob_ok, "nranks": len(self.ranks) or None, "hosts": hosts[:64],
            "gpus": sorted({g for _, g in self.ranks.values()})[:8], "nccl_library": self.library}
        failed = self.wrong > 0 or self.oob_ok is False
        yield Event(kind="nccl_test_result", ts=when, ts_origin=origin if when else "none",
                    ts_approx=when is not None and origin != "captured", host=host, source=NAME,
                    layer=LAYER, severity="error" if failed else "info", line=self.avg_line, attrs=attrs,
                    message=f"{self.test or 'nccl-tests'}: avg bus bandwidth {self.avg:g} GB/s"
                            + (f", peak {self.peak[0]:g} GB/s" if self.peak else "")
                            + (f" over {len(self.ranks)} ranks" if self.ranks else "")
                            + (f"; {self.wrong} wrong values" if self.wrong else "")
                            + ("; out-of-bounds values" if self.oob_ok is False else ""))


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None
