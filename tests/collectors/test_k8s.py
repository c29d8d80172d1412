# ruff: noqa: E501  (recorded kubectl outputs below keep their real, long lines)
"""Kubernetes evidence: the corpus's Kubernetes files through `gpuwb ingest` + `timeline --json`, checked
against their INDEX.tsv labels; JSON/YAML/table/describe/log forms; capture with a fake runner."""

from __future__ import annotations

import argparse
import io
import json
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import k8s
from collectors.base import Artifact, Event, ParseContext, Skipped
from collectors.framework import registry
from collectors.k8s import tables as k8s_tables
from tests.collectors.test_slurm import INDEX, SCHEDULER, assert_labels, hosts_named, stated
from tests.conftest import CORPUS, ingest_timeline

K8S_FILES = [p for p in SCHEDULER
             if any(word in INDEX[p]["system"].lower() for word in ("kubernetes", "k8s", "gpu operator"))]
MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _container_label(events: list[dict], key: str, value: str) -> bool:
    """``app1_reason=Completed`` / ``app1_exit=0``: a fact about one named container."""
    name, _, what = key.rpartition("_")
    mine = [e for e in events if e["attrs"].get("container") == name]
    field = {"reason": "reason", "exit": "exit_code"}[what]
    return any(str(e["attrs"].get(field)) == value for e in mine)


CHECKS = {
    "xid": lambda ev, v: any(e["attrs"].get("xid") == int(v) for e in ev),
    "reason": lambda ev, v: any(e["attrs"].get("reason") == v for e in ev) or stated(v, ev),
    "event": lambda ev, v: any(e["attrs"].get("reason") == v for e in ev),
    "state": lambda ev, v: any(e["attrs"].get("state") == v for e in ev),
    "last_state": lambda ev, v: any(e["attrs"].get("which") == "last_state" and e["attrs"].get("state") == v
                                    for e in ev),
    "last_reason": lambda ev, v: any(e["attrs"].get("which") == "last_state" and e["attrs"].get("reason") == v
                                     for e in ev),
    "exit_code": lambda ev, v: any(e["attrs"].get("exit_code") == int(v) for e in ev),
    "restart_count": lambda ev, v: any(e["attrs"].get("restart_count") == int(v) for e in ev),
    "restarts": lambda ev, v: any(e["attrs"].get("restarts") == int(v) for e in ev),
    "container": lambda ev, v: any(e["attrs"].get("container") == v for e in ev),
    "init_container": lambda ev, v: any(e["attrs"].get("container") == v and e["attrs"].get("init_container")
                                        for e in ev),
    "pod": lambda ev, v: any(e["attrs"].get("object") == f"Pod/{v}" for e in ev),
    "node": hosts_named,
    "type": lambda ev, v: any(e["attrs"].get("type") == v for e in ev),
    "app1_reason": lambda ev, v: _container_label(ev, "app1_reason", v),
    "app1_exit": lambda ev, v: _container_label(ev, "app1_exit", v),
}


def test_the_corpus_has_kubernetes_files():
    assert len(K8S_FILES) >= 5


@pytest.mark.parametrize("rel", K8S_FILES)
def test_corpus_file_matches_its_labels(rel, bundle_path):
    events = [e for e in ingest_timeline(bundle_path, CORPUS / rel) if e["source"] == "k8s"]
    assert events, f"{rel}: no Kubernetes events"
    parsed = [e for e in events if e["kind"] in ("k8s_event", "k8s_runtime_error")]
    recognised = [e for e in events if e not in parsed]  # the signature catalog's reading of a known message
    assert all(e["layer"] == "scheduling" for e in parsed)
    assert all(e["artifact"] and any(p["line"] == e["line"] for p in parsed) for e in recognised)
    assert_labels(rel, parsed, CHECKS)


