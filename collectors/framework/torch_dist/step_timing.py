"""Step timing: how long each training step took, per rank (Megatron, DeepSpeed, torchtitan, tqdm bars, the HF
Trainer's summary, plain ``step N ... step_time X`` lines)."""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Finding

STEP_NEEDLES = ("time", "it/s", "s/it", "SamplesPerSec", "ps: ", "skipped=")
"""Literal words every step-timing line below contains (``time`` covers Megatron's ``elapsed time per
iteration``, DeepSpeed's ``time (ms)``, ``step_time``, ``iter time``, HF's ``train_runtime``;
``skipped=`` DeepSpeed's progress line): the NCCL reader's prefilter sweeps the raw bytes for them."""

_ANSI = lazy_regex(r"\x1b\[[0-9;]*m")
_NUM = r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?"
_MEGATRON = lazy_regex(rf"\biteration\s+(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*\|.*?"
                       rf"elapsed time per iteration \(ms\):\s*(?P<v>{_NUM})")
_MEGATRON_TFLOPS = lazy_regex(rf"throughput per GPU \(TFLOP/s/GPU\):\s*(?P<v>{_NUM})")
_DS_PROGRESS = lazy_regex(r"\bstep=(?P<step>\d+), skipped=\d+")
_DS_TIMES = lazy_regex(r"time \(ms\) \|(?P<fields>.*)$")
_DS_FIELD = lazy_regex(rf"(?P<name>[a-z_]+):\s*(?P<v>{_NUM})")
_DS_RATE = lazy_regex(rf"(?:epoch=(?P<epoch>\d+)/micro_step=\d+/global_step=(?P<step>\d+)|\b(?P<epoch2>\d+)/"
                      rf"(?P<step2>\d+)),\s*(?:RunningAvg)?SamplesPerSec=(?P<avg>{_NUM})"
                      rf"(?:,\s*CurrSamplesPerSec=(?P<cur>{_NUM}))?")
_TITAN = lazy_regex(rf"\bstep:\s*(?P<step>\d+)\s+loss:.*?\b(?P<unit>tps|wps):\s*(?P<v>{_NUM})")
_TITAN_MFU = lazy_regex(rf"\bmfu:\s*(?P<v>{_NUM})%")
_TQDM = lazy_regex(rf"(?:\b[Ee]poch\s+(?P<epoch>\d+)\b[^|]*)?\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+|\?)\s*"
                   rf"\[[\d:]+<[^,\]]*,\s*(?P<v>{_NUM})(?P<unit>s/it|it/s)")
_HF_RUNTIME = lazy_regex(rf"""['"]train(?P<per_step>_step)?_runtime['"]:\s*(?P<v>{_NUM})""")
_HF_FIELD = lazy_regex(rf"""['"](?P<name>train_steps_per_second|train_samples_per_second|epoch|step)['"]:\s*"""
                       rf"(?P<v>{_NUM})")
_PLAIN_KEY = lazy_regex(r"(?P<key>step[_ ]time|per[-_ ]step time|time[_ ]per[_ ](?:step|iter(?:ation)?)|time/step|"
                        r"iter(?:ation)?[_ ]time|batch[_ ]time)"
                        rf"(?:\s*\((?P<paren>ms|s)\))?(?P<ms_key>_ms)?[\s:=]*(?P<v>{_NUM})\s*(?P<unit>ms|s|sec)?\b")
_PLAIN_STEP = lazy_regex(r"\b(?:global[_ ]step|steps?|iteration|iter)\b[\s:=#]*(?P<step>\d+)(?:\s*/\s*\d+)?\b")
"""``step N … step_time X`` and its spellings, matched on the lower-cased line: the key after the step."""
_MSG_RANK = lazy_regex(r"\[[Rr]ank ?(\d+)\]|\brank=(\d+)")


