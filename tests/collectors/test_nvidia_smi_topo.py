"""``nvidia-smi topo -m``: the GPU-to-GPU matrix as one ``gpu_topology`` host fact, from the tab-separated
layout of current drivers (tests/data/baseline/accepted/node07, an HGX H100 pair with two NICs) and the
space-aligned one of older drivers (kubernetes/kubernetes#53497, 8 GPUs and an mlx4 HCA)."""

from __future__ import annotations

import io
import json

from collectors import nvidia_smi
from collectors.base import HostFact, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import ROOT

TABS = (ROOT / "tests" / "data" / "baseline" / "accepted" / "node07" / "nvidia-smi-topo-m.txt").read_text()
SPACES = """        GPU0    GPU1    GPU2    GPU3    GPU4    GPU5    GPU6    GPU7    mlx4_0  CPU Affinity
GPU0     X      PIX     PHB     PHB     SYS     SYS     SYS     SYS     PHB     0-9,20-29
GPU1    PIX      X      PHB     PHB     SYS     SYS     SYS     SYS     PHB     0-9,20-29
GPU2    PHB     PHB      X      PIX     SYS     SYS     SYS     SYS     PHB     0-9,20-29
GPU3    PHB     PHB     PIX      X      SYS     SYS     SYS     SYS     PHB     0-9,20-29
GPU4    SYS     SYS     SYS     SYS      X      PIX     PHB     PHB     SYS     10-19,30-39
"""


def parse(text: str) -> list:
    return list(nvidia_smi.parse("nvidia_smi_topo", io.BytesIO(text.encode()), ParseContext(host="node07")))


def test_tab_layout_with_nics_and_legend_is_one_fact() -> None:
    assert registry.sniff("topo.txt", TABS) == ("nvidia_smi_topo", nvidia_smi)
    rows = parse(TABS)
    assert [r for r in rows if isinstance(r, Skipped)] == []
    (fact,) = [r for r in rows if isinstance(r, HostFact)]
    assert fact.key == "gpu_topology"
    assert json.loads(fact.value) == {"GPU0": {"GPU1": "NV18"}, "GPU1": {"GPU0": "NV18"}}


def test_space_layout_of_older_drivers() -> None:
    assert registry.sniff("topo.txt", SPACES) == ("nvidia_smi_topo", nvidia_smi)
    (fact,) = parse(SPACES)
    matrix = json.loads(fact.value)
    assert sorted(matrix) == ["GPU0", "GPU1", "GPU2", "GPU3", "GPU4"]
    assert matrix["GPU0"] == {"GPU1": "PIX", "GPU2": "PHB", "GPU3": "PHB", "GPU4": "SYS", "GPU5": "SYS",
                              "GPU6": "SYS", "GPU7": "SYS"}
    assert matrix["GPU4"]["GPU5"] == "PIX" and "GPU4" not in matrix["GPU4"]
