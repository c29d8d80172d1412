"""Which Kubernetes output a file's head is: a JSON or YAML document (events, pods, nodes), a kubectl table,
``kubectl describe`` text, a device-plugin or node-agent log."""

from __future__ import annotations

import re

from collectors.k8s.agent_logs import agent_lines
from collectors.k8s.tables import table_columns

_DEVICE_PLUGIN_WORDS = ("XidCriticalError", "device marked unhealthy", "nvidia-device-plugin", "k8s-device-plugin")
"""Plain substring tests, each far cheaper than one search for all four."""


def sniff(name: str, head: str) -> dict[str, int]:
    text = head.lstrip()
    if not text:
        return {}
    if text.startswith(("{", "[")):
        if not ('"apiVersion"' in head and '"kind"' in head):
            return {}
        if re.search(r'"kind"\s*:\s*"(?:EventList|Event)"|"involvedObject"|"regarding"', head):
            return {"k8s_events_json": 90}
        if re.search(r'"kind"\s*:\s*"(?:PodList|Pod)"|"containerStatuses"', head):
            return {"k8s_pods_json": 90}
        if re.search(r'"kind"\s*:\s*"(?:NodeList|Node)"', head):
            return {"k8s_nodes_json": 90}
        return {"k8s_json": 70}
    if "apiVersion:" in head and re.search(r"^-?\s*apiVersion:\s*\S+", head, re.M) \
            and re.search(r"^\s*kind:\s*\w+", head, re.M):
        return {"k8s_yaml": 85}
    lines = [line for line in head.splitlines()[:300] if line.strip()]
    scores: dict[str, int] = {}
    table_head = "\n".join(lines[:60]).upper()  # both tables below need REASON or RESTARTS: one test, not one per line
    for line in lines[:60] if "REASON" in table_head or "RESTARTS" in table_head else ():
        cols = {c for c, _ in table_columns(line)}
        if {"LAST SEEN", "REASON"} <= cols or {"LASTSEEN", "REASON"} <= cols:
            scores["k8s_events_table"] = 90
        elif {"NAME", "READY", "STATUS", "RESTARTS"} <= cols:
            scores["k8s_pods_table"] = 85
    describe = sum(1 for line in lines if re.match(
        r"^\s*(?:(?:Last State|Exit Code|Restart Count|Init Containers|Containers|Events|Controlled By|QoS Class):|"
        r"(?:Last )?State:\s+(?:Waiting|Running|Terminated)\s*$|Reason:\s+[A-Z]\w+\s*$)", line))
    if describe >= 2 or ("Reason" in head and re.search(r"^\s*Type\s+Reason\s+Age\s+From\s+Message", head, re.M)):
        scores["k8s_describe"] = max(scores.get("k8s_describe", 0), 90 if describe >= 3 else 85)
    if any(word in head for word in _DEVICE_PLUGIN_WORDS):
        scores["gpu_device_plugin_log"] = 80
    agents = agent_lines(lines)
    if agents:
        scores["kubelet_log"] = 75 if agents * 2 >= len(lines) else 40
    return scores
