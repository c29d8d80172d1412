# ruff: noqa: E501  (real scheduler and kubelet messages keep their long lines)
"""FailedScheduling counts and eviction details, from messages as public threads pasted them: a pod
waiting on taken GPUs is told apart from one waiting on cordoned or unreachable GPU nodes."""

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors import k8s
from collectors.base import Event, ParseContext
from collectors.k8s.messages import eviction_attrs, scheduling_attrs

MTIME = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def _events(kind: str, text: str) -> list[Event]:
    ctx = ParseContext(host=None, mtime=MTIME)
    return [r for r in k8s.parse(kind, io.BytesIO(text.encode()), ctx) if isinstance(r, Event)]


def test_insufficient_gpus_and_cordoned_nodes_are_counted_apart():
    # https://github.com/NVIDIA/k8s-device-plugin/issues/119
    a = scheduling_attrs("0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable.")
    assert (a["nodes_total"], a["nodes_available"]) == (2, 0)
    assert a["nodes_insufficient_gpu"] == 1 and a["nodes_unschedulable"] == 1
    assert a["filter_reasons"] == {"Insufficient nvidia.com/gpu": 1, "node(s) were unschedulable": 1}


def test_the_reason_rejecting_most_nodes_is_the_blocker():
    # https://github.com/NVIDIA/k8s-device-plugin/issues/283
    a = scheduling_attrs("0/6 nodes are available: 3 node(s) didn't match node selector, 6 Insufficient nvidia.com/gpu.")
    assert a["blocker"] == "insufficient_gpu" and a["nodes_selector_mismatch"] == 3
    cordoned = scheduling_attrs("0/8 nodes are available: 2 Insufficient nvidia.com/gpu, 3 node(s) had untolerated "
                                "taint {node.kubernetes.io/unreachable: }, 3 node(s) were unschedulable. preemption: "
                                "0/8 nodes are available: 2 No preemption victims found for incoming pod, 6 "
                                "Preemption is not helpful for scheduling.")
    assert cordoned["nodes_not_ready"] == 3 and cordoned["nodes_unschedulable"] == 3
    assert cordoned["taints"] == ["node.kubernetes.io/unreachable"]
    assert cordoned["preemption"].startswith("0/8 nodes are available: 2 No preemption victims")
    assert cordoned["nodes_insufficient_gpu"] == 2 and cordoned["blocker"] != "insufficient_gpu"


def test_the_predicates_layout_before_kubernetes_1_10():
    # https://github.com/kubernetes/kubernetes/issues/45024 layout: "No nodes are available that match all of the following predicates"
    a = scheduling_attrs("No nodes are available that match all of the following predicates:: Insufficient "
                         "alpha.kubernetes.io/nvidia-gpu (3), PodToleratesNodeTaints (1).")
    assert a["nodes_insufficient_gpu"] == 3 and a["nodes_tainted"] == 1 and "nodes_total" not in a


def test_a_message_without_counts_gives_nothing():
    assert scheduling_attrs("pod has unbound immediate PersistentVolumeClaims") == {}


def test_eviction_threshold_and_the_largest_consumer():
    # https://github.com/sustainable-computing-io/susql-operator/issues/140
    a = eviction_attrs("The node was low on resource: ephemeral-storage. Threshold quantity: 24068434671, available: "
                       "23201836Ki. Container kube-rbac-proxy was using 8Ki, request is 0, has larger consumption of "
                       "ephemeral-storage. Container manager was using 106848Ki, request is 0, has larger consumption "
                       "of ephemeral-storage.")
    assert a["resource"] == "ephemeral-storage" and a["threshold"] == "24068434671" and a["available"] == "23201836Ki"
    assert a["containers"] == ["kube-rbac-proxy", "manager"] and a["request"] == "0"
    # https://github.com/kubernetes/kubernetes/issues/91600 (the older wording)
    old = eviction_attrs("The node was low on resource: ephemeral-storage. Container ebaogi-bff-app was using 34260Ki, "
                         "which exceeds its request of 0.")
    assert old["container"] == "ebaogi-bff-app" and old["usage"] == "34260Ki" and old["request"] == "0"


def test_local_storage_limit_and_node_condition_evictions():
    a = eviction_attrs("Pod ephemeral local storage usage exceeds the total limit of containers 1Gi.")
    assert a == {"resource": "ephemeral-storage", "limits": "1Gi"}
    # https://github.com/operate-first/apps/issues/1352
    assert eviction_attrs("Pod The node had condition: [DiskPressure]. ") == {"which": "DiskPressure",
                                                                            "resource": "ephemeral-storage"}


