"""The parse of one kernel-log artifact: the candidate lines of each block (collectors/kernel/prefilter.py)
become records (indented continuation lines joined on, a time from a neighbour line where a line has none)
that collectors/framework/kernel_lines/ classifies; the signature catalog runs on the same lines."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any, BinaryIO

from collectors.base import MAX_LINE_BYTES, Event, ParseContext, Row, Skipped
from collectors.framework.kernel_lines import STAMPED, Classifier, Prefix, Record, Stamp, exact, resolve, split_prefix
from collectors.kernel.blocks import Block, mapped_blocks, mapping, read_blocks, text_after
from collectors.kernel.prefilter import Prefilter

NEIGHBOUR_LINES = 32
CONTINUATION_LINES = 16


class LogParser:
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
        self.prefilter = Prefilter(anchors)
        self.np = self.prefilter.np
        self.last_stamp: Stamp | None = None
        self.referenced: set[str] = set()
        self.boot_cut = None
        if kind == "syslog_before_boot":
            boot = ctx.boot_time_for(ctx.host)
            self.boot_cut = boot - timedelta(seconds=2) if boot else None

    # -- blocks ---------------------------------------------------------------------------------
    def run(self, stream: BinaryIO) -> Iterator[Row]:
        """Rows of every block (read_blocks, or mapped_blocks for a regular file: the same blocks without
        copying them); a line longer than MAX_LINE_BYTES is counted as skipped."""
        mapped = mapping(stream)
        line = 1
        for block in mapped_blocks(mapped, stream) if mapped is not None else read_blocks(stream):
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

    def _block(self, block: Block, first_line: int) -> Iterator[Row]:
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

    def _heads(self, block: Block, newline: Any, bad: set[int]) -> tuple[list[tuple[int, int]], int]:
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

    def _bad_lines(self, block: Block, newline: Any) -> Iterator[tuple[int, str]]:
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
    def _head_of(block: Block, start: int, idx: int) -> tuple[int, int]:
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
    def _record_text(block: Block, start: int, idx: int, bad: set[int]) -> str | None:
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

    def _record(self, text: str, line: int, block: Block, start: int, idx: int) -> Iterator[Row]:
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
        following = text_after(block, start)
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

    def _neighbour(self, block: Block, start: int, idx: int) -> Stamp:
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
