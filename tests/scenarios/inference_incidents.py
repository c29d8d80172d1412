"""Inference incidents: one function per scenario folder, each with realistic noise around the fault."""

# ruff: noqa: E501  (log lines and metric names are kept whole, as the tools print them)

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from tests.scenarios.formats import ctime, expected, histogram, k8s_event, k8s_list, prom, scenario, stamp, write

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
TTFT_BOUNDS = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


def _ttft_buckets(fast: float, slow: float) -> list[float]:
    """Cumulative TTFT bucket counts: ``fast`` requests answered within a second, ``slow`` ones that
    waited in the queue for 5-10 s or more."""
    shape = [0.30, 0.80, 0.97, 1.0, 1.0, 1.0, 1.0]
    return [round(fast * share + (slow * 0.3 if bound >= 5.0 else 0.0) + (slow * 0.7 if bound >= 10.0 else 0.0))
            for bound, share in zip(TTFT_BOUNDS, shape)]


@scenario
def infer_traffic_surge_kv_cache(folder: Path) -> None:
    """A client launch triples the request rate at 14:04: batches fill, the KV cache sits at ~100 %,
    requests queue, p99 TTFT goes from 0.4 s to 8 s, and one replica is OOMKilled and restarts.
    Noise: a config change three days earlier, routine Normal events."""
    t0 = datetime(2025, 3, 6, 14, 0, 0)
    surge = datetime(2025, 3, 6, 14, 4, 0)
    oom = datetime(2025, 3, 6, 14, 8, 40)
    for pod_index, pod in enumerate(("vllm-0", "vllm-1")):
        done = {"stop": 181_220.0 + pod_index * 3000, "length": 6_110.0}
        ttft_total, ttft_sum, slow_total = 187_000.0, 41_000.0, 0.0
        prompt = 94_500_000.0
        restarted = False
        for i in range(21):
            when = t0 + timedelta(seconds=30 * i)
            if pod == "vllm-1" and oom <= when < oom + timedelta(seconds=90):
                continue
            if pod == "vllm-1" and when >= oom + timedelta(seconds=90) and not restarted:
                done = {"stop": 0.0, "length": 0.0}
                ttft_total, ttft_sum, slow_total, prompt = 0.0, 0.0, 0.0, 0.0
                restarted = True
            busy = when >= surge
            saturated = when >= surge + timedelta(seconds=90)
            rate = 12.5 if busy else 4.1 + 0.1 * (i % 3)
            finished = rate * 30
            done["stop"] += finished * 0.97
            done["length"] += finished * 0.03
            slow_share = 0.35 if saturated else 0.0
            slow_total += finished * slow_share
            ttft_total += finished
            ttft_sum += finished * (0.3 + 6.0 * slow_share)
            prompt += finished * 1450
            waiting = (40 + 20 * (i - 12)) if saturated else 0
            labels = f'model_name="{MODEL}"'
            text = prom([
                ("vllm:num_requests_running", "gauge", "Number of requests currently running on GPU.",
                 [(f"{{{labels}}}", 256.0 if busy else 31.0 + i % 4)]),
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                 [(f"{{{labels}}}", float(waiting))]),
                ("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
                 [(f"{{{labels}}}", 0.993 if saturated else 0.71 if busy else 0.34 + 0.01 * (i % 3))]),
                ("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                 [(f"{{{labels}}}", float(0 if not saturated else 14 * (i - 12)))]),
                ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
                 [(f"{{{labels}}}", round(prompt))]),
                ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
                 [(f'{{finished_reason="stop",{labels}}}', round(done["stop"])),
                  (f'{{finished_reason="length",{labels}}}', round(done["length"]))]),
                histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels,
                          TTFT_BOUNDS, _ttft_buckets(ttft_total - slow_total, slow_total), round(ttft_total), ttft_sum),
            ])
            write(folder, f"metrics/{pod}-{stamp(when)}.prom", text)
    pods = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": [{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "vllm-1", "namespace": "serving", "labels": {"app": "vllm"},
                     "creationTimestamp": "2025-03-05T09:12:44Z"},
        "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.6.3",
                 "resources": {"limits": {"memory": "96Gi", "nvidia.com/gpu": "4"}}}]},
        "status": {"phase": "Running", "containerStatuses": [{
            "name": "vllm", "ready": True, "restartCount": 1, "image": "vllm/vllm-openai:v0.6.3",
            "state": {"running": {"startedAt": "2025-03-06T14:09:31Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2025-03-05T09:13:02Z",
                                         "finishedAt": oom.strftime("%Y-%m-%dT%H:%M:%SZ")}}}]}}]}
    write(folder, "k8s/pods.json", json.dumps(pods, indent=4) + "\n")
    events = [
        k8s_event("17f1a", datetime(2025, 3, 6, 13, 40, 2), "Pulled", 'Container image "busybox:1.36" already present on machine', "Pod", "log-rotate-28981140-x7k2p", "serving", "gpu-node-3", typ="Normal"),
        k8s_event("17f2b", surge + timedelta(seconds=75), "SuccessfulRescale", "New size: 4; reason: pods metric vllm_num_requests_waiting above target", "HorizontalPodAutoscaler", "vllm", "serving", None, typ="Normal", component="horizontal-pod-autoscaler"),
        k8s_event("17f2c", surge + timedelta(seconds=80), "FailedScheduling", "0/6 nodes are available: 2 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity/selector. preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod.", "Pod", "vllm-2", "serving", None, component="default-scheduler"),
        k8s_event("17f3d", oom + timedelta(seconds=31), "Unhealthy", "Readiness probe failed: Get \"http://10.42.3.17:8000/health\": dial tcp 10.42.3.17:8000: connect: connection refused", "Pod", "vllm-1", "serving", "gpu-node-3", field_path="spec.containers{vllm}"),
        k8s_event("17f3e", oom + timedelta(seconds=50), "Started", "Started container vllm", "Pod", "vllm-1", "serving", "gpu-node-3", typ="Normal", count=2, field_path="spec.containers{vllm}"),
    ]
    write(folder, "k8s/events.json", k8s_list(events))
    write(folder, "changes/deploys.csv", "ts,what,version,from_version,who\n2025-03-03T09:30:12Z,vllm-serving config,max_num_seqs=256,max_num_seqs=192,platform-bot\n")
    expected(folder, description="request rate triples; KV cache saturates, requests queue, p99 TTFT spikes, a replica is OOMKilled",
             captured_at="2025-03-06T14:25:00Z", workload="inference", layer="business", cause="traffic_surge",
             consequences=["kv_cache_pressure"], first_anomaly={"kind": "request_rate_surge"})