def test_corpus_files_are_sniffed_as_kubernetes():
    for rel in K8S_FILES:
        head = (CORPUS / rel).read_text(errors="replace")[:65536]
        found = registry.sniff(rel, head)
        assert found is not None and found[1].NAME == "k8s", rel


def test_describe_fragment_with_containerd_line(bundle_path):
    rel = "scheduler/k8s_122256_terminated_137_error_kubelet_containerd_syslog.log"
    events = ingest_timeline(bundle_path, CORPUS / rel)
    term = next(e for e in events if e["kind"] == "k8s_event")
    assert term["attrs"]["reason"] == "Error" and term["attrs"]["exit_code"] == 137
    assert term["attrs"]["container"] == "wk64c" and term["attrs"]["which"] == "last_state"
    # Finished: Mon, 13 Nov 2023 03:50:55 +0100 -> UTC
    assert term["ts"].startswith("2023-11-13T02:50:55") and not term["ts_approx"]
    runtime = next(e for e in events if e["kind"] == "k8s_runtime_error")
    assert runtime["host"] == "worker-pool4-j7f0skum-pccc-377-3" and runtime["attrs"]["component"] == "containerd"
    assert runtime["ts"].startswith("2023-11-13T02:50:55.2016")


def test_device_plugin_xid_marks_the_gpu(bundle_path):
    rel = "scheduler/k8s-device-plugin_189_xid69_device_unhealthy.log"
    events = ingest_timeline(bundle_path, CORPUS / rel)
    xid = next(e for e in events if e["attrs"].get("reason") == "XidCriticalError")
    assert xid["attrs"]["xid"] == 69 and xid["severity"] == "error"
    assert xid["attrs"]["gpu_uuid"] == "GPU-7540a9b3-eeb9-1214-1526-f93c9ea826a8"
    same_line = [e for e in events if e["line"] == xid["line"] and e["kind"] == "xid"]
    assert [e["attrs"]["xid"] for e in same_line] == [69], "the catalog reads the Xid the device plugin reports"
    unhealthy = next(e for e in events if e["attrs"].get("reason") == "DeviceUnhealthy")
    assert unhealthy["attrs"]["resource"] == "nvidia.com/gpu"


def test_events_table_ages_are_anchored_on_the_file_mtime(bundle_path, tmp_path):
    rel = "scheduler/k8s_91600_evicted_ephemeral_storage_events.txt"
    copy = tmp_path / "events.txt"
    copy.write_bytes((CORPUS / rel).read_bytes())
    stamp = datetime(2020, 5, 30, 10, 0, tzinfo=timezone.utc).timestamp()
    import os

    os.utime(copy, (stamp, stamp))
    events = ingest_timeline(bundle_path, copy)
    evicted = next(e for e in events if e["attrs"]["reason"] == "Evicted")
    assert evicted["ts"].startswith("2020-05-30T09:42:00") and evicted["ts_approx"]
    assert evicted["host"] == "mgt04" and evicted["attrs"]["resource"] == "ephemeral-storage"
    assert (evicted["attrs"]["usage"], evicted["attrs"]["request"]) == ("92Ki", "0")
    killing = next(e for e in events if e["attrs"]["reason"] == "Killing")
    assert killing["attrs"]["count"] == 2 and killing["attrs"]["container"] == "calico-node"


