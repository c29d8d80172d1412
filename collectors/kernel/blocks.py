"""A log's bytes as blocks that end at a line boundary: read from a stream, or stretches of a map of a
regular file (no copy). Nothing holds more than a block in memory (the map's pages behind the block are
dropped as the parse goes); a line longer than MAX_LINE_BYTES is skipped whole."""

from __future__ import annotations

import io
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from collectors.base import MAX_LINE_BYTES

BLOCK_BYTES = 4 << 20


class Block:
    """One block: the bytes ``buf[lo:hi]`` (a block read from a stream, or a stretch of a mapped file),
    addressed by absolute offsets and never looked past; ``last`` when no block follows."""

    __slots__ = ("buf", "lo", "hi", "last")

    def __init__(self, buf: Any, lo: int, hi: int, last: bool) -> None:
        self.buf, self.lo, self.hi, self.last = buf, lo, hi, last

    def line_start(self, pos: int) -> int:
        """Where the line holding ``pos`` starts."""
        nl = self.buf.rfind(b"\n", self.lo, pos)
        return nl + 1 if nl >= 0 else self.lo

    def line_end(self, start: int) -> int:
        """Where the line starting at ``start`` ends (its newline, or the block's end)."""
        end = self.buf.find(b"\n", start, self.hi)
        return self.hi if end < 0 else end

    def line(self, start: int) -> str:
        """The line that starts at ``start``, without its line end."""
        return self.buf[start:self.line_end(start)].decode("utf-8", "replace").rstrip("\r\n")

    def byte(self, pos: int) -> bytes:
        return self.buf[pos:pos + 1] if pos < self.hi else b""


def text_after(block: Block, start: int) -> Callable[[], str]:
    """The text after a record's line (a hung task's call trace), read only if a handler asks for it."""
    def read() -> str:
        end = block.buf.find(b"\n", start, block.hi)
        after = block.hi if end < 0 else end + 1
        return block.buf[after:min(after + 4096, block.hi)].decode("utf-8", "replace")

    return read


def read_blocks(stream: BinaryIO) -> Iterator[Block | None]:
    """Blocks of a stream that end at a line boundary not followed by a continuation line (one block of
    read-ahead tells the last block apart); None for a line longer than MAX_LINE_BYTES, skipped whole."""
    carry = b""
    skipping = False
    chunk = stream.read(BLOCK_BYTES)
    while chunk:
        following = stream.read(BLOCK_BYTES)
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                chunk = following
                continue
            chunk, skipping = chunk[nl + 1:], False
        if not following:
            data = carry + chunk if carry else chunk
            if data:
                yield Block(data, 0, len(data), True)
            return
        cut = safe_cut(chunk, 0, len(chunk))
        if cut:  # the usual case, a block made with one copy: carry + the chunk up to the cut
            block = b"".join((carry, memoryview(chunk)[:cut]))
            carry, chunk = chunk[cut:], following
            yield Block(block, 0, len(block), False)
            continue
        data = carry + chunk if carry else chunk
        carry = b""
        chunk = following
        cut = safe_cut(data, 0, len(data))
        if cut == 0:
            if len(data) < MAX_LINE_BYTES:
                carry = data
                continue
            nl = data.find(b"\n")
            if nl < 0 or nl == len(data) - 1:
                yield None
                skipping = nl < 0
                continue
            cut = data.rfind(b"\n") + 1
        block, carry = data[:cut], data[cut:]
        yield Block(block, 0, len(block), False)


MAP_FILES = False
"""Set by the parse worker (workbench/ingest/parse_worker.py): like any reader of a map, a parse would die of
SIGBUS if the file were truncated under it (a live log rotated with copytruncate), and only the worker's
death is survivable: the ingest counts it and goes on, where a parse in the ingest process would take
the whole run down. So the ingest process always reads."""


def mapping(stream: BinaryIO) -> Any:
    """A read-only map of the regular file ``stream`` reads, or None (any other stream is read, and every
    stream unless MAP_FILES). A map saves copying every block twice (the read, then carry + chunk): ~0.1 s
    per 256 MB."""
    if not MAP_FILES or type(stream) is not io.BufferedReader or type(stream.raw) is not io.FileIO:
        return None
    try:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return None
        return mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # an empty file cannot be mapped
        return None


def mapped_blocks(mapped: Any, stream: BinaryIO) -> Iterator[Block | None]:
    """The blocks read_blocks would make of the file from the stream's position on, as stretches of its
    map: chunk [lo, hi) is what a read would return, the carry [carry, lo) what it would keep. Pages
    behind the carry are dropped from the map as it goes, so memory stays flat however big the file."""
    size = len(mapped)
    carry = lo = stream.tell()
    hi = min(lo + BLOCK_BYTES, size)
    skipping = False
    released = carry - carry % mmap.PAGESIZE
    drop = getattr(mmap, "MADV_DONTNEED", None)
    while lo < hi:
        edge = carry - carry % mmap.PAGESIZE
        if drop is not None and edge > released:
            mapped.madvise(drop, released, edge - released)
            released = edge
        following = min(hi + BLOCK_BYTES, size)  # the next chunk is [hi, following)
        if skipping:
            nl = mapped.find(b"\n", lo, hi)
            if nl < 0:
                carry = lo = hi
                hi = following
                continue
            carry = lo = nl + 1
            skipping = False
        if following == hi:
            if hi > carry:
                yield Block(mapped, carry, hi, True)
            break
        cut = safe_cut(mapped, lo, hi)
        if cut:
            start, carry = carry, lo + cut
            lo, hi = hi, following
            yield Block(mapped, start, carry, False)
            continue
        start, end = carry, hi  # the carry and the chunk together
        carry = lo = hi
        hi = following
        cut = safe_cut(mapped, start, end)
        if cut == 0:
            if end - start < MAX_LINE_BYTES:
                carry = start
                continue
            nl = mapped.find(b"\n", start, end)
            if nl < 0 or nl == end - 1:
                yield None
                skipping = nl < 0
                continue
            cut = mapped.rfind(b"\n", start, end) + 1 - start
        carry = start + cut
        yield Block(mapped, start, start + cut, False)
    stream.seek(0, io.SEEK_END)


def safe_cut(data: Any, lo: int, hi: int) -> int:
    """Where a block may end in ``data[lo:hi]`` (counted from ``lo``): after a newline whose next line is
    not an indented continuation. Returns 0 when no such place is known yet (the last line may go on)."""
    i = data.rfind(b"\n", lo, hi)
    tries = 0
    while i >= 0 and tries < 64:
        nxt = i + 1
        if nxt < hi and data[nxt:nxt + 1] not in (b" ", b"\t"):
            return nxt - lo
        i = data.rfind(b"\n", lo, i)
        tries += 1
    return i + 1 - lo if i >= 0 else 0
