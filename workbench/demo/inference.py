"""The demo's inference incident, written as the raw files a responder would be handed.

Three vLLM pods serve Llama 3 70B in namespace ``serving``. At 14:12 a campaign triples the request
rate; the KV cache fills, requests queue, p99 latency and time to first token climb, the
autoscaler asks for two more pods that cannot be scheduled (no free GPUs), and two pods are
OOMKilled under the load and restart (their counters reset). A gateway rate limit at 14:29 brings
the service back. Evidence: successive Prometheus scrapes of each pod named
``POD-YYYYMMDDTHHMMSSZ.prom`` (as ``curl .../metrics > pod-$(date -u +%Y%m%dT%H%M%SZ).prom``
writes them), ``kubectl get events -o json`` and ``kubectl get pods -o json``.

The curves come from a small seeded simulation (request latencies drawn per scrape interval
and accumulated into histogram buckets), so quantiles computed from bucket deltas show the same
noise and shape real scrapes do, and every run writes the same bytes.
"""

from __future__ import annotations

import json
import math
import os
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

from workbench.times import iso

TITLE = "Llama 3 70B chat: p99 latency SLO breach and OOM restarts under a traffic surge"
NAMESPACE = "serving"
MODEL = "meta-llama/Meta-Llama-3-70B-Instruct"
PODS = ("vllm-llama3-70b-6c9d7f5b8-2xkqp", "vllm-llama3-70b-6c9d7f5b8-7fj4n", "vllm-llama3-70b-6c9d7f5b8-tq8zw")
NODES = ("gpu-b01", "gpu-b02", "gpu-b03")
START = datetime(2026, 3, 21, 14, 0, 0, tzinfo=timezone.utc)
SCRAPE = timedelta(seconds=30)
SCRAPES = 81
SURGE = 12.0
LIMITED = 29.5
CAPACITY = 2.2
"""Served load, relative to normal, that the three pods reach once their batches are full."""
OOM = {0: START + timedelta(minutes=19, seconds=42), 1: START + timedelta(minutes=23, seconds=5)}
RESTART_GAP = timedelta(minutes=2, seconds=20)
CAPTURED = START + timedelta(minutes=41)
SLO_P99_MS = 15000
MILESTONES = {"detection": START + timedelta(minutes=16, seconds=30),
              "mitigation": START + timedelta(minutes=29, seconds=30),
              "recovery": START + timedelta(minutes=33)}

E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
               480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)


def _load(minute: float) -> float:
    """Offered load relative to normal: 1 until the surge, ~3 during it, back to ~1.1 once limited."""
    if minute < SURGE:
        return 1.0
    if minute < LIMITED:
        return 1.0 + 2.0 * min(1.0, (minute - SURGE) / 2.0)
    return 1.1 + 1.9 * math.exp(-(minute - LIMITED) / 0.8)


def _write(path: Path, text: str, when: datetime) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    os.utime(path, (when.timestamp(), when.timestamp()))


