"""``kubectl describe pod`` text: the pod's name, node and status, each container's state and last state
(reason, exit code, signal, finished), limits and requests; indented or not."""

from __future__ import annotations

import re
from collections.abc import Iterator

from collectors.base import Row
from collectors.framework.lazy_re import lazy_regex
from collectors.k8s.events import k8s_event, parse_k8s_time
from collectors.k8s.lines import LineState

_DESCRIBE_KEYS = {"state", "last state", "last termination state", "reason", "exit code", "signal", "started",
                  "finished", "message", "ready", "restart count", "limits", "requests", "image", "image id",
                  "container id", "port", "ports", "host port", "host ports", "command", "args", "environment",
                  "mounts", "liveness", "readiness", "startup", "environment variables from"}
_POD_KEYS = {"name", "namespace", "node", "status", "reason", "message", "priority", "start time", "labels",
             "annotations", "ip", "ips", "controlled by", "qos class", "node-selectors", "tolerations",
             "service account", "priority class name", "runtime class name"}
_SECTION = lazy_regex(r"^(Containers|Init Containers|Ephemeral Containers|Conditions|Volumes|Events|Tolerations|"
                      r"Node-Selectors|QoS Class|Labels|Annotations):\s*(?P<rest>.*)$")


class DescribeLines(LineState):
    """Reads describe text into the pod and its containers; a container's events come out when it ends."""

    # -- kubectl describe pod
    def _describe_line(self, n: int, line: str) -> list[Row] | None:
        indent = len(line) - len(line.lstrip())
        text = line.strip()
        if text.startswith("...") or text == "<none>":
            return []
        if self.resources is not None:
            which, depth = self.resources
            m = re.match(r"^([\w./-]+):\s*(\S+)\s*$", text)
            if indent > depth and m and self.container is not None:
                self.container.setdefault(which, {})[m.group(1)] = m.group(2)
                return []
            self.resources = None
        if re.match(r"^Name:\s+\S", text) and self.container is None:
            self.base = indent  # a describe pasted with every line indented still has its top level
        top = indent <= self.base
        sec = _SECTION.match(text)
        if sec and top:
            out = list(self._flush_container())
            self.section = sec.group(1)
            return out
        m = re.match(r"^([A-Za-z][\w .-]*?):\s*(.*)$", text)
        if m is None:
            if re.fullmatch(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?", text):
                self.candidate = text
                return []
            return None
        key, value = m.group(1).lower(), m.group(2).strip()
        if top and key in _POD_KEYS:
            return self._pod_key(n, key, value)
        if not value and key not in _DESCRIBE_KEYS and re.fullmatch(r"[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?", m.group(1)):
            out = list(self._flush_container())
            self.container = {"name": m.group(1), "line": n, "init": self.section == "Init Containers" or None}
            return out
        if key not in _DESCRIBE_KEYS:
            return [] if not top else None
        if self.container is None:
            self.container = {"name": self.candidate, "line": n}
        if key in ("state", "last state", "last termination state"):
            self.block = "state" if key == "state" else "last_state"
            self.container[self.block] = {"state": value, "line": n}
        elif key in ("limits", "requests"):
            self.resources = (key, indent)
        elif key == "restart count":
            self.container["restart_count"] = int(value) if value.isdigit() else value
        elif key in ("reason", "exit code", "signal", "started", "finished", "message") and self.block:
            self.container[self.block][key] = value
        return []

    def _pod_key(self, n: int, key: str, value: str) -> list[Row]:
        if key == "name":
            out = list(self._flush_container())
            self.pod = {"name": value}
            return out
        if key == "node":
            self.pod["node"] = value.split("/")[0] if value and value != "<none>" else None
        elif key in ("namespace", "status", "message"):
            self.pod[key] = value
        elif key == "reason" and value:
            anchor, origin = self._anchor()
            return [k8s_event(value, self.pod.get("message", ""), ts=anchor, origin=origin, approx=True,
                              host=self.pod.get("node"), line=n, object=self._pod_object(),
                              namespace=self.pod.get("namespace"), phase=self.pod.get("status"))]
        return []

    def _pod_object(self) -> str | None:
        return f"Pod/{self.pod['name']}" if self.pod.get("name") else None

    def _flush_container(self) -> Iterator[Row]:
        container, self.container, self.block, self.resources = self.container, None, None, None
        if not container:
            return
        for which in ("state", "last_state"):
            block = container.get(which)
            if not block:
                continue
            state = block.get("state", "")
            reason = block.get("reason")
            common = {"container": container.get("name"), "init_container": container.get("init"),
                      "object": self._pod_object(),
                      "namespace": self.pod.get("namespace"), "limits": container.get("limits"),
                      "restart_count": container.get("restart_count"), "which": which, "state": state,
                      "node": self.pod.get("node")}
            if state == "Terminated" and reason:
                finished = parse_k8s_time(block.get("finished"))
                anchor, origin = (finished, "iso") if finished else self._anchor()
                code = block.get("exit code")
                sig = block.get("signal")
                yield k8s_event(reason, block.get("message", ""), ts=anchor, origin=origin, approx=finished is None,
                                ts_raw=block.get("finished"), host=self.pod.get("node"), line=block.get("line"),
                                exit_code=int(code) if code and code.lstrip("-").isdigit() else None,
                                signal=int(sig) if sig and sig.isdigit() else None, started=block.get("started"),
                                finished=block.get("finished"), **common)
            elif state == "Waiting" and reason:
                anchor, origin = self._anchor()
                yield k8s_event(reason, block.get("message", ""), ts=anchor, origin=origin, approx=True,
                                host=self.pod.get("node"), line=block.get("line"), **common)
