"""NCCL and PyTorch-distributed logs: who ran where, what failed on which rank, and when.

A distributed job that dies prints the same watchdog timeout on every rank; the cause is one rank,
one host, one GPU. This collector reads the ranks' logs (``--nccl-log GLOB`` at capture; sniffed
at ingest) into:

- ``topology`` rows from NCCL's init lines (``comm 0x… rank 3 nranks 16 cudaDev 3 busId 19000
  commId 0x… - Init COMPLETE``; NCCL version; ``Channel 00/0 : 3[3] -> 4[4] via P2P/IPC`` transports;
  the NET/IB devices and bootstrap interface), mapping rank <-> host <-> cudaDev <-> PCI bus id;
- events (kinds and attrs in collectors/catalog/events.yaml) from NCCL's WARN lines and error-propagation
  chains, and from the
  PyTorch / torchrun / trainer lines that ``collectors/framework/torch_dist/`` reads;
- a ``versions.nccl`` host fact per host.

Lines come with or without torchrun/mpirun/srun prefixes (``[rank3]:``, ``[default0]:``,
``[1,3]<stderr>:``, ``3: ``), glog-style stamps (``[E1129 10:01:02.123456 1234 file.cpp:12]``, year from
``ctx.reference_for``), NCCL's own ``NCCL_DEBUG_TIMESTAMP_FORMAT`` stamp (``[2024-03-01 10:00:00]``),
ISO and Python-logging stamps, or none at all: a line without a time takes the time of the dated
line before it in the same file (or, before the first dated line, of the next one), marked
approximate with origin ``neighbour``; a file with no dated line at all is anchored on its mtime.

Why it reads blocks, not lines: NCCL INFO logs run to gigabytes and almost every line is
uninteresting. Each 4 MiB block is split once and a line costs a substring test or two (``NCCL
INFO`` followed by one of the few prefixes topology needs, else a compiled keyword alternation)
before any decoding; times of the skipped lines are only looked for, with a C-speed search over
the raw bytes, when an undated line that matters needs a neighbour. Memory stays bounded: state is
per process and per pending event, each capped.

The modules, in the order a line meets them:

    live_capture.py  ``--nccl-log GLOB``: the files to freeze (head and tail of a huge one)
    sniff.py         which file is a rank's log (or a flight-recorder dump, read by launcher_places)
    reader.py        the block loop and one line's way through the readers below
    prefilter.py     the one RE2 pass that selects the lines worth decoding (and grep's twin of it)
    times.py         launcher prefixes and timestamps; the time an undated line takes from its neighbours
    init_lines.py    NCCL's init lines -> topology rows, versions.nccl
    warn.py          what a WARN/ERROR message means (CUDA, network details, NCCL's own signatures)
    writes.py        a failed (checkpoint) write
    findings.py      findings -> events (rank, host, GPU, time; held while the next lines add to them)
    state.py         what the reader keeps per file, and its caps
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import ParseContext, Row
from collectors.framework.launcher_places import trace_rows
from collectors.nccl.live_capture import add_capture_arguments, capture
from collectors.nccl.reader import Reader
from collectors.nccl.sniff import sniff

NAME = "nccl"
LAYER = "network_storage"
KINDS = ("nccl_log", "nccl_trace")
TIMEOUT = 20.0
PRIORITY = 60

__all__ = ["KINDS", "LAYER", "NAME", "PRIORITY", "TIMEOUT", "add_capture_arguments", "capture", "parse", "sniff"]


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "nccl_trace":
        yield from trace_rows(ctx.source_name, ctx.host)
        return
    yield from Reader(ctx).rows(stream)
