"""The LLM service every inference drill happens to: vLLM pods on GPU nodes under Kubernetes.

Evidence: successive Prometheus scrapes of each pod (``metrics/POD-YYYYMMDDTHHMMSSZ.prom``, as
``curl .../metrics > pod-$(date -u +%Y%m%dT%H%M%SZ).prom`` writes them), ``kubectl get events -o
json``, ``kubectl get pods -o json``, and whatever the cause adds (pod logs, device plugin logs,
the change log). Each scrape is computed from a per-pod state (request rate, prompt length, KV-cache
use, queue, share of slow and of failed requests); a fault generator adds an *effect* that bends
that state from the fault on, and the events it causes.
"""

# ruff: noqa: E501  (metric and event lines are kept whole, as the tools print them)

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from workbench.prevention.drill import lines as fmt
from workbench.prevention.drill.incident import Drill
from workbench.times import iso

SCRAPE_S = 30
SCRAPES = 30
NAMESPACE = "serving"
IMAGE = "vllm/vllm-openai:v0.6.3"
TTFT_BOUNDS = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0]
E2E_BOUNDS = [1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0]
HEADROOM = 1.4
"""How much more than its usual rate a replica serves once its batches are full."""
PROMPT_BOUNDS = [256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0]

Effect = Callable[[int, datetime, dict[str, float]], None]


