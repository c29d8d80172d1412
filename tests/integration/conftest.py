"""Fixtures that start real daemons for the integration tests (stopped by PID at teardown)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.prometheus_server import PrometheusServer, vllm_page
from tests.integration.slurm_cluster import SlurmCluster, tools_missing


@pytest.fixture
def prometheus_server(tmp_path: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping a vLLM-style page every second, with its first sample already in."""
    with PrometheusServer(tmp_path / "prom") as server:
        server.start(vllm_page(waiting=3))
        yield server


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """munge + MariaDB + slurmdbd + slurmctld + slurmd on loopback (tests/integration/slurm_cluster.py)."""
    missing = tools_missing()
    if missing:
        pytest.fail(f"the Slurm integration test needs {', '.join(missing)}: run scripts/system-deps.sh as root")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm") / "cluster").start()
    try:
        yield cluster
    finally:
        cluster.stop()
