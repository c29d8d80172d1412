"""The NCCL reader finds a block's selected lines by offset (collectors/nccl/reader.py Reader._block): line numbers,
lines over 1 MiB and the look-back of a write failure must come out as if the block were split into lines."""

from __future__ import annotations

import io

import pytest

from collectors import nccl
from collectors.base import MAX_LINE_BYTES, Event, ParseContext, Skipped

WARN = b"node1:11:12 [0] NCCL WARN Call to ibv_create_qp failed\n"
FILLER = b"node1:11:12 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f00 recvbuff 0x7f01 count 4 datatype 7\n"


def _rows(data: bytes) -> tuple[list, int]:
    ctx = ParseContext(host="node1", source_name="rank0.log")
    rows = list(nccl.parse("nccl_log", io.BytesIO(data), ctx))
    return rows, ctx.lines_read


def _numbered(lines: list[bytes]) -> dict[int, bytes]:
    return {i: line for i, line in enumerate(lines, start=1)}


@pytest.mark.parametrize("filler_lines", [10, 20_000])
def test_event_lines_are_the_lines_of_the_file(filler_lines):
    """A small block (bytes.count) and one past 1 MiB (newlines counted on a numpy compare) number alike."""
    lines = [FILLER] * filler_lines + [WARN] + [FILLER] * 7 + [WARN, WARN] + [FILLER] * 3 + [WARN]
    rows, read = _rows(b"".join(lines))
    expected = [n for n, line in _numbered(lines).items() if line == WARN]
    assert [r.line for r in rows if isinstance(r, Event)] == expected
    assert read == len(lines)


def test_lines_over_one_mib_are_skipped_at_their_numbers_and_the_rest_still_read():
    giant_a, giant_b = b"x" * (MAX_LINE_BYTES + 1) + b"\n", b"y" * (MAX_LINE_BYTES + 4096) + b"\n"
    lines = [FILLER, WARN, giant_a, FILLER, WARN, giant_b, WARN, b"z" * MAX_LINE_BYTES + b"\n", WARN, WARN]
    rows, read = _rows(b"".join(lines))
    assert [r.line for r in rows if isinstance(r, Skipped)] == [3, 6]
    assert {r.reason for r in rows if isinstance(r, Skipped)} == {"line longer than 1 MiB"}
    assert [r.line for r in rows if isinstance(r, Event)] == [2, 5, 7, 9, 10]
    assert read == len(lines)


@pytest.mark.parametrize(("distance", "kind"), [(1, "checkpoint_write_failed"), (40, "checkpoint_write_failed"),
                                                (41, "storage_error")])
def test_a_write_failure_looks_back_forty_lines_for_a_save(distance, kind):
    saving = b"2024-05-01 10:00:00,000 - INFO - train - Saving checkpoint to /ckpt/step100\n"
    failure = b"OSError: [Errno 28] No space left on device\n"
    lines = [FILLER] * 5 + [saving] + [b"plain line %d\n" % i for i in range(distance - 1)] + [failure, FILLER]
    rows, _ = _rows(b"".join(lines))
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert (event.kind, event.line) == (kind, 5 + distance + 1)