class _Pod:
    """Cumulative counters of one vLLM server, reset when the process restarts."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.rng = random.Random(1000 + index)
        self.reset()

    def reset(self) -> None:
        self.e2e = [0] * (len(E2E_BUCKETS) + 1)
        self.ttft = [0] * (len(TTFT_BUCKETS) + 1)
        self.e2e_sum = self.ttft_sum = 0.0
        self.ok = self.length = self.aborted = 0
        self.prompt_tokens = self.generation_tokens = self.preemptions = 0
        self.waiting = 0.0

    def step(self, minute: float, seconds: float) -> dict[str, float]:
        """Advance one scrape interval; returns the gauges at its end."""
        load = _load(minute)
        pressure = max(0.0, min(1.0, (load - 1.15) / 1.2))
        # larger batches roughly double throughput before the KV cache runs out; the rest queues
        served = int(self.rng.gauss(5.2 * min(load, CAPACITY), 0.25) * seconds)
        # the gateway gives up on requests queued for more than ~60 s, so the queue levels off
        self.waiting = min(240.0 + self.rng.uniform(0, 25),
                           max(0.0, self.waiting + (load - CAPACITY) * 5.2 * seconds * (0.45 if load > CAPACITY
                                                                                        else 1.6)))
        wait_s = self.waiting / (5.2 * CAPACITY)  # Little's law: queue length over service rate
        for _ in range(max(served, 0)):
            ttft = self.rng.lognormvariate(math.log(0.22 + 2.0 * pressure + wait_s), 0.35 + 0.2 * (1 - pressure))
            total = ttft + self.rng.lognormvariate(math.log(3.1 * (1 + 1.8 * pressure)), 0.35)
            self._observe(self.ttft, TTFT_BUCKETS, ttft)
            self._observe(self.e2e, E2E_BUCKETS, total)
            self.ttft_sum += ttft
            self.e2e_sum += total
            self.prompt_tokens += self.rng.randint(300, 2400)
            output = self.rng.randint(80, 900)
            self.generation_tokens += output
            if output > 880:
                self.length += 1
            else:
                self.ok += 1
        self.aborted += int(pressure * self.rng.uniform(2.0, 9.0) * seconds / 30)
        self.preemptions += int(pressure * self.rng.uniform(20, 45) * seconds / 30)
        kv = min(0.995, 0.48 + 0.04 * self.rng.random() + 0.5 * pressure)
        running = min(128, int(self.rng.gauss(42 + 84 * pressure, 3)))
        queued = int(self.waiting) if self.waiting >= 1 else self.rng.choice((0, 0, 0, 1, 2))
        return {"kv": kv, "running": running, "waiting": queued}

    @staticmethod
    def _observe(counts: list[int], bounds: tuple[float, ...], value: float) -> None:
        for i, bound in enumerate(bounds):
            if value <= bound:
                counts[i] += 1
                return
        counts[-1] += 1

    def exposition(self, gauges: dict[str, float]) -> str:
        """The /metrics page as vLLM 0.6 writes it (the families a responder looks at)."""
        lab = f'model_name="{MODEL}"'
        out = ["# HELP vllm:num_requests_running Number of requests currently running on GPU.",
               "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {gauges['running']:.1f}",
               "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
               "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} {gauges['waiting']:.1f}",
               "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.",
               "# TYPE vllm:gpu_cache_usage_perc gauge", f"vllm:gpu_cache_usage_perc{{{lab}}} {gauges['kv']:.4f}",
               "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
               "# TYPE vllm:num_preemptions_total counter",
               f"vllm:num_preemptions_total{{{lab}}} {self.preemptions:.1f}",
               "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
               "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{{{lab}}} {self.prompt_tokens:.1f}",
               "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
               "# TYPE vllm:generation_tokens_total counter",
               f"vllm:generation_tokens_total{{{lab}}} {self.generation_tokens:.1f}",
               "# HELP vllm:request_success_total Count of successfully processed requests.",
               "# TYPE vllm:request_success_total counter"]
        for reason, value in (("stop", self.ok), ("length", self.length), ("abort", self.aborted)):
            out.append(f'vllm:request_success_total{{finished_reason="{reason}",{lab}}} {value:.1f}')
        out += self._histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                               TTFT_BUCKETS, self.ttft, self.ttft_sum, lab)
        out += self._histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in "
                               "seconds.", E2E_BUCKETS, self.e2e, self.e2e_sum, lab)
        return "\n".join(out) + "\n"

    @staticmethod
    def _histogram(name: str, help_text: str, bounds: tuple[float, ...], counts: list[int], total: float,
                   lab: str) -> list[str]:
        out = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cumulative = 0
        for bound, count in zip(bounds, counts):
            cumulative += count
            out.append(f'{name}_bucket{{le="{bound}",{lab}}} {cumulative:.1f}')
        cumulative += counts[-1]
        out.append(f'{name}_bucket{{le="+Inf",{lab}}} {cumulative:.1f}')
        out.append(f"{name}_count{{{lab}}} {cumulative:.1f}")
        out.append(f"{name}_sum{{{lab}}} {total:.6f}")
        return out


def write(root: Path) -> None:
    """Write the incident's evidence: metrics scrapes per pod, Kubernetes events and pods."""
    pods = [_Pod(i) for i in range(len(PODS))]
    down_until: dict[int, datetime] = {}
    for k in range(SCRAPES):
        when = START + k * SCRAPE
        minute = k * SCRAPE.total_seconds() / 60
        for i, pod in enumerate(pods):
            gauges = pod.step(minute, SCRAPE.total_seconds())
            if i in OOM and OOM[i] <= when and i not in down_until:
                down_until[i] = OOM[i] + RESTART_GAP
                pod.reset()
            if i in down_until and when < down_until[i]:
                continue  # the scrape found the pod restarting: connection refused, no file
            _write(root / "metrics" / f"{PODS[i]}-{when:%Y%m%dT%H%M%SZ}.prom", pod.exposition(gauges), when)
    _write(root / "k8s" / "events.json", json.dumps(_events(), indent=4) + "\n", CAPTURED)
    _write(root / "k8s" / "pods.json", json.dumps(_pods(), indent=4) + "\n", CAPTURED)


