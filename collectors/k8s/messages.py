"""The grammar of two Kubernetes messages whose numbers decide a diagnosis.

A scheduler's FailedScheduling message counts the nodes each filter rejected ("0/8 nodes are
available: 2 Insufficient nvidia.com/gpu, 3 node(s) were unschedulable, ..."). A pod that waits
because the GPUs are taken (capacity) and one that waits because the GPU nodes are cordoned or
unreachable (a node problem someone must fix) read alike until the counts are told apart, so each
reason's count becomes an attr, and ``blocker`` names the class that rejected the most nodes.

An eviction message (kubelet's eviction manager) names the starved resource, the threshold and
what was available, and each container's use against its request: who was the victim and why.

Both layouts the scheduler has printed are read: ``0/N nodes are available: N reason, ...``
(1.10 on, with ``preemption: ...`` appended since 1.23) and the older ``No nodes are available
that match all of the following predicates:: Insufficient nvidia.com/gpu (2), ...``.
"""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex

_AVAILABLE = lazy_regex(r"(?P<avail>\d+)/(?P<total>\d+) nodes are available(?::\s*(?P<items>.*))?$", re.S)
_PREDICATES = lazy_regex(r"[Nn]o nodes are available that match all of the (?:following )?predicates:+\s*"
                         r"(?P<items>.*)$", re.S)
_ITEM_SPLIT = lazy_regex(r",\s*(?=\d+ )")
_ITEM = lazy_regex(r"^(?P<n>\d+) (?P<what>.+)$")
_OLD_ITEM = lazy_regex(r"^(?P<what>.+?)\s*\((?P<n>\d+)\)$")
_INSUFFICIENT = lazy_regex(r"^[Ii]nsufficient (?P<res>[\w./-]+)")
_TAINT = lazy_regex(r"\{(?P<key>[^:}]+):")

_CLASSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("unschedulable", re.compile(r"were unschedulable|NodeUnschedulable|CheckNodeUnschedulable|"
                                 r"node\.kubernetes\.io/unschedulable")),
    ("not_ready", re.compile(r"node\.kubernetes\.io/(?:unreachable|not-ready|network-unavailable)|"
                             r"NodeNotReady|were not ready|NodeUnderDiskPressure|had (?:memory|disk|pid) pressure|"
                             r"node\.kubernetes\.io/(?:memory|disk|pid)-pressure")),
    ("tainted", re.compile(r"taint|PodToleratesNodeTaints")),
    ("selector_mismatch", re.compile(r"didn't match|MatchNodeSelector|affinity|node selector|nodeAffinity")),
    ("volume", re.compile(r"volume|PersistentVolumeClaim|VolumeBinding", re.I)),
    ("ports", re.compile(r"free ports|PodFitsHostPorts")),
    ("too_many_pods", re.compile(r"Too many pods")),
)
"""Scheduler filter reasons by what a responder does about them; the first class that matches wins."""


def _gpu(resource: str) -> bool:
    return "gpu" in resource.lower() or resource.lower().startswith(("nvidia.com/", "amd.com/"))


