"""The on-disk ring: what the recorder saw in the last ``--window``, capped at ``--max-disk``.

Records are JSON lines in segment files ``ring/seg-NNNNNNNN.jsonl``; the recorder appends a
batch, flushes and fsyncs it, so a ``kill -9`` or a power cut loses at most the batch in flight and
leaves at worst one torn last line, which readers skip. A restart opens a new segment after the last
one, so the ring continues where it stopped. Whole segments are dropped, oldest first, when they
fall out of the window or the ring exceeds its size.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEGMENTS_PER_RING = 16
"""The ring is cut in about this many segments, so dropping one frees a sixteenth of it."""
MIN_SEGMENT_BYTES = 64 << 10
_SEGMENT = re.compile(r"^seg-(\d{8})\.jsonl$")


@dataclass
class RingRecord:
    """One thing the recorder saw: a raw line of a followed source, an NVML sample or a note."""

    t: float
    source: str
    kind: str
    text: str

    def to_json(self) -> str:
        return json.dumps({"t": round(self.t, 6), "src": self.source, "kind": self.kind, "text": self.text},
                          ensure_ascii=False)


class Ring:
    """Append-only segments under ``folder``; see the module docstring."""

    def __init__(self, folder: Path, *, max_bytes: int, window_s: float) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.window_s = window_s
        self.segment_bytes = max(MIN_SEGMENT_BYTES, max_bytes // SEGMENTS_PER_RING)
        self.segment_span_s = max(1.0, window_s / SEGMENTS_PER_RING)
        folder.mkdir(parents=True, exist_ok=True)
        numbers = [n for n, _ in self.segments()]
        self._seq = (max(numbers) + 1) if numbers else 1
        self._file: Any = None
        self._opened_at = 0.0
        self.records_written = 0

    def segments(self) -> list[tuple[int, Path]]:
        """(number, path) of every segment, oldest first."""
        found = []
        for entry in os.scandir(self.folder):
            m = _SEGMENT.match(entry.name)
            if m:
                found.append((int(m.group(1)), Path(entry.path)))
        return sorted(found)

    def size(self) -> int:
        total = 0
        for _, path in self.segments():
            try:
                total += path.stat().st_size
            except FileNotFoundError:
                continue
        return total

    def append(self, records: list[RingRecord]) -> None:
        """Write ``records`` durably (one fsync per batch), then drop what the caps no longer allow."""
        if not records:
            return
        now = time.time()
        if (self._file is None or self._file.tell() >= self.segment_bytes
                or now - self._opened_at >= self.segment_span_s):
            self._rotate(now)
        data = "".join(r.to_json() + "\n" for r in records).encode("utf-8", "surrogateescape")
        self._file.write(data)
        self._file.flush()
        os.fsync(self._file.fileno())
        self.records_written += len(records)
        self.prune(now)

    def _rotate(self, now: float) -> None:
        if self._file is not None:
            self._file.close()
        path = self.folder / f"seg-{self._seq:08d}.jsonl"
        self._seq += 1
        self._file = open(path, "ab")
        self._opened_at = now
        _fsync_folder(self.folder)

    def prune(self, now: float | None = None) -> int:
        """Drop whole segments older than the window, then the oldest while over the size cap; the
        segment being written is kept. Returns how many were dropped."""
        now = time.time() if now is None else now
        current = Path(self._file.name) if self._file is not None else None
        segments = [(n, p) for n, p in self.segments() if p != current]
        sizes = {}
        for _, path in segments:
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            sizes[path] = (st.st_size, st.st_mtime)
        total = sum(s for s, _ in sizes.values()) + (self._file.tell() if self._file is not None else 0)
        dropped = 0
        for _, path in segments:
            if path not in sizes:
                continue
            size, mtime = sizes[path]
            if mtime >= now - self.window_s and total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
            dropped += 1
        return dropped

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_ring(folder: Path, *, since: float | None = None, until: float | None = None) -> tuple[list[RingRecord], int]:
    """The records between ``since`` and ``until`` (epoch seconds, inclusive), oldest segment first, and
    how many lines were unreadable (a line torn by a kill, a segment dropped while reading)."""
    records: list[RingRecord] = []
    bad = 0
    if not folder.is_dir():
        return records, bad
    names = sorted(e.name for e in os.scandir(folder) if _SEGMENT.match(e.name))
    for name in names:
        try:
            with open(folder / name, "rb") as f:
                lines = f.read().split(b"\n")
        except FileNotFoundError:
            continue
        for raw in lines:
            if not raw:
                continue
            record = _record(raw)
            if record is None:
                bad += 1
                continue
            if (since is not None and record.t < since) or (until is not None and record.t > until):
                continue
            records.append(record)
    return records, bad


def _record(raw: bytes) -> RingRecord | None:
    try:
        doc = json.loads(raw.decode("utf-8", "surrogateescape"))
        return RingRecord(t=float(doc["t"]), source=str(doc["src"]), kind=str(doc["kind"]), text=str(doc["text"]))
    except (ValueError, KeyError, TypeError):
        return None


def records_by_source(records: list[RingRecord]) -> Iterator[tuple[str, str, list[RingRecord]]]:
    """(source, kind, records) groups in the order each source first appears."""
    groups: dict[tuple[str, str], list[RingRecord]] = {}
    for record in records:
        groups.setdefault((record.source, record.kind), []).append(record)
    for (source, kind), group in groups.items():
        yield source, kind, group


def _fsync_folder(folder: Path) -> None:
    """A new segment's name must survive a power cut too."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
