"""Which file is a rank's log: NCCL's own lines, PyTorch-distributed / torchrun lines, trainer output, a
launcher's per-rank prefix or environment dump; a flight-recorder dump by its name."""

from __future__ import annotations

import re

from collectors.framework import torch_dist as torch_dist
from collectors.framework.launcher_places import TRACE_NAME
from collectors.framework.lazy_re import lazy_regex

_SNIFF_NCCL = lazy_regex(r"[\w.\-]+:\d+:\d+ \[\d+\] (?:\S+ )?NCCL (?:INFO|WARN|ERROR)|^NCCL version \d", re.M)
_SNIFF_TORCH = lazy_regex(r"ProcessGroupNCCL|WorkNCCL\(|NCCL error|torch[./]distributed[./]elastic|ChildFailedError|"
                          r"Root Cause \(first observed failure\)|CUDA out of memory|CUDA error: |OutOfMemoryError|"
                          r"DistBackendError|ncclSystemError|ncclRemoteError|Not all ranks joining collective")
_SNIFF_TRAIN = lazy_regex(r"""['"]loss['"]: (?:nan|inf)|lm loss: (?:nan|NaN)|loss=nan|found NaN in|OVERFLOW! Rank|"""
                          r"Gradient overflow\.|elapsed time per iteration \(ms\)|\] rank=\d+ time \(ms\) \||"
                          r"global_step=\d+, RunningAvgSamplesPerSec=|\bstep:\s*\d+\s+loss:.{0,80}\btps:|"
                          r"""['"]train_runtime['"]:|\bstep[ :=]+\d+\b.{0,120}\bstep[_ ]time\b""")
"""Trainer logs without NCCL lines: NaN losses, and the step-timing lines torch_dist.step_time reads."""
_SNIFF_ENV = lazy_regex(r"^(?:\d{1,5}: )?(?:export |declare -x )?(?:SLURM_PROCID|SLURM_LOCALID|LOCAL_RANK)=[\"']?\d",
                        re.M)
"""An environment dump that says which rank a process was (collectors/framework/launcher_places.py)."""
_SNIFF_RANK_PREFIX = lazy_regex(r"^\[(?:rank|[A-Za-z_]+)\d+\]:", re.M)
"""torchrun --tee's per-rank prefix: a rank's log, whatever it says (a storage error in it keeps its rank)."""


def sniff(name: str, head: str) -> dict[str, int]:
    if TRACE_NAME.search(name):
        return {"nccl_trace": 85}
    if _SNIFF_NCCL.search(head):
        return {"nccl_log": 90}
    if _SNIFF_TORCH.search(head):
        return {"nccl_log": 70}
    if len(_SNIFF_RANK_PREFIX.findall(head, 0, 16384)) >= 3:
        return {"nccl_log": 75}
    if _SNIFF_TRAIN.search(head):
        return {"nccl_log": 40}
    if _SNIFF_ENV.search(head):
        return {"nccl_log": 30}
    return {}
