"""``df -P`` / ``df -PT`` / ``df -h`` / ``df -i``: a filesystem (or its inodes) over FULL_PCT used, read-only
and loop filesystems aside."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.storage.events import snapshot_event

FULL_PCT = 95

_READ_ONLY_FS = {"squashfs", "iso9660", "udf", "cramfs", "erofs"}


def parse_df(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    header: list[str] | None = None
    carry: tuple[str, int] | None = None
    ts, origin = ctx.snapshot_time()
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        if line.startswith("Filesystem"):
            header = re.sub(r"Mounted on", "Mounted_on", line).split()
            continue
        if header is None:
            yield Skipped(n, "df row before its header")
            continue
        parts = line.split()
        if len(parts) == 1 and carry is None:
            carry = (parts[0], n)
            continue
        if carry is not None:
            parts = [carry[0]] + parts
            n = carry[1]
            carry = None
        pct_col = next((i for i, h in enumerate(header) if h in ("Capacity", "Use%", "IUse%")), None)
        if pct_col is None or len(parts) < len(header):
            yield Skipped(n, "df row does not match its header")
            continue
        fields = dict(zip(header[:pct_col + 1], parts[:pct_col + 1]))
        mount = " ".join(parts[pct_col + 1:]) or fields.get("Filesystem", "")
        raw_pct = fields.get(header[pct_col], "-").rstrip("%")
        if not raw_pct.isdigit():
            continue
        pct = int(raw_pct)
        inodes = header[pct_col] == "IUse%"
        fstype = fields.get("Type")
        filesystem = fields.get("Filesystem", "")
        if ts is not None:
            yield SeriesPoint(ts=ts, name="fs.inode_use_pct" if inodes else "fs.use_pct", value=float(pct),
                              labels={"mount": mount, "filesystem": filesystem})
        if pct < FULL_PCT or (fstype or "").lower() in _READ_ONLY_FS or filesystem.startswith("/dev/loop") \
                or mount.startswith("/snap/"):
            continue
        avail = fields.get("Available", fields.get("Avail", fields.get("IFree")))
        attrs = {"mount": mount, "use_pct": pct, "filesystem": filesystem, "fstype": fstype,
                 "avail_kb": int(avail) if avail and avail.isdigit() else avail, "inodes": inodes}
        what = "inodes" if inodes else "space"
        yield snapshot_event(ctx, "filesystem_full", f"{mount} ({filesystem}) {what} {pct}% used"
                             + (f", {avail} available" if avail else ""),
                             "critical" if pct >= 100 else "error", attrs, n, ts, origin)
