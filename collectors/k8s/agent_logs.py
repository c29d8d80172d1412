"""Node-agent and device-plugin logs: kubelet, containerd, the NVIDIA device plugin, node-problem-detector,
kube-scheduler (syslog, RFC 3339, Go log and klog prefixes, logfmt fields): a line that says what
Kubernetes would is a ``k8s_event`` of that reason, an agent's other error a ``k8s_runtime_error``."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from collectors.base import Event, Row, infer_year
from collectors.framework.framing.times import syslog_time
from collectors.framework.lazy_re import lazy_regex
from collectors.k8s.events import k8s_event, parse_k8s_time
from collectors.k8s.lines import LineState

_GO_LOG = lazy_regex(r"^(?P<d>\d{4}/\d\d/\d\d \d\d:\d\d:\d\d)(?:\.\d+)?\s+(?P<msg>.*)$")
_KLOG = lazy_regex(r"^(?P<lvl>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<clock>\d\d:\d\d:\d\d(?:\.\d+)?)\s+\d+\s+"
                   r"(?P<src>[\w./-]+:\d+)\]\s*(?P<msg>.*)$")
_SYSLOG = lazy_regex(r"^(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)(?:\.\d+)?\s+"
                     r"(?P<host>\S+)\s+(?P<prog>[\w./-]+?)(?:\[\d+\])?:\s*(?P<msg>.*)$")
_RFC3339_SYSLOG = lazy_regex(r"^(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d))\s+(?P<host>\S+)\s+"
                             r"(?P<prog>[\w./-]+?)(?:\[\d+\])?:\s*(?P<msg>.*)$")
_LOGFMT = lazy_regex(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
_NO_FIT = lazy_regex(r'"Unable to schedule pod; no fit; waiting".*?\berr="((?:[^"\\]|\\.)*)"')
_EVENT_OCCURRED = lazy_regex(r'"Event occurred".*?\breason="(\w+)"')
_NPD_STATUS = lazy_regex(r"New status generated: &\{Source:(?P<source>[\w-]+) Events:\[\{Severity:\w+ "
                         r"Timestamp:.*? Reason:(?P<reason>\w+) Message:(?P<message>.*?)\}")
_AGENTS = ("kubelet", "containerd", "dockerd", "crio", "k3s", "k3s-agent", "rke2", "nvidia-device-plugin",
           "nvidia-container-runtime", "nvidia-container-toolkit", "gpu-operator", "gpu-feature-discovery",
           "node-problem-detector", "kube-scheduler")


class AgentLines(LineState):
    """Reads one node-agent log line."""

    def _log_line(self, n: int, line: str) -> list[Row] | None:
        ts, origin, host, prog, msg, raw = None, "iso", None, None, line, None
        if (m := _RFC3339_SYSLOG.match(line)) is not None:
            ts, host, prog, msg, raw = parse_k8s_time(m.group("ts")), m.group("host"), m.group("prog"), \
                m.group("msg"), m.group("ts")
        elif (m := _SYSLOG.match(line)) is not None:
            ts, origin, raw = self._syslog_time(m), "syslog_noyear", line[:m.start("host")].strip()
            host, prog, msg = m.group("host"), m.group("prog"), m.group("msg")
        elif (m := _GO_LOG.match(line)) is not None:
            raw, msg = m.group("d"), m.group("msg")
            ts = datetime.strptime(raw, "%Y/%m/%d %H:%M:%S").replace(tzinfo=timezone.utc)
        level = None
        if (k := _KLOG.match(msg)) is not None:
            level = {"I": "info", "W": "warning", "E": "error", "F": "fatal"}[k.group("lvl")]
            if ts is None:
                ts, origin, raw = self._klog_time(k), "glog_noyear", msg[:21]
            msg = k.group("msg")
        fields = dict((key, value.strip('"').replace('\\"', '"')) for key, value in _LOGFMT.findall(msg)) \
            if "level=" in msg or "msg=" in msg else {}
        if fields:
            level = fields.get("level", level)
            if ts is None and (when := parse_k8s_time(fields.get("time"))) is not None:
                ts, raw = when, fields.get("time")
        if ts is None and prog is None:
            return None
        if ts is not None:
            self.last_ts = ts
        component = (prog or "").lower() or None
        event = self._agent_message(n, msg, fields, level, component, host)
        if event is None:
            return []
        event.ts, event.ts_origin, event.ts_raw = ts, origin if ts else "none", raw
        event.host = event.host or host
        return [event]

    def _syslog_time(self, m: re.Match[str]) -> datetime | None:
        return syslog_time(m.group("mon"), m.group("day"), m.group("clock"), self.ctx.reference_for(m.group("host")))

    def _klog_time(self, k: re.Match[str]) -> datetime | None:
        month, day = int(k.group("mm")), int(k.group("dd"))
        year, _ = infer_year(month, day, self.ctx.reference_for(self.ctx.host))
        clock = k.group("clock")[:15]
        try:
            return datetime.strptime(f"{year}-{month:02d}-{day:02d} {clock}",
                                     "%Y-%m-%d %H:%M:%S.%f" if "." in clock else "%Y-%m-%d %H:%M:%S"
                                     ).replace(tzinfo=timezone.utc)
        except ValueError:
            return None

    def _agent_message(self, n: int, msg: str, fields: dict[str, str], level: str | None, component: str | None,
                       host: str | None) -> Event | None:
        text = fields.get("msg") or msg
        detail = fields.get("error") or fields.get("err") or ""
        both = f"{text} {detail}"
        pod = re.search(r'pod="?([\w.-]+/[\w.-]+)"?', msg)
        container = re.search(r'container(?:Name)?="?([\w.-]+)"?', msg)
        common = {"component": component, "object": f"Pod/{pod.group(1).split('/')[1]}" if pod else None,
                  "namespace": pod.group(1).split("/")[0] if pod else None,
                  "container": container.group(1) if container else None, "node": host}
        if (ev := _EVENT_OCCURRED.search(msg)) is not None:
            # client-go's event recorder logs every event it sends (kubelet, scheduler, controllers)
            logged = dict((key, value.strip('"').replace('\\"', '"')) for key, value in _LOGFMT.findall(msg))
            obj = logged.get("object", "")
            return k8s_event(logged.get("reason") or ev.group(1), logged.get("message", ""), ts=None, line=n,
                             component=component, type=logged.get("type"), node=host,
                             object=f"{logged.get('kind', 'Pod')}/{obj.split('/')[-1]}" if obj else None,
                             namespace=obj.split("/")[0] if "/" in obj else None)
        if (npd := _NPD_STATUS.search(msg)) is not None:
            # node-problem-detector's "New status generated": its problem reason and the matched line
            return k8s_event(npd.group("reason"), npd.group("message"), ts=None, line=n,
                             component="node-problem-detector", node=host, which=npd.group("source"))
        if (sched := _NO_FIT.search(msg)) is not None:
            # kube-scheduler's own log of a pod it could not place: the FailedScheduling message is err="..."
            return k8s_event("FailedScheduling", sched.group(1).replace('\\"', '"'), ts=None, line=n, **common)
        if re.search(r"XidCriticalError|\bXid[=: ]", both):
            return k8s_event("XidCriticalError", msg, ts=None, line=n, **common)
        if re.search(r"device marked unhealthy|marking device \S+ as unhealthy|device \S+ is unhealthy", both, re.I):
            res = re.search(r"'([\w./-]+)' device marked unhealthy", both)
            return k8s_event("DeviceUnhealthy", msg, ts=None, line=n, resource=res.group(1) if res else None, **common)
        rules = (("CrashLoopBackOff", r"CrashLoopBackOff"), ("BackOff", r"[Bb]ack-off restarting failed container"),
                 ("Unhealthy", r"Probe failed|probe failed"), ("SystemOOM", r"System OOM encountered"),
                 ("OOMKilled", r"OOMKilled"),
                 ("Evicted", r"[Ee]vict(?:ed|ing) pod|pods? evicted|pod is evicted successfully"),
                 ("EvictionThresholdMet", r"[Ee]viction manager: "),
                 ("Killing", r"Killing container with a grace period|Killing unwanted pod"),
                 ("NodeNotReady", r"Node became not ready|NodeNotReady"), ("FailedScheduling", r"FailedScheduling"))
        for reason, pattern in rules:
            if re.search(pattern, both):
                return k8s_event(reason, msg, ts=None, line=n, **common)
        if level in ("error", "fatal", "panic"):
            attrs = {k: v for k, v in {"component": component, "level": level, "message": text[:2000],
                                       "error": detail[:2000] or None, "node": host}.items() if v}
            return Event(kind="k8s_runtime_error", message=f"{component or 'agent'}: {text[:300]}"
                         + (f": {detail[:300]}" if detail else ""), severity="error", attrs=attrs, line=n)
        return None


def agent_lines(lines: list[str]) -> int:
    """How many of a head's lines are a syslog line of a node agent (the sniffer's test)."""
    return sum(1 for line in lines if (m := _SYSLOG.match(line) or _RFC3339_SYSLOG.match(line))
               and m.group("prog").lower() in _AGENTS)