@scenario
def infer_bad_model_release(folder: Path) -> None:
    """Version 3 of a Triton ensemble (a post-processing change) goes out at 10:02; from the reload on,
    one request in five fails. Noise: normal scaling events and a corrected PCIe error on the node."""
    t0 = datetime(2025, 3, 6, 9, 55, 0)
    deploy = datetime(2025, 3, 6, 10, 2, 11)
    reload_at = datetime(2025, 3, 6, 10, 2, 40)
    success, failure, count, duration = 1_204_310.0, 412.0, 1_204_722.0, 3.1e11
    for i in range(36):
        when = t0 + timedelta(seconds=30 * i)
        served = 30 * 22.0
        broken = when > reload_at
        failure += served * (0.21 if broken else 0.0004)
        success += served * (0.79 if broken else 0.9996)
        count += served
        duration += served * 260_000
        version = "3" if broken else "2"
        labels = f'model="llm-ensemble",version="{version}"'
        text = prom([
            ("nv_inference_request_success", "counter", "Number of successful inference requests, all batch sizes",
             [(f"{{{labels}}}", round(success))]),
            ("nv_inference_request_failure", "counter", "Number of failed inference requests, all batch sizes",
             [(f'{{{labels},reason="BACKEND"}}', round(failure * 0.98)), (f'{{{labels},reason="OTHER"}}', round(failure * 0.02))]),
            ("nv_inference_count", "counter", "Number of inferences performed (does not include cached requests)",
             [(f"{{{labels}}}", round(count))]),
            ("nv_inference_request_duration_us", "counter", "Cumulative inference request duration in microseconds (includes cached requests)",
             [(f"{{{labels}}}", round(duration))]),
            ("nv_inference_pending_request_count", "gauge", "Instantaneous number of pending requests awaiting execution per-model.",
             [(f"{{{labels}}}", 3 + i % 4)]),
            ("nv_gpu_utilization", "gauge", "GPU utilization rate [0.0 - 1.0)",
             [('{gpu_uuid="GPU-2f1d7c3e-88a1-4c2e-9b7a-1e5d3c9f0a11"}', 0.62 + 0.01 * (i % 5))]),
        ])
        write(folder, f"metrics/triton-0-{stamp(when)}.prom", text)
    write(folder, "changes/deploys.json", json.dumps([
        {"ts": "2025-03-04T16:20:00Z", "what": "model llm-ensemble", "version": "2", "from_version": "1", "who": "ci-bot",
         "note": "quarterly retrain"},
        {"ts": deploy.strftime("%Y-%m-%dT%H:%M:%SZ"), "what": "model llm-ensemble", "version": "3", "from_version": "2",
         "who": "ci-bot", "note": "post-processing: new stop-sequence handling"},
    ], indent=2) + "\n")
    events = [
        k8s_event("2a01", deploy - timedelta(seconds=4), "ScalingReplicaSet", "Scaled up replica set triton-6c9d8f7b5 to 1", "Deployment", "triton", "serving", None, typ="Normal", component="deployment-controller"),
        k8s_event("2a02", deploy + timedelta(seconds=21), "Pulled", 'Container image "nvcr.io/nvidia/tritonserver:25.01-trtllm-python-py3" already present on machine', "Pod", "triton-6c9d8f7b5-q8j2m", "serving", "gpu-node-4", typ="Normal"),
        k8s_event("2a03", deploy + timedelta(seconds=95), "ScalingReplicaSet", "Scaled down replica set triton-5b7d9c6f4 to 0 from 1", "Deployment", "triton", "serving", None, typ="Normal", component="deployment-controller"),
    ]
    write(folder, "k8s/events.json", k8s_list(events))
    write(folder, "gpu-node-4/dmesg.txt", "\n".join([
        ctime(datetime(2025, 3, 6, 7, 41, 9), "pcieport 0000:00:03.1: AER: Corrected error received: 0000:00:03.1"),
        ctime(datetime(2025, 3, 6, 7, 41, 9), "pcieport 0000:00:03.1: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)"),
    ]) + "\n")
    expected(folder, description="a new model version (post-processing change) is rolled out; 21% of requests fail from its reload on",
             captured_at="2025-03-06T10:15:00Z", workload="inference", layer="business", cause="bad_change",
             first_anomaly={"kind": "change"})