def test_a_describe_events_block_carries_the_counts():
    # https://github.com/NVIDIA/k8s-device-plugin/issues/119
    text = ("Events:\n"
            "  Type     Reason            Age                From               Message\n"
            "  ----     ------            ----               ----               -------\n"
            "  Warning  FailedScheduling  40s (x2 over 40s)  default-scheduler  0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable.\n")
    (event,) = [e for e in _events("k8s_describe", text) if e.attrs.get("reason") == "FailedScheduling"]
    assert event.attrs["nodes_unschedulable"] == 1 and event.attrs["nodes_insufficient_gpu"] == 1


def test_kubelet_and_scheduler_journal_lines():
    # https://github.com/kubernetes/kubernetes/blob/819ecd4dbe6afbaa4f6227d22b9c46938d48e603/pkg/kubelet/events/event.go (filled)
    text = ('Mar 02 10:15:42 gpu-node-3 kubelet[2211]: I0302 10:15:42.118421    2211 event.go:307] "Event occurred" object="ml/trainer-0" fieldPath="" kind="Pod" apiVersion="v1" type="Warning" reason="Evicted" message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 91040Ki. Container trainer was using 12Gi, request is 0, has larger consumption of memory. "\n'
            'Mar 02 10:15:43 cp-1 kube-scheduler[981]: I0302 10:15:43.000000     981 schedule_one.go:1004] "Unable to schedule pod; no fit; waiting" pod="ml/trainer-1" err="0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable."\n'
            'Mar 02 10:15:44 gpu-node-3 kubelet[2211]: I0302 10:15:44.000000    2211 eviction_manager.go:199] "Eviction manager: pods evicted, waiting for pod to be cleaned up" pods=["ml/trainer-0"]\n'
            'Mar 02 10:15:45 gpu-node-3 node-problem-detector[611]: I0302 10:15:45.000000     611 log_monitor.go:162] New status generated: &{Source:kernel-monitor Events:[{Severity:warn Timestamp:2026-03-02 10:15:45 +0000 UTC Reason:TaskHung Message:task python:48211 blocked for more than 120 seconds.}] Conditions:[]}\n')
    evicted, sched, cleaned, npd = _events("kubelet_log", text)
    assert evicted.attrs["reason"] == "Evicted" and evicted.attrs["object"] == "Pod/trainer-0"
    assert evicted.attrs["threshold"] == "100Mi" and evicted.attrs["usage"] == "12Gi" and evicted.host == "gpu-node-3"
    assert sched.attrs["reason"] == "FailedScheduling" and sched.attrs["nodes_unschedulable"] == 1
    assert cleaned.attrs["reason"] == "Evicted"
    assert npd.attrs["reason"] == "TaskHung" and npd.attrs["which"] == "kernel-monitor"


def test_a_pod_level_reason_rejects_every_node():
    # https://github.com/akash-network/support/issues/249
    a = scheduling_attrs("0/8 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/8 "
                         "nodes are available: 8 Preemption is not helpful for scheduling..")
    assert a["nodes_volume"] == 8 and a["blocker"] == "volume" and "nodes_insufficient_gpu" not in a


# https://github.com/kubernetes/website/blob/0189ae0f6bf2a79ff2e4bfd5f9ec0da98d64c5d2/content/en/docs/tasks/debug-application-cluster/debug-application-introspection.md
OLD_EVENTS = ("  Events:\n"
              "    FirstSeen\tLastSeen\tCount\tFrom\t\t\t        SubobjectPath\tType\t\tReason\t\t\t    Message\n"
              "    ---------\t--------\t-----\t----\t\t\t        -------------\t--------\t------\t\t\t    -------\n"
              "    1m\t\t    48s\t\t    7\t    {default-scheduler }\t\t\t        Warning\t\tFailedScheduling\tpod (nginx-deployment-1370807587-fz9sd) failed to fit in any node\n")


def test_the_tab_separated_events_layout_of_old_kubectl():
    (event,) = _events("k8s_events_table", OLD_EVENTS)
    assert event.attrs["reason"] == "FailedScheduling" and event.attrs["count"] == 7
    assert event.attrs["component"] == "default-scheduler" and event.attrs["type"] == "Warning"
    assert event.attrs["message"] == "pod (nginx-deployment-1370807587-fz9sd) failed to fit in any node"
