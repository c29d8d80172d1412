"""The on-disk ring: durable appends, torn lines skipped, window and size caps, restart numbering."""

from __future__ import annotations

import os
import time
from pathlib import Path

from workbench.capture.recorder.ring import MIN_SEGMENT_BYTES, Ring, RingRecord, read_ring, records_by_source


def records(n: int, t: float, text: str = "x" * 100, source: str = "kernel:f") -> list[RingRecord]:
    return [RingRecord(t + i * 0.001, source, "line", f"{i} {text}") for i in range(n)]


def test_append_then_read_back_in_order_with_a_time_range(tmp_path: Path) -> None:
    ring = Ring(tmp_path, max_bytes=1 << 20, window_s=600)
    now = time.time()
    ring.append(records(3, now) + records(2, now + 1, source="nvml"))
    ring.close()
    got, bad = read_ring(tmp_path)
    assert bad == 0 and [r.text.split()[0] for r in got] == ["0", "1", "2", "0", "1"]
    assert [r.source for r in read_ring(tmp_path, since=now + 0.5)[0]] == ["nvml", "nvml"]
    assert [(s, len(g)) for s, _, g in records_by_source(got)] == [("kernel:f", 3), ("nvml", 2)]


def test_a_torn_last_line_is_skipped_and_counted_and_a_restart_opens_the_next_segment(tmp_path: Path) -> None:
    ring = Ring(tmp_path, max_bytes=1 << 20, window_s=600)
    ring.append(records(2, time.time()))
    ring.close()
    (first,) = ring.segments()
    with open(first[1], "ab") as f:
        f.write(b'{"t": 1.0, "src": "ker')
    again = Ring(tmp_path, max_bytes=1 << 20, window_s=600)
    again.append(records(1, time.time(), text="after restart"))
    again.close()
    got, bad = read_ring(tmp_path)
    assert bad == 1 and [r.text for r in got][-1] == "0 after restart"
    assert [n for n, _ in again.segments()] == [first[0], first[0] + 1]


def test_size_cap_drops_the_oldest_segments(tmp_path: Path) -> None:
    cap = MIN_SEGMENT_BYTES * 4
    ring = Ring(tmp_path, max_bytes=cap, window_s=3600)
    for k in range(40):
        ring.append(records(50, time.time() + k, text="y" * 200))
    ring.close()
    assert ring.size() <= cap + MIN_SEGMENT_BYTES
    got, _ = read_ring(tmp_path)
    assert got and got[-1].t > got[0].t and len(got) < 40 * 50, "the newest records are kept, the oldest dropped"


def test_window_drops_segments_older_than_it(tmp_path: Path) -> None:
    ring = Ring(tmp_path, max_bytes=1 << 30, window_s=60)
    ring.append(records(5, time.time() - 3600))
    ring._opened_at = 0.0  # force the next append into a new segment
    old = ring.segments()[0][1]
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    ring.append(records(5, time.time()))
    ring.close()
    assert not old.exists() and len(ring.segments()) == 1
