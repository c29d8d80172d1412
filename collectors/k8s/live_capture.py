"""Live capture: events, pods and nodes as JSON, when ``kubectl`` is installed and has a current context."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.base import Artifact, CaptureContext

COMMAND_TIMEOUT = 30.0


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--k8s-namespace", metavar="NS", dest="k8s_namespace",
                        help="Kubernetes namespace to collect events and pods from (default: all namespaces)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Events, pods and nodes as JSON, when kubectl is installed and pointed at a cluster."""
    if ctx.which("kubectl") is None:
        ctx.missing("kubernetes", "unavailable: kubectl not installed")
        return
    context = ctx.run(["kubectl", "config", "current-context"], kind="k8s_context", timeout=10)
    if context.info.get("exit_code") != 0:
        ctx.missing("kubernetes", "unavailable: kubectl has no current context")
        return
    namespace = ctx.options.get("k8s_namespace")
    scope = ["-n", str(namespace)] if namespace else ["-A"]
    wait = f"--request-timeout={int(COMMAND_TIMEOUT) - 5}s"
    for argv, kind in ((["kubectl", "get", "events", *scope, "-o", "json", wait], "k8s_events_json"),
                       (["kubectl", "get", "pods", *scope, "-o", "json", wait], "k8s_pods_json"),
                       (["kubectl", "get", "nodes", "-o", "json", wait], "k8s_nodes_json")):
        art = ctx.run(argv, kind=kind, timeout=COMMAND_TIMEOUT)
        if art.info.get("exit_code") != 0:
            stderr = (art.info.get("stderr") or art.info.get("error") or "").strip().splitlines()
            ctx.missing(" ".join(argv[:3]), f"error: exit {art.info.get('exit_code')}: {stderr[-1] if stderr else ''}")
        yield art