# ============================================================== structured documents
EVENTS_JSON = json.dumps({"apiVersion": "v1", "kind": "List", "items": [
    {"apiVersion": "v1", "kind": "Event", "count": 7, "type": "Warning", "reason": "FailedScheduling",
     "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
                "4 No preemption victims found for incoming pod.",
     "involvedObject": {"kind": "Pod", "name": "trainer-0", "namespace": "ml"},
     "metadata": {"name": "trainer-0.17a", "namespace": "ml", "creationTimestamp": "2024-03-01T10:00:00Z"},
     "firstTimestamp": "2024-03-01T10:00:00Z", "lastTimestamp": "2024-03-01T10:05:00Z",
     "source": {"component": "default-scheduler"}},
    {"apiVersion": "v1", "kind": "Event", "count": 1, "type": "Warning", "reason": "OOMKilling",
     "message": "Memory cgroup out of memory: Killed process 4242 (python)",
     "involvedObject": {"kind": "Node", "name": "gpu-node-07"},
     "metadata": {"name": "gpu-node-07.17b", "namespace": "default"},
     "lastTimestamp": "2024-03-01T10:06:00Z", "source": {"component": "kernel-monitor", "host": "gpu-node-07"}},
    {"apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "SuccessfulRescale",
     "message": "New size: 6; reason: cpu resource utilization (percentage of request) above target",
     "involvedObject": {"kind": "HorizontalPodAutoscaler", "name": "vllm", "namespace": "serve"},
     "metadata": {"name": "vllm.17c", "namespace": "serve"}, "eventTime": "2024-03-01T10:07:00.123456Z",
     "reportingComponent": "horizontal-pod-autoscaler"},
    {"apiVersion": "v1", "kind": "Event", "type": "Normal", "reason": "Killing",
     "message": "Stopping container vllm", "count": 1,
     "involvedObject": {"kind": "Pod", "name": "vllm-abc", "namespace": "serve",
                        "fieldPath": "spec.containers{vllm}"},
     "metadata": {"name": "vllm-abc.17d"}, "lastTimestamp": "2024-03-01T10:08:00Z",
     "source": {"component": "kubelet", "host": "gpu-node-02"}},
]})
POD_JSON = json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "trainer-1", "namespace": "ml"},
                       "spec": {"nodeName": "gpu-node-03", "containers": [
                           {"name": "pytorch", "resources": {"limits": {"memory": "40Gi", "nvidia.com/gpu": "8"}}}]},
                       "status": {"phase": "Running", "containerStatuses": [
                           {"name": "pytorch", "restartCount": 3,
                            "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                  "message": "back-off 5m0s restarting failed container=pytorch"}},
                            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                                         "startedAt": "2024-03-01T09:58:00Z",
                                                         "finishedAt": "2024-03-01T10:01:02Z"}}}]}})
EVICTED_POD = {"kind": "Pod", "metadata": {"name": "batch-7", "namespace": "ml"}, "spec": {"nodeName": "gpu-node-04"},
               "status": {"phase": "Failed", "reason": "Evicted",
                          "message": "The node was low on resource: memory. Threshold quantity: 100Mi, available: "
                                     "80Mi. Container worker was using 30Gi, which exceeds its request of 8Gi.",
                          "conditions": [{"type": "Ready", "status": "False",
                                          "lastTransitionTime": "2024-03-01T11:00:00Z"}]}}
