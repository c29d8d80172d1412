"""The Kubernetes way to capture many nodes: a Job with one pod per selected node, each running
``gpuwb capture`` on its node and writing its bundle to a shared volume, and a small pod that mounts
that volume so ``kubectl cp`` can fetch the bundles (it needs a running container with ``tar``).

The capture pod gets what capture reads and nothing more: the host's process table (``hostPID``) and
network namespace (``hostNetwork``: the bundle is filed under the node's own host name and sees its
NICs), read-only mounts of ``/dev/kmsg``, ``/var/log`` and the NCCL log folders, and two
capabilities, ``SYSLOG`` (the kernel ring buffer) and ``DAC_READ_SEARCH`` (logs owned by other
users), all others dropped; not privileged, no privilege escalation, a read-only root file system. It
tolerates every taint (a GPU node that failed is usually tainted or cordoned) and requests no GPU (the
hung job holds them all); a pod that cannot start on a down node leaves its node without a bundle,
which ``gpuwb cluster collect`` reports as ``no answer``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from workbench.errors import UsageError
from workbench.times import iso

BUNDLES = "/bundles"
"""Where the shared volume is mounted in every pod."""
LABEL = "app.kubernetes.io/name"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_NAME = 52
"""A Job's name becomes its pods' label values and name prefix: Kubernetes recommends 52 characters at most
for an Indexed Job, whose pod names add the index and a suffix."""


@dataclass
class ManifestOptions:
    """What ``gpuwb cluster manifest`` was asked for."""

    nodes: list[str]
    image: str
    name: str
    namespace: str = "gpuwb"
    claim: str = "gpuwb-bundles"
    claim_size: str | None = None
    storage_class: str | None = None
    since: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    safe: bool = True
    nccl_dirs: list[str] = field(default_factory=list)
    deadline_s: int = 900


def default_name(now: datetime | None = None) -> str:
    return f"gpuwb-capture-{(now or datetime.now(timezone.utc)):%Y%m%d-%H%M%S}"


def check(options: ManifestOptions) -> None:
    """Names Kubernetes would refuse are refused here, with the option that carries them."""
    if not _DNS_LABEL.match(options.name) or len(options.name) > MAX_NAME:
        raise UsageError(f"--name {options.name!r}: lower-case letters, digits and '-', at most {MAX_NAME}")
    for what, value in (("--namespace", options.namespace), ("--claim", options.claim)):
        if not _DNS_LABEL.match(value) or len(value) > 63:
            raise UsageError(f"{what} {value!r}: lower-case letters, digits and '-', at most 63")
    bad = [n for n in options.nodes if not _DNS_SUBDOMAIN.match(n) or len(n) > 253]
    if bad:
        raise UsageError(f"not a Kubernetes node name: {bad[0]!r}")
    for folder in options.nccl_dirs:
        if not folder.startswith("/") or folder.rstrip("/") in ("", "/dev", "/var/log", BUNDLES, "/tmp"):
            raise UsageError(f"--nccl-log-dir {folder!r}: an absolute host folder other than /, /dev, /var/log, "
                             f"/tmp and {BUNDLES}")
    if not options.image or any(c.isspace() for c in options.image):
        raise UsageError(f"--image {options.image!r}: an image reference without spaces")


def capture_args(options: ManifestOptions) -> list[str]:
    """The container's command: ``$(NODE_NAME)`` is expanded by Kubernetes from the pod's env, not a shell."""
    argv = ["gpuwb", "capture", "-o", f"{BUNDLES}/$(NODE_NAME).duckdb", "--since",
            iso(options.since, "seconds"),
            "--title", f"{options.name}: $(NODE_NAME)"]
    if options.safe:
        argv.append("--safe")
    for folder in options.nccl_dirs:
        argv += ["--nccl-log", f"{folder.rstrip('/')}/*"]
    return argv


def capture_job(options: ManifestOptions) -> dict[str, Any]:
    """The Job: one pod per node (node affinity to the list, anti-affinity to each other), each index
    failing on its own (``backoffLimitPerIndex: 0``, Kubernetes 1.29 or later)."""
    labels = {LABEL: "gpuwb-capture", "gpuwb/capture": options.name}
    host_mounts = [("kmsg", "/dev/kmsg", "CharDevice"), ("varlog", "/var/log", "Directory")]
    host_mounts += [(f"nccl-{i}", folder.rstrip("/"), "Directory") for i, folder in enumerate(options.nccl_dirs)]
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    if not options.safe:  # NVML through the NVIDIA container runtime without requesting a GPU
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    container = {
        "name": "capture",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "command": capture_args(options),
        "env": env,
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {
            "runAsUser": 0, "privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["SYSLOG", "DAC_READ_SEARCH"]},
            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": n, "mountPath": path, "readOnly": True} for n, path, _ in host_mounts]
        + [{"name": "bundles", "mountPath": BUNDLES, "subPath": f"{options.name}/nodes"},
           {"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = {
        "restartPolicy": "Never",
        "hostPID": True,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                       "values": list(options.nodes)}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"gpuwb/capture": options.name}},
                 "topologyKey": "kubernetes.io/hostname"}]}},
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": [{"name": n, "hostPath": {"path": path, "type": kind}} for n, path, kind in host_mounts]
        + [{"name": "bundles", "persistentVolumeClaim": {"claimName": options.claim}},
           {"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": options.name, "namespace": options.namespace, "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": len(options.nodes),
            "parallelism": len(options.nodes),
            "backoffLimitPerIndex": 0,
            "activeDeadlineSeconds": options.deadline_s,
            "ttlSecondsAfterFinished": 86400,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def collect_pod(options: ManifestOptions) -> dict[str, Any]:
    """A pod that only mounts the bundles' volume, read-only, so that ``kubectl cp`` can copy them out."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{options.name}-collect", "namespace": options.namespace,
                     "labels": {LABEL: "gpuwb-collect", "gpuwb/capture": options.name}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "activeDeadlineSeconds": 86400,
            "containers": [{
                "name": "collect",
                "image": options.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sleep", "86400"],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
                "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
                                    "seccompProfile": {"type": "RuntimeDefault"}},
                "volumeMounts": [{"name": "bundles", "mountPath": BUNDLES, "readOnly": True}],
            }],
            "volumes": [{"name": "bundles", "persistentVolumeClaim": {"claimName": options.claim, "readOnly": True}}],
        },
    }


def bundle_claim(options: ManifestOptions) -> dict[str, Any]:
    """A ReadWriteMany claim every node's pod can write to (NFS, CephFS, a cloud file share)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"],
                            "resources": {"requests": {"storage": options.claim_size}}}
    if options.storage_class:
        spec["storageClassName"] = options.storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": options.claim, "namespace": options.namespace}, "spec": spec}


def manifests(options: ManifestOptions) -> list[dict[str, Any]]:
    """Every object to apply, in order: the claim when asked for, the Job, the collect pod."""
    check(options)
    return ([bundle_claim(options)] if options.claim_size else []) + [capture_job(options), collect_pod(options)]


def manifest_yaml(options: ManifestOptions) -> str:
    import yaml

    return yaml.safe_dump_all(manifests(options), sort_keys=False, default_flow_style=False)
