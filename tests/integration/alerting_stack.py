"""A real alerting path on loopback: node_exporter reading a textfile folder, Prometheus scraping it (and
any extra /metrics target) and evaluating rule files, Alertmanager routing every alert at once to a webhook
receiver in the test process, which notes when each notification arrived.

Debian's prometheus, prometheus-node-exporter and prometheus-alertmanager (scripts/system-deps.sh), set up
as their documentation describes (https://prometheus.io/docs/alerting/latest/configuration/,
https://github.com/prometheus/node_exporter#textfile-collector): every daemon a child of the test process
under one temp dir, free loopback ports, Alertmanager's cluster port off, all stopped by PID. Intervals are
1 s so an alert travels in seconds; every wait is bounded and fails with the daemon's log tail.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.processes import free_port, http_get, spawn, stop_children, wait_until

INTERVAL_S = 1.0
"""Scrape and rule evaluation interval."""
READY_TIMEOUT_S = 20.0
BINARIES = {"prometheus": "prometheus", "node_exporter": "prometheus-node-exporter",
            "alertmanager": "prometheus-alertmanager"}


class StackError(RuntimeError):
    """A daemon did not come up or a bounded wait ran out; the message carries the log tail."""


def missing() -> list[str]:
    """Debian packages of the stack that are not installed."""
    packages = {"prometheus": "prometheus", "prometheus-node-exporter": "prometheus-node-exporter",
                "prometheus-alertmanager": "prometheus-alertmanager"}
    return [packages[b] for b in BINARIES.values() if shutil.which(b) is None]


@dataclass
class Notification:
    """One webhook delivery: when it arrived (time.time()) and its alerts."""

    at: float
    alerts: list[dict[str, Any]]


class _Receiver(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.notifications: list[Notification] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Hook)


class _Hook(http.server.BaseHTTPRequestHandler):
    server: _Receiver

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        at = time.time()
        try:
            alerts = json.loads(body).get("alerts", [])
        except ValueError:
            alerts = []
        with self.server.lock:
            self.server.notifications.append(Notification(at, alerts))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@dataclass
class AlertingStack:
    """The daemons under ``root`` (which must not exist yet); ``extra_targets`` are scraped too."""

    root: Path
    extra_targets: list[str] = field(default_factory=list)
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.textfile_dir, self.rules_dir = self.root / "textfile", self.root / "rules"
        self.log = self.root / "log"
        self.ports = {name: free_port() for name in BINARIES}
        self.receiver: _Receiver | None = None

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    # ----------------------------------------------------------------- start and stop
    def start(self) -> AlertingStack:
        absent = missing()
        if absent:
            raise StackError(f"not installed: {', '.join(absent)} (run scripts/system-deps.sh as root)")
        for folder in (self.textfile_dir, self.rules_dir, self.log, self.root / "prom-data", self.root / "am-data"):
            folder.mkdir(parents=True, exist_ok=True)
        try:
            self.receiver = _Receiver()
            threading.Thread(target=self.receiver.serve_forever, name="webhook", daemon=True).start()
            self._start_alertmanager()
            self._spawn("node_exporter", [BINARIES["node_exporter"],
                                          f"--web.listen-address=127.0.0.1:{self.ports['node_exporter']}",
                                          "--collector.disable-defaults", "--collector.textfile",
                                          f"--collector.textfile.directory={self.textfile_dir}"])
            self._start_prometheus()
            self.wait("alertmanager", lambda: self.get(f"{self.url('alertmanager')}/-/ready") is not None)
            self.wait("prometheus", lambda: self.get(f"{self.url('prometheus')}/-/ready") is not None)
            self.wait_up("node")
            self.wait("prometheus", self._notifier_ready, what="Alertmanager discovered")
        except BaseException:
            self.stop()
            raise
        return self

    def _start_alertmanager(self) -> None:
        assert self.receiver is not None
        config = self.root / "alertmanager.yml"
        config.write_text(f"""route:
  receiver: webhook
  group_by: ['...']
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: webhook
    webhook_configs:
      - url: http://127.0.0.1:{self.receiver.server_address[1]}/alerts
        send_resolved: false
""")
        self._spawn("alertmanager", [BINARIES["alertmanager"], f"--config.file={config}",
                                     f"--storage.path={self.root / 'am-data'}",
                                     f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}",
                                     "--cluster.listen-address=", "--log.level=info"])

    def _start_prometheus(self) -> None:
        config = self.root / "prometheus.yml"
        extra = "".join(f"""  - job_name: extra{i}
    honor_labels: true
    static_configs:
      - targets: ['{target}']
