"""Fixtures that start real daemons for the integration tests (stopped by PID at teardown)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.prometheus_server import PrometheusServer, vllm_page


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping a vLLM-style page every second, with its first sample already in."""
    with PrometheusServer(tmp_path / "prom") as server:
        server.start(vllm_page(waiting=3))
        yield server
