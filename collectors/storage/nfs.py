"""NFS client statistics: ``nfsstat -c`` and ``/proc/self/mountstats`` (per mount retransmissions and
per-operation RPC counters)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint
from collectors.framework.lazy_re import lazy_regex
from collectors.storage.events import snapshot_event


def parse_nfsstat(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    pending: list[str] | None = None
    in_rpc = False
    ts, origin = ctx.snapshot_time()
    for n, line in ctx.lines(stream):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.lower().startswith("client rpc stats"):
            in_rpc, pending = True, None
            continue
        if stripped.endswith(":") and not stripped.startswith("calls"):
            in_rpc = False
            continue
        if in_rpc and pending is None and stripped.startswith("calls"):
            pending = stripped.split()
            continue
        if in_rpc and pending is not None:
            values = dict(zip(pending, stripped.split()))
            pending, in_rpc = None, False
            calls, retrans = _int(values.get("calls")), _int(values.get("retrans"))
            if ts is not None:
                for key in ("calls", "retrans"):
                    if (v := _int(values.get(key))) is not None:
                        yield SeriesPoint(ts=ts, name=f"nfs.rpc_{key}", value=float(v))
            if retrans:
                pct = 100.0 * retrans / calls if calls else None
                yield snapshot_event(ctx, "nfs_retrans", f"NFS client: {retrans} RPC retransmissions of {calls} calls"
                                     + (f" ({pct:.2f} %)" if pct is not None else ""), "warning",
                                     {"server": None, "mount": None, "retrans": retrans, "calls": calls,
                                       "retrans_pct": pct, "timeouts": None}, n, ts, origin)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


_MOUNT_HEAD = lazy_regex(r"^device (\S+) mounted on (.+?) with fstype (\S+)(?: statvers=(\S+))?\s*$")
_OP_LINE = lazy_regex(r"^\s+([A-Z_0-9]+):\s+(\d+(?:\s+\d+){7,})\s*$")


def parse_mountstats(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    mount: dict[str, Any] | None = None
    ts, origin = ctx.snapshot_time()
    for n, line in ctx.lines(stream):
        if m := _MOUNT_HEAD.match(line):
            yield from _mount_done(ctx, mount, ts, origin)
            device, path, fstype = m.group(1), m.group(2), m.group(3)
            mount = None
            if fstype.startswith("nfs"):
                server = device.rsplit(":", 1)[0] if ":" in device else device
                mount = {"device": device, "server": server, "mount": path, "fstype": fstype, "line": n,
                         "ops": 0, "trans": 0, "timeouts": 0, "rtt": {}, "exe": {}}
            continue
        if mount is None:
            continue
        if m := _OP_LINE.match(line):
            fields = [int(x) for x in m.group(2).split()]
            ops, trans, timeouts = fields[0], fields[1], fields[2]
            mount["ops"] += ops
            mount["trans"] += trans
            mount["timeouts"] += timeouts
            if m.group(1) in ("READ", "WRITE", "COMMIT", "GETATTR") and ops:
                mount["rtt"][m.group(1)] = fields[6] / ops
                mount["exe"][m.group(1)] = fields[7] / ops
    yield from _mount_done(ctx, mount, ts, origin)


def _mount_done(ctx: ParseContext, mount: dict[str, Any] | None, ts: datetime | None, origin: str) -> Iterator[Row]:
    if mount is None:
        return
    retrans = max(0, mount["trans"] - mount["ops"])
    labels = {"mount": mount["mount"], "server": mount["server"]}
    if ts is not None:
        yield SeriesPoint(ts=ts, name="nfs.retrans", value=float(retrans), labels=labels)
        yield SeriesPoint(ts=ts, name="nfs.major_timeouts", value=float(mount["timeouts"]), labels=labels)
        for op, value in mount["exe"].items():
            yield SeriesPoint(ts=ts, name=f"nfs.{op.lower()}_exe_ms", value=value, labels=labels)
    if retrans or mount["timeouts"]:
        exe = ", ".join(f"{op} {v:.0f} ms" for op, v in mount["exe"].items())
        yield snapshot_event(ctx, "nfs_retrans", f"{mount['mount']} ({mount['device']}): {retrans} retransmissions, "
                             f"{mount['timeouts']} major timeouts" + (f"; avg execute {exe}" if exe else ""),
                             "error" if mount["timeouts"] else "warning",
                             {"server": mount["server"], "mount": mount["mount"], "retrans": retrans,
                               "timeouts": mount["timeouts"], "calls": mount["ops"],
                               "exe_ms": {k: round(v, 2) for k, v in mount["exe"].items()}},
                              mount["line"], ts, origin)
