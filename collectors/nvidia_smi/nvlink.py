"""``nvidia-smi nvlink --status`` (``-s``: link speeds or ``<inactive>``) and ``nvidia-smi nvlink -e``
(per-link error counters)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from collectors.base import GpuInventory, GpuSample, Row
from collectors.framework.text_blocks import Block, TextParser
from collectors.nvidia_smi.tree import norm
from collectors.nvml.shared import gpu_key

NVLINK_GPU = re.compile(r"^GPU (\d+): (.+?)(?: \(UUID: (GPU-[0-9A-Fa-f-]+)\))?\s*$")
NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.*?)\s*$")


def open_nvlink(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if NVLINK_GPU.match(line):
        return parser.open(NvlinkBlock(parser), n, line)
    return None


class NvlinkBlock(Block):
    """``nvidia-smi nvlink --status`` (link speeds or ``<inactive>``) and ``nvlink -e`` (per-link error
    counters). ``-e`` prints a blank line after each link's counters, so a blank line does not end the
    block: the next ``Link`` line continues the same GPU. Every counter is kept (zeros too, in
    ``nvlink_counters``); a non-zero one is an ``nvlink_error`` event through the health tracker. The
    snapshot is judged as a whole at the end: a GPU with fewer active links than its peers has links down."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.gpus: list[dict[str, Any]] = []

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if m := NVLINK_GPU.match(line):
            self.gpus.append({"index": int(m.group(1)), "name": m.group(2).strip(), "uuid": m.group(3), "line": n,
                              "active": [], "inactive": [], "speeds": [], "errors": {}, "notes": []})
            return [], True
        if not self.gpus:
            return [], False
        if not line.strip():
            return [], True
        gpu = self.gpus[-1]
        if m := NVLINK_LINK.match(line):
            link, text = int(m.group(1)), m.group(2)
            if em := re.match(r"^([A-Za-z][\w /-]*?)(?: Errors)?:\s*(\d+)$", text):
                counter = norm(em.group(1))
                gpu["errors"].setdefault(str(link), {})[counter] = int(em.group(2))
            elif "inactive" in text.lower() or "down" in text.lower():
                gpu["inactive"].append(link)
            elif sm := re.match(r"^([\d.]+)\s*GB/s", text):
                gpu["active"].append(link)
                gpu["speeds"].append(float(sm.group(1)))
            else:
                gpu["notes"].append(text)
            return [], True
        if line.startswith((" ", "\t")) and line.strip():
            gpu["notes"].append(line.strip()[:200])
            return [], True
        return [], False

    def close(self) -> list[Row]:
        rows: list[Row] = []
        clock = self.p.clock()
        snapshot = []
        for g in self.gpus:
            key = gpu_key(None, g["index"], g["uuid"])
            rows.append(GpuInventory(gpu=key, host=self.p.host, index=g["index"], uuid=g["uuid"], name=g["name"],
                                     extra={"source": "nvidia-smi nvlink"}))
            links = len(g["active"]) + len(g["inactive"])
            counts = [v for per in g["errors"].values() for v in per.values()]
            sample = GpuSample(ts=clock.ts, gpu=key, host=self.p.host, uuid=g["uuid"],
                               nvlink_errors=sum(counts) if counts else None,
                               extra={"source": "nvidia-smi nvlink", "index": g["index"],
                                      "nvlink_links": links or None, "nvlink_active": len(g["active"]),
                                      "nvlink_inactive": g["inactive"], "nvlink_speeds_gbps": sorted(set(g["speeds"])),
                                      "nvlink_errors": {k: {c: v for c, v in per.items() if v}
                                                        for k, per in g["errors"].items() if any(per.values())},
                                      "notes": g["notes"][:20],
                                      **({"nvlink_counters": g["errors"]} if g["errors"] else {})},
                               line=g["line"])
            rows.append(sample)
            rows.extend(self.p.tracker.observe(sample, ts_origin=clock.origin, ts_approx=clock.approx))
            if links:
                snapshot.append((sample, g["active"], g["inactive"]))
        rows.extend(self.p.tracker.nvlink_snapshot(snapshot, ts_origin=clock.origin, ts_approx=clock.approx))
        return rows

