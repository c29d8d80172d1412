"""How raw bytes are cut into stored chunks and packed: sizes that keep an ingest's memory flat whatever
the file (see docs/bundle.md, "artifact_chunk"), zstd where it shrinks them, and unpacking checked against
the stored size. The sizes are read when a chunk is cut, not imported: tests and the perf baseline
(tests/perf/old_chunk_layout.py) set them on this module."""

from __future__ import annotations

import functools
from typing import Any

import zstandard

from workbench.store.errors import BundleError

CHUNK_BYTES = 32 << 10
"""Raw bytes are stored in chunks so that a multi-GB log is streamed, never held whole. Small enough
that ROW_GROUP_ROWS (connection.py) of them (64 MiB) fill a row group within one artifact: DuckDB writes a full
row group of an open transaction to disk at once (optimistic writing), so storing a file of any size
holds about one row group in memory (64 KiB chunks: 2 GiB of random bytes peaked at 350 MB, 32 KiB:
250 MB). Bundles written with 4 MiB chunks read the same."""
STORED_CHUNK_BYTES = 32 << 10
"""What a compressed chunk should hold at least: DuckDB 2.0 keeps BLOBs under ~16 KiB of an open
transaction in memory even once their row group is written, so a log that zstd shrinks 9x is cut into
chunks of a few hundred KiB (raw) instead. Incompressible bytes stay at CHUNK_BYTES. Not more: a
row group needs ROW_GROUP_ROWS chunks to be written (a 64 KiB target: 1 GiB of log, 610 MB RSS)."""
MAX_CHUNK_BYTES = 1 << 20


def chunk_params(artifact_id: int, first_seq: int, block: bytes, step: int) -> tuple[list[Any], int, int]:
    """``block`` as chunk rows from seq ``first_seq`` on: the first chunk holds ``step`` raw bytes, and how
    well each compressed sizes the next (see STORED_CHUNK_BYTES). Returns the flattened rows, the next seq
    and the next chunk's size."""
    params: list[Any] = []
    seq = first_seq
    at = 0
    while at < len(block):
        part = block[at:at + step]
        stored, codec = _pack(part)
        params += [artifact_id, seq, stored, codec, len(part)]
        seq += 1
        at += len(part)
        step = _next_chunk_bytes(len(part), len(stored))
    return params, seq, step


def _next_chunk_bytes(raw: int, stored: int) -> int:
    """Raw bytes for the next chunk so that it stores about STORED_CHUNK_BYTES, in CHUNK_BYTES steps;
    CHUNK_BYTES after one that was kept as it was."""
    if stored >= raw:
        return CHUNK_BYTES
    wanted = raw * STORED_CHUNK_BYTES // max(stored, 1)
    steps = -(-wanted // CHUNK_BYTES)
    return min(MAX_CHUNK_BYTES, max(CHUNK_BYTES, steps * CHUNK_BYTES))


def _pack(block: bytes) -> tuple[bytes, str | None]:
    """zstd at ~800 MB/s shrinks logs ~9x, so a 1 GB log costs DuckDB a ninth of the memory and
    time; blocks that do not shrink are kept as they are. Level 1, as pyarrow's zstd wrote before:
    the frames are the same format either way, and the python-zstandard module costs ~3 MB of RSS
    where importing pyarrow cost ~40."""
    if len(block) < 512:
        return block, None
    packed = _zstd()[0].compress(block)
    return (packed, "zstd") if len(packed) < len(block) else (block, None)


def unpack(data: bytes, codec: str | None, raw_size: int) -> bytes:
    if codec is None:
        return data
    if codec != "zstd":
        raise BundleError(f"unknown chunk codec {codec!r} (a damaged bundle?)")
    try:
        out = _zstd()[1].decompress(data, max_output_size=raw_size)
    except zstandard.ZstdError as exc:
        raise BundleError(f"a stored chunk does not expand: {exc} (a damaged bundle?)") from exc
    if len(out) != raw_size:
        raise BundleError("a stored chunk expands to the wrong size (a damaged bundle?)")
    return out


@functools.cache
def _zstd() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    return zstandard.ZstdCompressor(level=1), zstandard.ZstdDecompressor()
