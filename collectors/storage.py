"""Storage evidence: disk latency (``iostat -x``, ``/proc/diskstats``), ``df``, NFS client statistics
(``nfsstat -c``, ``/proc/self/mountstats``), the checkpoint directory, and checkpoint-write failures
in training logs.

A training job that "hangs" at a checkpoint is usually waiting on storage: a full volume, an NFS
server that retransmits, a disk whose requests take seconds. The signals are chosen to survive
the classic false alarms: ``%util`` is 100 on any busy NVMe (it serves requests in parallel), so
latency is judged by ``await`` against the same device's baseline (the since-boot first report of
iostat, the since-boot average of diskstats, or the calmest other report), never by ``%util``.

Artifact kinds
- ``iostat``: ``iostat -x`` (old and new sysstat layouts, with or without ``-t``; several reports,
  also pasted together with ``---``).
- ``diskstats``: ``/proc/diskstats``; capture samples it twice, a second apart, each sample after a
  ``# diskstats sample N at ISO`` line.
- ``df``: ``df -P`` / ``df -PT`` / ``df -h`` / ``df -i``.
- ``nfsstat``: ``nfsstat -c``. ``mountstats``: ``/proc/self/mountstats``.
- ``checkpoint_listing``: what ``--checkpoint-dir DIR`` writes: ``# checkpoint listing of DIR at ISO``
  then one ``MTIME_EPOCH SIZE TYPE PATH`` line per entry (the shape of
  ``find DIR -printf '%T@ %s %y %p\\n'``, which responders can run by hand, with or without the
  type column); ``ls -l --time-style=full-iso`` listings are read too.
- ``checkpoint_log``: a training log whose head shows a checkpoint write failure.
  :func:`write_failure` is public so that the training-log collector can flag the same lines in
  logs it owns.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO

from collectors.base import (
    MONTHS,
    Artifact,
    CaptureContext,
    Event,
    HostFact,
    ParseContext,
    Row,
    SeriesPoint,
    Skipped,
    infer_year,
)
from collectors.framework.framing import parse_iso
from collectors.framework.lazy_re import lazy_regex

NAME = "storage"
LAYER = "network_storage"
KINDS = ("iostat", "diskstats", "df", "nfsstat", "mountstats", "checkpoint_listing", "checkpoint_log")
TIMEOUT = 30.0

FULL_PCT = 95
AWAIT_FLOOR_MS = 20.0
"""Below this no await is a stall, however many times its baseline it is."""
AWAIT_FACTOR = 5.0
SINGLE_REPORT_AWAIT_MS = 200.0
"""With one report and nothing to compare against, only an extreme average is flagged."""
MAX_LISTING = 200_000
MAX_PARTIAL_EVENTS = 50
CONTEXT_LINES = 40
CONTEXT_CHARS = 2048
"""Lines kept to decide whether a write error happened inside a checkpoint save, each cut short."""

_READ_ONLY_FS = {"squashfs", "iso9660", "udf", "cramfs", "erofs"}


# -- live capture -------------------------------------------------------------------------------

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


# -- sniffing -----------------------------------------------------------------------------------

_WRITE_FAIL = lazy_regex(
    r"PytorchStreamWriter failed writing|write\(\): fd \d+ failed with|unexpected pos \d+ vs \d+"
    r"|No space left on device|\[Errno (?:5|28|122|30|116)\]|Input/output error|Disk quota exceeded"
    r"|Read-only file system|Stale file handle|Transport endpoint is not connected")
_CKPT_CONTEXT = lazy_regex(r"torch\.save|save_checkpoint|serialization\.py|inline_container|checkpoint|ckpt"
                           r"|\.safetensors|\.pt\b|\.pth\b|state_dict|save_pretrained|dcp\.save|save_model",
                           re.IGNORECASE)


def sniff(name: str, head: str) -> dict[str, int]:
    lines = head.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    # a plain substring test before each pattern that needs it: 512 rank logs are sniffed by every collector
    if "Device" in head and re.search(r"^Device:?\s+.*(?:await|r/s|rrqm/s|tps)", head, re.MULTILINE):
        return {"iostat": 90}
    if first.startswith("# diskstats sample") or (
            len(re.findall(r"^\s*\d+\s+\d+\s+\S+(?:\s+\d+){10,}\s*$", head, re.MULTILINE)) >= 2):
        return {"diskstats": 90}
    if re.match(r"^Filesystem\s+(?:Type\s+)?(?:1024-blocks|1K-blocks|\d+[KMG]?-blocks|Size|Inodes)\s", first):
        return {"df": 95}
    if "Client rpc stats:" in head and re.search(r"^Client rpc stats:", head, re.MULTILINE):
        return {"nfsstat": 90}
    if " mounted on " in head and re.search(r"^device \S+ mounted on \S+ with fstype \S+", head, re.MULTILINE):
        return {"mountstats": 90}
    if first.startswith("# checkpoint listing of") or (
            " /" in head and len(re.findall(r"^\d{9,11}(?:\.\d+)? \d+ (?:[fdl] )?/", head, re.MULTILINE)) >= 2):
        return {"checkpoint_listing": 90}
    if re.search(r"^[-dl][rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+\d+\s+\d{4}-\d\d-\d\d \d\d:\d\d", head,
                 re.MULTILINE) and _CKPT_CONTEXT.search(head):
        return {"checkpoint_listing": 70}
    if ("PytorchStreamWriter" in head or "write(): fd " in head or "unexpected pos " in head) and re.search(
            r"PytorchStreamWriter failed writing|write\(\): fd \d+ failed with|unexpected pos \d+ vs \d+", head):
        return {"checkpoint_log": 80}
    if "Traceback" in head and _WRITE_FAIL.search(head) and _CKPT_CONTEXT.search(head):
        return {"checkpoint_log": 70}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = {"iostat": _parse_iostat, "diskstats": _parse_diskstats, "df": _parse_df, "nfsstat": _parse_nfsstat,
              "mountstats": _parse_mountstats, "checkpoint_listing": _parse_listing,
              "checkpoint_log": _parse_log}.get(kind)
    if parser is None:
        yield Skipped(None, f"storage collector cannot parse kind {kind}")
        return
    yield from parser(stream, ctx)


def _snapshot_event(ctx: ParseContext, kind: str, message: str, severity: str, attrs: dict, line: int | None,
                    ts: datetime | None = None, origin: str | None = None) -> Event:
    if ts is None:
        ts, origin = ctx.snapshot_time()
    origin = origin or "iso"
    return Event(kind=kind, message=message, ts=ts, ts_origin=origin if ts else "none",
                 ts_approx=origin in ("mtime", "local_as_utc"), severity=severity, attrs=attrs, line=line)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", "."))
    except ValueError:
        return None


def _await_outlier(value: float, baseline: float | None) -> bool:
    if value < AWAIT_FLOOR_MS:
        return False
    if baseline is None:
        return value >= SINGLE_REPORT_AWAIT_MS
    return value >= AWAIT_FACTOR * max(baseline, 0.1)


# -- iostat -------------------------------------------------------------------------------------

_IOSTAT_HOST = lazy_regex(r"^Linux \S+ \((\S+)\)\s+(\S+)")
_IOSTAT_TIME = [
    (re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)([+-]\d{4}|Z)?\s*$"), "iso"),
    (re.compile(r"^(\d\d/\d\d/\d{4}) (\d\d:\d\d:\d\d)(?: ([AP]M))?\s*$"), "us"),
    (re.compile(r"^(\d\d/\d\d/\d\d) (\d\d:\d\d:\d\d)(?: ([AP]M))?\s*$"), "us2"),
]
_AWAIT_COLUMNS = ("await", "r_await", "w_await")
IOSTAT_SERIES = frozenset({"r_s", "w_s", "rkB_s", "wkB_s", "rsec_s", "wsec_s", "r_await", "w_await", "await",
                           "f_await", "aqu_sz", "avgqu_sz", "util_pct", "tps"})
"""iostat columns kept as series: rates, latencies, queue and %util (merges and sizes are derivable noise)."""


def _column_name(col: str) -> str:
    name = col.rstrip(":")
    if name.startswith("%"):
        name = name[1:] + "_pct"
    return name.replace("/s", "_s").replace("-", "_").replace("/", "_")


def _iostat_time(line: str) -> tuple[datetime | None, str | None]:
    for pattern, style in _IOSTAT_TIME:
        m = pattern.match(line.strip())
        if not m:
            continue
        try:
            if style == "iso":
                when = datetime.fromisoformat(m.group(1))
                zone = m.group(2)
                if zone and zone != "Z":
                    sign = 1 if zone[0] == "+" else -1
                    when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:5]))
                    return when.replace(tzinfo=timezone.utc), "iso"
                return when.replace(tzinfo=timezone.utc), "iso" if zone else "local_as_utc"
            fmt = "%m/%d/%Y %H:%M:%S" if style == "us" else "%m/%d/%y %H:%M:%S"
            when = datetime.strptime(f"{m.group(1)} {m.group(2)}", fmt)
            if m.group(3):
                hour = when.hour % 12 + (12 if m.group(3) == "PM" else 0)
                when = when.replace(hour=hour)
            return when.replace(tzinfo=timezone.utc), "local_as_utc"
        except ValueError:
            return None, None
    return None, None


class _AwaitWatch:
    """Per device and await column: the calmest value seen so far is the baseline (the first
    report of ``iostat -x`` is the since-boot average, a natural one); an event marks the onset of
    each run of outlying reports, not every report of a long stall."""

    def __init__(self) -> None:
        self.baseline: dict[tuple[str, str], float] = {}
        self.high: set[str] = set()

    def check(self, device: str, values: dict[str, float]) -> tuple[str, float, float | None] | None:
        found = None
        for col in _AWAIT_COLUMNS:
            if col not in values:
                continue
            baseline = self.baseline.get((device, col))
            if found is None and _await_outlier(values[col], baseline):
                found = (col, values[col], baseline)
            self.baseline[(device, col)] = values[col] if baseline is None else min(baseline, values[col])
        onset = found is not None and device not in self.high
        if found is None:
            self.high.discard(device)
        else:
            self.high.add(device)
        return found if onset else None


def _parse_iostat(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    host: str | None = None
    report = 0
    report_ts: datetime | None = None
    report_origin: str | None = None
    columns: list[str] | None = None
    cpu_header: list[str] | None = None
    seen_in_report: set[str] = set()
    watch = _AwaitWatch()
    snapshot, _ = ctx.snapshot_time()
    for n, line in ctx.lines(stream):
        stripped = line.strip()
        if not stripped:
            columns = None
            cpu_header = None
            continue
        if stripped == "---":
            report += 1
            seen_in_report = set()
            columns = None
            continue
        if m := _IOSTAT_HOST.match(stripped):
            host = m.group(1)
            continue
        when, origin = _iostat_time(stripped)
        if when is not None:
            report_ts, report_origin = when, origin
            report += 1
            seen_in_report = set()
            continue
        if stripped.startswith("avg-cpu:"):
            cpu_header = stripped.split()[1:]
            continue
        if cpu_header is not None:
            values = stripped.split()
            if len(values) == len(cpu_header) and (ts := report_ts or snapshot):
                for col, val in zip(cpu_header, values):
                    if col == "%iowait" and (num := _number(val)) is not None:
                        yield SeriesPoint(ts=ts, name="cpu.iowait_pct", value=num, host=host)
            cpu_header = None
            continue
        if re.match(r"^Device:?\s", stripped):
            columns = [_column_name(c) for c in stripped.split()[1:]]
            continue
        if columns is None:
            yield Skipped(n, "not an iostat line")
            continue
        parts = stripped.split()
        if len(parts) != len(columns) + 1:
            yield Skipped(n, "iostat row with an unexpected number of columns")
            continue
        device = parts[0]
        if device in seen_in_report or report == 0:
            report += 1
            seen_in_report = set()
        seen_in_report.add(device)
        values = {c: v for c, raw in zip(columns, parts[1:]) if (v := _number(raw)) is not None}
        when = report_ts or snapshot
        if when is not None:
            labels = {"device": device, "report": str(report)}
            for col, value in values.items():
                if col in IOSTAT_SERIES:
                    yield SeriesPoint(ts=when, name=f"iostat.{col}", value=value, host=host, labels=labels)
        found = watch.check(device, values)
        if found is None:
            continue
        col, value, baseline = found
        attrs = {"device": device, "column": col, "await_ms": value, "baseline_ms": baseline,
                 "util_pct": values.get("util_pct"), "aqu_sz": values.get("aqu_sz", values.get("avgqu_sz")),
                 "report": report}
        base_text = f"baseline {baseline:.2f} ms" if baseline is not None else "no earlier report"
        util = f", %util {values['util_pct']:.0f}" if "util_pct" in values else ""
        event = _snapshot_event(ctx, "disk_await_high", f"{device}: {col} {value:.1f} ms ({base_text}{util})",
                                "warning", attrs, n, report_ts, report_origin)
        event.host = host
        yield event


# -- /proc/diskstats ----------------------------------------------------------------------------

_DISKSTATS_HEAD = lazy_regex(r"^#\s*diskstats sample (\d+) at (\S+)")


def _parse_diskstats(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    # Fields after the name: reads, reads merged, sectors read, ms reading, writes, writes merged,
    # sectors written, ms writing, I/Os in flight, ms doing I/O, weighted ms (Documentation/iostats).
    snapshot, snap_origin = ctx.snapshot_time()
    previous: tuple[datetime | None, dict[str, tuple[list[int], int]]] | None = None
    current: tuple[datetime | None, dict[str, tuple[list[int], int]]] | None = None
    for n, line in ctx.lines(stream):
        if m := _DISKSTATS_HEAD.match(line):
            if previous is not None and current is not None:
                yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)
            previous, current = current, (parse_iso(m.group(2)), {})
            continue
        parts = line.split()
        if not parts or line.startswith("#"):
            continue
        if len(parts) < 14 or not all(p.isdigit() for p in parts[:2] + parts[3:14]):
            yield Skipped(n, "not a /proc/diskstats line")
            continue
        device = parts[2]
        if device.startswith(("loop", "ram", "zram")):
            continue
        if current is None or device in current[1]:
            if previous is not None and current is not None:
                yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)
            previous, current = current, (None, {})
        current[1][device] = ([int(p) for p in parts[3:14]], n)
    if previous is not None and current is not None:
        yield from _diskstats_interval(ctx, previous, current, snapshot, snap_origin)


def _diskstats_interval(ctx: ParseContext, earlier: tuple[datetime | None, dict[str, tuple[list[int], int]]],
                        later: tuple[datetime | None, dict[str, tuple[list[int], int]]], snapshot: datetime | None,
                        snap_origin: str) -> Iterator[Row]:
    (t0, first), (t1, second) = earlier, later
    seconds = (t1 - t0).total_seconds() if t0 and t1 else None
    for device, (after, n) in second.items():
        if device not in first:
            continue
        before = first[device][0]
        d = [a - b for a, b in zip(after, before)]
        if any(x < 0 for x in d[:8]):
            continue
        ios = d[0] + d[4]
        busy_ms = d[3] + d[7]
        total_ios = before[0] + before[4]
        baseline = (before[3] + before[7]) / total_ios if total_ios else None
        when = t1 or snapshot
        inflight = after[8]
        if when is not None:
            labels = {"device": device}
            if ios:
                yield SeriesPoint(ts=when, name="disk.await_ms", value=busy_ms / ios, labels=labels)
            if seconds:
                yield SeriesPoint(ts=when, name="disk.util_pct", value=min(100.0, d[9] / (seconds * 10)),
                                  labels=labels)
            yield SeriesPoint(ts=when, name="disk.inflight", value=float(inflight), labels=labels)
        origin = "iso" if t1 else snap_origin
        if ios and _await_outlier(busy_ms / ios, baseline):
            yield _snapshot_event(ctx, "disk_await_high",
                                  f"{device}: await {busy_ms / ios:.1f} ms over the interval "
                                  f"(since-boot average {baseline or 0:.2f} ms)", "warning",
                                  {"device": device, "column": "await", "await_ms": busy_ms / ios,
                                   "baseline_ms": baseline, "ios": ios, "seconds": seconds}, n, when, origin)
        elif not ios and inflight > 0 and d[9] > 0:
            yield _snapshot_event(ctx, "disk_stall",
                                  f"{device}: {inflight} request(s) in flight, none completed"
                                  + (f" in {seconds:.1f} s" if seconds else " between samples"), "error",
                                  {"device": device, "inflight": inflight, "seconds": seconds}, n, when, origin)


# -- df -----------------------------------------------------------------------------------------

def _parse_df(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
        yield _snapshot_event(ctx, "filesystem_full", f"{mount} ({filesystem}) {what} {pct}% used"
                              + (f", {avail} available" if avail else ""),
                              "critical" if pct >= 100 else "error", attrs, n, ts, origin)


# -- NFS ----------------------------------------------------------------------------------------

def _parse_nfsstat(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
                yield _snapshot_event(ctx, "nfs_retrans", f"NFS client: {retrans} RPC retransmissions of {calls} calls"
                                      + (f" ({pct:.2f} %)" if pct is not None else ""), "warning",
                                      {"server": None, "mount": None, "retrans": retrans, "calls": calls,
                                       "retrans_pct": pct, "timeouts": None}, n, ts, origin)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


_MOUNT_HEAD = lazy_regex(r"^device (\S+) mounted on (.+?) with fstype (\S+)(?: statvers=(\S+))?\s*$")
_OP_LINE = lazy_regex(r"^\s+([A-Z_0-9]+):\s+(\d+(?:\s+\d+){7,})\s*$")


def _parse_mountstats(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
        yield _snapshot_event(ctx, "nfs_retrans", f"{mount['mount']} ({mount['device']}): {retrans} retransmissions, "
                              f"{mount['timeouts']} major timeouts" + (f"; avg execute {exe}" if exe else ""),
                              "error" if mount["timeouts"] else "warning",
                              {"server": mount["server"], "mount": mount["mount"], "retrans": retrans,
                               "timeouts": mount["timeouts"], "calls": mount["ops"],
                               "exe_ms": {k: round(v, 2) for k, v in mount["exe"].items()}},
                              mount["line"], ts, origin)


# -- checkpoint directory -----------------------------------------------------------------------

_LISTING_HEAD = lazy_regex(r"^#\s*checkpoint listing of (.+) at (\S+)\s*$")
_FIND_LINE = lazy_regex(r"^(\d+(?:\.\d+)?) (\d+) (?:([fdlpsbc]) )?(.+)$")
_LS_FULL = lazy_regex(r"^([-dlpsbc])[rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(\d+)\s+"
                      r"(\d{4}-\d\d-\d\d) (\d\d:\d\d(?::\d\d(?:\.\d+)?)?)(?: ([+-]\d{4}))?\s+(.+)$")
_LS_SHORT = lazy_regex(r"^([-dlpsbc])[rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(\d+)\s+"
                       r"([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{4}|\d\d:\d\d)\s+(.+)$")
_LS_DIR = lazy_regex(r"^(.+):\s*$")
_CKPT_NAME = lazy_regex(r"checkpoint|ckpt|global_step|iter_\d|step[_-]?\d|epoch[_-]?\d|model_states|optim_states"
                        r"|\.(?:pt|pth|ckpt|safetensors|distcp|bin|pkl|h5|npz|msgpack)$", re.IGNORECASE)
_TEMP_NAME = lazy_regex(r"(?:\.tmp|\.temp|\.partial|\.incomplete|\.part|\.inprogress|~)$|^\.?tmp|\.tmp[._-]"
                        r"|\.__temp|_tmp\b", re.IGNORECASE)
"""Temporary names of a file or of the directory a save writes into (HF Trainer's tmp-checkpoint-N,
torch.save's partial files, rsync's dot files are not matched: they do not end a checkpoint)."""


def _parse_listing(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    listed_at, listed_origin = ctx.snapshot_time()
    if listed_origin == "mtime":
        # A handed-over listing's mtime is when it was copied as often as when ls ran: no age from it.
        listed_at = None
    directory: str | None = None
    entries: list[tuple[str, int, datetime, int]] = []
    ls_dir = ""
    for n, line in ctx.lines(stream):
        if m := _LISTING_HEAD.match(line):
            directory = m.group(1)
            if when := parse_iso(m.group(2)):
                listed_at, listed_origin = when, "iso"
            continue
        if not line.strip() or line.startswith(("#", "total ")):
            continue
        if len(entries) >= MAX_LISTING:
            yield Skipped(n, f"listing longer than {MAX_LISTING} entries")
            continue
        entry = _listing_entry(line, ls_dir, ctx)
        if entry is None:
            if m := _LS_DIR.match(line):
                ls_dir = m.group(1).rstrip("/") + "/"
                continue
            yield Skipped(n, "not a checkpoint listing line")
            continue
        kind, path, size, mtime = entry
        if kind == "f":
            entries.append((path, size, mtime, n))
    yield from _checkpoint_events(entries, directory, listed_at, listed_origin)


def _listing_entry(line: str, ls_dir: str, ctx: ParseContext) -> tuple[str, str, int, datetime] | None:
    if m := _FIND_LINE.match(line):
        try:
            mtime = datetime.fromtimestamp(float(m.group(1)), tz=timezone.utc)
        except (OverflowError, ValueError, OSError):
            return None
        return m.group(3) or "f", m.group(4), int(m.group(2)), mtime
    if m := _LS_FULL.match(line):
        kind, size, day, clock, zone, name = m.groups()
        try:
            when = datetime.fromisoformat(f"{day}T{clock[:15]}" if "." in clock else f"{day}T{clock}")
        except ValueError:
            return None
        if zone:
            sign = 1 if zone[0] == "+" else -1
            when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:]))
        return ("f" if kind == "-" else kind), ls_dir + name.split(" -> ")[0], int(size), when.replace(
            tzinfo=timezone.utc)
    if m := _LS_SHORT.match(line):
        kind, size, mon, day, year_or_time, name = m.groups()
        month = MONTHS.get(mon.lower())
        if month is None:
            return None
        try:
            if ":" in year_or_time:
                year, _ = infer_year(month, int(day), ctx.reference_for(ctx.host) or ctx.snapshot_time()[0])
                when = datetime(year, month, int(day), int(year_or_time[:2]), int(year_or_time[3:]))
            else:
                when = datetime(int(year_or_time), month, int(day))
        except ValueError:
            return None
        return ("f" if kind == "-" else kind), ls_dir + name.split(" -> ")[0], int(size), when.replace(
            tzinfo=timezone.utc)
    return None


def _checkpoint_events(entries: list[tuple[str, int, datetime, int]], directory: str | None,
                       listed_at: datetime | None, listed_origin: str) -> Iterator[Row]:
    ckpts = [e for e in entries if _CKPT_NAME.search(_relative(e[0], directory))]
    if not ckpts:
        return
    groups: dict[tuple[str, str], list[int]] = {}
    for path, size, _, _ in ckpts:
        groups.setdefault(_shape(path), []).append(size)
    partial: list[tuple[str, int, datetime, int, str]] = []
    good: list[tuple[str, int, datetime, int]] = []
    for path, size, mtime, n in ckpts:
        sizes = groups[_shape(path)]
        median = statistics.median(sizes)
        if size == 0:
            partial.append((path, size, mtime, n, "zero bytes"))
        elif _is_temporary(path):
            partial.append((path, size, mtime, n, "temporary file"))
        elif len(sizes) >= 3 and size < 0.5 * median:
            partial.append((path, size, mtime, n, f"smaller than its siblings (median {int(median)} bytes)"))
        else:
            good.append((path, size, mtime, n))
    last_good = max(good, key=lambda e: e[2]) if good else None
    if last_good is not None:
        path, size, mtime, n = last_good
        age = (listed_at - mtime).total_seconds() if listed_at else None
        yield Event(kind="checkpoint_last_good", ts=mtime, ts_origin="mtime", severity="info", line=n,
                    message=f"newest complete checkpoint file {path} ({size} bytes)"
                    + (f", {_age(age)} old at listing time" if age is not None else ""),
                    attrs={"path": path, "size": size, "age_s": age, "directory": directory})
    for path, size, mtime, n, reason in sorted(partial, key=lambda e: e[2], reverse=True)[:MAX_PARTIAL_EVENTS]:
        newer = last_good is None or mtime > last_good[2]
        yield Event(kind="checkpoint_partial", ts=mtime, ts_origin="mtime", severity="warning" if newer else "info",
                    line=n, message=f"checkpoint file {path}: {reason} ({size} bytes)",
                    attrs={"path": path, "size": size, "reason": reason, "newer_than_last_good": newer,
                           "directory": directory})
    if len(partial) > MAX_PARTIAL_EVENTS:
        yield Skipped(None, f"{len(partial) - MAX_PARTIAL_EVENTS} more partial checkpoint files not listed")
    yield HostFact(f"checkpoint.{directory or 'listing'}.files", str(len(ckpts)))


def _relative(path: str, directory: str | None) -> str:
    """The part of ``path`` below the listed directory: the directory's own name says nothing."""
    if directory and path.startswith(directory.rstrip("/") + "/"):
        return path[len(directory.rstrip("/")) + 1:]
    return path


