"""Installed Python packages (``pip freeze`` / ``pip list``): the versions of the GPU-stack and ML packages, as
``versions.*`` host facts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import HostFact, ParseContext, Row
from collectors.framework.lazy_re import lazy_regex
from collectors.host import PACKAGES

PIP_FREEZE_LINE = r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;]+)"
"""A ``pip freeze`` line (the sniffer of collectors/changes/__init__.py compiles it too)."""
_PIP_FREEZE = lazy_regex(PIP_FREEZE_LINE)
_PIP_LIST = lazy_regex(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s+(\d[^\s]*)\s*(?:\S.*)?$")

_TRACKED = {p.lower().replace("_", "-"): p for p in PACKAGES} | {
    name: name for name in ("torchvision", "jaxlib", "flash-attn", "xformers", "triton", "megatron-core",
                            "accelerate", "nvidia-cudnn-cu12", "nvidia-cuda-runtime-cu12", "text-generation-server",
                            "tensorrt", "onnxruntime-gpu", "cupy-cuda12x", "ray")}


def parse_pip(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """``pip freeze`` / ``pip list``: the tracked packages' versions as host facts."""
    for _, line in ctx.lines(stream):
        m = _PIP_FREEZE.match(line) or _PIP_LIST.match(line)
        if not m:
            continue
        key = _TRACKED.get(m.group(1).lower().replace("_", "-"))
        if key:
            yield HostFact(f"versions.{key}", m.group(2))
