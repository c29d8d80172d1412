"""Metrics tables (long and wide CSV) and benchmark summaries into the series table."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import metrics_csv
from collectors.base import ParseContext, SeriesPoint, Skipped
from collectors.framework import registry
from tests.conftest import ingest_timeline
from workbench.store.bundle import Bundle

MTIME = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)


def _rows(text: str, kind: str = "metrics_csv", host: str | None = None, mtime: datetime | None = MTIME) -> list:
    ctx = ParseContext(host=host, mtime=mtime, source_name="metrics.csv")
    return list(metrics_csv.parse(kind, io.BytesIO(text.encode()), ctx))


def test_long_form_with_labels_and_epoch_ms():
    text = ("ts,name,value,instance,model_name\n"
            "1795992661000,vllm:num_requests_waiting,3,10.0.0.5:8000,llama\n"
            "1795992662000,vllm:num_requests_waiting,17,10.0.0.5:8000,llama\n"
            "1795992662000,vllm:request_success_total,5,10.0.0.5:8000,llama\n")
    rows = _rows(text)
    assert [r.value for r in rows] == [3.0, 17.0, 5.0]
    assert rows[0].ts == datetime(2026, 11, 29, 22, 51, 1, tzinfo=timezone.utc)
    assert rows[0].host == "10.0.0.5"
    assert rows[0].labels == {"instance": "10.0.0.5:8000", "model_name": "llama", "metric": "queue_depth"}
    assert rows[2].labels["metric"] == "request_success"


def test_grafana_series_as_rows_export():
    text = ('"Series";"Time";"Value"\n'
            '"p99 TTFT";"2026-11-29 22:00:00";"0.25"\n'
            '"p99 TTFT";"2026-11-29 22:00:15";"0.31"\n')
    rows = _rows(text)
    assert [(r.name, r.value) for r in rows] == [("p99 TTFT", 0.25), ("p99 TTFT", 0.31)]
    assert rows[1].ts == datetime(2026, 11, 29, 22, 0, 15, tzinfo=timezone.utc)  # naive: taken as UTC
    assert rows[0].labels["metric"] == "ttft"


def test_wide_form_with_label_column_and_vocabulary_from_column_names():
    text = ("time,host,p99_ttft_ms,queue_depth,kv_cache_usage,error_rate\n"
            "2026-11-29T22:00:00Z,gpu01,120,0,0.4,0.0\n"
            "2026-11-29T22:00:15+01:00,gpu01,n/a,1,0.5,0.01\n"
            "2026-11-29T22:00:30Z,gpu02,135,,0.5,0.0\n")
    rows = _rows(text, host="fallback")
    points = [r for r in rows if isinstance(r, SeriesPoint)]
    ttft = [r for r in points if r.name == "p99_ttft_ms"]
    assert [r.value for r in ttft] == [120.0, 135.0]
    assert ttft[0].labels["metric"] == "ttft"
    assert ttft[0].labels["quantile"] == "0.99" and ttft[0].labels["stat"] == "p99"
    assert {r.host for r in points} == {"gpu01", "gpu02"}
    queue_times = [r.ts for r in points if r.name == "queue_depth"]
    assert queue_times[1] == datetime(2026, 11, 29, 21, 0, 15, tzinfo=timezone.utc)
    assert {r.labels["metric"] for r in points} == {"ttft", "queue_depth", "kv_cache_usage", "error_rate"}
    assert len([r for r in points if r.name == "queue_depth"]) == 2  # the empty cell is no point
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["not a finite number in column 'p99_ttft_ms'"]


def test_bad_rows_are_counted():
    rows = _rows("ts,queue\n2026-11-29T22:00:00Z,1\nnot a time,2\n2026-11-29T22:00:30Z\n2026-11-29T22:01:00Z,3\n")
    assert [r.value for r in rows if isinstance(r, SeriesPoint)] == [1.0, 3.0]
    assert [r.line for r in rows if isinstance(r, Skipped)] == [3, 4]


@pytest.mark.parametrize("text,kind", [
    ("ts,name,value\n2026-11-29T22:00:00Z,vllm:num_requests_waiting,3\n", "metrics_csv"),
    ("time,p99_latency_ms,rps\n1795992661,120,40\n1795992662,130,41\n", "metrics_csv"),
    ("============ Serving Benchmark Result ============\nSuccessful requests:  10\n", "bench_summary"),
])
def test_sniff(text, kind):
    assert registry.sniff("handed-over", text)[0] == kind


@pytest.mark.parametrize("text", [
    "timestamp, name, pci.bus_id, utilization.gpu [%]\n2026/11/29 10:00:00.000, H100, 00000000:19:00.0, 5 %\n",
    "ts,what,version,who\n2026-11-29T22:00:00Z,deploy model,v2,alice\n",
    "JobID|State|ExitCode\n123|FAILED|1:0\n",
])
def test_sniff_leaves_other_tables_alone(text):
    assert "metrics_csv" not in metrics_csv.sniff("x.csv", text)


def test_bench_summary_block_per_run_with_text_labels():
    text = ("reporter prose\n"
            "============ Serving Benchmark Result ============\n"
            "Backend:                                 vllm\n"
            "Max request concurrency:                 not set\n"
            "Successful requests:                     1000\n"
            "---------------Time to First Token----------------\n"
            "Mean TTFT (ms):                          157.75\n"
            "P90 TTFT (ms):                           332.99\n"
            "==================================================\n"
            "============ Serving Benchmark Result ============\n"
            "    Mean TPOT (ms):                      3.29\n")
    rows = _rows(text, kind="bench_summary", host="bench-node")
    points = {(r.name, r.labels["run"]): r for r in rows if isinstance(r, SeriesPoint)}
    p90 = points[("bench_serving:p90_ttft_ms", "1")]
    assert p90.value == 332.99 and p90.labels["quantile"] == "0.9" and p90.labels["unit"] == "ms"
    assert p90.labels["backend"] == "vllm" and p90.labels["max_request_concurrency"] == "not set"
    assert p90.ts == MTIME and p90.labels["ts_origin"] == "mtime" and p90.host == "bench-node"
    assert points[("bench_serving:mean_tpot_ms", "2")].labels["metric"] == "tpot"
    assert "metric" not in points[("bench_serving:successful_requests", "1")].labels
    assert [r.line for r in rows if isinstance(r, Skipped)] == [1]


def test_sglang_bench_summary_from_the_corpus_through_ingest(bundle_path, corpus, index):
    path = corpus / "latency" / "sglang_8285_bench_serving_unstable_ttft.txt"
    ingest_timeline(bundle_path, path)
    labels = index["latency/" + path.name]["parsed_labels"]
    with Bundle.open(bundle_path) as bundle:
        rows = {name: (value, json.loads(lab)) for name, value, lab in bundle.con.execute(
            "SELECT name, value, labels FROM series").fetchall()}
    assert rows["bench_serving:mean_ttft_ms"][0] == float(labels["ttft_mean_ms"])
    assert rows["bench_serving:p99_ttft_ms"][1]["quantile"] == "0.99"
    assert rows["bench_serving:mean_e2e_latency_ms"][1]["metric"] == "e2e_latency"
    assert rows["bench_serving:request_throughput_req_per_s"][0] == 11.91
    assert {lab["backend"] for _, lab in rows.values()} == {labels["backend"]}


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ts,name,value\n0123456789.:-TZ\"; \tx")), max_size=300))
def test_fuzzed_tables_never_raise(text):
    for kind in metrics_csv.KINDS:
        assert all(isinstance(r, (SeriesPoint, Skipped)) for r in _rows(text, kind=kind))
