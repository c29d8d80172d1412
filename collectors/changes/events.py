"""What a change is: the ``change`` event, the layer a changed thing acts on (:func:`layer_for`), and the GPU-stack
versions a package log shows installed (the ``versions.*`` host facts)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

from collectors.base import Event, HostFact, Row
from collectors.framework.lazy_re import lazy_regex

_GPU_STACK = lazy_regex(r"nvidia|cuda|cudnn|nccl|nvlink|fabricmanager|fabric-manager|tensorrt|cublas|cufft|curand"
                        r"|cusolver|cusparse|nvjpeg|npp|dcgm|datacenter-gpu-manager|gdrcopy|gdrdrv|^linux-image"
                        r"|^linux-modules|^kernel(?:-core|-modules)?$|^kmod-|gpu.?driver|rocm",
                        re.IGNORECASE)
_NET_STORAGE = lazy_regex(r"ofed|mlnx|rdma|ibverbs|infiniband|libibumad|ucx|openmpi|hpcx|nfs|lustre|beegfs|gpfs"
                          r"|weka|ceph|fuse|efa|libfabric|aws-ofi", re.IGNORECASE)
_SCHEDULING = lazy_regex(r"slurm|munge|pmix|kubelet|kubeadm|containerd|docker|cri-o|runc|nvidia-container",
                         re.IGNORECASE)


def layer_for(what: str) -> str:
    """Where a change acts (see the module docstring)."""
    if _SCHEDULING.search(what):
        return "scheduling"
    if _GPU_STACK.search(what):
        return "gpu"
    if _NET_STORAGE.search(what):
        return "network_storage"
    return "business"


def names_gpu_stack(what: str) -> bool:
    """Whether ``what`` names a GPU-stack package or component (a deploy record of one is not ``business``)."""
    return _GPU_STACK.search(what) is not None


def version_key(package: str, version: str | None) -> tuple[str, str] | None:
    """(``driver``/``cuda``/``nccl``/``cudnn``, upstream version) for a GPU-stack package, else None."""
    name = package.split(":")[0].lower()
    upstream = upstream_version(version)
    if not upstream:
        return None
    if re.match(r"^(nvidia-driver|nvidia-dkms|nvidia-utils|nvidia-headless|libnvidia-compute|nvidia-kernel-source"
                r"|nvidia-compute-utils|cuda-drivers|kmod-nvidia|nvidia-open|nvidia-kmod)", name):
        return "driver", upstream
    if m := re.match(r"^cuda(?:-toolkit|-runtime|-cudart|-libraries|-compiler|-nvcc)?-(\d+)-(\d+)$", name):
        return "cuda", f"{m.group(1)}.{m.group(2)}"
    if name in ("cuda", "cuda-toolkit"):
        return "cuda", upstream
    if re.match(r"^libnccl\d*$|^nccl$", name):
        return "nccl", upstream
    if re.match(r"^libcudnn\d*(?:-cuda-\d+)?$", name):
        return "cudnn", upstream
    if re.match(r"^(nvidia-fabricmanager|cuda-drivers-fabricmanager)", name):
        return "fabricmanager", upstream
    return None


def upstream_version(version: str | None) -> str | None:
    """``3:550.90.07-0ubuntu0.22.04.1`` -> ``550.90.07``; ``2.21.5-1+cuda12.4`` -> ``2.21.5``."""
    if not version or version in ("<none>", "-"):
        return None
    text = version.split(":", 1)[1] if re.match(r"^\d+:", version) else version
    return text.split("-", 1)[0] or None


def change_event(*, what: str, version: str | None, from_version: str | None, action: str, who: str | None,
                 via: str, ts: datetime | None, ts_origin: str, ts_raw: str | None, line: int | None,
                 host: str | None = None, layer: str | None = None, note: str | None = None,
                 approx: bool = True) -> Event:
    """One ``change`` event; ``layer`` defaults to :func:`layer_for` of ``what``. A package outside the
    GPU, network/storage and scheduler stacks is kept at severity ``debug``: a libc update is on
    record, but it is not the deploy that a ``bad_change`` hypothesis looks for."""
    if from_version and version and from_version != version:
        detail = f"{from_version} -> {version}"
    else:
        detail = version or from_version or ""
    message = f"{action} {what} {detail}".strip() + (f" by {who}" if who else "") + (f": {note}" if note else "")
    layer = layer or layer_for(what)
    attrs = {"what": what, "version": version, "from_version": from_version, "action": action, "who": who,
             "via": via}
    if note:
        attrs["note"] = note
    return Event(kind="change", message=message[:500], ts=ts, ts_origin=ts_origin if ts else "none",
                 ts_approx=bool(ts and approx), ts_raw=ts_raw, host=host, layer=layer,
                 severity="debug" if layer == "business" and via not in ("records", "yum history") else "info",
                 attrs=attrs, line=line)


class Installed:
    """The last version of each GPU-stack package a log shows, for the ``versions.*`` host facts."""

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}

    def saw(self, package: str, version: str | None) -> None:
        key = version_key(package, version)
        if key:
            self.versions[key[0]] = key[1]

    def removed(self, package: str) -> None:
        key = version_key(package, "0")
        if key:
            self.versions.pop(key[0], None)

    def facts(self) -> Iterator[Row]:
        for key, value in sorted(self.versions.items()):
            yield HostFact(f"versions.{key}", value)
