"""The serving vocabulary, Prometheus' histogram_quantile, bucket deltas and the curves built from a bundle."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from collectors import prometheus
from collectors.base import ParseContext, SeriesPoint
from collectors.framework import metric_vocabulary as vocabulary
from workbench.ingest.session import ingest_paths
from workbench.query import series, series_math, series_table
from workbench.store.bundle import Bundle

T0 = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("name,labels,expected", [
    ("vllm:time_to_first_token_seconds_bucket", {}, "ttft"),
    ("vllm:time_per_output_token_seconds_sum", {}, "tpot"),
    ("vllm:inter_token_latency_seconds_count", {}, "tpot"),
    ("vllm:e2e_request_latency_seconds_bucket", {}, "e2e_latency"),
    ("vllm:num_requests_running", {}, "requests_running"),
    ("vllm:num_requests_waiting", {}, "queue_depth"),
    ("vllm:gpu_cache_usage_perc", {}, "kv_cache_usage"),
    ("vllm:kv_cache_usage_perc", {}, "kv_cache_usage"),
    ("vllm:num_preemptions_total", {}, "preemptions"),
    ("vllm:request_success_total", {"finished_reason": "stop"}, "request_success"),
    ("vllm:request_success_total", {"finished_reason": "abort"}, "request_failure"),
    ("tgi_request_duration_bucket", {}, "e2e_latency"),
    ("tgi_queue_size", {}, "queue_depth"),
    ("tgi_batch_current_size", {}, "requests_running"),
    ("nv_inference_request_duration_us", {}, "e2e_latency"),
    ("nv_inference_queue_duration_us", {}, "queue_time"),
    ("nv_inference_compute_infer_duration_us", {}, "compute_time"),
    ("nv_inference_request_failure", {"reason": "BACKEND"}, "request_failure"),
    ("nv_inference_queue_summary_us", {"quantile": "0.99"}, "queue_time"),
    ("sglang:num_queue_reqs", {}, "queue_depth"),
    ("sglang:token_usage", {}, "kv_cache_usage"),
    ("process_cpu_seconds_total", {}, None),
])
def test_vocabulary(name, labels, expected):
    assert vocabulary.canonical(name, labels) == expected


@pytest.mark.parametrize("text,labels", [
    ("P99 TTFT (ms)", {"metric": "ttft", "stat": "p99", "quantile": "0.99"}),
    ("Median ITL (ms)", {"metric": "tpot", "stat": "median", "quantile": "0.5"}),
    ("p99.9_e2e_latency_ms", {"metric": "e2e_latency", "stat": "p99.9", "quantile": "0.999"}),
    ("avg queue depth", {"metric": "queue_depth", "stat": "mean"}),
    ("http_5xx_error_rate", {"metric": "error_rate"}),
    ("Max request concurrency", {}),
])
def test_word_labels(text, labels):
    assert vocabulary.word_labels(text) == labels


@pytest.mark.parametrize("name,scale", [
    ("nv_inference_queue_duration_us", 1e-6), ("nv_inference_first_response_histogram_ms_bucket", 1e-3),
    ("vllm:e2e_request_latency_seconds_sum", 1.0), ("bench_serving:mean_ttft_ms", 1e-3), ("Mean TTFT (ms)", 1e-3),
    ("tgi_request_duration", 1.0),
])
def test_unit_scale(name, scale):
    assert vocabulary.unit_scale(name) == scale


def _corpus_buckets(path: Path) -> list[tuple[float, float]]:
    ctx = ParseContext(mtime=T0, source_name=path.name)
    with open(path, "rb") as f:
        rows = [r for r in prometheus.parse("prom_text", f, ctx) if isinstance(r, SeriesPoint)]
    return [(float(r.labels["le"]), r.value) for r in rows if r.name == "vllm:time_to_first_token_seconds_bucket"]


def test_quantiles_by_hand_on_the_real_vllm_ttft_histogram(corpus):
    """IBM/vllm#18, bloom-560m: le 0.001..0.01 = 0, 0.02 = 112, 0.04 = 211, 0.06 = 211, 0.08 = 213; the page was
    cut before the +Inf bucket, so Prometheus would answer NaN, and the truncated reading uses 213 as the total
    (a lower bound of the true quantile).

    p50: rank 0.5 * 213 = 106.5; the first bucket with a count >= 106.5 is le 0.02 (112), below it le 0.01 (0):
         0.01 + (0.02 - 0.01) * (106.5 - 0) / (112 - 0) = 0.01 + 0.01 * 0.950893 = 0.0195089 s.
         (The 112 requests under 20 ms are already more than half of 213, so p50 is in (0.01, 0.02], not above.)
    p95: rank 202.35 -> le 0.04 (211), below le 0.02 (112): 0.02 + 0.02 * (202.35 - 112) / 99 = 0.0382525 s.
    p99: rank 210.87 -> le 0.04 (211): 0.02 + 0.02 * (210.87 - 112) / 99 = 0.0399737 s.
    """
    buckets = _corpus_buckets(corpus / "latency" / "ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom")
    assert len(buckets) == 7
    assert math.isnan(series_math.histogram_quantile(0.5, buckets))
    got = {q: series_math.histogram_quantile(q, buckets, allow_truncated=True) for q in (0.5, 0.95, 0.99)}
    assert got[0.5] == pytest.approx(0.01 + 0.01 * 106.5 / 112)
    assert got[0.95] == pytest.approx(0.02 + 0.02 * (202.35 - 112) / 99)
    assert got[0.99] == pytest.approx(0.02 + 0.02 * (210.87 - 112) / 99)
    assert got[0.5] == pytest.approx(0.0195089, abs=1e-7)


def test_quantiles_per_interval_use_bucket_deltas(corpus):
    """A second scrape of the same server 15 s later adds 100 requests, all in (0.04, 0.06]: the interval's
    buckets are then le 0.02: 0, 0.04: 0, 0.06: 100, 0.08: 100, +Inf: 100, so its p50 is
    0.04 + 0.02 * (50 - 0) / 100 = 0.05 s, although the cumulative p50 stays under 0.04 s."""
    first = dict(_corpus_buckets(corpus / "latency" / "ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom"))
    first[math.inf] = first[0.08]
    second = {le: count + (100 if le >= 0.06 else 0) for le, count in first.items()}
    (interval,) = series_math.interval_quantiles([(T0, first), (T0 + timedelta(seconds=15), second)])
    assert interval.observations == 100 and not interval.reset
    assert interval.values[0.5] == pytest.approx(0.05)
    assert interval.values[0.99] == pytest.approx(0.04 + 0.02 * 99 / 100)
    assert series_math.histogram_quantile(0.5, second.items()) < 0.04


def test_counter_reset_in_histogram_uses_new_counts():
    before = {0.1: 50.0, 1.0: 100.0, math.inf: 100.0}
    after_restart = {0.1: 0.0, 1.0: 4.0, math.inf: 4.0}
    (interval,) = series_math.interval_quantiles([(T0, before), (T0 + timedelta(seconds=15), after_restart)])
    assert interval.reset and interval.observations == 4
    assert interval.values[0.5] == pytest.approx(0.1 + 0.9 * 2 / 4)


def test_intervals_without_requests_are_left_out_and_first_scrape_optional():
    scrape = {0.1: 5.0, math.inf: 5.0}
    scrapes = [(T0, scrape), (T0 + timedelta(seconds=15), scrape)]
    assert series_math.interval_quantiles(scrapes) == []
    first = series_math.interval_quantiles(scrapes, include_first=True)
    assert len(first) == 1 and first[0].values[0.5] == pytest.approx(0.05)


@pytest.mark.parametrize("q,buckets,expected", [
    (0.5, [(1.0, 0), (math.inf, 0)], math.nan),              # no observations
    (0.5, [(math.inf, 10)], math.nan),                       # a single bucket
    (-0.1, [(1.0, 1), (math.inf, 1)], -math.inf),
    (1.1, [(1.0, 1), (math.inf, 1)], math.inf),
    (0.99, [(1.0, 5), (2.0, 5), (math.inf, 10)], 2.0),       # rank in the +Inf bucket: highest finite bound
    (0.5, [(-1.0, 6), (0.0, 8), (math.inf, 10)], -1.0),      # first bucket with a non-positive bound
    (0.5, [(1.0, 6), (2.0, 5.999999), (math.inf, 10)], 1 * 5 / 6),  # float noise flattened
    (0.5, [(1.0, 2), (1.0, 2), (math.inf, 8)], 1.0),         # duplicate bounds are merged (2 + 2 = 4 = rank)
])
def test_histogram_quantile_edges(q, buckets, expected):
    got = series_math.histogram_quantile(q, buckets)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_counter_deltas_reset_nan_and_order():
    points = [(T0 + timedelta(seconds=30), 5.0), (T0, 100.0), (T0 + timedelta(seconds=15), 130.0),
              (T0 + timedelta(seconds=45), math.nan), (T0 + timedelta(seconds=60), 9.0)]
    assert [(inc, dt) for _, inc, dt in series_math.counter_deltas(points)] == [(30.0, 15.0), (5.0, 15.0), (4.0, 30.0)]


def test_tag_keeps_source_metric_label():
    assert vocabulary.tag("tgi_queue_size", {"metric": "x", "a": "b"}) == {"a": "b", "exported_metric": "x",
                                                                      "metric": "queue_depth"}
    assert vocabulary.tag("unknown_thing", {"a": "b"}) == {"a": "b"}


def _write_scrapes(root: Path, pages: list[str], name: str = "pod-a") -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i, page in enumerate(pages):
        stamp = (T0 + timedelta(seconds=15 * i)).strftime("%Y%m%dT%H%M%SZ")
        (root / f"{name}-{stamp}.prom").write_text(page)


def test_signals_from_a_folder_of_triton_scrapes(tmp_path):
    """Triton: cumulative request duration (us) over requests served gives the mean latency per interval;
    failures against successes give the error ratio; both are per model."""
    pages = []
    for i in range(4):
        ok, failed, duration_us = 100 * (i + 1), 10 * i, 5000 * 100 * (i + 1) + (2_000_000 if i == 3 else 0)
        pages.append("\n".join([
            f'nv_inference_request_success{{model="resnet",version="1"}} {ok}',
            f'nv_inference_request_failure{{model="resnet",reason="BACKEND",version="1"}} {failed}',
            'nv_inference_request_failure{model="resnet",reason="OTHER",version="1"} 0',
            f'nv_inference_request_duration_us{{model="resnet",version="1"}} {duration_us}',
        ]) + "\n")
    _write_scrapes(tmp_path / "scrapes", pages)
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        ingest_paths(bundle, [str(tmp_path / "scrapes")])
        curves = {(s.metric, s.stat): s for s in series.signals(bundle.con)}
    mean = curves[("e2e_latency", "mean")]
    assert mean.identity == {"instance": "pod-a", "model": "resnet"} and mean.host == "pod-a"
    assert [round(v, 6) for _, v in mean.points] == [round(500000 / 110 * 1e-6, 6), round(500000 / 110 * 1e-6, 6),
                                                     round(2_500_000 / 110 * 1e-6, 6)]
    assert [v for _, v in curves[("error_rate", "ratio")].points] == pytest.approx([10 / 110] * 3)
    assert [v for _, v in curves[("request_rate", "rate")].points] == pytest.approx([110 / 15] * 3)


def test_signals_quantiles_from_summary_and_histogram(tmp_path):
    pages = [
        "\n".join([
            f'nv_inference_queue_summary_us{{model="m",quantile="0.99"}} {100 + i}',
            f'vllm:e2e_request_latency_seconds_bucket{{le="0.5",model_name="m",engine="0"}} {10 * i}',
            f'vllm:e2e_request_latency_seconds_bucket{{le="0.5",model_name="m",engine="1"}} {10 * i}',
            f'vllm:e2e_request_latency_seconds_bucket{{le="+Inf",model_name="m",engine="0"}} {10 * i}',
            f'vllm:e2e_request_latency_seconds_bucket{{le="+Inf",model_name="m",engine="1"}} {10 * i}',
        ]) + "\n" for i in range(3)]
    _write_scrapes(tmp_path / "s", pages)
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        ingest_paths(bundle, [str(tmp_path / "s")])
        curves = {(s.metric, s.stat): s for s in series.signals(bundle.con)}
    assert [v for _, v in curves[("queue_time", "p99")].points] == pytest.approx([100e-6, 101e-6, 102e-6])
    e2e = curves[("e2e_latency", "p50")]  # both engines summed: 20 requests per interval, all under 0.5 s
    assert e2e.unit == "s" and [v for _, v in e2e.points] == pytest.approx([0.25, 0.25])


def test_parse_then_series_table_keeps_raw_values(tmp_path):
    page = 'nv_inference_queue_duration_us{model="m"} 36737955\n'
    _write_scrapes(tmp_path / "s", [page])
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        ingest_paths(bundle, [str(tmp_path / "s")])
        assert bundle.con.execute("SELECT value FROM series").fetchall() == [(36737955.0,)]


def test_load_rows_reads_only_vocabulary_rows(tmp_path):
    rows = [SeriesPoint(T0, "a_metric", 1.0), SeriesPoint(T0, "tgi_queue_size", 2.0, labels={"metric": "queue_depth"})]
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(None)
        writer.add_all(rows)
        writer.flush()
        got = list(series_table.load_rows(bundle.con, ["queue_depth"]))
    assert [(name, value) for _, _, name, _, value in got] == [("tgi_queue_size", 2.0)]

