"""Kernel log: NVRM Xid/SXid, fallen-off-the-bus, PCIe AER, MCE, OOM kills, hung tasks, link and NFS
state, Lustre/LNet, from a live host or from handed-over dmesg/journal/syslog files.

Live, the journal is asked first (``journalctl -k``, this boot and the two before: after a reboot the
evidence is in the previous boot), else ``dmesg``, else /var/log/kern.log, messages or syslog; pstore
dumps of a crashed boot are kept too. A syslog file next to a journal or dmesg that only covers this
boot is kept as ``syslog_before_boot``: only its lines from before the boot become events, so nothing
is counted twice.

Parsing is built for multi-GB logs: the bytes are scanned in 4 MiB blocks by a prefilter (one RE2
pass for the keywords' short windows, or numpy compares for a few rare anchor bytes then an 8-byte window
check around each anchor), so only lines that can be events reach the per-line regexes of
collectors/framework/kernel_lines.py. The RE2 pass also narrows the keywords a busy Kubernetes node prints on
most lines (NARROWED), so a chatty log costs about what a quiet one does. A block's newlines are counted
by one numpy compare, in stretches that end at the candidate lines, which are located by offset: no line
that cannot be an event is ever split out, decoded or indexed. A regular file is scanned through a map of
it, not copied into blocks. Nothing holds more than a block in memory (the map's pages behind the block
are dropped as the parse goes).
"""

from __future__ import annotations

import io
import mmap
import os
import re
import stat
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any, BinaryIO

from collectors.base import MAX_LINE_BYTES, Artifact, CaptureContext, Event, ParseContext, Row, Skipped
from collectors.framework.kernel_lines import (
    CONTAINER_INTERFACES,
    ERROR_WORDS,
    NV_BARE,
    STAMPED,
    Classifier,
    Prefix,
    Record,
    Stamp,
    exact,
    resolve,
    split_prefix,
)

NAME = "kernel"
LAYER = "hardware"
KINDS = ("dmesg", "dmesg_ctime", "dmesg_iso", "journal", "syslog", "kmsg", "pstore", "syslog_before_boot")
TIMEOUT = 35.0
"""Its commands one after the other at their limits (journalctl -k in two formats 8 s + 8 s, the list of boots 4 s,
two earlier boots 5 s + 5 s) and the spool margin: the whole sequence fits, not only what the clamp leaves."""
PRIORITY = 10
"""After host facts (boot times), before the collectors whose year-less lines take dates from ours."""
SIGNATURES_INLINE = True
"""The signature catalog (collectors/catalog/signatures/) runs on this parser's own candidate lines instead of a
second pass over the file: a multi-GB quiet log is read once."""

BLOCK_BYTES = 4 << 20
FILE_TAIL_BYTES = 128 << 20
PSTORE_DIRS = ("/var/lib/systemd/pstore", "/sys/fs/pstore")
NEIGHBOUR_LINES = 32
CONTINUATION_LINES = 16


def xid_info(code: int) -> dict[str, Any]:
    """The catalog entry of an Xid as plain data, for other collectors (NVML's Xid events)."""
    from collectors.framework.xid_catalog import lookup

    info = lookup(code)
    return {"name": info.name, "meaning": info.meaning, "layer": info.layer, "severity": info.severity,
            "action": info.action, "follower": info.follower, "causes": list(info.causes)}


# -- live capture -------------------------------------------------------------------------------
def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    journal_ok, previous_boots = yield from _journal(ctx)
    dmesg_ok = False
    if not journal_ok:
        dmesg_ok = yield from _dmesg(ctx)
    if not previous_boots:
        yield from _log_files(ctx, before_boot=journal_ok or dmesg_ok)
    yield from _pstore(ctx)


def _head(art: Artifact, size: int = 64 << 10) -> str:
    if art.path is None:
        return (art.data or b"")[:size].decode("utf-8", "replace")
    try:
        with open(art.path, "rb") as f:
            return f.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


