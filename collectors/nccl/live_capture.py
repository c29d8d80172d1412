"""Live capture: copy the rank logs the responder named with ``--nccl-log GLOB`` (head and tail of a
log too long to keep whole)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from typing import Any

from collectors.base import Artifact, CaptureContext

_MAX_FILES = 10_000
_CAPTURE_BYTES = 256 << 20
_HEAD_BYTES = 16 << 20
"""A log longer than _CAPTURE_BYTES is kept as its head (the init lines that map rank -> host -> GPU)
and its tail (where the incident is)."""


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--nccl-log", action="append", default=[], metavar="GLOB",
                        help="NCCL / PyTorch distributed / trainer log files to freeze (repeatable; ** recurses)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Copy the logs the responder named; without ``--nccl-log`` there is nothing to guess at."""
    patterns = [p for p in (ctx.options.get("nccl_log") or []) if p]
    if not patterns:
        ctx.missing("nccl logs", "unavailable: no --nccl-log given")
        return
    seen: set[str] = set()
    for pattern in patterns:
        files = [p for p in sorted(glob.glob(os.path.expanduser(pattern), recursive=True)) if os.path.isfile(p)]
        if not files:
            ctx.missing(pattern, "unavailable: no file matches")
            continue
        if len(files) > _MAX_FILES:
            ctx.missing(pattern, f"partial: {len(files)} files match, kept the first {_MAX_FILES}")
        for path in files[:_MAX_FILES]:
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            if size <= _CAPTURE_BYTES:
                parts = [ctx.read_file(path, kind="nccl_log")]
            else:
                parts = [ctx.read_file(path, kind="nccl_log", max_bytes=_HEAD_BYTES),
                         ctx.read_file(path, kind="nccl_log", max_bytes=_CAPTURE_BYTES - _HEAD_BYTES, tail=True)]
            yield from (artifact for artifact in parts if artifact is not None)