def _is_temporary(path: str) -> bool:
    parts = path.rstrip("/").rsplit("/", 2)
    return any(_TEMP_NAME.search(part) for part in parts[-2:])


def _shape(path: str) -> tuple[str, str]:
    """A checkpoint file's family: its name with digits blanked, and its suffix."""
    name = path.rsplit("/", 1)[-1]
    return re.sub(r"\d+", "#", name), os.path.splitext(name)[1]


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- training logs ------------------------------------------------------------------------------

_ERRNO = [
    (re.compile(r"No space left on device|\[Errno 28\]|ENOSPC", re.IGNORECASE), "ENOSPC"),
    (re.compile(r"Input/output error|\[Errno 5\]|\bEIO\b"), "EIO"),
    (re.compile(r"Disk quota exceeded|\[Errno 122\]|EDQUOT"), "EDQUOT"),
    (re.compile(r"Read-only file system|\[Errno 30\]|EROFS"), "EROFS"),
    (re.compile(r"Stale file handle|\[Errno 116\]|ESTALE"), "ESTALE"),
    (re.compile(r"Transport endpoint is not connected|\[Errno 107\]|ENOTCONN"), "ENOTCONN"),
]
_STREAM_WRITER = lazy_regex(r"PytorchStreamWriter failed writing file (\S+?):? (.*)$")
_FD_WRITE = lazy_regex(r"write\(\): fd (\d+) failed with (.*)$")
_UNEXPECTED_POS = lazy_regex(r"unexpected pos \d+ vs \d+")
_LOG_TS = lazy_regex(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?\s*(Z|[+-]\d\d:?\d\d)?")


def write_failure(line: str) -> dict[str, Any] | None:
    """The storage write error a log line reports, if any: {error, errno, file, checkpoint_api}.

    ``checkpoint_api`` is True when the line itself is from torch's checkpoint writer; callers
    that see a ``torch.save``/``save_checkpoint`` frame nearby treat other errors as checkpoint
    failures too."""
    if not _WRITE_FAIL.search(line):
        return None
    errno = next((name for pattern, name in _ERRNO if pattern.search(line)), None)
    error = line.strip()
    if m := re.search(r"(?:RuntimeError|OSError|IOError|PermissionError|Exception):\s*(.*)$", error):
        error = m.group(1)
    error = re.sub(r"^\[enforce fail at [^\]]+\]\s*\.?\s*", "", error)
    result: dict[str, Any] = {"error": error[:500], "errno": errno, "file": None, "checkpoint_api": False}
    if m := _STREAM_WRITER.search(line):
        result.update(file=m.group(1), checkpoint_api=True)
    elif _FD_WRITE.search(line) or _UNEXPECTED_POS.search(line):
        result["checkpoint_api"] = True
    if m := re.search(r"\[enforce fail at ([^\]]+)\]", line):
        result["source"] = m.group(1)
    return result


def _parse_log(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    recent: deque[str] = deque(maxlen=CONTEXT_LINES)
    last_stamp: re.Match[str] | None = None
    learned = False
    for n, line in ctx.lines(stream):
        own = _LOG_TS.search(line, 0, 64)
        if own:
            last_stamp = own
            if not learned and (first := _log_time(own)) is not None:
                ctx.learn_reference_time(ctx.host, first)
                learned = True
        recent.append(line[:CONTEXT_CHARS])
        if not _WRITE_FAIL.search(line):
            continue
        failure = write_failure(line)
        if failure is None:
            continue
        in_checkpoint = failure["checkpoint_api"] or any(_CKPT_CONTEXT.search(r) for r in recent)
        kind = "checkpoint_write_failed" if in_checkpoint else "storage_error"
        ts = _log_time(last_stamp) if last_stamp else None
        attrs = {k: v for k, v in failure.items() if k != "checkpoint_api"}
        errno = f" ({failure['errno']})" if failure["errno"] else ""
        yield Event(kind=kind, message=f"{'checkpoint write failed' if in_checkpoint else 'storage error'}{errno}: "
                    f"{failure['error']}"[:400], ts=ts, ts_origin=("iso" if own else "neighbour") if ts else "none",
                    ts_approx=bool(ts and not own), ts_raw=last_stamp.group(0) if ts and last_stamp else None,
                    severity="error", attrs=attrs, line=n)


def _log_time(m: re.Match[str]) -> datetime | None:
    try:
        when = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
    except ValueError:
        return None
    if m.group(3):
        when = when.replace(microsecond=int(m.group(3).ljust(6, "0")))
    zone = m.group(4)
    if zone and zone != "Z":
        digits = zone.replace(":", "")
        sign = 1 if digits[0] == "+" else -1
        when -= sign * timedelta(hours=int(digits[1:3]), minutes=int(digits[3:5]))
    return when.replace(tzinfo=timezone.utc)