def _has_entries(art: Artifact) -> bool:
    """journalctl prints ``-- No entries --`` and exits 0 when it has nothing; dmesg may print nothing."""
    return any(line.strip() and not line.startswith("-- ") for line in _head(art).splitlines())


def _reason(art: Artifact, default: str) -> str:
    err = str(art.info.get("error") or art.info.get("stderr") or "").strip()
    first = err.splitlines()[0] if err else default
    if "not permitted" in err or "denied" in err.lower():
        return f"denied: {first}"
    if art.info.get("timed_out"):
        return "timeout: " + first
    return f"unavailable: {first}"


def _journal(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("journalctl"):
        ctx.missing("journalctl -k", "unavailable: journalctl not installed")
        return False, False
    since = [f"--since=@{int(ctx.since.timestamp())}"] if ctx.since else []
    art = None
    fmt = "short-iso-precise"
    for fmt in ("short-iso-precise", "short-iso"):  # short-iso-precise needs systemd 234
        art = ctx.run(["journalctl", "-k", "--no-pager", "-o", fmt, *since], kind="journal", timeout=8)
        if _has_entries(art) or art.info.get("exit_code") == 0:
            break
    if art is None or not _has_entries(art):
        ctx.missing("journalctl -k", _reason(art, "no kernel messages in the journal") if art is not None
                    else "unavailable")
        return False, False
    yield art
    boots = ctx.run(["journalctl", "--list-boots", "--no-pager", "-q"], kind="journal_boots", timeout=4)
    count = sum(1 for line in _head(boots).splitlines() if line.strip() and not line.startswith(("IDX", "--")))
    for offset in range(1, min(count, 3)):
        previous = ctx.run(["journalctl", "-k", "--no-pager", "-o", fmt, "-b", f"-{offset}", *since], kind="journal",
                           timeout=5)
        if _has_entries(previous):
            yield previous
    return True, count > 1


def _dmesg(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("dmesg"):
        ctx.missing("dmesg", "unavailable: dmesg not installed")
        return False
    art = ctx.run(["dmesg", "--time-format", "iso"], kind="dmesg_iso", timeout=5)
    if not _has_entries(art):  # util-linux before 2.27 has no --time-format: raw seconds since boot
        art = ctx.run(["dmesg"], kind="dmesg", timeout=5)
    if _has_entries(art):
        yield art
        return True
    ctx.missing("dmesg", _reason(art, "empty kernel ring buffer"))
    return False


def _log_files(ctx: CaptureContext, before_boot: bool) -> Iterator[Artifact]:
    """The first of kern.log, messages, syslog (they repeat each other); the tail of a big one."""
    kind = "syslog_before_boot" if before_boot else "syslog"
    for path in ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog"):
        if not os.path.exists(path):
            continue
        art = ctx.read_file(path, kind=kind, max_bytes=FILE_TAIL_BYTES, tail=True)
        if art is not None:
            yield art
            return
    if not before_boot:
        ctx.missing("/var/log/kern.log, messages, syslog", "unavailable: no kernel log file")


def _pstore(ctx: CaptureContext) -> Iterator[Artifact]:
    """Crash dumps the kernel left in persistent storage; absent on most hosts, which is fine."""
    found = 0
    for root in PSTORE_DIRS:
        try:
            walk = sorted(os.walk(root))
        except OSError:
            continue
        for dirpath, _, files in walk:
            for fname in sorted(files):
                if found >= 64:
                    return
                art = ctx.read_file(os.path.join(dirpath, fname), kind="pstore", max_bytes=16 << 20)
                if art is not None:
                    found += 1
                    yield art


# -- sniffing ------------------------------------------------------------------------------------
_BARE_TAGS = ("NVRM:", "nvidia-nvswitch", "pcieport ", "mce: ", "EDAC ", "nfs: server", "INFO: task", "Out of memory",
              "oom-kill:", "LustreError:", "Lustre:", "LNet:", "mlx5_core ", "IPv6: ADDRCONF", "[Hardware Error]",
              "Call Trace:", "NETDEV WATCHDOG")
_STYLE_KIND = {"mono": "dmesg", "ctime": "dmesg_ctime", "iso": "dmesg_iso", "journal": "journal", "syslog": "syslog",
               "kmsg": "kmsg"}


def sniff(name: str, head: str) -> dict[str, int]:
    """Confident only for text whose lines are kernel-log lines; a system log that is mostly other
    programs, or a few kernel-looking lines inside something else, scores low."""
    lines = [line for line in head.splitlines()[:400] if line.strip()][:200]
    if not lines:
        return {}
    if lines[0].startswith(("Oops#", "Panic#", "Emergency#")) or "pstore" in name.lower():
        return {"pstore": 90}
    styles: Counter[str] = Counter()
    counted = 0
    for line in lines:
        if line[:1] in (" ", "\t"):
            continue
        counted += 1
        if not _may_be_kernel(line):
            continue
        pre, msg = split_prefix(line)
        style = _kernel_style(pre, msg)
        if style:
            styles[style] += 1
    kernelish = sum(styles.values())
    if not kernelish or not counted:
        return {}
    style, _ = styles.most_common(1)[0]
    frac = kernelish / counted
    strong = style != "kmsg"
    if frac >= 0.6:
        score = 90 if strong else 75
    elif frac >= 0.2:
        score = 60 if strong else 40
    else:
        score = 30 if style in ("journal", "syslog") else 15
    lowered = name.lower()
    if any(hint in lowered for hint in ("dmesg", "kern", "journal", "messages", "syslog")):
        score += 5
    return {_STYLE_KIND[style]: score}


_FACILITY_INITIALS = frozenset("kumdaslncf")
"""First letters of the facilities ``dmesg -x`` prints (kern, user, mail, daemon, auth, syslog, lpr, news, ...)."""


def _may_be_kernel(line: str) -> bool:
    """False for a line split_prefix would leave without a prefix and _kernel_style would not count: it
    starts with no bracket, digit, capital, facility or bare tag (an NCCL ``host:pid:tid`` line)."""
    first = line[:1]
    return (first in ("[", "<") or first.isdigit() or first.isupper() or first in _FACILITY_INITIALS
            or line.startswith(_BARE_TAGS))


def _kernel_style(pre: Prefix, msg: str) -> str | None:
    if pre.style == "mono":
        return "mono" if len((pre.raw or "").split(".")[-1]) == 6 else None  # Xorg prints 3 decimals
    if pre.style in ("ctime", "iso"):
        return pre.style
    if pre.style in ("journal", "syslog"):
        return pre.style if pre.ident == "kernel" else None
    if pre.ident == "kernel" or msg.startswith(_BARE_TAGS):
        return "kmsg"
    return None


# -- parsing ---------------------------------------------------------------------------------------
KEYWORDS = (b"NVRM", b"SXid", b"AER:", b"PCIe Bus Error", b"DPC: containment", b"PCIe bandwidth",
            b"[Hardware Error]", b"EDAC", b"temperature above threshold", b"Killed process", b"oom-kill",
            b"invoked oom", b"INFO: ", b"soft lockup", b"hard LOCKUP", b"Kernel panic", b"Link ",
            b"link is not ready", b"link becomes ready", b"link status definitely", b"Releasing backup",
            b"Releasing active", b"without any active interface", b"infiniband", b"rdma_rxe", b"mlx5_",
            b"NETDEV WATCHDOG", b"Port module event", b": server ", b"Lustre", b"LNet", b"segfault",
            b"protection fault", b"nvidia", b"I/O error", b"Linux version", b"fabricmanager", b"Driver/library",
            b"blocked for more than", b"Remounting filesystem", b"fs error (device",
            b"Disk failure on", b"beyond end of", b"no available path", b"reset controller",
            b"timeout, aborting", b"Disabling device after", b"hutting down filesystem", b"Corruption detected",
            b"Corruption of in-memory", b"BTRFS error", b"mmfs", b"file-max limit", b"Lock reclaim failed",
            b"insufficient power", b"health compromised", b"health_try_recover", b"Port: ",
            b"Oops: ", b"kernel BUG at", b"NULL pointer dereference", b"unable to handle",
            b"Device isn't ready", b"Reset indication", b"Admin queue is closed",
            b"Wait for completion (polling)", b"Kill process", b"Abort status: ", b"controller is down",
            b"after probe failure", b"Device not ready", b"Detected IO errors", b"blocks, I/O Error",
            b"has been shut down", b"Operation continuing on", b"detected when updating journal",
            b"Delayed block allocation", b"Data will be lost", b"critical medium error", b"critical target error",
            b"timeout, disable controller", b"state error detected",
            b"kthread starved", b"OOM is now expected", b"no killable processes", b"oom_reaper: ",
            b"Card not present", b"ms after FLR", b"ms after bus reset", b"ms after DPC", b"; giving up",
            *(w.encode() for w in NV_BARE))
"""Literals a line must hold to be looked at by the per-line parser; every handler of
collectors/framework/kernel_lines.py, and every sample of the signature catalog's kernel families (which run
on these candidate lines only: tests/collectors/test_kernel_signature_reach.py), is reachable through at
least one of them."""
NARROWED = (b"mlx5_", b"nvidia", b"link becomes ready", b"link is not ready")
"""Keywords that most lines of a busy Kubernetes GPU node hold without being evidence (the mlx5 firmware
tracer, nvidia-uvm loading per container, veth pairs becoming ready per pod): the RE2 pass keeps such a
line only with what a handler or signature needs from it (_narrowed); the numpy pass keeps them all,
and the lines it keeps besides make no rows."""

RARITY = b"QZJXVKWYHBRwLDOvxfUGFqzjkyCIPMTNASEbgpmhucdltrisnoae"
"""Bytes from rarest to commonest in kernel logs: each keyword is anchored at its rarest byte, and
this order also keeps the number of distinct anchor bytes small (each costs one pass)."""
RE2_BLOCK_HITS = 2048
"""Above this many window hits in a block the RE2 pass (a Python tuple per hit) gives way to the numpy
one; a block with that many candidates spends far longer in the per-line parser either way."""


class _Prefilter:
    """Keyword candidates of a block without a Python loop per line: one numpy compare per anchor
    byte, then the 8 bytes around each anchor against the keywords anchored there. The same windows as
    one RE2 alternation find those lines about twice as fast when hits are few (a window holds no
    newline, so every line holding one gets a match), less the NARROWED keywords' lines that cannot
    make a row (``anchors``: the signature catalog's, which such a line may still match)."""

    def __init__(self, anchors: Iterable[str] = ()) -> None:
        import numpy as np  # deferred: numpy costs ~0.1 s to import and capture never needs it

        self.np = np
        by_mask: dict[int, set[int]] = {}
        anchor_bytes: set[int] = set()
        plain: set[bytes] = set()
        narrowed: set[bytes] = set()
        for kw in KEYWORDS:
            i = min(range(len(kw)), key=lambda j: (RARITY.find(bytes([kw[j]])) % 1000,
                                                   -(min(j, 3) + min(len(kw) - j, 5))))
            lo = max(0, i - 3)
            window = kw[lo:i + 5]
            shift = 3 - (i - lo)
            by_mask.setdefault(((1 << (8 * len(window))) - 1) << (8 * shift), set()).add(
                int.from_bytes(window, "little") << (8 * shift))
            anchor_bytes.add(kw[i])
            (narrowed if kw in NARROWED else plain).add(window)
        self.anchors = sorted(anchor_bytes)
        self.masks = [(np.uint64(mask), np.array(sorted(vals), dtype=np.uint64)) for mask, vals in by_mask.items()]
        self.windows = _windows_regex(plain, sorted(narrowed - plain), anchors)

    def scan(self, block: _Block | bytes) -> list[int]:
        """Sorted positions (in the block's own offsets) inside the candidate lines of one block."""
        if isinstance(block, bytes):
            block = _Block(block, 0, len(block), True)
        if self.windows is not None:
            from collectors.framework.signatures import spans

            found = spans(self.windows, block.buf, RE2_BLOCK_HITS + 1, block.lo, block.hi)
            if len(found) <= RE2_BLOCK_HITS:
                return [start for start, _ in found]
        np = self.np
        data = block.buf[block.lo:block.hi]
        padded = b"\n\n\n" + data + b"\n" * 8
        arr = np.frombuffer(padded, dtype=np.uint8)[3:3 + len(data)]
        words = np.ndarray(shape=(len(data),), dtype="<u8", buffer=padded, offset=0, strides=(1,))
        hit = np.equal(arr, self.anchors[0])
        scratch = np.empty_like(hit)
        for anchor in self.anchors[1:]:
            np.bitwise_or(hit, np.equal(arr, anchor, out=scratch), out=hit)
        pos = np.flatnonzero(hit)
        if not pos.size:
            return []
        vals = words[pos]
        found = np.zeros(pos.size, dtype=bool)
        for mask, allowed in self.masks:
            found |= np.isin(vals & mask, allowed)
        return (pos[found] + block.lo).tolist()


class _Parser:
    """State of one artifact's parse: block reading, line numbers, neighbour times, the classifier.
    A block's lines are addressed by their start offset and their index in the block: only candidate
    lines and the few around them are ever located, never every line of a block."""

    def __init__(self, kind: str, ctx: ParseContext) -> None:
        self.kind = kind
        self.ctx = ctx
        self.classifier = Classifier()
        # deferred: live capture imports this module on a bare node and never parses there
        from collectors.framework.signatures import catalog as signature_catalog

        try:
            self.signatures = signature_catalog()
        except (ImportError, OSError, ValueError):  # a broken catalog or RE2 install must not cost the kernel's events
            self.signatures = None
        anchors = {a for sig in self.signatures.signatures for a in sig.anchors} if self.signatures else set()
        self.prefilter = _Prefilter(anchors)
        self.np = self.prefilter.np
        self.last_stamp: Stamp | None = None
        self.referenced: set[str] = set()
        self.boot_cut = None
        if kind == "syslog_before_boot":
            boot = ctx.boot_time_for(ctx.host)
            self.boot_cut = boot - timedelta(seconds=2) if boot else None

    # -- blocks ---------------------------------------------------------------------------------
    def run(self, stream: BinaryIO) -> Iterator[Row]:
        """Rows of every block (_read_blocks, or _mapped_blocks for a regular file: the same blocks without
        copying them); a line longer than MAX_LINE_BYTES is counted as skipped."""
        mapped = _mapping(stream)
        line = 1
        for block in _mapped_blocks(mapped, stream) if mapped is not None else _read_blocks(stream):
            if block is None:
                yield Skipped(line, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
                line += 1
                continue
            line += yield from self._block(block, line)
            if block.last and block.buf[block.hi - 1:block.hi] != b"\n":
                line += 1
            self.ctx.lines_read = line - 1
        self.ctx.lines_read = line - 1
        yield from self.classifier.finish()

    def _block(self, block: _Block, first_line: int) -> Iterator[Row]:
        """Rows of one block; returns (through StopIteration) how many newlines it holds."""
        buf, lo, hi = block.buf, block.lo, block.hi
        newline = self.np.frombuffer(buf, dtype=self.np.uint8, count=hi - lo, offset=lo) == 10
        bad: set[int] = set()
        for idx, reason in self._bad_lines(block, newline):
            if idx not in bad:
                bad.add(idx)
                yield Skipped(first_line + idx, reason)
        if block.line_end(lo) - lo > MAX_LINE_BYTES and 0 not in bad:
            bad.add(0)
            yield Skipped(first_line, f"line longer than {MAX_LINE_BYTES >> 20} MiB")
        heads, newlines = self._heads(block, newline, bad)
        for idx, start in heads:
            text = self._record_text(block, start, idx, bad)
            if text is not None:
                yield from self._record(text, first_line + idx, block, start, idx)
        return newlines

    def _heads(self, block: _Block, newline: Any, bad: set[int]) -> tuple[list[tuple[int, int]], int]:
        """(index, start) of each record holding a prefilter hit, in order, and how many newlines the
        block holds: they are counted once, in stretches that end at the candidate lines, so a block's
        other lines cost nothing but the one compare above."""
        count_nonzero = self.np.count_nonzero
        lo = block.lo
        heads: set[tuple[int, int]] = set()
        idx = 0
        counted_to = lo
        last = -1
        for pos in self.prefilter.scan(block):
            start = block.line_start(pos)
            if start == last:
                continue
            last = start
            idx += int(count_nonzero(newline[counted_to - lo:start - lo]))
            counted_to = start
            head = self._head_of(block, start, idx)
            if head[0] not in bad:
                heads.add(head)
        return sorted(heads), idx + int(count_nonzero(newline[counted_to - lo:]))

    def _bad_lines(self, block: _Block, newline: Any) -> Iterator[tuple[int, str]]:
        """Lines that are not text: NUL bytes. Invalid UTF-8 is not one: such a line is decoded with
        U+FFFD in place of the bytes that do not decode and kept (an Xid line cut by a crash or with
        one stray byte is still the Xid)."""
        np = self.np
        buf, lo, hi = block.buf, block.lo, block.hi
        if buf.find(b"\x00", lo, hi) >= 0:
            arr = np.frombuffer(buf, dtype=np.uint8, count=hi - lo, offset=lo)
            newlines = np.flatnonzero(newline)
            for idx in np.unique(np.searchsorted(newlines, np.flatnonzero(arr == 0))).tolist():
                yield idx, "binary data (NUL bytes)"

    @staticmethod
    def _head_of(block: _Block, start: int, idx: int) -> tuple[int, int]:
        """An indented line continues the record above it (dmesg prints multi-line messages so)."""
        head, pos = idx, start
        while head > 0 and idx - head < CONTINUATION_LINES and block.byte(pos) in (b" ", b"\t"):
            pos = block.line_start(pos - 1)
            head -= 1
        if head != idx:
            pre, _ = split_prefix(block.line(pos))
            if pre.style not in ("mono", "ctime", "iso"):
                return idx, start
        return head, pos

    @staticmethod
    def _record_text(block: _Block, start: int, idx: int, bad: set[int]) -> str | None:
        """A record's line with its indented continuation lines joined on; None for an overlong line."""
        buf, hi = block.buf, block.hi
        end = block.line_end(start)
        if end - start > MAX_LINE_BYTES:
            return None
        text = buf[start:end].decode("utf-8", "replace").rstrip("\r")
        nxt = idx + 1
        while nxt - idx <= CONTINUATION_LINES and end < hi and nxt not in bad:
            s = end + 1
            if block.byte(s) not in (b" ", b"\t"):
                break
            e = block.line_end(s)
            if e - s > 4096:
                break
            text += " " + buf[s:e].decode("utf-8", "replace").strip()
            nxt += 1
            end = e
        return text

    def _record(self, text: str, line: int, block: _Block, start: int, idx: int) -> Iterator[Row]:
        pre, message = split_prefix(text)
        if pre.ident is not None and pre.ident != "kernel":
            yield from self._known(pre, message, line, set())  # another program's line in a system log
            return
        stamp = resolve(pre, self.ctx, use_boot=self.kind != "pstore")
        if pre.style == "none":
            stamp = self._neighbour(block, start, idx)
        elif stamp.ts is not None or pre.style != "mono":
            self.last_stamp = stamp
        if self.boot_cut is not None and stamp.ts is not None and stamp.ts >= self.boot_cut:
            return
        host = pre.host
        if (host or "") not in self.referenced and (when := exact(stamp)) is not None:
            self.referenced.add(host or "")
            self.ctx.learn_reference_time(host or self.ctx.host, when)
        following = _following(block, start)
        rec = Record(message=message.strip(), stamp=stamp, host=host, line=line, level=pre.level,
                     following=following)
        written: set[str] = set()
        for row in self.classifier.handle(rec):
            if isinstance(row, Event):
                if row.severity == "info" and pre.level in ("emerg", "alert", "crit"):
                    row.severity = "warning"
                if row.line == line:
                    written.add(row.kind)
            yield row
        yield from self._known(pre, rec.message, line, written, stamp)

    def _known(self, pre: Prefix, message: str, line: int, written: set[str],
               stamp: Stamp | None = None) -> Iterator[Row]:
        """A known message of the signature catalog on this line, unless the classifier wrote its kind."""
        found = self.signatures.match(message, written) if self.signatures is not None else None
        if found is None:
            return
        sig, attrs = found
        from collectors.framework.framing import Framed
        from collectors.framework.signatures import event_of

        if stamp is None:
            stamp = resolve(pre, self.ctx, use_boot=self.kind != "pstore")
        framed = Framed(line=line, message=message, ts=stamp.ts, ts_approx=stamp.approx, ts_raw=stamp.raw,
                        ts_origin=stamp.origin, host=pre.host)
        yield event_of(sig, attrs, framed, message)

    def _neighbour(self, block: _Block, start: int, idx: int) -> Stamp:
        """A line without a time takes the nearest dated line's time, marked approximate: the
        NEIGHBOUR_LINES lines above it in the block, else the last dated record, else the lines below."""
        found = None
        pos = start
        for _ in range(min(idx, NEIGHBOUR_LINES)):
            pos = block.line_start(pos - 1)
            pre, _ = split_prefix(block.line(pos))
            if pre.style in STAMPED:
                found = resolve(pre, self.ctx, use_boot=self.kind != "pstore")
                break
        if found is None:
            found = self.last_stamp
        pos = start
        for _ in range(NEIGHBOUR_LINES if found is None else 0):
            pos = block.buf.find(b"\n", pos, block.hi) + 1
            if pos == 0:
                break
            pre, _ = split_prefix(block.line(pos))
            if pre.style in STAMPED:
                found = resolve(pre, self.ctx, use_boot=self.kind != "pstore")
                break
        if found is None:
            return Stamp()
        return Stamp(found.ts, "neighbour", True, None)


class _Block:
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


def _following(block: _Block, start: int):
    """The text after a record's line (a hung task's call trace), read only if a handler asks for it."""
    def read() -> str:
        end = block.buf.find(b"\n", start, block.hi)
        after = block.hi if end < 0 else end + 1
        return block.buf[after:min(after + 4096, block.hi)].decode("utf-8", "replace")

    return read


def _read_blocks(stream: BinaryIO) -> Iterator[_Block | None]:
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
                yield _Block(data, 0, len(data), True)
            return
        cut = _safe_cut(chunk, 0, len(chunk))
        if cut:  # the usual case, a block made with one copy: carry + the chunk up to the cut
            block = b"".join((carry, memoryview(chunk)[:cut]))
            carry, chunk = chunk[cut:], following
            yield _Block(block, 0, len(block), False)
            continue
        data = carry + chunk if carry else chunk
        carry = b""
        chunk = following
        cut = _safe_cut(data, 0, len(data))
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
        yield _Block(block, 0, len(block), False)


MAP_FILES = False
"""Set by the parse worker (workbench/ingest/parse_worker.py): like any reader of a map, a parse would die of
SIGBUS if the file were truncated under it (a live log rotated with copytruncate), and only the worker's
death is survivable: the ingest counts it and goes on, where a parse in the ingest process would take
the whole run down. So the ingest process always reads."""


def _mapping(stream: BinaryIO) -> Any:
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


def _mapped_blocks(mapped: Any, stream: BinaryIO) -> Iterator[_Block | None]:
    """The blocks _read_blocks would make of the file from the stream's position on, as stretches of its
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
                yield _Block(mapped, carry, hi, True)
            break
        cut = _safe_cut(mapped, lo, hi)
        if cut:
            start, carry = carry, lo + cut
            lo, hi = hi, following
            yield _Block(mapped, start, carry, False)
            continue
        start, end = carry, hi  # the carry and the chunk together
        carry = lo = hi
        hi = following
        cut = _safe_cut(mapped, start, end)
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
        yield _Block(mapped, start, start + cut, False)
    stream.seek(0, io.SEEK_END)


def _windows_regex(plain: set[bytes], narrowed: list[bytes], anchors: Iterable[str]) -> Any:
    """One RE2 alternation of the prefilter's windows; None where RE2 is not installed (numpy does it all).
    The windows of the NARROWED keywords count only with what a line needs to become a row (_narrowed)."""
    try:
        import re2
    except ImportError:
        return None
    options = re2.Options()
    options.max_mem = 64 << 20
    options.encoding = re2.Options.Encoding.LATIN1  # a byte each: ``[^\n]*`` goes on past invalid UTF-8
    alternatives = [re.escape(w) for w in sorted(plain, key=lambda w: (-len(w), w))]
    return re2.compile(b"|".join(alternatives + _narrowed(narrowed, anchors)), options)


def _narrowed(windows: list[bytes], anchors: Iterable[str]) -> list[bytes]:
    """RE2 alternatives that keep a line holding a NARROWED keyword's window only where a row can come
    of it: an error word on its line (rdma_error, nvidia_module), ``traps:`` (a trap in a GPU library), a
    signature anchor (the catalog runs on candidate lines), for an interface becoming ready an interface
    that is not container plumbing, or an indented line before or after it (a record of several lines
    is judged whole by the parser). Each alternative starts on the window's own line."""
    if not windows:
        return []
    window = b"(?:" + b"|".join(re.escape(w) for w in windows) + b")"
    line = rb"[^\n]*"
    errors = b"(?i:" + ERROR_WORDS.encode() + b")"
    extra = b"(?:" + b"|".join(re.escape(a.encode()) for a in sorted({"traps:", *anchors})) + b")"
    return [window + line + b"(?:" + errors + b"|" + extra + rb"|\n[ \t])",
            extra + line + window,
            errors + line + window,
            rb"(?m:^)[ \t]" + line + window,
            rb"ADDRCONF\(NETDEV_\w+\): " + _not_prefixed(CONTAINER_INTERFACES)
            + rb": link (?:is not ready|becomes ready)"]


def _not_prefixed(prefixes: tuple[str, ...]) -> bytes:
    """An RE2 pattern for an interface name (``[\\w.@-]+``) that starts with none of ``prefixes``."""
    name = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-"))

    def node(done: str, root: bool) -> bytes:
        following = sorted({p[len(done)] for p in prefixes if p.startswith(done) and len(p) > len(done)})
        other = "".join(re.escape(c) for c in name if c not in following)
        parts = [b"[" + other.encode() + rb"][\w.@-]*"]
        parts += [re.escape(c.encode()) + node(done + c, False) for c in following if done + c not in prefixes]
        if not root:
            parts.append(b"")
        return b"(?:" + b"|".join(parts) + b")"

    return node("", True)


def _safe_cut(data: Any, lo: int, hi: int) -> int:
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


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    yield from _Parser(kind, ctx).run(stream)