@scenario
def infer_disk_full_eviction(folder: Path) -> None:
    """The kubelet filesystem on gpu-node-2 fills up (model cache downloads); the kubelet evicts the
    TGI replicas there and the survivors fail or queue requests. Noise: one unrelated Evicted event
    days earlier on another node."""
    t0 = datetime(2025, 3, 13, 15, 10, 0)
    pressure = datetime(2025, 3, 13, 15, 20, 2)
    evicted = datetime(2025, 3, 13, 15, 20, 31)
    success, failure, total = 880_410.0, 120.0, 880_530.0
    for i in range(30):
        when = t0 + timedelta(seconds=30 * i)
        short = when > evicted
        served = 30 * 9.0
        failure += served * (0.18 if short else 0.0002)
        success += served * (0.82 if short else 0.9998)
        total += served
        labels = 'model="mistralai/Mistral-7B-Instruct-v0.3",instance="tgi-2.serving:80"'
        text = prom([
            ("tgi_request_success", "counter", "Number of successful requests", [(f"{{{labels}}}", round(success))]),
            ("tgi_request_failure", "counter", "Number of failed requests",
             [(f'{{err="overloaded",{labels}}}', round(failure))]),
            ("tgi_request_count", "counter", "Number of requests received", [(f"{{{labels}}}", round(total))]),
            ("tgi_queue_size", "gauge", "Number of requests waiting in the queue",
             [(f"{{{labels}}}", float(48 + 6 * (i - 21)) if short else float(i % 3))]),
            ("tgi_batch_current_size", "gauge", "Current batch size", [(f"{{{labels}}}", 32.0 if short else 11.0 + i % 4)]),
        ])
        write(folder, f"metrics/tgi-2-{stamp(when)}.prom", text)
    write(folder, "gpu-node-2/df.txt", "\n".join([
        "Filesystem     Type     1024-blocks       Used Available Capacity Mounted on",
        "tmpfs          tmpfs       52819588       4012  52815576       1% /run",
        "/dev/nvme0n1p2 ext4      1919767448 1857140220  62627228      97% /",
        "/dev/nvme1n1   xfs       7501476528 2113019720 5388456808      29% /raid",
        "overlay        overlay   1919767448 1857140220  62627228      97% /var/lib/kubelet/pods/5c1e2a9b-7f4d-4d2a-9e61-0a8b3c2d1e4f/volume-subpaths",
    ]) + "\n")
    events = [
        k8s_event("3b00", datetime(2025, 3, 10, 4, 12, 40), "Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 98112Ki. Container fluent-bit was using 2112Mi, which exceeds its request of 200Mi.", "Pod", "fluent-bit-7xk2c", "logging", "cpu-node-9"),
        k8s_event("3b01", pressure, "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage", "Node", "gpu-node-2", "default", "gpu-node-2"),
        k8s_event("3b02", pressure + timedelta(seconds=6), "FreeDiskSpaceFailed", "Failed to garbage collect required amount of images. Attempted to free 96118412083 bytes, but only found 0 bytes eligible to free.", "Node", "gpu-node-2", "default", "gpu-node-2"),
        k8s_event("3b03", evicted, "Evicted", "The node was low on resource: ephemeral-storage. Threshold quantity: 191976744Ki, available: 62627228Ki. Container text-generation-inference was using 61238112Ki, which exceeds its request of 0.", "Pod", "tgi-0", "serving", "gpu-node-2"),
        k8s_event("3b04", evicted + timedelta(seconds=1), "Evicted", "The node was low on resource: ephemeral-storage. Threshold quantity: 191976744Ki, available: 62627228Ki. Container text-generation-inference was using 58120331Ki, which exceeds its request of 0.", "Pod", "tgi-1", "serving", "gpu-node-2"),
        k8s_event("3b05", evicted + timedelta(seconds=40), "FailedScheduling", "0/6 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }, 5 Insufficient nvidia.com/gpu.", "Pod", "tgi-0", "serving", None, component="default-scheduler"),
    ]
    write(folder, "k8s/events.json", k8s_list(events))
    expected(folder, description="gpu-node-2's kubelet filesystem fills; its TGI replicas are evicted; the remaining replica overloads",
             captured_at="2025-03-13T15:35:00Z", workload="inference", layer="network_storage", cause="disk_full",
             host="gpu-node-2", consequences=["pod_eviction"], first_anomaly={"kind": "k8s_event", "host": "gpu-node-2"})
