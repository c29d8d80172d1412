"""Kubernetes: what the cluster did to the workload's pods and nodes, and why.

Live, when ``kubectl`` has a current context, it saves events, pods and nodes as JSON. Offline it
reads those JSON/YAML documents, ``kubectl get events``/``get pods``/``get nodes`` tables,
``kubectl describe pod`` text (container states, limits, the Events table), kubelet/containerd
log lines and NVIDIA device-plugin logs, in any mix: responders paste several into one file.

Every finding is one ``k8s_event`` whose ``reason`` is spelled as Kubernetes writes it
(OOMKilled, Evicted, FailedScheduling, BackOff, CrashLoopBackOff, Killing, Unhealthy,
NodeNotReady, SuccessfulRescale, Preempting, ...), so playbooks test one attribute whatever the
source. Where Kubernetes has no word, the emitting component's own is used: the device plugin's
``XidCriticalError`` and ``DeviceUnhealthy`` (with ``xid`` and ``gpu_uuid``). Ages in tables
(``18m``) are anchored on the file's mtime, else a dated neighbour, and marked approximate.

In a JSON or YAML document each object is read on its own: one that is not what Kubernetes writes (an
item that is not an object, ``involvedObject`` a string, a time that does not parse, ``count`` not a
number) is one counted skip and the others are read; a list cut short by kubectl's deadline, a watch
stream of objects and a YAML stream with a broken document keep every complete object
(collectors/framework/json_items.py).

Event kinds emitted here: k8s_event, and k8s_runtime_error for an error line of a node agent that
carries no Kubernetes reason; their attrs are declared in collectors/catalog/events.yaml.

One module per output, and one for what they share:

    live_capture.py  kubectl get events/pods/nodes -o json
    sniff.py         which of the outputs below a file's head is
    documents.py     JSON / YAML documents, object by object
    text.py          the text reader: each line to the part below it belongs to
    lines.py         the state those parts share
    tables.py        kubectl get events / get pods / get nodes tables
    describe.py      kubectl describe pod text
    agent_logs.py    kubelet, containerd, device-plugin, node-problem-detector, kube-scheduler logs
    messages.py      eviction and scheduling messages in detail
    events.py        the k8s_event every reader emits; Kubernetes' time spellings
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import ParseContext, Row
from collectors.k8s.documents import parse_document
from collectors.k8s.live_capture import add_capture_arguments, capture
from collectors.k8s.sniff import sniff
from collectors.k8s.text import TextParser

NAME = "k8s"
LAYER = "scheduling"
JSON_KINDS = ("k8s_events_json", "k8s_pods_json", "k8s_nodes_json", "k8s_json")
TEXT_KINDS = ("k8s_events_table", "k8s_describe", "k8s_pods_table", "kubelet_log", "gpu_device_plugin_log")
KINDS = JSON_KINDS + ("k8s_yaml",) + TEXT_KINDS
TIMEOUT = 60.0

__all__ = ["KINDS", "LAYER", "NAME", "TIMEOUT", "add_capture_arguments", "capture", "parse", "sniff"]


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind in JSON_KINDS or kind == "k8s_yaml":
        yield from parse_document(kind, stream, ctx)
    else:
        yield from TextParser(ctx).run(stream)