def scheduling_attrs(message: str) -> dict[str, Any]:
    """The counts of a FailedScheduling message: nodes_total, nodes_available, one count per reason class.

    ``filter_reasons`` keeps every reason as printed (its count by text); ``nodes_insufficient_gpu``
    counts nodes short of a GPU resource, ``nodes_unschedulable`` cordoned ones, ``nodes_not_ready``
    those tainted unreachable/not-ready or under pressure; ``blocker`` is the class with most nodes."""
    text = message.strip()
    main, _, preemption = text.partition(" preemption:")
    attrs: dict[str, Any] = {}
    items: list[tuple[int, str]] = []
    if (m := _AVAILABLE.search(main)) is not None:
        attrs["nodes_available"], attrs["nodes_total"] = int(m.group("avail")), int(m.group("total"))
        rejected = int(m.group("total")) - int(m.group("avail"))
        for item in _ITEM_SPLIT.split((m.group("items") or "").strip().rstrip(".")):
            if (i := _ITEM.match(item.strip())) is not None:
                items.append((int(i.group("n")), i.group("what").strip().rstrip(".")))
            elif item.strip() and not items:
                # a pod-level reason (PreFilter: "pod has unbound immediate PersistentVolumeClaims") rejects every node
                items.append((rejected, item.strip().rstrip(".")))
    elif (m := _PREDICATES.search(main)) is not None:
        for item in re.split(r",\s*", m.group("items").strip().rstrip(".")):
            if (i := _OLD_ITEM.match(item.strip())) is not None:
                items.append((int(i.group("n")), i.group("what").strip()))
    else:
        return {}
    reasons: dict[str, int] = {}
    classes: dict[str, int] = {}
    for count, what in items:
        reasons[what] = reasons.get(what, 0) + count
        if (ins := _INSUFFICIENT.match(what)) is not None:
            cls = "insufficient_gpu" if _gpu(ins.group("res")) else "insufficient_other"
        else:
            cls = next((name for name, pattern in _CLASSES if pattern.search(what)), "other")
        classes[cls] = classes.get(cls, 0) + count
    if reasons:
        attrs["filter_reasons"] = reasons
    for cls, count in classes.items():
        if cls != "other":
            attrs[f"nodes_{cls}"] = count
    taints = sorted({t.group("key").strip() for _, what in items for t in _TAINT.finditer(what)})
    if taints:
        attrs["taints"] = taints
    if classes:
        attrs["blocker"] = max(classes.items(), key=lambda kv: (kv[1], kv[0] != "other"))[0]
    if preemption.strip():
        attrs["preemption"] = preemption.strip()[:500]
    return attrs


_Q = r"-?\d+(?:\.\d+)?[A-Za-z]*"
"""A Kubernetes quantity (100Mi, 91040Ki, 24068434671, 1.5G), without the sentence's full stop."""
_LOW_ON = lazy_regex(r"low on resource: (?P<res>[\w./-]+?)\.?(?:\s|$)")
_THRESHOLD = lazy_regex(rf"Threshold quantity: (?P<thr>{_Q}), available: (?P<avail>{_Q})")
_CONTAINER_USE = lazy_regex(rf"Container (?P<c>\S+) was using (?P<use>{_Q}), (?:which exceeds its request of "
                            rf"(?P<req>{_Q})|request is (?P<req2>{_Q}))")
_LOCAL_LIMIT = lazy_regex(rf"Pod ephemeral local storage usage exceeds the total limit of containers (?P<lim>{_Q})|"
                          rf"Container (?P<c>\S+) exceeded its local ephemeral storage limit \"?(?P<clim>{_Q})|"
                          rf"Usage of EmptyDir volume \"?(?P<vol>[\w.-]+?)\"? exceeds the limit \"?(?P<vlim>{_Q})")
_CONDITION = lazy_regex(r"The node had condition: \[(?P<cond>\w+)\]")
_PRESSURE = {"DiskPressure": "ephemeral-storage", "MemoryPressure": "memory", "PIDPressure": "pids"}


def eviction_attrs(message: str) -> dict[str, Any]:
    """What an eviction message says: resource, threshold and available, and the largest container's use."""
    attrs: dict[str, Any] = {}
    if (m := _LOW_ON.search(message)) is not None:
        attrs["resource"] = m.group("res")
    if (m := _THRESHOLD.search(message)) is not None:
        attrs["threshold"], attrs["available"] = m.group("thr"), m.group("avail")
    uses = list(_CONTAINER_USE.finditer(message))
    if uses:
        first = uses[0]
        attrs.update(container=first.group("c"), usage=first.group("use"),
                     request=first.group("req") or first.group("req2"))
        if len(uses) > 1:
            attrs["containers"] = [u.group("c") for u in uses]
    if (m := _LOCAL_LIMIT.search(message)) is not None:
        attrs["resource"] = "ephemeral-storage"
        attrs["limits"] = m.group("lim") or m.group("clim") or m.group("vlim")
        if m.group("c"):
            attrs["container"] = m.group("c")
        if m.group("vol"):
            attrs["volume"] = m.group("vol")
    if (m := _CONDITION.search(message)) is not None:
        attrs["which"] = m.group("cond")
        attrs.setdefault("resource", _PRESSURE.get(m.group("cond")))
    return {k: v for k, v in attrs.items() if v is not None}