""" for i, target in enumerate(self.extra_targets))
        config.write_text(f"""global:
  scrape_interval: {INTERVAL_S:g}s
  scrape_timeout: {INTERVAL_S:g}s
  evaluation_interval: {INTERVAL_S:g}s
rule_files:
  - {self.rules_dir}/*.yaml
alerting:
  alertmanagers:
    - static_configs:
        - targets: ['127.0.0.1:{self.ports['alertmanager']}']
scrape_configs:
  # honor_labels: gpuwb's instance (the host an event names) wins over the scrape address
  - job_name: node
    honor_labels: true
    static_configs:
      - targets: ['127.0.0.1:{self.ports['node_exporter']}']
{extra}""")
        self._spawn("prometheus", [BINARIES["prometheus"], f"--config.file={config}",
                                   f"--storage.tsdb.path={self.root / 'prom-data'}",
                                   f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
                                   "--web.enable-lifecycle", "--storage.tsdb.retention.time=1d",
                                   # an alert sent while a reload re-discovers Alertmanager is dropped: resend
                                   # each second (default 1m) so that the first delivery never waits a minute
                                   f"--rules.alert.resend-delay={INTERVAL_S:g}s"])

    def stop(self) -> None:
        stop_children(self.procs)
        if self.receiver is not None:
            self.receiver.shutdown()
            self.receiver.server_close()
            self.receiver = None

    def __enter__(self) -> AlertingStack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- rules and alerts
    def load_rules(self, expected_groups: int) -> None:
        """Have Prometheus read the rule folder again and wait until it evaluates ``expected_groups``."""
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
                urllib.request.Request(f"{self.url('prometheus')}/-/reload", method="POST"), timeout=10):
            pass

        def loaded() -> bool:
            body = self.get(f"{self.url('prometheus')}/api/v1/rules")
            groups = json.loads(body)["data"]["groups"] if body else []
            return len(groups) == expected_groups and not any(g["lastEvaluation"].startswith("0001") for g in groups)
        self.wait("prometheus", loaded, what=f"{expected_groups} rule group(s) loaded and evaluated")

    def wait_up(self, job: str) -> None:
        """Until Prometheus has scraped ``job`` (``node``, or ``extraN`` for the N-th extra target)."""
        self.wait("prometheus", lambda: any(r["value"][1] == "1" for r in self.query(f'up{{job="{job}"}}')),
                  what=f"scraping {job}")

    def add_rules(self, *files: Path) -> None:
        """Copy rule files in and have Prometheus load them."""
        for path in files:
            shutil.copy(path, self.rules_dir / path.name)
        self.load_rules(len(list(self.rules_dir.glob("*.yaml"))))

    def notifications(self) -> list[Notification]:
        assert self.receiver is not None
        with self.receiver.lock:
            return list(self.receiver.notifications)

    def wait_for_alert(self, *wanted: dict[str, str], since: float, timeout: float) -> tuple[float, dict[str, Any]]:
        """The first firing alert whose labels hold one of the ``wanted`` label sets, delivered after ``since``."""
        found: list[tuple[float, dict[str, Any]]] = []

        def seen() -> bool:
            for n in self.notifications():
                for alert in n.alerts:
                    if n.at >= since and alert.get("status") == "firing" \
                            and any(w.items() <= alert.get("labels", {}).items() for w in wanted):
                        found.append((n.at, alert))
                        return True
            return False

        try:
            self.wait("alertmanager", seen, timeout=timeout, what=f"a notification of one of {list(wanted)}")
        except StackError as exc:
            delivered = [a["labels"] for n in self.notifications() for a in n.alerts]
            raise StackError(f"{exc}\ndelivered: {delivered}\nfiring in Prometheus: {self.query('ALERTS')}") from None
        return found[0]

    def query(self, promql: str) -> list[dict[str, Any]]:
        body = self.get(f"{self.url('prometheus')}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return json.loads(body).get("data", {}).get("result", []) if body else []

    def _notifier_ready(self) -> bool:
        body = self.get(f"{self.url('prometheus')}/api/v1/alertmanagers")
        return bool(body and json.loads(body)["data"]["activeAlertmanagers"])

    # ----------------------------------------------------------------- helpers
    def _spawn(self, name: str, argv: list[str]) -> None:
        spawn(self.procs, self.log, name, argv)

    def wait(self, name: str, ready: Callable[[], bool], timeout: float = READY_TIMEOUT_S, what: str = "ready") -> None:
        wait_until(self.procs, self.log, name, ready, timeout, StackError, what)

    get = staticmethod(http_get)
