"""``nvidia-smi topo -m``: the GPU-to-GPU path matrix, tab-separated (current drivers) or space-aligned."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from collectors.base import HostFact, Row
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, TextParser

TOPO_HEAD = re.compile(r"^\s+GPU0(?:\s+\S+)*?\s+CPU Affinity\b")
_TOPO_ROW = lazy_regex(r"^(GPU\d+|NIC\d+|mlx\S+)\s")
_TOPO_LEGEND = lazy_regex(r"^(?:\s*(?:NIC\s+)?Legend:\s*$|\s+\S+\s+=\s|\s+NIC\d+:\s)")
_TOPO_SPLIT = lazy_regex(r"\t|\s{2,}")


def open_topo(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if TOPO_HEAD.match(line):
        return parser.open(TopoBlock(parser), n, line)
    return None


class TopoBlock(Block):
    """``nvidia-smi topo -m``: how each GPU reaches each other GPU (``NV18``: 18 bonded NVLinks; ``SYS``,
    ``NODE``, ``PHB``, ``PXB``, ``PIX``: PCIe paths), as one ``gpu_topology`` host fact, JSON
    ``{"GPU0": {"GPU1": "NV18", ...}, ...}``; NIC columns and the affinities are left out."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.columns: list[str] = []
        self.matrix: dict[str, dict[str, str]] = {}
        self.blank_run = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if not line.strip():
            self.blank_run += 1
            return [], self.blank_run < 3
        self.blank_run = 0
        if not self.columns and TOPO_HEAD.match(line):
            self.columns = [c.strip() for c in _TOPO_SPLIT.split(line.strip()) if c.strip()]
            return [], True
        if m := _TOPO_ROW.match(line):
            cells = [c.strip() for c in _TOPO_SPLIT.split(line.strip())][1:]
            if m.group(1).startswith("GPU"):
                self.matrix[m.group(1)] = {peer: cell for peer, cell in zip(self.columns, cells)
                                           if peer.startswith("GPU") and peer != m.group(1) and cell}
            return [], True
        return [], bool(_TOPO_LEGEND.match(line))

    def close(self) -> list[Row]:
        if not self.matrix:
            return []
        return [HostFact("gpu_topology", json.dumps(self.matrix, sort_keys=True), host=self.p.host)]