def _event(n: int, kind: str, name: str, reason: str, message: str, first: datetime, last: datetime | None = None,
           count: int = 1, etype: str = "Normal", component: str = "kubelet", host: str | None = None) -> dict:
    last = last or first
    return {"apiVersion": "v1", "kind": "Event", "count": count, "firstTimestamp": iso(first, "seconds"),
            "lastTimestamp": iso(last, "seconds"), "involvedObject": {"apiVersion": "v1", "kind": kind, "name": name,
                                                            "namespace": NAMESPACE},
            "message": message, "reason": reason, "type": etype,
            "metadata": {"name": f"{name}.{0x17f3a2c9e5b8d000 + n:x}", "namespace": NAMESPACE,
                         "creationTimestamp": iso(first, "seconds")},
            "reportingComponent": component, "source": {"component": component, **({"host": host} if host else {})}}


def _events() -> dict:
    at = START
    hpa = "vllm-llama3-70b"
    pending = ("vllm-llama3-70b-6c9d7f5b8-h2m9c", "vllm-llama3-70b-6c9d7f5b8-w5rtd")
    items = [
        _event(1, "HorizontalPodAutoscaler", hpa, "SuccessfulRescale",
               "New size: 5; reason: pods metric vllm:num_requests_waiting above target",
               at + timedelta(minutes=14, seconds=10), component="horizontal-pod-autoscaler"),
        _event(2, "Deployment", hpa, "ScalingReplicaSet", "Scaled up replica set vllm-llama3-70b-6c9d7f5b8 to 5",
               at + timedelta(minutes=14, seconds=10), component="deployment-controller"),
    ]
    for j, pod in enumerate(pending):
        items.append(_event(3 + j, "Pod", pod, "FailedScheduling",
                            "0/12 nodes are available: 3 Insufficient nvidia.com/gpu, 9 node(s) didn't match Pod's "
                            "node affinity/selector. preemption: 0/12 nodes are available: 3 No preemption victims "
                            "found for incoming pod, 9 Preemption is not helpful for scheduling.",
                            at + timedelta(minutes=14, seconds=11), at + timedelta(minutes=40, seconds=2), count=27,
                            etype="Warning", component="default-scheduler"))
    for i, pod in enumerate(PODS):
        items.append(_event(10 + i, "Pod", pod, "Unhealthy",
                            f'Readiness probe failed: Get "http://10.42.{i + 3}.17:8000/health": context deadline '
                            "exceeded (Client.Timeout exceeded while awaiting headers)",
                            at + timedelta(minutes=16, seconds=40 + i), at + timedelta(minutes=28, seconds=50),
                            count=9 + i, etype="Warning", host=NODES[i]))
    for i, when in OOM.items():
        back = when + timedelta(seconds=2)
        items += [
            _event(20 + i * 3, "Pod", PODS[i], "Pulled", 'Container image "vllm/vllm-openai:v0.6.3" already present '
                   "on machine", back, host=NODES[i]),
            _event(21 + i * 3, "Pod", PODS[i], "Created", "Created container vllm", back, host=NODES[i]),
            _event(22 + i * 3, "Pod", PODS[i], "Started", "Started container vllm", back, host=NODES[i]),
        ]
    items.append(_event(30, "Pod", PODS[1], "BackOff", "Back-off restarting failed container vllm in pod "
                        f"{PODS[1]}_{NAMESPACE}(4f0c2a9e-1b7d-4c55-9e3a-2d6f8b1a0c47)",
                        OOM[1] + timedelta(seconds=40), count=2, etype="Warning", host=NODES[1]))
    items.append(_event(31, "HorizontalPodAutoscaler", hpa, "SuccessfulRescale",
                        "New size: 3; reason: All metrics below target", at + timedelta(minutes=38, seconds=15),
                        component="horizontal-pod-autoscaler"))
    items.sort(key=lambda e: (e["lastTimestamp"], e["metadata"]["name"]))
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}


def _pods() -> dict:
    items = []
    for i, pod in enumerate(PODS):
        status: dict = {"name": "vllm", "ready": True, "restartCount": 0, "image": "vllm/vllm-openai:v0.6.3",
                        "state": {"running": {"startedAt": "2026-03-20T08:12:44Z"}}, "lastState": {}}
        if i in OOM:
            restarted = iso(OOM[i] + timedelta(seconds=2), "seconds")
            status.update(restartCount=1, state={"running": {"startedAt": restarted}},
                          lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                    "startedAt": "2026-03-20T08:12:44Z",
                                                    "finishedAt": iso(OOM[i], "seconds")}})
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NAMESPACE, "labels": {"app": "vllm-llama3-70b"}},
            "spec": {"nodeName": NODES[i], "containers": [{
                "name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
                "args": ["--model", MODEL, "--tensor-parallel-size", "4", "--max-num-seqs", "128"],
                "resources": {"limits": {"memory": "96Gi", "nvidia.com/gpu": "4"},
                              "requests": {"memory": "96Gi", "nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running", "hostIP": f"10.0.2.{21 + i}", "podIP": f"10.42.{i + 3}.17",
                       "containerStatuses": [status]}})
    return {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}