@dataclass
class Service:
    """The service's story; a fault generator adds effects, events and files."""

    d: Drill
    model: str
    pods: list[str]
    t0: datetime
    effects: list[Effect] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    changes: list[dict] = field(default_factory=list)
    restart: tuple[str, datetime] | None = None
    """Why the victim's container last terminated (kubectl's lastState) and when it ran again."""

    @property
    def nodes(self) -> list[str]:
        return self.d.hosts

    @property
    def victim(self) -> int:
        """The pod on the culprit node."""
        return self.d.hosts.index(self.d.culprit)

    def event(self, when: datetime, reason: str, message: str, kind: str = "Pod", obj: str | None = None,
              node: str | None = None, typ: str = "Warning", count: int = 1, component: str = "kubelet") -> None:
        uid = f"{0x17f3a2c9e5b8d000 + len(self.events) * 0x1d3 + self.d.job:x}"
        self.events.append(fmt.k8s_event(uid, when, reason, message, kind, obj or self.pods[self.victim], NAMESPACE,
                                         node, typ=typ, count=count, component=component))
        if component == "kubelet" and node in self.d.hosts:
            # the node's kubelet logs what it reports, on the node's own clock
            self.d.add(f"{node}/kubelet.log", fmt.kubelet_event(node, 1800 + self.d.hosts.index(node) * 11, when,
                                                                reason, message, kind,
                                                                obj or self.pods[self.victim], NAMESPACE, typ))

    def absorb(self, s: dict[str, float]) -> None:
        """A survivor's share of a lost replica's traffic: it serves what its full batches allow (at
        most ``HEADROOM`` times its usual rate), the rest waits in its queue."""
        share = len(self.pods) / max(1, len(self.pods) - 1)
        s["rate"] *= min(share, HEADROOM)
        s["waiting"] += 40 + 60 * max(0.0, share - HEADROOM)
        s["slow"] = max(s["slow"], 0.2)

    def kernel(self, node: str, when: datetime, *texts: str) -> None:
        """Kernel lines of a node as ``dmesg -T`` prints them (the time a node's kubelet logs carry)."""
        self.d.add(f"{node}/dmesg-T.txt", *(fmt.dmesg_ctime(when, text) for text in texts))

    def engine_log(self, when: datetime, *tail: str) -> None:
        """The victim pod's vLLM log: its start, then ``tail`` (an engine error, a traceback)."""
        start = self.t0 - timedelta(hours=20)
        self.d.add(f"{self.d.culprit}/logs/{self.pods[self.victim]}.log",
                   f"INFO {start:%m-%d %H:%M:%S} api_server.py:585] vLLM API server version 0.6.3",
                   f"INFO {start:%m-%d %H:%M:%S} gpu_executor.py:122] # GPU blocks: 9166, # CPU blocks: 3276",
                   *(f"ERROR {when:%m-%d %H:%M:%S} {line}" for line in tail))

    def replica_restarts(self, gone_s: float = 150.0, reason: str = "Error") -> None:
        """The victim's container dies at the fault and is back ``gone_s`` later with its counters
        reset; meanwhile the other replicas take its load."""
        d, pod, node = self.d, self.pods[self.victim], self.d.culprit
        back = d.fault + timedelta(seconds=gone_s)
        self.event(d.fault + timedelta(seconds=35), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
                   obj=pod, node=node, count=2)
        self.event(back - timedelta(seconds=2), "Started", "Started container vllm", obj=pod, node=node, typ="Normal", count=2)
        self.restart = (reason, back)
        restarted: list[bool] = []

        def effect(p: int, t: datetime, s: dict[str, float]) -> None:
            if t < d.fault:
                return
            if p != self.victim:
                if t < back:
                    self.absorb(s)
                return
            if t < back:
                s["up"] = 0.0
            elif not restarted:
                restarted.append(True)
                s["restart"] = 1.0
        self.effects.append(effect)

    def replica_stopped(self, fail: float | None = None) -> None:
        """The kubelet stops the victim's container a second after the fault and it stays gone."""
        d = self.d
        self.event(d.fault + timedelta(seconds=1), "Killing", "Stopping container vllm", obj=self.pods[self.victim],
                   node=d.culprit, typ="Normal")
        self.replica_gone(fail)

    def replica_gone(self, fail: float | None = None) -> None:
        """From the fault on the victim serves nothing; the other replicas take its load (failing ``fail``
        of their requests, if given)."""
        d = self.d

        def effect(p: int, t: datetime, s: dict[str, float]) -> None:
            if t < d.fault:
                return
            if p == self.victim:
                s["up"] = 0.0
                return
            self.absorb(s)
            if fail is not None:
                s["fail"] = fail
        self.effects.append(effect)

    def engine_fails_at_start(self, nccl: Callable[[str, int], list[str]]) -> None:
        """The victim's container restarts (the kubelet stops it 8 s before the fault) and its engine dies
        while NCCL sets up, on the lines ``nccl(pod, pid)`` writes: CrashLoopBackOff, the replica gone."""
        d = self.d
        pod, node = self.pods[self.victim], d.culprit
        pid = d.rng.randint(200, 900)
        self.event(d.fault - timedelta(seconds=8), "Killing", "Stopping container vllm", obj=pod, node=node,
                   typ="Normal")
        d.add(f"{node}/logs/{pod}.log",
              f"INFO {d.fault:%m-%d %H:%M:%S} api_server.py:585] vLLM API server version 0.6.3",
              *nccl(pod, pid),
              f"ERROR {d.fault:%m-%d %H:%M:%S} worker_base.py:464] RuntimeError: NCCL error: unhandled system error "
              "(run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5")
        d.first_sign = d.fault.replace(microsecond=0)
        self.event(d.fault + timedelta(seconds=30), "BackOff", f"Back-off restarting failed container vllm in pod {pod}_serving",
                   obj=pod, node=node, count=4)
        self.replica_gone()

    def ramp(self, t: datetime, delay_s: float = 0.0, over_s: float = 60.0) -> float:
        """0 before the fault (plus ``delay_s``), rising to 1 over ``over_s`` seconds."""
        return max(0.0, min(1.0, ((t - self.d.fault).total_seconds() - delay_s) / over_s))


def build(d: Drill, fault: Callable[[Service], None]) -> Service:
    """Draw the service, let ``fault`` bend it, then write the scrapes, events and pods."""
    rng = d.rng
    d.place_gpu = False
    model = rng.choice(("meta-llama/Meta-Llama-3-70B-Instruct", "Qwen/Qwen2.5-72B-Instruct",
                        "mistralai/Mixtral-8x22B-Instruct-v0.1"))
    short = model.split("/")[1].split("-")[0].lower()
    replica = f"{rng.randint(0, 0xfffffffff):09x}"[:9]
    pods = [f"vllm-{short}-{replica}-{''.join(rng.choice('bcdfghjklmnpqrstvwxz2456789') for _ in range(5))}"
            for _ in d.hosts]
    t0 = d.start
    d.fault = t0 + timedelta(minutes=rng.randint(6, 7), seconds=rng.randint(0, 59))
    svc = Service(d, model, pods, t0)
    _routine(svc)
    fault(svc)
    _scrapes(svc)
    d.texts["k8s/events.json"] = fmt.k8s_list(sorted(svc.events, key=lambda e: (e["lastTimestamp"], e["metadata"]["name"])))
    d.texts["k8s/pods.json"] = _pods(svc)
    if svc.changes:
        d.texts["changes/deploys.json"] = json.dumps(sorted(svc.changes, key=lambda c: c["ts"]), indent=2) + "\n"
    d.detected = d.detected or d.fault + timedelta(minutes=rng.randint(3, 6), seconds=rng.randint(0, 59))
    return svc


