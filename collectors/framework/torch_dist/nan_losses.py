"""NaN / Inf losses and loss-scale overflows: HF Trainer dicts, Lightning progress bars, Megatron iteration lines
and ``found NaN``, DeepSpeed / apex overflows (skipped steps)."""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Finding

_NAN_READERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("hf_trainer", re.compile(r"""['"](?P<metric>\w*loss\w*|grad_norm)['"]\s*:\s*(?P<value>-?(?:nan|inf))\b""", re.I)),
    ("megatron", re.compile(r"(?:^|\|)\s*(?P<metric>lm loss|[\w ]*loss|grad norm)\s*:\s*(?P<value>-?(?:nan|inf))\b",
                            re.I)),
    ("lightning", re.compile(r"\b(?P<metric>\w*loss\w*|grad_norm\w*)=(?P<value>-?(?:nan|inf))\b", re.I)),
    ("generic", re.compile(r"\b(?P<metric>loss)\s+(?:is|=|became)\s+(?P<value>-?(?:nan|inf))\b", re.I)),
    ("megatron", re.compile(r"found (?P<value>NaN|Inf|nan|inf) in (?P<metric>local [\w ]+?)(?: calculation|\.|,|$)")),
    ("megatron", re.compile(r"number of (?P<value>nan) iterations:\s*(?P<count>[1-9]\d*)")),
)
_OVERFLOW = (
    ("deepspeed", re.compile(r"OVERFLOW! Rank (?P<rank>\d+) Skipping step\."
                             r"(?: Attempted loss scale: (?P<scale>[\d.e+]+), reducing to (?P<new>[\d.e+]+))?")),
    ("deepspeed", re.compile(r"(?:dynamic loss scale|Grad) overflow!?.{0,40}?Skipping step"
                             r"(?:\. Attempted loss scale: (?P<scale>[\d.e+]+), reducing to (?P<new>[\d.e+]+))?")),
    ("apex", re.compile(r"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to "
                        r"(?P<new>[\d.e+]+)")),
)
_STEP = lazy_regex(r"\b(?:global_step|iteration|step|iter)\b\D{0,3}(?P<step>\d+)", re.I)


def nan_loss(msg: str) -> Finding | None:
    """A NaN / Inf loss or grad norm, or a skipped step's loss-scale overflow."""
    for framework, pattern in _NAN_READERS:
        if m := pattern.search(msg):
            attrs: dict[str, Any] = {"value": m.group("value").lower(), "metric": m.group("metric").strip(),
                                     "framework": framework}
            if "count" in m.groupdict() and m.group("count"):
                attrs["count"] = int(m.group("count"))
            if s := _STEP.search(msg):
                attrs["step"] = int(s.group("step"))
            rank = int(r.group(1)) if (r := re.search(r"\bRank (\d+):", msg)) else None
            return Finding("nan_loss", "warning", attrs, layer="gpu", rank=rank)
    for framework, pattern in _OVERFLOW:
        if m := pattern.search(msg):
            groups = m.groupdict()
            attrs = {"value": "overflow", "overflow": True, "skipped_step": True, "framework": framework}
            if groups.get("scale"):
                attrs["loss_scale"] = float(groups["scale"])
            if groups.get("new"):
                attrs["new_loss_scale"] = float(groups["new"])
            rank = int(groups["rank"]) if groups.get("rank") else None
            return Finding("nan_loss", "info", attrs, layer="gpu", rank=rank)
    return None
