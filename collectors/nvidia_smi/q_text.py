"""``nvidia-smi -q`` text: an indented ``Key : value`` tree, one subtree per ``GPU <bus id>``, in the
layout of any driver, with or without its ``NVSMI LOG`` banner (pasted excerpts lack it)."""

from __future__ import annotations

import re
from collections.abc import Iterable

from collectors.base import Row, Skipped
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, Clock, TextParser, integer
from collectors.nvidia_smi.tree import Node, gpu_rows, norm, parse_ctime, value

BANNER = re.compile(r"^=+\s*NVSMI LOG\s*=+\s*$")
Q_GPU = lazy_regex(r"^GPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")
KV = re.compile(r"^(\s*)([A-Za-z0-9][^:]*?)\s+:(?:\s(.*))?$")
HEADER = re.compile(r"^(\s*)([A-Za-z][\w .()/+,-]*?)\s*$")
Q_HINTS = {"product_name", "performance_state", "gpu_uuid", "driver_version", "cuda_version", "attached_gpus",
           "persistence_mode", "bus_id", "replays_since_reset", "clocks_throttle_reasons", "clocks_event_reasons",
           "fb_memory_usage", "bar1_memory_usage", "ecc_errors", "ecc_mode", "retired_pages", "remapped_rows",
           "utilization", "temperature", "gpu_link_info", "pcie_generation", "link_width", "power_readings",
           "gpu_power_readings", "vbios_version", "minor_number", "gpu_current_temp", "power_draw", "hw_slowdown",
           "sw_power_cap", "hw_power_brake_slowdown", "hw_thermal_slowdown", "compute_mode", "fan_speed",
           "multigpu_board", "gpu_operation_mode", "inforom_version", "max_clocks", "applications_clocks"}
"""Keys and sections of ``nvidia-smi -q`` that open a -q block even without its banner (excerpts)."""



def open_banner(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """The banner or a ``GPU 00000000:19:00.0`` line."""
    if BANNER.match(stripped) or Q_GPU.match(line):
        return parser.open(QBlock(parser), n, line)
    return None


def open_by_hint(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """A key or section only -q prints (``Product Name``, ``Clocks Event Reasons``): an excerpt. Tried
    last, after every other format had its chance."""
    if (m := KV.match(line) or HEADER.match(line)) and norm(m.group(2)) in Q_HINTS:
        return parser.open(QBlock(parser), n, line)
    return None


class QBlock(Block):
    """``nvidia-smi -q`` text: an indented key/value tree, one subtree per ``GPU <bus id>``.
    Each GPU is turned into rows as soon as the next one starts, so memory stays bounded."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.root = Node("root")
        self.gpu: Node | None = None
        self.gpu_bus: str | None = None
        self.gpu_line: int | None = None
        self.stack: list[tuple[int, Node]] = []
        self.clock = Clock()
        self.nodes = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        rows: list[Row] = []
        stripped = line.strip()
        if not stripped:
            return rows, True
        if BANNER.match(stripped):
            if self.gpu is not None or self.root.children:
                return rows, False
            return rows, True
        if m := Q_GPU.match(line):
            rows.extend(self._flush())
            self.gpu, self.gpu_bus, self.gpu_line = Node("gpu", line=n), m.group(1), n
            self.stack = [(-1, self.gpu)]
            return rows, True
        kv = KV.match(line)
        header = None if kv else HEADER.match(line)
        if kv is None and header is None:
            return rows, False
        m = kv or header
        assert m is not None
        indent = len(m.group(1).expandtabs(4))
        if indent == 0 and header is not None and self.gpu is not None and norm(m.group(2)) not in Q_HINTS:
            return rows, False
        if self.nodes > 20_000:
            rows.append(Skipped(n, "nvidia-smi -q block too large; rest of block ignored"))
            return rows, True
        self.nodes += 1
        node = Node(norm(m.group(2)), (kv.group(3) or "").strip() if kv else None, n)
        if not self.stack:
            self.stack = [(-1, self.gpu or self.root)]
        while len(self.stack) > 1 and self.stack[-1][0] >= indent:
            self.stack.pop()
        self.stack[-1][1].children.append(node)
        self.stack.append((indent, node))
        if self.gpu is None and indent == 0 and kv is not None and node.name == "timestamp":
            when = parse_ctime(node.value)
            if when is not None:
                self.clock = Clock(when, "localtime", True, node.value)
                self.p.ctx.learn_reference_time(self.p.host or self.p.ctx.host, when)
        return rows, True

    def _flush(self) -> list[Row]:
        target = self.gpu
        if target is None:
            target = self.root
            if not any(c.name not in ("timestamp", "driver_version", "cuda_version", "attached_gpus")
                       for c in target.children):
                return []
        clock = self.clock if self.clock.ts else self.p.clock()
        rows = list(gpu_rows(target, bus=self.gpu_bus, clock=clock, host=self.p.host,
                             driver=value(self.root, "driver_version"), cuda=value(self.root, "cuda_version"),
                             tracker=self.p.tracker, source="nvidia-smi -q",
                             line=self.gpu_line or (target.children[0].line if target.children else None),
                             extra={"attached_gpus": integer(value(self.root, "attached_gpus"))}))
        self.gpu = None
        self.stack = []
        return rows

    def close(self) -> list[Row]:
        return self._flush()

