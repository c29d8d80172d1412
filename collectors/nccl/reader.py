"""The NCCL log reader: a file in blocks, the lines the prefilter selects, each line through its launcher
prefix to NCCL's own header lines (init lines, WARNs, error chains), torch_dist's grammar (PyTorch,
torchrun, trainers), a launcher's environment dump or a failed write."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import MAX_LINE_BYTES, Row, Skipped
from collectors.framework import torch_dist as torch_dist
from collectors.framework.launcher_places import RENDEZVOUS, Rendezvous
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist import Finding
from collectors.nccl.findings import FindingEvents, summary_text
from collectors.nccl.init_lines import InitLines
from collectors.nccl.prefilter import WRITE_NEEDLES, giant_starts, hit_starts, newline_counter
from collectors.nccl.state import HOLD_LINES
from collectors.nccl.tasks import LauncherTasks
from collectors.nccl.times import Prefix, TimeLines, line_prefix
from collectors.nccl.warn import nccl_warn
from collectors.nccl.writes import write_finding

_NCCL_HDR = lazy_regex(r"(?<![\w.\-])(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                       r"(?:(?P<src>[^\s]+?:\d+)(?: \((?P<func>[^)]*)\))? )?"
                       r"NCCL (?P<lvl>INFO|WARN|ERROR|ABORT|TRACE|CALL)(?: |$)")
_NCCL_BARE = lazy_regex(r"(?:(?P<src>[^\s]+?:\d+) )?NCCL (?P<lvl>WARN|ERROR|ABORT) (?P<msg>.*)")
_BARE_VERSION = lazy_regex(r"NCCL version (?P<ver>\S+)")
_CHAIN = lazy_regex(r"(?P<src>\S+?:\d+) -> (?P<code>\d+)(?: \[(?P<thread>[^\]]+)\])?\s*$")

_STRONG = lazy_regex(r"WorkNCCL\(|Watchdog caught|NCCL (?:WARN|ERROR|ABORT)|Init COMPLETE|CUDA error|exitcode|"
                     r"NCCL error")
"""Markers that mean a line should have parsed: one that did not was cut or garbled, and is counted."""


def _nccl_headers(text: str) -> list[re.Match[str]]:
    """The NCCL headers in a message, as ``finditer`` finds them: after one, the next is looked for only when
    `` NCCL `` follows it (lines of two processes run together). A header starts where a host name does (the
    lookbehind), so a search is not retried at every character of every word."""
    found = []
    m = _NCCL_HDR.search(text)
    while m is not None:
        found.append(m)
        m = _NCCL_HDR.search(text, m.end()) if text.find(" NCCL ", m.end()) >= 0 else None
    return found


_DATED = lazy_regex(rb"\s*(?:\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d|\[?[EWIFD]\d{4} \d\d:\d\d:\d\d)")
"""A line that starts with its own time: the skipped lines before it need not be searched for one, its
own stamp supersedes theirs (unless undated events are still waiting for the first time in the file)."""

_BLOCK = 4 << 20
_MAX_TEXT = 8192


class Reader(TimeLines, InitLines, FindingEvents, LauncherTasks):
    """One file's rows: topology, events and host facts."""

    def rows(self, stream: BinaryIO) -> Iterator[Row]:
        carry = b""
        base = 0
        giant = False
        while True:
            chunk = stream.read(_BLOCK)
            if not chunk:
                break
            data = carry + chunk if carry else chunk
            end = data.rfind(b"\n") + 1
            carry = data[end:]
            if giant:
                if not end:
                    carry = b""
                    continue
                cut = data.find(b"\n") + 1
                data, end, giant = data[cut:], end - cut, False
                base += 1
            if len(carry) > MAX_LINE_BYTES:
                yield Skipped(base + data.count(b"\n", 0, end) + 1, "line longer than 1 MiB")
                carry, giant = b"", True
            base = yield from self._block(data, end, base)
            self.ctx.lines_read = base
        if carry and not giant:
            base = yield from self._block(carry + b"\n", len(carry) + 1, base)
        if giant:
            base += 1
        self.ctx.lines_read = base
        yield from self._finish()

    def _block(self, data: bytes, end: int, base: int) -> Iterator[Row]:
        """Read the lines of ``data[:end]`` that the prefilter selects; returns the line count after them.
        A line is found by its offset, the block is never split into lines (a list of every line cost
        more than the prefilter itself on a block of NCCL INFO lines)."""
        self.block = data
        giants = giant_starts(data, end) if end > MAX_LINE_BYTES else []
        for start in giants:
            yield Skipped(base + data.count(b"\n", 0, start) + 1, "line longer than 1 MiB")
        newlines = newline_counter(data, end)
        gap = pos = counted = 0
        lineno = base
        if self.cont is not None:
            pos = gap = yield from self._follow(data, 0, end, base + 1)
        for start in hit_starts(data, end):
            lineno += newlines(counted, start)
            counted = start
            if start < pos or (giants and start in giants):
                continue
            stop = data.find(b"\n", start, end)
            if start > gap and (self.waiting or not _DATED.match(data, start, stop)):
                yield from self._date_gap(data, gap, start)
            self.line_start = start
            yield from self._line(lineno + 1, data[start:stop])
            pos = stop + 1
            if self.cont is not None:
                pos = yield from self._follow(data, pos, end, lineno + 2)
            gap = pos
        if gap < end:
            yield from self._date_gap(data, gap, end)
        return lineno + newlines(counted, end)

    def _follow(self, data: bytes, pos: int, end: int, lineno: int) -> Iterator[Row]:
        """A continuation is open: every next line (the first at ``pos``, numbered ``lineno``) goes to it,
        selected or not, until it closes. Returns where the lines it did not take begin."""
        while self.cont is not None and pos < end:
            stop = data.find(b"\n", pos, end)
            self.line_start = pos
            yield from self._line(lineno, data[pos:stop])
            pos, lineno = stop + 1, lineno + 1
        return pos

    # -- one line ----------------------------------------------------------------------------------------------

    def _line(self, lineno: int, raw: bytes) -> Iterator[Row]:
        if len(raw) > MAX_LINE_BYTES:
            return
        if self.cont is None and self._bare_channel(raw):
            return
        if b"\x00" in raw:
            yield Skipped(lineno, "binary data (NUL bytes)")
            return
        text = raw[:_MAX_TEXT].decode("utf-8", "replace").rstrip("\r")
        pre = self._untask(line_prefix(text, self.ctx))
        self.places.prefix(pre.rank, pre.task, pre.local_rank, pre.from_launcher)
        if pre.stamp is not None:
            if pre.stamp.origin == "iso" and (self.ctx.host or "") not in self.learned:
                self.learned.add(self.ctx.host or "")
                self.ctx.learn_reference_time(self.ctx.host, pre.stamp.ts)
            yield from self._dated(pre.stamp)
        if self.cont is not None:
            if self.cont.feed(pre.rest, lineno):
                self.cont.budget -= 1
                if self.cont.budget <= 0:
                    yield from self._end_cont()
                return
            yield from self._end_cont()
        if lineno - self.checked > HOLD_LINES:
            self.checked = lineno
            yield from self._release_stale(lineno)
        yield from self._message(lineno, text, pre)

    def _message(self, lineno: int, text: str, pre: Prefix) -> Iterator[Row]:
        rest = pre.rest
        headers = _nccl_headers(rest) if " NCCL " in rest and " [" in rest else []
        if headers:
            for k, m in enumerate(headers):
                end = headers[k + 1].start() if k + 1 < len(headers) else len(rest)
                got = list(self._nccl(lineno, text, pre, m, rest[m.end():end], interleaved=len(headers) > 1))
                if not got and k + 1 < len(headers):
                    yield Skipped(lineno, "interleaved or cut NCCL line")
                yield from got
            return
        if m := _BARE_VERSION.match(rest):
            self.file_version = self.file_version or m.group("ver")
            yield from self._tell_version(pre.host or self.ctx.host, m.group("ver"))
            return
        if ("NCCL WARN " in rest or "NCCL ERROR " in rest or "NCCL ABORT " in rest) and (m := _NCCL_BARE.search(rest)):
            finding = nccl_warn(m.group("msg"), m.group("lvl"))
            if m.group("src"):
                finding.attrs.setdefault("file", m.group("src").rsplit("/", 1)[-1])
            yield from self._emit(finding, lineno, text, pre)
            return
        if ("=" in rest or "':" in rest or '":' in rest or "initialized host" in rest) and self.places.env_line(
                pre.rank, rest):
            return
        finding, cont = (None, Rendezvous(self.places)) if RENDEZVOUS in rest else torch_dist.classify(rest, lineno)
        if cont is not None:
            self.cont = cont
            self.cont_start = (lineno, text, pre, self.last)
            return
        if finding is None and any(needle in rest for needle in WRITE_NEEDLES):
            finding = write_finding(rest, self.block, self.line_start)
        if finding is not None:
            yield from self._emit(finding, lineno, text, pre)
        elif _STRONG.search(rest):
            yield Skipped(lineno, "cut or unrecognised NCCL/PyTorch line")

    def _end_cont(self) -> Iterator[Row]:
        cont, start = self.cont, self.cont_start
        self.cont, self.cont_start = None, None
        if cont is None or start is None:
            return
        lineno, text, pre, neighbour = start
        for finding in cont.finish():
            finding.message = finding.message or summary_text(finding)
            yield from self._emit(finding, finding.line or lineno, text, pre, neighbour=neighbour)

    # -- NCCL lines ---------------------------------------------------------------------------------------------

    def _nccl(self, lineno: int, text: str, pre: Prefix, m: re.Match[str], msg: str,
              interleaved: bool) -> Iterator[Row]:
        host = self._known_host(m.group("host")) if interleaved else m.group("host")
        if len(self.hosts) < 4096:
            self.hosts.add(host)
        pid, tid, dev, level = int(m.group("pid")), int(m.group("tid")), int(m.group("dev")), m.group("lvl")
        proc = self._proc(host, pid)
        self._task_header(pre, host, pid)
        self.places.header(pre.rank, host, pid, dev, pre.local_rank, pre.from_launcher)
        key = (host, pid, tid)
        if level == "INFO":
            if " -> " in msg and (c := _CHAIN.match(msg)):
                yield from self._chain(lineno, text, pre, key, dev, c)
                return
            if key in self.chains:
                yield from self._out(self.chains.pop(key).event)
            if proc is None:
                return
            yield from self._info(lineno, proc, tid, host, msg)
            return
        if level in ("TRACE", "CALL"):
            return
        if key in self.chains:
            yield from self._out(self.chains.pop(key).event)
        finding = nccl_warn(msg, level)
        if m.group("src"):
            finding.attrs.setdefault("file", m.group("src").rsplit("/", 1)[-1])
        if m.group("func"):
            finding.attrs["function"] = m.group("func")
        event = self._event(finding, lineno, text, pre, host=host, pid=pid, tid=tid, dev=dev)
        if event is not None:
            yield from self._hold(self.chains, key, event, lineno)

    def _chain(self, lineno: int, text: str, pre: Prefix, key: tuple[str, int, int], dev: int,
               c: re.Match[str]) -> Iterator[Row]:
        code = int(c.group("code"))
        held = self.chains.get(key)
        if held is None:
            kind = "nccl_net_error" if code in torch_dist.NETWORK_RESULTS else "nccl_error"
            finding = Finding(kind, "error", {"error": torch_dist.NCCL_RESULTS.get(code, f"result {code}")},
                              layer="network_storage" if kind == "nccl_net_error" else "gpu")
            event = self._event(finding, lineno, text, pre, host=key[0], pid=key[1], tid=key[2], dev=dev)
            if event is None:
                return
            yield from self._hold(self.chains, key, event, lineno)
            held = self.chains.get(key)
            if held is None:
                return
        attrs = held.event.attrs
        attrs.setdefault("nccl_result", code)
        attrs.setdefault("nccl_error", torch_dist.NCCL_RESULTS.get(code))
        chain = attrs.setdefault("chain", [])
        if len(chain) < 16:
            chain.append(c.group("src"))
        if c.group("thread"):
            attrs.setdefault("thread", c.group("thread"))
        held.line = lineno

    def _finish(self) -> Iterator[Row]:
        if self.cont is not None:
            yield from self._end_cont()
        for table in (self.chains, self.timeouts):
            for held in list(table.values()):
                yield from self._out(held.event)
            table.clear()
        for proc in self.procs.values():
            for comm_ptr, comm in proc.comms.items():
                if comm.state != "COMPLETE":
                    yield self._topology(proc, comm_ptr, comm)
        yield from self.places.rows({key for key, proc in self.procs.items() if proc.rank is not None})
        if self.waiting:
            yield from self._anchor(self.waiting)
            self.waiting = []