def capture(d: Drill) -> datetime:
    """When the responder's evidence was taken: at the last scrape."""
    return d.start + timedelta(seconds=SCRAPE_S * (SCRAPES - 1) + 20)


def _routine(svc: Service) -> None:
    """Benign events and changes a responder must not chase."""
    d, rng = svc.d, svc.d.rng
    when = svc.t0 - timedelta(minutes=rng.randint(5, 50))
    svc.event(when, "Pulled", 'Container image "busybox:1.36" already present on machine', obj=f"log-rotate-{d.job}-x7k2p",
              node=rng.choice(d.hosts), typ="Normal")
    svc.event(when + timedelta(seconds=2), "Started", "Started container log-rotate", obj=f"log-rotate-{d.job}-x7k2p",
              node=d.hosts[0], typ="Normal")
    if rng.random() < 0.5:
        svc.changes.append({"ts": iso(svc.t0 - timedelta(days=rng.randint(2, 6), hours=rng.randint(0, 9)), "seconds"),
                            "what": "vllm-serving config", "version": "max_num_seqs=256", "from_version": "max_num_seqs=192",
                            "who": "platform-bot"})


@dataclass
class _Counters:
    stop: float = 0.0
    length: float = 0.0
    failed: float = 0.0
    prompt: float = 0.0
    generation: float = 0.0
    preemptions: float = 0.0
    ttft: list[float] = field(default_factory=lambda: [0.0] * len(TTFT_BOUNDS))
    ttft_sum: float = 0.0
    e2e: list[float] = field(default_factory=lambda: [0.0] * len(E2E_BOUNDS))
    e2e_sum: float = 0.0
    plen: list[float] = field(default_factory=lambda: [0.0] * len(PROMPT_BOUNDS))
    total: float = 0.0


def _scrapes(svc: Service) -> None:
    d, rng = svc.d, svc.d.rng
    for p, pod in enumerate(svc.pods):
        c = _Counters(stop=rng.randint(100_000, 400_000), prompt=rng.randint(10**8, 4 * 10**8))
        c.total = c.stop
        base_rate = rng.uniform(3.5, 6.0)
        for k in range(SCRAPES):
            when = svc.t0 + timedelta(seconds=SCRAPE_S * k, milliseconds=rng.randint(0, 400))
            state = {"up": 1.0, "rate": base_rate * rng.uniform(0.97, 1.03), "prompt": 1400 * rng.uniform(0.96, 1.04),
                     "kv": 0.34 + 0.04 * rng.random(), "waiting": float(rng.choice((0, 0, 0, 1, 2))), "slow": 0.0,
                     "fail": 0.0005, "latency": 1.0, "preempt": 0.0, "restart": 0.0}
            for effect in svc.effects:
                effect(p, when, state)
            if state["restart"]:
                c = _Counters()
            if not state["up"]:
                continue  # the scrape found the pod gone: connection refused, no file
            _advance(c, state)
            d.texts[f"metrics/{pod}-{when:%Y%m%dT%H%M%SZ}.prom"] = _exposition(svc.model, c, state)