PENDING_POD = {"kind": "Pod", "metadata": {"name": "big-job", "namespace": "ml"}, "spec": {},
               "status": {"phase": "Pending", "conditions": [
                   {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "lastTransitionTime": "2024-03-01T12:00:00Z",
                    "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}]}}
NODES_JSON = json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [
    {"kind": "Node", "metadata": {"name": "gpu-node-05"}, "spec": {"unschedulable": True},
     "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "7"},
                "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                "message": "Kubelet stopped posting node status.",
                                "lastTransitionTime": "2024-03-01T13:00:00Z"},
                               {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"}]}},
    {"kind": "Node", "metadata": {"name": "gpu-node-06"},
     "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}]})


def parse(kind: str, text: str | bytes, mtime: datetime | None = MTIME) -> list:
    data = text.encode() if isinstance(text, str) else text
    return list(k8s.parse(kind, io.BytesIO(data), ParseContext(host="capture-host", mtime=mtime)))


def events_of(rows: list) -> list[Event]:
    return [r for r in rows if isinstance(r, Event)]


def by_reason(events: list[Event]) -> dict[str, Event]:
    return {e.attrs["reason"]: e for e in events}


def test_events_json():
    assert k8s.sniff("events.json", EVENTS_JSON) == {"k8s_events_json": 90}
    found = by_reason(events_of(parse("k8s_events_json", EVENTS_JSON)))
    sched = found["FailedScheduling"]
    assert sched.attrs["insufficient"] == ["nvidia.com/gpu"] and sched.attrs["count"] == 7
    assert sched.attrs["object"] == "Pod/trainer-0" and sched.attrs["namespace"] == "ml"
    assert sched.ts == datetime(2024, 3, 1, 10, 0, tzinfo=timezone.utc) and sched.severity == "warning"
    assert sched.attrs["last_seen"] == "2024-03-01T10:05:00Z"
    assert found["OOMKilling"].host == "gpu-node-07"
    rescale = found["SuccessfulRescale"]
    assert rescale.attrs["object"] == "HorizontalPodAutoscaler/vllm"
    assert rescale.ts == datetime(2024, 3, 1, 10, 7, 0, 123456, tzinfo=timezone.utc)
    assert found["Killing"].attrs["container"] == "vllm" and found["Killing"].host == "gpu-node-02"


def test_pod_json_oomkilled_with_limits_and_crashloop():
    assert k8s.sniff("pod.json", POD_JSON) == {"k8s_pods_json": 90}
    found = by_reason(events_of(parse("k8s_pods_json", POD_JSON)))
    oom = found["OOMKilled"]
    assert oom.attrs["exit_code"] == 137 and oom.attrs["container"] == "pytorch"
    assert oom.attrs["limits"] == {"memory": "40Gi", "nvidia.com/gpu": "8"} and oom.attrs["restart_count"] == 3
    assert oom.ts == datetime(2024, 3, 1, 10, 1, 2, tzinfo=timezone.utc) and oom.host == "gpu-node-03"
    crash = found["CrashLoopBackOff"]
    assert crash.ts == MTIME and crash.ts_approx and crash.severity == "error"


def test_pod_list_with_evicted_and_unschedulable_pods():
    doc = json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [EVICTED_POD, PENDING_POD]})
    found = by_reason(events_of(parse("k8s_pods_json", doc)))
    evicted = found["Evicted"]
    assert evicted.attrs["resource"] == "memory" and evicted.attrs["container"] == "worker"
    assert evicted.host == "gpu-node-04" and evicted.ts == datetime(2024, 3, 1, 11, tzinfo=timezone.utc)
    sched = found["FailedScheduling"]
    assert sched.attrs["insufficient"] == ["nvidia.com/gpu"] and sched.attrs["object"] == "Pod/big-job"


def test_nodes_json_not_ready_and_cordoned():
    events = events_of(parse("k8s_nodes_json", NODES_JSON))
    assert [(e.host, e.attrs["reason"]) for e in events] == [("gpu-node-05", "NodeNotReady"),
                                                              ("gpu-node-05", "NodeNotSchedulable")]
    assert events[0].attrs["condition_reason"] == "NodeStatusUnknown"
    assert (events[0].attrs["gpu_capacity"], events[0].attrs["gpu_allocatable"]) == ("8", "7")


def test_yaml_documents():
    yaml = pytest.importorskip("yaml")
    text = yaml.safe_dump(json.loads(POD_JSON)) + "---\n" + yaml.safe_dump(EVICTED_POD | {"apiVersion": "v1"})
    assert k8s.sniff("pod.yaml", text) == {"k8s_yaml": 85}
    assert {"OOMKilled", "CrashLoopBackOff", "Evicted"} <= set(by_reason(events_of(parse("k8s_yaml", text))))


def test_broken_json_is_one_skip():
    rows = parse("k8s_events_json", EVENTS_JSON[:300])
    assert len(rows) == 1 and isinstance(rows[0], Skipped)


# ============================================================== text forms
EVENTS_TABLE = """\
NAMESPACE   LAST SEEN   TYPE      REASON              OBJECT                                MESSAGE
ml          2m          Warning   FailedScheduling    pod/trainer-0                         0/4 nodes are available: 4 Insufficient nvidia.com/gpu.
ml          45s         Normal    Preempted           pod/low-prio-7                        Preempted by ml/trainer-0 on node gpu-node-01
ml          50s         Normal    Preempting          pod/trainer-0                         Preempting pod low-prio-7
serve       3m10s       Normal    SuccessfulRescale   horizontalpodautoscaler/vllm          New size: 6; reason: above target
serve       10m         Warning   Unhealthy           pod/vllm-abc                          Readiness probe failed: HTTP probe failed with statuscode: 503
serve       12m         Warning   BackOff             pod/vllm-def                          Back-off restarting failed container vllm in pod vllm-def_serve(1a2b)
default     61s         Warning   NodeNotReady        node/gpu-node-05                      Node gpu-node-05 status is now: NodeNotReady
"""
DESCRIBE = """\
Name:             trainer-1
Namespace:        ml
Node:             gpu-node-03/10.0.0.13
Status:           Running
Containers:
  pytorch:
    Image:          nvcr.io/nvidia/pytorch:24.01-py3
    State:          Running
      Started:      Fri, 01 Mar 2024 10:01:10 +0000
    Last State:     Terminated
      Reason:       OOMKilled
      Exit Code:    137
      Started:      Fri, 01 Mar 2024 09:58:00 +0000
      Finished:     Fri, 01 Mar 2024 10:01:02 +0000
    Ready:          True
    Restart Count:  3
    Limits:
      memory:          40Gi
      nvidia.com/gpu:  8
    Requests:
      memory:          40Gi
      nvidia.com/gpu:  8
    Environment:    <none>
Conditions:
  Type              Status
  Ready             True
Events:
  Type     Reason     Age                  From               Message
  ----     ------     ----                 ----               -------
  Warning  BackOff    2m (x4 over 6m)      kubelet            Back-off restarting failed container pytorch in pod trainer-1_ml(9f8e)
  Normal   Pulled     3m                   kubelet            Container image "nvcr.io/nvidia/pytorch:24.01-py3" already present on machine
"""
KUBELET = """\
Mar  1 10:02:03 gpu-node-03 kubelet[2211]: E0301 10:02:03.123456    2211 pod_workers.go:1298] "Error syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"pytorch\\" with CrashLoopBackOff: \\"back-off 5m0s restarting failed container=pytorch pod=trainer-1_ml(9f8e)\\"" pod="ml/trainer-1" podUID=9f8e
Mar  1 10:02:09 gpu-node-03 kubelet[2211]: I0301 10:02:09.000001    2211 prober.go:107] "Probe failed" probeType="Readiness" pod="serve/vllm-abc" podUID=1a2b containerName="vllm" probeResult="failure" output="HTTP probe failed with statuscode: 503"
Mar  1 10:02:10 gpu-node-03 kubelet[2211]: I0301 10:02:10.000001    2211 kubelet.go:2000] "SyncLoop (PLEG): event for pod" pod="ml/trainer-1"
Mar  1 10:02:11 gpu-node-03 containerd[900]: time="2024-03-01T10:02:11.5Z" level=info msg="StartContainer returns successfully"
I0301 10:05:00.000000       1 health.go:151] XidCriticalError: Xid=79 on Device=GPU-11111111-2222-3333-4444-555555555555; marking device as unhealthy.
"""


def test_events_table_with_namespaces():
    assert k8s.sniff("events.txt", EVENTS_TABLE) == {"k8s_events_table": 90}
    rows = parse("k8s_events_table", EVENTS_TABLE)
    assert not [r for r in rows if isinstance(r, Skipped)]
    found = by_reason(events_of(rows))
    assert set(found) == {"FailedScheduling", "Preempted", "Preempting", "SuccessfulRescale", "Unhealthy", "BackOff",
                          "NodeNotReady"}
    sched = found["FailedScheduling"]
    assert sched.ts == MTIME - timedelta(minutes=2) and sched.ts_approx and sched.ts_origin == "mtime"
    assert sched.attrs["insufficient"] == ["nvidia.com/gpu"] and sched.attrs["namespace"] == "ml"
    assert found["SuccessfulRescale"].ts == MTIME - timedelta(minutes=3, seconds=10)
    assert found["BackOff"].attrs["container"] == "vllm"
    assert found["NodeNotReady"].attrs["object"] == "node/gpu-node-05"


def test_old_tab_separated_events_table():
    text = ("FirstSeen\tLastSeen\tCount\tFrom\tSubobjectPath\tReason\tMessage\n"
            "Tue, 07 Jul 2015 12:53:51 -0700\tTue, 07 Jul 2015 12:53:51 -0700\t1\t{scheduler }\t\tscheduled\t"
            "Successfully assigned simmemleak-hra99 to kubernetes-minion-tf0f\n")
    event = events_of(parse("k8s_describe", text))[0]
    assert event.attrs["reason"] == "scheduled" and event.ts == datetime(2015, 7, 7, 19, 53, 51, tzinfo=timezone.utc)


def test_describe_pod_oomkilled_with_limits_and_events():
    scores = k8s.sniff("describe.txt", DESCRIBE)
    assert max(scores, key=scores.get) == "k8s_describe"
    rows = parse("k8s_describe", DESCRIBE)
    found = by_reason(events_of(rows))
    oom = found["OOMKilled"]
    assert oom.attrs["exit_code"] == 137 and oom.attrs["container"] == "pytorch"
    assert oom.attrs["limits"] == {"memory": "40Gi", "nvidia.com/gpu": "8"} and oom.attrs["restart_count"] == 3
    assert oom.attrs["object"] == "Pod/trainer-1" and oom.attrs["namespace"] == "ml" and oom.host == "gpu-node-03"
    assert oom.ts == datetime(2024, 3, 1, 10, 1, 2, tzinfo=timezone.utc) and not oom.ts_approx
    back = found["BackOff"]
    assert back.attrs["count"] == 4 and back.attrs["object"] == "Pod/trainer-1" and back.host == "gpu-node-03"
    assert "Pulled" in found


def test_pods_table_reports_only_unhealthy_pods():
    text = ("NAME          READY   STATUS             RESTARTS        AGE\n"
            "ok-0          1/1     Running            0               5d\n"
            "trainer-1     0/1     CrashLoopBackOff   7 (2m ago)      1h\n"
            "prep-2        0/1     Init:OOMKilled     1               3m\n")
    found = by_reason(events_of(parse("k8s_pods_table", text)))
    assert set(found) == {"CrashLoopBackOff", "OOMKilled"}
    assert found["CrashLoopBackOff"].attrs["restarts"] == 7
    assert found["OOMKilled"].attrs["init_container"] is True


def test_kubelet_and_device_plugin_lines():
    scores = k8s.sniff("kubelet.log", KUBELET)
    assert scores["kubelet_log"] >= 75
    rows = parse("kubelet_log", KUBELET)
    events = events_of(rows)
    assert [e.attrs["reason"] for e in events] == ["CrashLoopBackOff", "Unhealthy", "XidCriticalError"]
    crash = events[0]
    assert crash.host == "gpu-node-03" and crash.attrs["object"] == "Pod/trainer-1" and crash.attrs["namespace"] == "ml"
    assert crash.ts == datetime(2026, 3, 1, 10, 2, 3, tzinfo=timezone.utc)
    assert events[1].attrs["container"] == "vllm"
    assert events[2].attrs["xid"] == 79 and events[2].attrs["gpu_uuid"].startswith("GPU-1111")
    assert not [r for r in rows if isinstance(r, Skipped)]


def test_age_parsing():
    assert k8s_tables.parse_age("2m30s") == timedelta(minutes=2, seconds=30)
    assert k8s_tables.parse_age("18m (x2 over 18m)") == timedelta(minutes=18)
    assert k8s_tables.parse_age("3d4h") == timedelta(days=3, hours=4)
    assert k8s_tables.parse_age("<unknown>") is None


# ============================================================== capture
class FakeContext:
    def __init__(self, outputs: dict[str, int], options: dict | None = None, tools: set | None = None):
        self.host, self.since, self.options = "node1", None, options or {}
        self.outputs, self.tools = outputs, tools if tools is not None else {"kubectl"}
        self.argvs: list[list[str]] = []
        self.missed: list[tuple[str, str]] = []

    def which(self, name):
        return f"/usr/bin/{name}" if name in self.tools else None

    def missing(self, what, reason):
        self.missed.append((what, reason))

    def run(self, argv, *, kind, timeout=None, max_bytes=None):
        assert timeout is not None
        self.argvs.append(argv)
        code = next((c for k, c in self.outputs.items() if " ".join(argv).startswith(k)), 1)
        return Artifact(source=" ".join(argv), kind=kind, data=b"{}", info={"exit_code": code, "stderr": "x"})

    def read_file(self, path, *, kind, max_bytes=None, tail=False):
        return None


def test_capture_events_pods_nodes_for_a_namespace():
    ctx = FakeContext({"kubectl config current-context": 0, "kubectl get": 0}, options={"k8s_namespace": "ml"})
    arts = list(k8s.capture(ctx))
    assert [a.kind for a in arts] == ["k8s_events_json", "k8s_pods_json", "k8s_nodes_json"]
    assert ctx.argvs[1][:5] == ["kubectl", "get", "events", "-n", "ml"]
    assert "-A" not in ctx.argvs[1] and ctx.missed == []


def test_capture_all_namespaces_and_a_failing_command():
    ctx = FakeContext({"kubectl config current-context": 0, "kubectl get events": 0, "kubectl get pods": 0})
    arts = list(k8s.capture(ctx))
    assert "-A" in ctx.argvs[1] and len(arts) == 3
    assert ctx.missed == [("kubectl get nodes", "error: exit 1: x")]


def test_capture_without_context_or_kubectl():
    ctx = FakeContext({})
    assert list(k8s.capture(ctx)) == [] and ctx.missed == [("kubernetes", "unavailable: kubectl has no current context")]
    bare = FakeContext({}, tools=set())
    assert list(k8s.capture(bare)) == [] and bare.argvs == []


def test_capture_option_is_registered():
    parser = argparse.ArgumentParser()
    k8s.add_capture_arguments(parser)
    assert parser.parse_args(["--k8s-namespace", "ml"]).k8s_namespace == "ml"


# ============================================================== malformed input
REAL_LINES = [line for rel in K8S_FILES for line in (CORPUS / rel).read_text(errors="replace").splitlines()
              if line.strip()] + EVENTS_TABLE.splitlines() + DESCRIBE.splitlines() + KUBELET.splitlines()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.sampled_from(REAL_LINES), min_size=1, max_size=14), cuts=st.lists(st.integers(0, 150)),
       junk=st.binary(max_size=64), kind=st.sampled_from(k8s.KINDS))
def test_truncated_and_interleaved_real_lines_never_raise(lines, cuts, junk, kind):
    cut = [line[:c] if i < len(cuts) and (c := cuts[i]) < len(line) else line for i, line in enumerate(lines)]
    rows = parse(kind, "\n".join(cut).encode() + b"\n" + junk)
    for row in rows:
        assert isinstance(row, (Event, Skipped))
        if isinstance(row, Event):
            assert row.kind in ("k8s_event", "k8s_runtime_error") and row.attrs.get("reason", "x")
            assert row.ts is None or row.ts.tzinfo is not None
