"""Business layer causes: demand and changes, seen in the serving metrics and the change log."""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

import json
from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.registry import fault
from workbench.prevention.drill.serving import Service
from workbench.prevention.drill.training import Job
from workbench.times import iso


def _overload(p: int, s: dict[str, float], level: float) -> None:
    """What a full engine looks like: KV cache near 100 %, a queue, slow first tokens, preemptions."""
    s["kv"] = s["kv"] + (0.993 - s["kv"]) * level
    s["waiting"] += 180 * level * (0.8 + 0.05 * p)
    s["slow"] = 0.35 * level
    s["preempt"] = 1.5 * level


@fault("traffic_surge", "inference")
def traffic_surge_inference(svc: Service) -> None:
    """A campaign triples the request rate: batches fill, then the KV cache, requests queue, the autoscaler cannot add pods."""
    d = svc.d
    d.title = f"{svc.model}: p99 latency SLO breach"
    d.place_host = False
    factor = d.rng.uniform(2.6, 3.4)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        s["rate"] *= 1 + (factor - 1) * svc.ramp(t, over_s=90)
        _overload(p, s, svc.ramp(t, delay_s=90, over_s=60))
    svc.effects.append(effect)
    scaled = d.fault + timedelta(minutes=2, seconds=d.rng.randint(0, 40))
    svc.event(scaled, "SuccessfulRescale", f"New size: {len(svc.pods) + 2}; reason: pods metric vllm:num_requests_waiting above target",
              kind="HorizontalPodAutoscaler", obj="vllm", typ="Normal", component="horizontal-pod-autoscaler")
    svc.event(scaled + timedelta(seconds=1), "FailedScheduling",
              f"0/{len(svc.pods) + 9} nodes are available: {len(svc.pods)} Insufficient nvidia.com/gpu, 9 node(s) didn't match Pod's node affinity/selector. preemption: 0/{len(svc.pods) + 9} nodes are available: {len(svc.pods) + 9} No preemption victims found for incoming pod.",
              obj=f"vllm-pending-{d.job % 1000}", component="default-scheduler", count=14)


@fault("long_context_shift", "inference")
def long_context_shift_inference(svc: Service) -> None:
    """A new client sends prompts four times longer at the same request rate: the KV cache fills and requests queue."""
    d = svc.d
    d.title = f"{svc.model}: time to first token up"
    d.place_host = False
    factor = d.rng.uniform(3.5, 5.0)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        s["prompt"] *= 1 + (factor - 1) * svc.ramp(t, over_s=60)
        _overload(p, s, svc.ramp(t, delay_s=90, over_s=90))
    svc.effects.append(effect)


@fault("bad_change", "inference")
def bad_change_inference(svc: Service) -> None:
    """A new model release (chat template change) rolls out; from its restart on one request in five fails."""
    d = svc.d
    d.title = f"{svc.model}: error rate up"
    d.place_host = False
    new = d.rng.randint(7, 30)
    svc.changes.append({"ts": iso(d.fault, "seconds"), "what": f"model {svc.model}", "version": f"v{new}", "from_version": f"v{new - 1}",
                        "who": "ci-bot", "note": "new chat template and stop-sequence handling"})
    share = d.rng.uniform(0.15, 0.3)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        s["fail"] = max(s["fail"], share * svc.ramp(t, delay_s=30 + 20 * p, over_s=30))
    svc.effects.append(effect)
    svc.event(d.fault + timedelta(seconds=4), "ScalingReplicaSet", f"Scaled up replica set vllm-{new} to {len(svc.pods)}",
              kind="Deployment", obj="vllm", typ="Normal", component="deployment-controller")


@fault("quantization_regression", "inference")
def quantization_regression_inference(svc: Service) -> None:
    """The model is re-released in FP8; an unsupported kernel path is slower and some outputs come back broken."""
    d = svc.d
    d.title = f"{svc.model}: latency and errors up after a release"
    d.place_host = False
    svc.changes.append({"ts": iso(d.fault, "seconds"), "what": f"model {svc.model}", "version": "fp8-dynamic", "from_version": "bf16",
                        "who": "ci-bot", "note": "FP8 weight quantization to halve the GPU count"})
    share = d.rng.uniform(0.06, 0.12)

    def effect(p: int, t: datetime, s: dict[str, float]) -> None:
        level = svc.ramp(t, delay_s=30 + 20 * p, over_s=30)
        s["fail"] = max(s["fail"], share * level)
        s["latency"] = 1.0 + 2.0 * level
    svc.effects.append(effect)


@fault("bad_change", "training")
def bad_change_training(job: Job) -> None:
    """A commit to the training code adds tokens to the tokenizer; the job restarted on it cannot load its checkpoint on any rank."""
    d = job.d
    d.title = f"Job {d.job} failed at start after a code change"
    d.place_host = False
    change = d.start - timedelta(minutes=d.rng.randint(8, 50), seconds=d.rng.randint(0, 59))
    new, old = f"{d.rng.randint(0, 0xfffffff):07x}", f"{d.rng.randint(0, 0xfffffff):07x}"
    d.texts["changes/deploys.json"] = json.dumps([{"ts": iso(change, "seconds"), "what": "repo llm-train", "version": f"git {new}",
                                                   "from_version": f"git {old}", "who": "ci-bot",
                                                   "note": "tokenizer: add 8 special tokens for tool calls"}], indent=2) + "\n"
    d.first_sign = change
    d.fault = d.start + timedelta(seconds=d.rng.randint(20, 40), milliseconds=d.rng.randint(0, 999))
    step = d.rng.randint(10, 90) * 1000
    for rank in range(d.nranks):
        job.log(rank, fmt.pylog(d.fault, f"[rank{rank}] loading checkpoint /ckpt/run{d.job % 97}/global_step{step}"),
                *(f"[rank{rank}]: {line}" for line in (
                    "Traceback (most recent call last):",
                    '  File "/workspace/train.py", line 398, in <module>',
                    "    engine.load_checkpoint(args.load)",
                    "RuntimeError: Error(s) in loading state_dict for LlamaForCausalLM:",
                    "\tsize mismatch for model.embed_tokens.weight: copying a param with shape torch.Size([128256, 8192]) from checkpoint, the shape in current model is torch.Size([128264, 8192]).",
                    "\tsize mismatch for lm_head.weight: copying a param with shape torch.Size([128256, 8192]) from checkpoint, the shape in current model is torch.Size([128264, 8192]).")))
    job.finish(d.fault + timedelta(seconds=6))
