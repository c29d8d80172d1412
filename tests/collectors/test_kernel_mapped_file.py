"""A regular file is parsed through a map of it (collectors/kernel/blocks.py mapped_blocks), any other stream by
reading it (_read_blocks): both must make the same blocks, so the same rows, line counts and end position,
at any block size (records and over-long lines cut across blocks included)."""

from __future__ import annotations

import io
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest

from collectors import kernel
from collectors.base import ParseContext
from collectors.kernel import blocks, log_parser
from tests.conftest import CORPUS
from tests.perf.kernel_log_mix import sample

BOOT = datetime(2026, 11, 20, 2, tzinfo=timezone.utc)


def _shuffled(seed: int) -> bytes:
    """Corpus kernel lines in random order, some indented, CRLF-ended, cut, with NUL, bad UTF-8 or long junk."""
    rng = random.Random(seed)
    lines = [line for p in sorted((CORPUS / "kernel").iterdir()) for line in p.read_bytes().splitlines(True)]
    out = []
    for _ in range(1500):
        line, r = rng.choice(lines), rng.random()
        if r < 0.05:
            line = b"\t" + line
        elif r < 0.06:
            line = line.rstrip(b"\n") + b"\r\n"
        elif r < 0.065:
            line = line[:10] + b"\x00" + line[10:]
        elif r < 0.07:
            line = line[:10] + b"\xc3\x28" + line[10:]
        elif r < 0.075:
            line = line[:rng.randint(0, len(line))]
        elif r < 0.08:
            line = b"x" * rng.randint(100, 5000) + line
        out.append(line)
    return b"".join(out)


TRACE = b"".join(b"[  %d.000000] INFO: task python:%d blocked for more than 120 seconds.\n" % (i, i)
                + b"".join(b"  frame %d+0x10/0x20\n" % j for j in range(70)) for i in range(60))
"""Records longer than the 64 lines a block end looks back over, so some blocks end inside one."""
INPUTS = {"shuffled-1": _shuffled(1), "shuffled-2": _shuffled(2).rstrip(b"\n"), "noisy": sample("noisy", 3000).encode(),
          "quiet": sample("quiet", 3000).encode(), "long-traces": TRACE}


def _parse(kind: str, stream, offset: int) -> tuple[list[str], int, int]:
    stream.seek(offset)
    ctx = ParseContext(host="h", boot_time=BOOT)
    rows = [repr(row) for row in kernel.parse(kind, stream, ctx)]
    return rows, ctx.lines_read, stream.tell()


@pytest.mark.parametrize("block", [97, 1000, 8192, 4 << 20])
@pytest.mark.parametrize("name", sorted(INPUTS))
def test_a_mapped_file_parses_as_a_read_stream(tmp_path: Path, monkeypatch, name: str, block: int):
    data = INPUTS[name]
    monkeypatch.setattr(blocks, "MAP_FILES", True)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", block)
    for where in (blocks, log_parser):  # the block reader and the record parser both check it
        monkeypatch.setattr(where, "MAX_LINE_BYTES", 3000 if block < 4 << 20 else 1 << 20)
    path = tmp_path / "kern.log"
    path.write_bytes(data)
    for kind in ("dmesg", "syslog"):
        for offset in (0, 777):
            with open(path, "rb") as f:
                assert blocks.mapping(f) is not None
                mapped = _parse(kind, f, offset)
            read = _parse(kind, io.BytesIO(data), offset)
            assert mapped == read, (kind, offset)
            assert mapped[0]


def test_an_empty_file_is_read_not_mapped(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(blocks, "MAP_FILES", True)
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    with open(path, "rb") as f:
        assert blocks.mapping(f) is None
        assert _parse("dmesg", f, 0) == ([], 0, 0)


def test_the_ingest_process_reads_files_only_the_parse_worker_maps_them(tmp_path: Path):
    import subprocess
    import sys

    path = tmp_path / "kern.log"
    path.write_bytes(INPUTS["noisy"])
    with open(path, "rb") as f:
        assert blocks.mapping(f) is None
    probe = ("import sys; from workbench.ingest import parse_worker; parse_worker._preload(); "
             "from collectors.kernel import blocks; print(blocks.mapping(open(sys.argv[1], 'rb')) is not None)")
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=120,
                         cwd=Path(kernel.__file__).parents[2])
    assert out.stdout.strip() == "True", out.stderr[-500:]