def _num(text: str | None) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def step_time(msg: str) -> Finding | None:
    """A training step's duration (``seconds``) or throughput, as the common trainers log it::

        Megatron-LM   iteration     1200/    5000 | consumed samples: … | elapsed time per iteration (ms): 1432.1 | …
        DeepSpeed     [Rank 3] rank=3 time (ms) | forward: 402.1 | backward: 880.5 | backward_inner: 861.2 | …
                      epoch=0/micro_step=4500/global_step=4500, RunningAvgSamplesPerSec=16.1, CurrSamplesPerSec=16.8
                      [Rank 3] step=1200, skipped=0, lr=[…]   (progress true: no duration, only the step)
        torchtitan    step: 14  loss:  3.24405  memory:  9.46GiB(64.99%)  tps: 7,282  tflops: 0.52  mfu: 0.17%
        HF / Lightning tqdm bars (`` 51%|█████ | 507/1000 [15:32<16:42,  2.03s/it]``) and the Trainer's
                      ``{'train_runtime': …, 'train_steps_per_second': …}`` summary
        plain         step 1200 | loss 2.27 | step_time 1.43s   /   Step 100 per-step time 0.813s

    attrs: step, seconds (per step) or throughput with unit, measure (``step``: the whole step's wall
    time, which every rank of a synchronous job shares; ``compute``: forward/backward/optimizer without
    the wait for the others, where a slow rank shows), framework, and what else the line gives."""
    if "\x1b" in msg:
        msg = _ANSI.sub("", msg)
    if "\r" in msg:
        msg = next((part for part in reversed(msg.split("\r")) if "/it" in part or "it/s" in part), msg)
    attrs: dict[str, Any] | None = None
    if "per iteration" in msg and (m := _MEGATRON.search(msg)):
        attrs = {"framework": "megatron", "step": int(m.group("step")), "total_steps": int(m.group("total")),
                 "seconds": round(_num(m.group("v")) / 1000, 6), "measure": "step"}
        if t := _MEGATRON_TFLOPS.search(msg, m.end()):
            attrs["tflops_per_gpu"] = _num(t.group("v"))
    elif "time (ms)" in msg and (m := _DS_TIMES.search(msg)):
        attrs = _deepspeed_times(m.group("fields"))
    elif "SamplesPerSec=" in msg and (m := _DS_RATE.search(msg)):
        rate = _num(m.group("cur") or m.group("avg"))
        attrs = {"framework": "deepspeed", "step": int(m.group("step") or m.group("step2")),
                 "epoch": int(m.group("epoch") or m.group("epoch2")), "throughput": rate, "unit": "samples/s",
                 "measure": "step"}
    elif "skipped=" in msg and (m := _DS_PROGRESS.search(msg)):
        attrs = {"framework": "deepspeed", "step": int(m.group("step")), "progress": True}
    elif "ps:" in msg and (m := _TITAN.search(msg)):
        attrs = {"framework": "torchtitan", "step": int(m.group("step")), "throughput": _num(m.group("v")),
                 "unit": "tokens/s" if m.group("unit") == "tps" else "words/s", "measure": "step"}
        if f := _TITAN_MFU.search(msg, m.end()):
            attrs["mfu_pct"] = _num(f.group("v"))
    elif ("/it" in msg or "it/s" in msg) and (m := _TQDM.search(msg)):
        rate = _num(m.group("v"))
        attrs = {"framework": "tqdm", "step": int(m.group("n")), "measure": "step",
                 "seconds": rate if m.group("unit") == "s/it" else (round(1 / rate, 6) if rate else None)}
        if m.group("total").isdigit():
            attrs["total_steps"] = int(m.group("total"))
        if m.group("epoch"):
            attrs["epoch"] = int(m.group("epoch"))
    elif "_runtime" in msg and (m := _HF_RUNTIME.search(msg)):
        attrs = _hf_metrics(msg, m)
    elif (m := _plain(msg)) is not None:
        key, step = m
        value = _num(key.group("v"))
        in_ms = key.group("unit") == "ms" or key.group("paren") == "ms" or bool(key.group("ms_key"))
        attrs = {"framework": "plain", "step": int(step.group("step")), "measure": "step",
                 "seconds": round(value / 1000, 6) if in_ms and value is not None else value}
    if attrs is None or (attrs.get("seconds") is None and attrs.get("throughput") is None
                         and not attrs.get("progress")):
        return None
    rank = None
    if r := _MSG_RANK.search(msg):
        rank = int(r.group(1) or r.group(2))
    return Finding("step_time", "info", attrs, layer="gpu", rank=rank)


def _plain(msg: str) -> tuple[re.Match[str], re.Match[str]] | None:
    low = msg.lower()
    at = low.find("time")
    if at < 0:
        return None
    key = _PLAIN_KEY.search(low, max(0, at - 10))
    step = _PLAIN_STEP.search(low, 0, key.start()) if key else None
    return (key, step) if key and step else None


def _deepspeed_times(fields: str) -> dict[str, Any] | None:
    """DeepSpeed's wall_clock_breakdown: the global timers (not the ``_microstep`` ones, not the
    optimizer's own). compute = forward + backward without the gradient all-reduce + optimizer step."""
    ms = {m.group("name"): _num(m.group("v")) for m in _DS_FIELD.finditer(fields)}
    ms = {name: value for name, value in ms.items() if value is not None and not name.endswith("_microstep")}
    forward = ms.get("forward", ms.get("fwd"))
    backward = ms.get("backward_inner", ms.get("bwd_inner", ms.get("backward", ms.get("bwd"))))
    if forward is None or backward is None:
        return None
    compute = forward + backward + ms.get("step", 0.0)
    return {"framework": "deepspeed", "step": None, "seconds": round(compute / 1000, 6), "measure": "compute",
            "breakdown_ms": ms}


def _hf_metrics(msg: str, m: re.Match[str]) -> dict[str, Any] | None:
    """The HF Trainer's ``train_runtime`` summary (the run's mean step time, no step) or a per-step
    ``train_step_runtime``."""
    fields = {f.group("name"): _num(f.group("v")) for f in _HF_FIELD.finditer(msg)}
    runtime = _num(m.group("v"))
    if m.group("per_step"):
        attrs: dict[str, Any] = {"framework": "hf_trainer", "step": None, "seconds": runtime, "measure": "step"}
    else:
        per_second = fields.get("train_steps_per_second")
        attrs = {"framework": "hf_trainer", "step": None, "summary": True, "train_runtime_s": runtime,
                 "measure": "step", "seconds": round(1 / per_second, 6) if per_second else None}
        if fields.get("train_samples_per_second") is not None:
            attrs["throughput"], attrs["unit"] = fields["train_samples_per_second"], "samples/s"
    if fields.get("step") is not None:
        attrs["step"] = int(fields["step"])
    if fields.get("epoch") is not None:
        attrs["epoch"] = fields["epoch"]
    return attrs if attrs.get("seconds") is not None or attrs.get("throughput") is not None else None
