"""The Kubernetes DaemonSet ``gpuwb record --print-daemonset`` prints: one recorder per GPU node, with the
options it was given, its ring and bundles on the node (hostPath), and the log-event counter in the
node's textfile folder, where the node-exporter of the cluster reads it (docs/alerts.md).

The pod gets what the recorder reads and nothing more: ``/dev/kmsg`` (the kernel log; capability
``SYSLOG``), the folders of the ``--kernel-log`` and ``--watch`` files, read-only, and capability
``DAC_READ_SEARCH`` for logs of other users; all other capabilities dropped, not privileged, a read-only
root file system. ``--host $(NODE_NAME)`` (the downward API, expanded by Kubernetes, not a shell)
names the node in bundles and metrics, not the pod. It tolerates every taint: a node quarantined after
an incident is where the recorder matters most.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.unit import record_args
from workbench.errors import UsageError

NAME = "gpuwb-record"
LABEL = "app.kubernetes.io/name"
GPU_NODE_LABEL = "nvidia.com/gpu.present"
"""The label the NVIDIA GPU operator's feature discovery puts on GPU nodes."""


def _folder_of(pattern: str) -> str:
    """The fixed folder above a glob (``/scratch/job*/rank*.log`` -> ``/scratch``): what the pod mounts."""
    parts = []
    for part in pattern.split("/"):
        if glob.has_magic(part):
            break
        parts.append(part)
    folder = "/".join(parts) if len(parts) < len(pattern.split("/")) else os.path.dirname(pattern)
    return os.path.normpath(folder or "/")


def daemonset(config: RecorderConfig, *, image: str, namespace: str) -> dict[str, Any]:
    """The DaemonSet object."""
    if not image or any(c.isspace() for c in image):
        raise UsageError(f"--image {image!r}: an image reference without spaces")
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise UsageError(f"--namespace {namespace!r}: lower-case letters, digits and '-', at most 63")
    if not config.out.startswith("/"):
        raise UsageError(f"--out {config.out!r}: an absolute folder on the node")
    reads = sorted({_folder_of(p) for p in [*config.watch, *([config.kernel_log] if config.kernel_log else [])]})
    if any(folder in ("/", "/dev", "/proc", "/sys") for folder in reads):
        raise UsageError("a --watch or --kernel-log glob must start with a folder other than /, /dev, /proc or /sys")
    mounts: list[tuple[str, str, str, bool]] = [("state", config.out, "DirectoryOrCreate", False),
                                                ("kmsg", "/dev/kmsg", "CharDevice", True)]
    if config.textfile_dir:
        mounts.append(("textfile", config.textfile_dir, "DirectoryOrCreate", False))
    mounts += [(f"logs-{i}", folder, "Directory", True) for i, folder in enumerate(reads)]
    labels = {LABEL: NAME}
    container = {
        "name": "record",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["gpuwb", *record_args(config, host="$(NODE_NAME)")],
        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                # NVML through the NVIDIA container runtime, without requesting (and so taking) a GPU
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
        "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "100m", "memory": "256Mi"}},
        "securityContext": {
            "runAsUser": 0, "privileged": False, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["SYSLOG", "DAC_READ_SEARCH"]},
            "seccompProfile": {"type": "RuntimeDefault"}},
        "volumeMounts": [{"name": n, "mountPath": path, "readOnly": ro} for n, path, _, ro in mounts]
        + [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {GPU_NODE_LABEL: "true"},
        "tolerations": [{"operator": "Exists"}],
        "containers": [container],
        "volumes": [{"name": n, "hostPath": {"path": path, "type": kind}} for n, path, kind, _ in mounts]
        + [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }


def daemonset_yaml(config: RecorderConfig, *, image: str, namespace: str) -> str:
    import yaml

    head = ("# gpuwb flight recorder on every GPU node (gpuwb record --print-daemonset).\n"
            + (f"# The counter goes to {config.textfile_dir}/gpuwb.prom on the node: give the cluster's node-exporter\n"
               f"# that folder (hostPath) as --collector.textfile.directory (docs/alerts.md).\n"
               if config.textfile_dir else "")
            + f"# kubectl create namespace {namespace}; kubectl apply -f this file\n")
    return head + yaml.safe_dump(daemonset(config, image=image, namespace=namespace), sort_keys=False,
                                 default_flow_style=False)