def _advance(c: _Counters, s: dict[str, float]) -> None:
    n = s["rate"] * SCRAPE_S
    failed = n * s["fail"]
    c.failed += failed
    c.stop += (n - failed) * 0.97
    c.length += (n - failed) * 0.03
    c.prompt += n * s["prompt"]
    c.generation += n * 310
    c.preemptions += s["preempt"] * SCRAPE_S
    slow, lat = s["slow"], s["latency"]
    fast_ttft = [0.30, 0.80, 0.97, 1.0, 1.0, 1.0, 1.0, 1.0]
    slow_ttft = [0.0, 0.0, 0.0, 0.0, 0.05, 0.3, 0.75, 1.0]
    for i in range(len(TTFT_BOUNDS)):
        c.ttft[i] += n * ((1 - slow) * fast_ttft[min(len(fast_ttft) - 1, max(0, i - int(lat) + 1))] + slow * slow_ttft[i])
    c.ttft_sum += n * ((1 - slow) * 0.3 * lat + slow * 7.5)
    fast_e2e = [0.05, 0.55, 0.93, 1.0, 1.0, 1.0, 1.0]
    slow_e2e = [0.0, 0.0, 0.0, 0.1, 0.5, 0.9, 1.0]
    for i in range(len(E2E_BOUNDS)):
        c.e2e[i] += n * ((1 - slow) * fast_e2e[min(len(fast_e2e) - 1, max(0, i - int(lat) + 1))] + slow * slow_e2e[i])
    c.e2e_sum += n * ((1 - slow) * 3.1 * lat + slow * 21.0)
    for i, bound in enumerate(PROMPT_BOUNDS):
        c.plen[i] += n * min(1.0, max(0.0, (bound - s["prompt"] * 0.25) / (s["prompt"] * 1.5)))
    c.total += n


def _exposition(model: str, c: _Counters, s: dict[str, float]) -> str:
    lab = f'model_name="{model}"'
    running = min(256.0, round(s["rate"] * 7.5))
    return fmt.prom([
        ("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.", [(f"{{{lab}}}", running)]),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         [(f"{{{lab}}}", round(s["waiting"]))]),
        ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
         [(f"{{{lab}}}", round(s["kv"], 4))]),
        ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
         [(f"{{{lab}}}", round(c.preemptions))]),
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", [(f"{{{lab}}}", round(c.prompt))]),
        ("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         [(f"{{{lab}}}", round(c.generation))]),
        ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         [(f'{{finished_reason="stop",{lab}}}', round(c.stop)), (f'{{finished_reason="length",{lab}}}', round(c.length)),
          (f'{{finished_reason="abort",{lab}}}', round(c.failed))]),
        fmt.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", lab, PROMPT_BOUNDS,
                      [round(v) for v in c.plen], round(c.total), c.prompt),
        fmt.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", lab,
                      TTFT_BOUNDS, [round(v) for v in c.ttft], round(c.total), c.ttft_sum),
        fmt.histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", lab,
                      E2E_BOUNDS, [round(v) for v in c.e2e], round(c.total), c.e2e_sum),
    ])


def _container(svc: Service, i: int) -> dict:
    status = {"name": "vllm", "ready": True, "restartCount": 0, "image": IMAGE,
              "state": {"running": {"startedAt": iso(svc.t0 - timedelta(days=1), "seconds")}}}
    if svc.restart and i == svc.victim:
        reason, back = svc.restart
        status.update(restartCount=1, state={"running": {"startedAt": iso(back, "seconds")}},
                      lastState={"terminated": {"exitCode": 137 if reason == "OOMKilled" else 1, "reason": reason,
                                                "startedAt": iso(svc.t0 - timedelta(days=1), "seconds"),
                                                "finishedAt": iso(svc.d.fault, "seconds")}})
    return status


def _pods(svc: Service) -> str:
    items = []
    for i, pod in enumerate(svc.pods):
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": NAMESPACE, "labels": {"app": "vllm"},
                         "creationTimestamp": iso(svc.t0 - timedelta(days=1, minutes=i * 7), "seconds")},
            "spec": {"nodeName": svc.nodes[i], "containers": [{
                "name": "vllm", "image": IMAGE, "args": ["--model", svc.model, "--tensor-parallel-size", "4"],
                "resources": {"limits": {"memory": "96Gi", "nvidia.com/gpu": "4"}}}]},
            "status": {"phase": "Running", "hostIP": f"10.0.2.{21 + i}", "podIP": f"10.42.{i + 3}.17",
                       "containerStatuses": [_container(svc, i)]}})
    return fmt.k8s_list(items)
