"""Live capture: ``df -P -T``, ``iostat -x -t 1 2``, two samples of /proc/diskstats a second apart,
/proc/self/mountstats, ``nfsstat -c`` and the listing of each ``--checkpoint-dir``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from collectors.base import Artifact, CaptureContext


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--checkpoint-dir", metavar="DIR", action="append", default=[],
                        help="list this checkpoint directory (newest files, sizes, mtimes, partial files)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    if ctx.which("df"):
        yield ctx.run(["df", "-P", "-T"], kind="df", timeout=10)
    else:
        ctx.missing("df", "unavailable: df not installed")
    if ctx.which("iostat"):
        yield ctx.run(["env", "S_TIME_FORMAT=ISO", "iostat", "-x", "-t", "1", "2"], kind="iostat", timeout=10)
    else:
        ctx.missing("iostat", "unavailable: sysstat not installed (diskstats is sampled instead)")
    first = _diskstats_sample(1)
    if first is None:
        ctx.missing("/proc/diskstats", "unavailable: cannot read /proc/diskstats")
    else:
        time.sleep(1.0)
        second = _diskstats_sample(2) or ""
        yield Artifact(source="/proc/diskstats (2 samples)", kind="diskstats", data=(first + second).encode())
    mountstats = ctx.read_file("/proc/self/mountstats", kind="mountstats", max_bytes=16 << 20)
    if mountstats is not None:
        yield mountstats
    if ctx.which("nfsstat"):
        yield ctx.run(["nfsstat", "-c"], kind="nfsstat", timeout=5)
    for directory in ctx.options.get("checkpoint_dir") or []:
        listing = checkpoint_listing(directory)
        if listing is None:
            ctx.missing(directory, "unavailable: not a readable directory")
        else:
            yield Artifact(source=f"checkpoint listing {directory}", kind="checkpoint_listing", data=listing.encode())


def _diskstats_sample(number: int) -> str | None:
    try:
        with open("/proc/diskstats") as f:
            body = f.read(8 << 20)
    except OSError:
        return None
    return f"# diskstats sample {number} at {datetime.now(timezone.utc).isoformat()}\n{body}"


def checkpoint_listing(directory: str, limit: int = 20_000) -> str | None:
    """The newest ``limit`` entries under ``directory`` in find -printf '%T@ %s %y %p' form."""
    if not os.path.isdir(directory):
        return None
    entries: list[tuple[float, int, str, str]] = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            kind = "d" if name in dirs else ("l" if os.path.islink(path) else "f")
            entries.append((st.st_mtime, st.st_size, kind, path))
        if len(entries) > 4 * limit:
            entries = sorted(entries, reverse=True)[:limit]
    entries = sorted(entries, reverse=True)[:limit]
    head = f"# checkpoint listing of {directory} at {datetime.now(timezone.utc).isoformat()}\n"
    return head + "".join(f"{m:.6f} {s} {k} {p}\n" for m, s, k, p in entries)
