"""The members of a zip archive whose end is missing, read from their local headers.

A zip names its members in the central directory at its very end, so a copy cut short (a transfer that
died, an upload limit, a full disk) is refused whole by ``zipfile``, although every member before the cut
is intact. Each member is also preceded by a local header that holds its name, method and sizes: reading
those from the start finds every complete member, and the one the cut falls in up to the cut.

Stored and deflated members are read (what ``zip`` and every capture tool write); a member with another
method or encrypted is passed over when its size is known, else the reading stops there. Sizes written
only after the data (a data descriptor, as a zip written to a pipe has) are found by the deflate stream's
own end, or for a stored member by the descriptor that names its size. Every complete member's CRC is
checked.
"""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

LOCAL = b"PK\x03\x04"
_HEADER = struct.Struct("<4s5H3L2H")
_CENTRAL = (b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07")
"""What may follow the last member: the central directory or its end records (a complete archive)."""
_DESCRIPTOR = b"PK\x07\x08"
_BLOCK = 1 << 20
_STORED, _DEFLATED = 0, 8


@dataclass
class Member:
    """One member's bytes, decompressed into a temp file."""

    name: str
    path: Path
    date_time: tuple[int, int, int, int, int, int]
    complete: bool
    """False for the member the archive ends in: ``path`` holds what came before the cut"""


@dataclass
class Problem:
    """A member that was not kept, and why."""

    name: str
    reason: str


@dataclass
class End:
    """Where the reading stopped: ``reason`` is empty when the members ran up to the central directory."""

    members: int
    reason: str


def starts_as_zip(path: Path) -> bool:
    """Whether ``path`` begins with a zip local header (a zip, whole or cut short)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == LOCAL
    except OSError:
        return False


def members(path: Path, tmp: Path, count: Callable[[int], None]) -> Iterator[Member | Problem | End]:
    """Every member of the zip at ``path`` in the order it holds them, each written to a file in ``tmp``,
    then one End. ``count`` sees the running total of bytes written and may raise to stop a bomb (the
    file being written is removed first)."""
    with open(path, "rb") as f:
        yield from _Reader(f, tmp, count).run()


@dataclass
class _Data:
    """What reading one member's data gave: ``state`` is ``whole``, ``damaged`` (its bytes do not inflate)
    or ``cut`` (the archive ends inside it; ``member`` holds what came before, or is None)."""

    state: str
    member: Member | None = None
    consumed: int = 0
    crc: int = 0
    note: str = ""


class _Reader:
    """One pass over the local headers, from the first byte on."""

    def __init__(self, f: BinaryIO, tmp: Path, count: Callable[[int], None]) -> None:
        self.f, self.tmp, self.count = f, tmp, count
        self.total = 0

    def run(self) -> Iterator[Member | Problem | End]:
        kept = pos = 0
        while True:
            self.f.seek(pos)
            head = self.f.read(_HEADER.size)
            if head[:4] in _CENTRAL:
                yield End(kept, "")
                return
            if len(head) < _HEADER.size or head[:4] != LOCAL:
                yield End(kept, _no_header(head))
                return
            _, _, flags, method, mtime, mdate, crc, csize, usize, name_len, extra_len = _HEADER.unpack(head)
            raw_name, extra = self.f.read(name_len), self.f.read(extra_len)
            if len(raw_name) < name_len or len(extra) < extra_len:
                yield End(kept, "it ends inside a member header")
                return
            name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", "replace")
            csize, usize = _zip64_sizes(extra, csize, usize)
            data_at = pos + _HEADER.size + name_len + extra_len
            described = bool(flags & 0x08)
            if name.endswith("/") or flags & 0x01 or method not in (_STORED, _DEFLATED):
                if not name.endswith("/"):
                    why = "encrypted" if flags & 0x01 else f"compression method {method}"
                    yield Problem(name, f"not read from a damaged zip: {why}")
                if described:
                    yield End(kept, f"the size of {name!r} is not known")
                    return
                pos = data_at + csize
                continue
            size: int | None = csize
            if described:
                size = self._stored_size(data_at) if method == _STORED else None
            data = self._data(name, data_at, method, size, _date_time(mdate, mtime))
            if data.state == "cut":
                if data.member is not None:
                    yield data.member
                yield End(kept, data.note)
                return
            if data.state == "damaged":
                yield Problem(name, f"not kept: {data.note}")
                if described:
                    yield End(kept, f"{name!r} is damaged and its size is not known")
                    return
                pos = data_at + csize
                continue
            assert data.member is not None
            if described:
                crc, pos = self._descriptor(data_at + data.consumed)
            else:
                pos = data_at + csize
            if data.crc != crc:
                data.member.path.unlink(missing_ok=True)
                yield Problem(name, "not kept: its bytes do not match its CRC")
                continue
            kept += 1
            yield data.member

    def _data(self, name: str, at: int, method: int, csize: int | None,
              date_time: tuple[int, int, int, int, int, int]) -> _Data:
        """One member's data, inflated into a temp file; ``csize`` None: until the deflate stream ends, or
        for a stored member the file does (which makes it cut)."""
        self.f.seek(at)
        inflate = zlib.decompressobj(-15) if method == _DEFLATED else None
        fd, out_name = tempfile.mkstemp(dir=self.tmp)
        out = Path(out_name)
        crc = consumed = written = 0
        try:
            with os.fdopen(fd, "wb") as dst:
                while csize is None or consumed < csize:
                    block = self.f.read(_BLOCK if csize is None else min(_BLOCK, csize - consumed))
                    if not block:
                        break
                    if inflate is None:
                        data, consumed = block, consumed + len(block)
                    else:
                        data = inflate.decompress(block)
                        consumed += len(block) - len(inflate.unused_data)
                    if data:
                        crc = zlib.crc32(data, crc)
                        written += len(data)
                        self.total += len(data)
                        self.count(self.total)
                        dst.write(data)
                    if inflate is not None and inflate.eof:
                        break
        except zlib.error as exc:
            out.unlink(missing_ok=True)
            return _Data("damaged", note=f"damaged ({exc})")
        except BaseException:
            out.unlink(missing_ok=True)
            raise
        if inflate.eof if inflate is not None else consumed == csize:
            return _Data("whole", Member(name, out, date_time, complete=True), consumed, crc)
        if inflate is not None and csize is not None and consumed >= csize:
            out.unlink(missing_ok=True)
            return _Data("damaged", note="its deflate stream does not end where its size says")
        if not written:
            out.unlink(missing_ok=True)
            return _Data("cut", note=f"it ends inside {name!r}")
        return _Data("cut", Member(name, out, date_time, complete=False),
                     note=f"it ends inside {name!r}: kept its first {written} bytes")

    def _stored_size(self, at: int) -> int | None:
        """The size of a stored member whose sizes follow its data: the distance to the first data
        descriptor whose size field says that distance (32- or 64-bit); None when there is none (the
        archive is cut inside it, which _data then reads to its end)."""
        pos, carry = at, b""
        while True:
            self.f.seek(pos)
            chunk = self.f.read(_BLOCK)
            if not chunk:
                return None
            buf, base = carry + chunk, pos - len(carry)
            hit = buf.find(_DESCRIPTOR)
            while 0 <= hit <= len(buf) - 16:
                distance = base + hit - at
                if distance in (struct.unpack("<L", buf[hit + 8:hit + 12])[0],
                                struct.unpack("<Q", buf[hit + 8:hit + 16])[0]):
                    return distance
                hit = buf.find(_DESCRIPTOR, hit + 1)
            carry, pos = buf[-15:], pos + len(chunk)

    def _descriptor(self, at: int) -> tuple[int, int]:
        """(CRC, where the next header starts) from the data descriptor after a member's data: with or
        without its signature, 32- or 64-bit sizes, whichever leaves a header next."""
        self.f.seek(at)
        tail = self.f.read(28)
        skip = 4 if tail.startswith(_DESCRIPTOR) else 0
        crc = struct.unpack("<L", tail[skip:skip + 4])[0] if len(tail) >= skip + 4 else -1
        for size in (12, 20):
            nxt = skip + size
            if tail[nxt:nxt + 4] == LOCAL or tail[nxt:nxt + 4] in _CENTRAL:
                return crc, at + nxt
        return crc, at + skip + 12


def _no_header(head: bytes) -> str:
    """Why no member starts where the last one ended."""
    if not head:
        return "it ends between members"
    if LOCAL.startswith(head[:4]):
        return "it ends inside a member header"
    return "no member header where one should start"


def _zip64_sizes(extra: bytes, csize: int, usize: int) -> tuple[int, int]:
    """The sizes a zip64 extra field holds for the ones the header marks 0xFFFFFFFF."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, size = struct.unpack("<HH", extra[pos:pos + 4])
        if tag == 0x0001:
            fields = extra[pos + 4:pos + 4 + size]
            values = [struct.unpack("<Q", fields[i:i + 8])[0] for i in range(0, len(fields) - 7, 8)]
            if usize == 0xFFFFFFFF and values:
                usize = values.pop(0)
            if csize == 0xFFFFFFFF and values:
                csize = values.pop(0)
            break
        pos += 4 + size
    return csize, usize


def _date_time(date: int, time: int) -> tuple[int, int, int, int, int, int]:
    """A DOS date and time as zipfile's ``date_time`` tuple."""
    return ((date >> 9) + 1980, (date >> 5) & 0xF, date & 0x1F, time >> 11, (time >> 5) & 0x3F, (time & 0x1F) * 2)
