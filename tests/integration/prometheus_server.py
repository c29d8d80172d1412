"""A real Prometheus on loopback scraping a static vLLM-style /metrics page, for integration tests.

Set up as Prometheus' getting-started guide (https://prometheus.io/docs/prometheus/latest/getting_started/)
describes, with a static scrape config: the exporter is ``python -m http.server`` serving
one file, Prometheus scrapes it every second; both run as children of the test process under one
temp dir (nothing in /etc, no default ports) and are stopped by PID. A new page is written to a
temp file and renamed over the old one, so a scrape never sees half a file. Waits are bounded: a
daemon that does not come up raises PrometheusError with the tail of its log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.processes import free_port, http_get, spawn, stop_children, wait_until

READY_TIMEOUT_S = 10.0
FIRST_SAMPLE_TIMEOUT_S = 20.0
"""Prometheus applies new targets on a 5 s tick: the first sample is queryable ~5.6 s after start."""

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


class PrometheusError(RuntimeError):
    """Prometheus or the exporter did not come up; the message carries the log tail."""


def vllm_page(waiting: float, kv_usage: float = 0.42, ttft_buckets: tuple[float, ...] = (2, 5, 9, 10, 10)) -> str:
    """A vLLM /metrics page: waiting requests, KV-cache usage and a TTFT histogram (le 0.05..+Inf)."""
    m = f'model_name="{MODEL}"'
    les = ("0.05", "0.1", "0.5", "1.0", "+Inf")
    lines = [
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{m}}} {waiting:.1f}",
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.",
        "# TYPE vllm:gpu_cache_usage_perc gauge",
        f"vllm:gpu_cache_usage_perc{{{m}}} {kv_usage}",
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    lines += [f'vllm:time_to_first_token_seconds_bucket{{{m},le="{le}"}} {n:.1f}' for le, n in zip(les, ttft_buckets)]
    lines += [f"vllm:time_to_first_token_seconds_sum{{{m}}} 1.9",
              f"vllm:time_to_first_token_seconds_count{{{m}}} {ttft_buckets[-1]:.1f}"]
    return "\n".join(lines) + "\n"



@dataclass
class PrometheusServer:
    """Exporter + Prometheus under ``root`` (which must not exist yet)."""

    root: Path
    procs: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.www, self.log, self.data = self.root / "www", self.root / "log", self.root / "data"
        self.prom_port = free_port()
        self.exporter_port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def exporter_url(self) -> str:
        return f"http://127.0.0.1:{self.exporter_port}"

    def start(self, page: str) -> PrometheusServer:
        prometheus = shutil.which("prometheus")
        if prometheus is None:
            raise PrometheusError("prometheus is not installed (Debian package 'prometheus'; "
                                  "see scripts/system-deps.sh)")
        for path in (self.www, self.log, self.data):
            path.mkdir(parents=True)
        self.set_page(page)
        config = self.root / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: vllm\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{self.exporter_port}']\n")
        self._spawn("exporter", [sys.executable, "-m", "http.server", str(self.exporter_port), "--bind", "127.0.0.1",
                                 "--directory", str(self.www)])
        self._spawn("prometheus", [prometheus, f"--config.file={config}", f"--storage.tsdb.path={self.data}",
                                   f"--web.listen-address=127.0.0.1:{self.prom_port}",
                                   "--storage.tsdb.retention.time=1d", "--log.level=info"])
        self._wait("prometheus", READY_TIMEOUT_S, lambda: self._get(f"{self.url}/-/ready") is not None)
        self._wait("exporter", READY_TIMEOUT_S, lambda: self._get(f"{self.exporter_url}/metrics") is not None)
        self._wait("prometheus", FIRST_SAMPLE_TIMEOUT_S, lambda: bool(self.query("vllm:num_requests_waiting")))
        return self

    def set_page(self, page: str) -> None:
        """Serve a new /metrics page atomically (write a temp file, rename it over the old one)."""
        tmp = self.www / "metrics.tmp"
        tmp.write_text(page)
        tmp.replace(self.www / "metrics")

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the result list (empty until the first scrape landed)."""
        body = self._get(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        if body is None:
            return []
        return json.loads(body).get("data", {}).get("result", [])

    def wait_for_value(self, promql: str, value: float, timeout: float = 10.0) -> None:
        def seen() -> bool:
            return any(float(r["value"][1]) == value for r in self.query(promql))

        self._wait("prometheus", timeout, seen)

    def stop(self) -> None:
        stop_children(self.procs)

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----------------------------------------------------------------- helpers
    def _spawn(self, name: str, argv: list[str]) -> None:
        spawn(self.procs, self.log, name, argv)

    def _wait(self, name: str, timeout: float, ready: Any) -> None:
        wait_until(self.procs, self.log, name, ready, timeout, PrometheusError, poll=0.1)

    _get = staticmethod(http_get)
