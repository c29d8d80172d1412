"""A real Prometheus scrapes a vLLM-style page; ``gpuwb capture`` reads it back and sees the queue spike.

One capture exercises both live paths: ``--prom-server``/``--query`` (query_range over the window)
and ``--prom`` (scraping the exporter's /metrics directly). The histogram quantile Prometheus
computes is compared with :func:`workbench.query.series_math.histogram_quantile` on the same buckets.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from tests.conftest import run_cli
from tests.integration.prometheus_server import MODEL, PrometheusServer, vllm_page
from workbench.query import series_math
from workbench.store.bundle import Bundle

pytestmark = pytest.mark.integration

BASELINE_S = 7.0
"""Seconds of unchanged queue before the spike: the detector wants at least 5 baseline points."""
QUANTILE_QUERY = "histogram_quantile(0.75, sum by (le) (vllm:time_to_first_token_seconds_bucket))"


def test_capture_reads_queue_spike_from_real_prometheus(prometheus_server: PrometheusServer, tmp_path):
    time.sleep(BASELINE_S)
    spike_at = datetime.now(timezone.utc)
    prometheus_server.set_page(vllm_page(waiting=17))
    prometheus_server.wait_for_value("vllm:num_requests_waiting", 17.0)
    time.sleep(3.0)  # a few spiked points, so the run is sustained rather than one sample

    out = tmp_path / "live.duckdb"
    code, stdout, stderr = run_cli(
        "capture", "-o", out, "--only", "prometheus", "--since", "2m",
        "--prom-server", prometheus_server.url, "--query", "vllm:num_requests_waiting",
        "--query", QUANTILE_QUERY, "--prom-step", "1s",
        "--prom", prometheus_server.exporter_url, "--prom-samples", "2", "--prom-interval", "0.5")
    assert code == 0, stderr + stdout

    with Bundle.open(out) as bundle:
        rows = bundle.con.execute(
            "SELECT ts, host, labels, value FROM series WHERE name = 'vllm:num_requests_waiting' "
            "AND json_extract_string(labels, '$.query') IS NOT NULL ORDER BY ts").fetchall()
        scraped = bundle.con.execute(
            "SELECT labels, value FROM series WHERE name = 'vllm:num_requests_waiting' "
            "AND json_extract_string(labels, '$.query') IS NULL").fetchall()
        quantiles = bundle.con.execute(
            "SELECT value FROM series WHERE json_extract_string(labels, '$.query') = ?", [QUANTILE_QUERY]).fetchall()
        events = bundle.con.execute(
            "SELECT kind, layer, ts, attrs FROM event WHERE kind = 'queue_backlog'").fetchall()
        status = bundle.con.execute("SELECT status FROM capture_log WHERE collector = 'prometheus'").fetchall()

    assert status == [("ok",)]
    values = [v for *_, v in rows]
    assert values.count(3.0) >= 5 and values.count(17.0) >= 2, values
    assert values.index(17.0) > values.index(3.0)
    labels = json.loads(rows[-1][2])
    assert labels["metric"] == "queue_depth"
    assert labels["job"] == "vllm" and labels["model_name"] == MODEL
    assert labels["instance"] == f"127.0.0.1:{prometheus_server.exporter_port}"
    assert rows[-1][1]  # loopback instance: the capturing host's name, not 127.0.0.1

    assert [v for _, v in scraped] == [17.0, 17.0]  # two direct scrapes of the exporter
    assert json.loads(scraped[0][0])["instance"] == f"127.0.0.1:{prometheus_server.exporter_port}"

    buckets = [(0.05, 2), (0.1, 5), (0.5, 9), (1.0, 10), (float("inf"), 10)]
    ours = series_math.histogram_quantile(0.75, buckets)
    assert ours == pytest.approx(0.35)  # rank 7.5 in (0.1, 0.5]: 0.1 + 0.4 * (7.5 - 5) / (9 - 5)
    assert quantiles and all(v == pytest.approx(ours) for (v,) in quantiles)

    assert len(events) == 1, events
    kind, layer, onset, attrs = events[0]
    attrs = json.loads(attrs)
    assert layer == "business"
    assert attrs["baseline"] == 3.0 and attrs["peak"] == 17.0
    lag = (onset.replace(tzinfo=timezone.utc) - spike_at).total_seconds()
    assert -1.0 <= lag <= 3.0, lag  # onset within a step (1 s) plus a scrape (1 s) of the change
