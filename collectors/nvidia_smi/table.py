"""The default ``nvidia-smi`` table, every layout since r4xx: per GPU two or three lines between ``+---+``
borders, then the process table; a field the driver could not read prints ``ERR!``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from collectors.base import Event, GpuInventory, GpuSample, Row, normalize_pci
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, Clock, TextParser, integer, number
from collectors.nvidia_smi.failures import failure_events, is_failure
from collectors.nvidia_smi.tree import parse_ctime
from collectors.nvml.shared import gpu_key

TABLE_HEAD = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
TABLE_GPU1 = re.compile(r"^\|\s*(\d+)\s+(.+?)\s+(On|Off|ERR!|N/A)\s*\|\s*"
                        r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s+(On|Off|ERR!|N/A)\s*\|\s*(\S+)\s*\|")
"""A GPU's first row: index, name, persistence mode, bus id, display active, volatile uncorrected ECC."""
_TABLE_GPU2 = lazy_regex(r"^\|\s*(\S+)\s+(\d+C|N/A|ERR!)\s+(P\d+|ERR!|N/A)\s+(\S+)\s*/\s*(\S+)\s*\|\s*(\S+)\s*/\s*(\S+)"
                         r"\s*\|\s*(\S+)\s+(\S+)\s*\|")
_TABLE_PROC = lazy_regex(r"^\|\s+(\d+)\s+(?:(\S+)\s+(\S+)\s+)?(\d+)\s+([CG+]+)\s+(.+?)\s+(\d+MiB|N/A)\s*\|")


def open_table(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if m := TABLE_HEAD.search(line):
        return parser.open(TableBlock(parser, m), n, line)
    return None


def open_excerpt(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """A GPU row with no ``NVIDIA-SMI ... Driver Version`` head above it: an excerpt pasted to show the one
    GPU that prints ``ERR!``. Read as a table whose driver is unknown."""
    if TABLE_GPU1.match(stripped):
        return parser.open(TableBlock(parser, None), n, line)
    return None


def open_date(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """A ``date`` line on its own (``Mon Jul  8 08:11:21 2024``): the clock of the table after it."""
    when = parse_ctime(stripped)
    if when is None:
        return None
    parser.pending_date = (when, stripped)
    return ()


class TableBlock(Block):
    """The default ``nvidia-smi`` table (every layout since r4xx): GPU rows of two or three lines,
    then the process table. Rows are emitted at the end, once processes are known. A field the driver
    could not read prints ``ERR!`` (a GPU falling off the bus, a fan or sensor that stopped answering, the
    ``| ERR!  ERR!  ERR!    ERR! / ERR! |`` of r4xx drivers): one ``nvidia_smi_error`` event per GPU names
    the GPU and every such field, beside the sample of what it still read."""

    def __init__(self, parser: TextParser, head: re.Match[str] | None) -> None:
        super().__init__(parser)
        self.driver, self.cuda = (head.group(2), head.group(3)) if head else (None, None)
        self.gpus: list[dict[str, Any]] = []
        self.procs: list[dict[str, Any]] = []
        self.pending: dict[str, Any] | None = None
        date = parser.pending_date
        self.clock = Clock(date[0], "localtime", True, date[1]) if date else parser.clock()
        parser.pending_date = None
        self.blank_run = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if not stripped:
            self.blank_run += 1
            return [], self.blank_run < 3
        self.blank_run = 0
        if is_failure(line):  # r4xx prints the GPUs it reads, then one such line per GPU it lost
            return list(failure_events(self.p, n, line)), True
        if not stripped.startswith(("|", "+")):
            return [], False
        if TABLE_HEAD.search(line):
            return [], True
        if m := TABLE_GPU1.match(stripped):
            self.pending = {"index": int(m.group(1)), "name": m.group(2).strip(), "persistence": m.group(3),
                            "bus": m.group(4), "display": m.group(5), "ecc": m.group(6), "line": n}
        elif (m := _TABLE_GPU2.match(stripped)) and self.pending is not None:
            self.pending.update(fan=m.group(1), temp=m.group(2), pstate=m.group(3), power=m.group(4),
                                cap=m.group(5), used=m.group(6), total=m.group(7), util=m.group(8),
                                compute=m.group(9))
            self.gpus.append(self.pending)
            self.pending = None
        elif m := _TABLE_PROC.match(stripped):
            self.procs.append({"gpu": int(m.group(1)), "pid": int(m.group(4)), "type": m.group(5),
                               "name": m.group(6).strip(), "used_mib": number(m.group(7))})
        return [], True

    def close(self) -> list[Row]:
        rows: list[Row] = []
        for g in self.gpus:
            key = gpu_key(g["bus"], g["index"])
            errs = [name for name in ("persistence", "fan", "temp", "pstate", "power", "cap", "used", "total", "util",
                                      "ecc", "display")
                    if str(g.get(name, "")).upper().startswith("ERR")]
            rows.append(GpuInventory(gpu=key, host=self.p.host, index=g["index"], name=g["name"], driver=self.driver,
                                     cuda=None if (self.cuda or "").upper() == "N/A" else self.cuda,
                                     persistence={"On": "Enabled", "Off": "Disabled"}.get(g["persistence"]),
                                     power_limit_w=number(g["cap"]), memory_total_mib=number(g["total"]),
                                     extra={"source": "nvidia-smi", "compute_mode": g["compute"]}))
            sample = GpuSample(ts=self.clock.ts, gpu=key, host=self.p.host, util_gpu=number(g["util"]),
                               mem_used_mib=number(g["used"]), mem_total_mib=number(g["total"]),
                               temp_c=number(g["temp"]), power_w=number(g["power"]), power_limit_w=number(g["cap"]),
                               ecc_volatile_uncorrected=integer(g["ecc"]),
                               extra={"source": "nvidia-smi", "pstate": g["pstate"], "fan": g["fan"],
                                      "processes": [p for p in self.procs if p["gpu"] == g["index"]]},
                               line=g["line"])
            rows.append(sample)
            rows.extend(self.p.tracker.observe(sample, ts_origin=self.clock.origin, ts_approx=self.clock.approx,
                                               ts_raw=self.clock.raw))
            if errs:
                rows.append(Event(kind="nvidia_smi_error", ts=self.clock.ts, ts_origin=self.clock.origin,
                                  ts_approx=self.clock.approx, ts_raw=self.clock.raw, host=self.p.host, layer="gpu",
                                  severity="error",
                                  gpu=normalize_pci(g["bus"]), line=g["line"],
                                  message=f"nvidia-smi shows ERR! for {', '.join(errs)} of GPU {g['index']}",
                                  attrs={"error": "ERR!", "reason": None, "pci": normalize_pci(g["bus"]),
                                         "fields": errs}))
        return rows

