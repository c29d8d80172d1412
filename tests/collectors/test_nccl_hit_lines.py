"""The NCCL prefilter's one RE2 pass picks the same lines as the sweeps it replaced.

The reference below is the former ``_hit_lines`` verbatim (Python ``re`` for the NCCL INFO lines, then a
``bytes.find`` sweep per needle and the rest patterns over a copy of the block with its NCCL INFO lines
blanked); it runs on every NCCL log of the corpus, on the ingest bench's synthetic rank logs and on lines
made to sit on the edges (a needle on an INFO line, ``NCCL INFO`` without a space, NUL bytes, an error chain).
"""

from __future__ import annotations

import re

import pytest

from collectors.nccl import prefilter
from tests.conftest import CORPUS

_INFO_LINES = re.compile(rb"NCCL INFO (?:" + "|".join(prefilter._INFO_KEEP).encode() + rb"|[^\s:]+:\d+ -> [0-9])")
_REST_PATTERNS = (re.compile(rb"NCCL(?: (?!INFO )|[.(']|Utils)"),
                  re.compile(rb"CU(?:DA (?:error|out of memory|driver error)|BLAS_STATUS_|DNN_STATUS_)"))


def _reference(data: bytes, end: int) -> list[int]:
    lines = data[:end].split(b"\n")
    lines.pop()
    rfind = data.rfind
    info = {rfind(b"\n", 0, m.start()) + 1 for m in _INFO_LINES.finditer(data, 0, end)}
    hits = set(prefilter._line_numbers(data, sorted(info)))
    rest = b"\n".join([b"" if b"NCCL INFO" in line else line for line in lines])
    needles = prefilter._NEEDLES + (b"\x00",) if b"\x00" in rest else prefilter._NEEDLES
    find, rest_rfind = rest.find, rest.rfind
    found = {rest_rfind(b"\n", 0, m.start()) + 1 for pattern in _REST_PATTERNS for m in pattern.finditer(rest)}
    for needle in needles:
        pos = find(needle)
        while pos >= 0:
            found.add(rest_rfind(b"\n", 0, pos) + 1)
            stop = find(b"\n", pos)
            pos = find(needle, stop + 1) if stop >= 0 else -1
    hits.update(prefilter._line_numbers(rest, sorted(found)))
    return sorted(hits)


EDGES = (b"host:1:1 [0] NCCL INFO AllReduce: opCount 9 exitcode 1 nan\n"
         b"host:1:1 [0] NCCL INFO comm 0x55 rank 0 nranks 8 - Init COMPLETE\n"
         b"host:1:1 [0] NCCL INFO\n"
         b"host:1:1 [0] NCCL INFOx something\n"
         b"host:1:1 [0] NCCL WARN Call to ibv_create_qp failed\n"
         b"host:1:1 [0] NCCL INFO transport.cc:123 -> 2\n"
         b"plain line with \x00 a NUL\n"
         b"NCCL INFO line with a NUL \x00 only\n"
         b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
         b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
         b"loss is NaN at step 10\n"
         b"NCCL \n"
         b"ProcessGroupNCCL.cpp:1234 watchdog caught collective operation timeout\n"
         b"nothing here\n")


def _inputs() -> dict[str, bytes]:
    found = {p.name: p.read_bytes() for p in sorted((CORPUS / "nccl").iterdir()) if p.is_file()}
    found["edges"] = EDGES
    return found


@pytest.mark.parametrize("name", sorted(_inputs()))
def test_one_pass_picks_the_lines_of_the_sweeps(name):
    data = _inputs()[name]
    end = data.rfind(b"\n") + 1
    got = prefilter._hit_lines(data, end)
    assert got == _reference(data, end)
    assert got or name != "edges"


def test_synthetic_rank_logs(tmp_path):
    from tests.data.nccl_multirank import write_job

    write_job(tmp_path, hosts=2, gpus_per_host=2, seq=900_001, straggler=1, filler_bytes=200_000, per_host=False)
    for path in sorted(tmp_path.rglob("*.log")):
        data = path.read_bytes()
        end = data.rfind(b"\n") + 1
        assert prefilter._hit_lines(data, end) == _reference(data, end), path.name


def test_edges_keep_what_the_sweeps_kept():
    """A needle or ``NCCL INFO`` without its space on an INFO line counts for nothing; the rest all count."""
    kept = [i + 1 for i in prefilter._hit_lines(EDGES, len(EDGES))]
    assert kept == [2, 5, 6, 7, 9, 10, 11, 12, 13]
