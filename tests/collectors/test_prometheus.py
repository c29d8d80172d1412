"""Prometheus pages, API responses and query logs: the real corpus through ``gpuwb ingest``, then edge cases.

The corpus test reads each file's INDEX.tsv labels and checks every one against the series table,
so an unseen file of the same kinds with the same label vocabulary is checked the same way.
"""

from __future__ import annotations

import http.server
import io
import json
import math
import re
import socket
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import prometheus
from collectors.base import ParseContext, SeriesPoint, Skipped
from collectors.framework import registry
from tests.conftest import CORPUS, corpus_index, ingest_timeline, run_cli
from workbench.query import series, series_math
from workbench.store.bundle import Bundle

LATENCY_FILES = sorted(p for p in (CORPUS / "latency").iterdir())
MTIME = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)
PREFIX = {"vllm": "vllm:", "vllm_v1": "vllm:", "sglang": "sglang:", "triton": "nv_", "tgi": "tgi_"}
FORMAT_KIND = {"prometheus_text": "prom_text", "prometheus_json": "prom_api_json", "csv": "metrics_csv"}
CONTEXT_ONLY = {"port", "version"}
"""Labels about where the excerpt came from (the curl command's port, the container release) that the
text itself does not state as data: checked only when a series carries them."""


@dataclass
class Row:
    ts: datetime
    host: str | None
    name: str
    labels: dict[str, str]
    value: float


def _ingest(bundle_path: Path, path: Path) -> tuple[list[Row], list[str], dict]:
    events = ingest_timeline(bundle_path, path)
    with Bundle.open(bundle_path) as bundle:
        rows = [Row(ts, host, name, json.loads(labels), value) for ts, host, name, labels, value in bundle.con.execute(
            "SELECT ts, host, name, labels, value FROM series ORDER BY ts, name").fetchall()]
        kinds = [k for (k,) in bundle.con.execute("SELECT kind FROM artifact").fetchall()]
    assert all(e["ts_origin"] == "derived" for e in events)  # pages hold no events of their own
    return rows, kinds, {"events": events}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _quantile_of(key: str) -> float:
    digits = re.match(r"p(\d+)", key).group(1)
    return float(digits) / 10 ** len(digits)


def _check_label(key: str, expected: str, rows: list[Row], kinds: list[str], index_labels: dict[str, str],
                 path: Path) -> None:
    """One INDEX.tsv label against the series rows (fails for a label this test cannot interpret)."""
    num = None
    try:
        num = float(expected)
    except ValueError:
        pass
    by_metric = index_labels.get("metric")
    if key == "format":
        assert FORMAT_KIND[expected] in kinds
    elif key == "truncated":
        buckets = [(float(r.labels["le"]), r.value) for r in rows if r.name.endswith("_bucket")]
        assert buckets and all(le != math.inf for le, _ in buckets)
        assert math.isnan(series_math.histogram_quantile(0.5, buckets))  # Prometheus: no +Inf bucket, no answer
    elif key == "server":
        assert rows and all(r.name.startswith(PREFIX[expected]) for r in rows)
        if expected == "vllm_v1":
            assert all("engine" in r.labels for r in rows)
    elif key == "model":
        assert any(expected in (r.labels.get("model_name"), r.labels.get("model")) for r in rows)
    elif key == "models":
        assert {r.labels.get("model") for r in rows} == set(expected.split(","))
    elif key in ("engine", "engine_type", "gpu_uuid", "job"):
        assert any(r.labels.get(key) == expected for r in rows)
    elif key == "metric":
        assert any(expected in (r.name, series.family(r.name)[0]) for r in rows)
    elif key == "failure_reasons":
        assert {r.labels.get("reason") for r in rows if r.labels.get("metric") == "request_failure"} == \
            set(expected.split(","))
    elif key in ("failures", "request_failure_total", "request_success", "inference_count", "exec_count"):
        metric = {"failures": "request_failure", "request_failure_total": "request_failure"}.get(key, key)
        hits = [r.value for r in rows if r.labels.get("metric") == metric]
        assert hits and _close(sum(hits), num)
    elif key.startswith("request_success_"):
        model = key.removeprefix("request_success_")
        assert [r.value for r in rows if r.labels.get("metric") == "request_success"
                and r.labels.get("model") == model] == [num]
    elif m := re.fullmatch(r"(ttft_)?bucket_le_([\d.]+)", key):
        assert [r.value for r in rows if r.name.endswith("_bucket") and float(r.labels["le"]) == float(m.group(2))
                and (not m.group(1) or r.labels.get("metric") == "ttft")] == [num]
    elif key in ("count", "sum_us"):
        suffix = "_count" if key == "count" else "_sum"
        assert [r.value for r in rows if r.name == by_metric + suffix] == [num]
    elif re.fullmatch(r"p\d+_us", key):
        assert [r.value for r in rows if r.name == by_metric and
                _close(float(r.labels["quantile"]), _quantile_of(key))] == [num]
    elif m := re.fullmatch(r"tpot_(max|p\d+)_s", key):
        assert [r.value for r in rows if r.labels.get("metric") == "tpot" and r.labels.get("stat") == m.group(1)] \
            == [num]
    elif key == "window":
        assert any(r.labels.get("range") == expected for r in rows)
    elif key == "prom_ts":
        assert any(_close(r.ts.replace(tzinfo=timezone.utc).timestamp(), num) for r in rows)
    elif key == "empty_families":
        declared = set(re.findall(r"(?m)^# HELP (\S+)", path.read_text(errors="replace")))  # documented families
        assert len(declared - {series.family(r.name)[0] for r in rows}) == int(num)
    elif key == "tool":
        assert any(expected.endswith(r.labels.get("tool", "\0")) for r in rows)
    elif key == "backend":
        assert all(r.labels.get("backend") == expected for r in rows)
    elif key in BENCH_NAMES:
        assert [r.value for r in rows if r.name == BENCH_NAMES[key]] == [num]
    elif m := re.fullmatch(r"(ttft|itl|tpot|e2e)_(mean|median|p\d+)_ms", key):
        assert [r.value for r in rows if m.group(1) in r.name and r.labels.get("stat") == m.group(2)
                and r.labels.get("unit") == "ms"] == [num]
    elif key == "ttft_runs_ms":
        # only the first run's result block is in the excerpt; the other four are the reporter's prose
        first = float(expected.split(",")[0])
        assert [r.value for r in rows if r.labels.get("metric") == "ttft" and r.labels.get("stat") == "mean"] == [first]
    elif any(r.name == key or r.name.endswith(":" + key) for r in rows):
        assert [r.value for r in rows if r.name == key or r.name.endswith(":" + key)] == [num]
    elif key in CONTEXT_ONLY:
        assert not any(r.labels.get(key) not in (None, expected) for r in rows)
    else:
        pytest.fail(f"{path.name}: no check for INDEX label {key}={expected}")


BENCH_NAMES = {"request_rate": "bench_serving:traffic_request_rate",
               "max_concurrency": "bench_serving:max_request_concurrency",
               "requests": "bench_serving:successful_requests", "duration_s": "bench_serving:benchmark_duration_s"}


@pytest.mark.parametrize("path", LATENCY_FILES, ids=[p.name for p in LATENCY_FILES])
def test_corpus_file_labels_through_ingest(path, bundle_path):
    entry = corpus_index()[f"latency/{path.name}"]
    rows, kinds, _ = _ingest(bundle_path, path)
    assert rows, f"{path.name}: no series rows"
    assert all(r.ts is not None for r in rows)
    for key, expected in entry["parsed_labels"].items():
        _check_label(key, expected, rows, kinds, entry["parsed_labels"], path)


def test_ibm_vllm_page_rows_carry_vocabulary_and_mtime_origin(bundle_path, corpus):
    rows, _, _ = _ingest(bundle_path, corpus / "latency" / "ibm_vllm_18_vllm_metrics_ttft_histogram_bloom560m.prom")
    by_name = {r.name: r for r in rows}
    assert by_name["vllm:generation_tokens_total"].labels["metric"] == "generation_tokens"
    assert by_name["vllm:cpu_cache_usage_perc"].labels["metric"] == "cpu_cache_usage"
    assert {r.labels["metric"] for r in rows if r.name.endswith("_bucket")} == {"ttft"}
    assert all(r.labels["ts_origin"] == "mtime" for r in rows)  # no stamp in the name, no sample timestamps
    assert sorted(float(r.labels["le"]) for r in rows if r.name.endswith("_bucket")) == [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08]


def test_triton_prompt_line_is_skipped_and_old_floats_parse(bundle_path, corpus):
    path = corpus / "latency" / "triton_3569_nv_inference_counters_multi_model.prom"
    rows, _, _ = _ingest(bundle_path, path)
    assert [r.value for r in rows if r.labels.get("model") == "simple_identity"
            and r.name == "nv_inference_request_success"] == [40.0]
    with Bundle.open(bundle_path) as bundle:
        skipped = bundle.con.execute("SELECT skipped, skip_reasons FROM artifact").fetchall()
    assert skipped[0][0] == 1 and "not a metrics sample" in skipped[0][1]


def test_query_log_orphan_response_takes_stat_and_metric_from_neighbours(bundle_path, corpus):
    rows, _, _ = _ingest(bundle_path, corpus / "latency" / "ai-on-gke_937_promql_tpot_p90_p99.log")
    assert len(rows) == 3  # every response is printed twice; each is stored once
    orphan = [r for r in rows if r.labels.get("stat") == "max"]
    assert orphan[0].name == "vllm:time_per_output_token_seconds" and orphan[0].labels["metric_inferred"]
    p90 = next(r for r in rows if r.labels.get("stat") == "p90")
    assert p90.labels["quantile"] == "0.9" and p90.labels["job"] == "vllm-podmonitoring"


# -- text exposition edge cases ----------------------------------------------------------------

def _rows(text: str | bytes, *, name: str = "page.prom", kind: str = "prom_text", host: str | None = None,
          mtime: datetime | None = MTIME) -> list:
    data = text.encode() if isinstance(text, str) else text
    ctx = ParseContext(host=host, mtime=mtime, source_name=name)
    return list(prometheus.parse(kind, io.BytesIO(data), ctx))


def test_label_escapes_timestamps_and_special_values():
    page = "\n".join([
        r'msdos_file_access_time_seconds{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} '
        r'1.458255915e9',
        "http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000",
        "metric_without_labels 12.47",
        'om_style{a="b"} 3 1520879607.789',
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 7',
        'nan_gauge NaN',
        'inf_gauge +Inf',
        'neg_inf -Inf',
        '{"my.utf8.metric", "some.label"="x"} 5',
        'exemplar_total{a="1"} 4 # {trace_id="abc"} 1.0 1520879607.789',
    ])
    rows = _rows(page)
    points = {r.name: r for r in rows if isinstance(r, SeriesPoint)}
    assert points["msdos_file_access_time_seconds"].labels["path"] == "C:\\DIR\\FILE.TXT"
    assert points["msdos_file_access_time_seconds"].labels["error"] == 'Cannot find file:\n"FILE.TXT"'
    assert points["http_requests_total"].ts == datetime(2014, 3, 17, 14, 26, 3, tzinfo=timezone.utc)
    assert "ts_origin" not in points["http_requests_total"].labels
    assert points["om_style"].ts.timestamp() == pytest.approx(1520879607.789)
    plain = points["metric_without_labels"]
    assert plain.ts == MTIME and plain.labels["ts_origin"] == "mtime"
    assert points["vllm:e2e_request_latency_seconds_bucket"].labels == {"le": "+Inf", "model_name": "m",
                                                                      "metric": "e2e_latency", "ts_origin": "mtime"}
    assert points["my.utf8.metric"].labels["some.label"] == "x"
    assert points["exemplar_total"].value == 4
    skipped = [r.reason for r in rows if isinstance(r, Skipped)]
    assert skipped == ["non-finite value (NaN/Inf)"] * 3


@pytest.mark.parametrize("line,reason", [
    ('vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="bigscience/b', "unterminated"),
    ('vllm:num_requests_waiting{model_name="m"', "unclosed"),
    ("vllm:num_requests_waiting{model_name=\"m\"}", "without a value"),
    ("vllm:num_requests_waiting 1.0 123 extra", "trailing"),
    ("vllm:num_requests_waiting abc", "not a number"),
    ("root@host:/workspace# curl localhost:8002/metrics", "bad character"),
    ('x{a=b} 1', "not quoted"),
])
def test_broken_lines_are_skipped_with_a_reason(line, reason):
    rows = _rows(f"ok_metric 1\n{line}\nafter_metric 2\n")
    assert [r.name for r in rows if isinstance(r, SeriesPoint)] == ["ok_metric", "after_metric"]
    assert [r.line for r in rows if isinstance(r, Skipped)] == [2]
    assert reason in next(r.reason for r in rows if isinstance(r, Skipped))


def test_scrape_time_and_instance_from_file_name():
    rows = _rows("vllm:num_requests_waiting 4\n", name="/x/metrics/pod-7f9-20261129T221500Z.prom", host=None)
    assert rows[0].ts == datetime(2026, 11, 29, 22, 15, tzinfo=timezone.utc)
    assert rows[0].labels["instance"] == "pod-7f9" and rows[0].host == "pod-7f9"
    assert "ts_origin" not in rows[0].labels
    rows = _rows("vllm:num_requests_waiting 4\n", name="node07/pod-7f9-20261129T221500.250Z.prom", host="node07")
    assert rows[0].host == "node07" and rows[0].ts.microsecond == 250000


def test_instance_label_gives_host_without_port_but_not_loopback():
    rows = _rows('up{instance="10.1.2.3:8000"} 1\nup{instance="127.0.0.1:9090"} 1\n', host="capture-host")
    assert [r.host for r in rows] == ["10.1.2.3", "capture-host"]


def test_a_source_label_named_metric_is_kept_as_exported_metric():
    rows = _rows('vllm:num_requests_waiting{metric="x"} 1\n')
    assert rows[0].labels == {"exported_metric": "x", "metric": "queue_depth", "ts_origin": "mtime"}


def test_no_time_at_all_is_a_counted_skip():
    rows = _rows("vllm:num_requests_waiting 1\n", mtime=None)
    assert isinstance(rows[0], Skipped) and "no time" in rows[0].reason


def test_live_scrape_header_sets_time_and_instance():
    page = ("# gpuwb-scrape url=http://10.0.0.9:8000/metrics time=2026-11-29T22:15:00.500000Z\n"
            "vllm:num_requests_waiting 2\n")
    row = _rows(page, name="10.0.0.9:8000-20261129T221500.500Z.prom", host="cap")[0]
    assert row.ts == datetime(2026, 11, 29, 22, 15, 0, 500000, tzinfo=timezone.utc)
    assert row.labels["instance"] == "10.0.0.9:8000" and row.host == "cap"


# -- API JSON ----------------------------------------------------------------------------------

MATRIX = ('{"status":"success","data":{"resultType":"matrix","result":[{"metric":{'
          '"__name__":"vllm:num_requests_waiting","instance":"127.0.0.1:27227","job":"vllm","model_name":"meta-llama/Llama-3.1-8B-Instruct"},'
          '"values":[[1795992661,"3"],[1795992663,"3"],[1795992673,"17"],[1795992675,"NaN"]]}]}}')


def test_query_range_matrix():
    rows = _rows(MATRIX, kind="prom_api_json", host="cap")
    points = [r for r in rows if isinstance(r, SeriesPoint)]
    assert [p.value for p in points] == [3.0, 3.0, 17.0]
    assert points[0].ts == datetime.fromtimestamp(1795992661, tz=timezone.utc)
    assert points[0].labels["metric"] == "queue_depth" and points[0].host == "cap"
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["non-finite value (NaN/Inf)"]


def test_query_vector_and_expression_named_from_the_query_url():
    body = ('{"status":"success","data":{"resultType":"vector","result":[{"metric":{},'
            '"value":[1795992673.977,"0.5"]}]}}')
    url = ("http://127.0.0.1:9090/api/v1/query_range?query=histogram_quantile%280.9%2C+sum+by+%28le%29+%28"
           "vllm%3Atime_to_first_token_seconds_bucket%7Bjob%3D%22vllm%22%7D%29%29&start=1&end=2&step=1")
    row = _rows(body, kind="prom_api_json", name=url)[0]
    assert row.name == "vllm:time_to_first_token_seconds"
    assert row.labels["quantile"] == "0.9" and row.labels["stat"] == "p90"
    assert row.labels["metric"] == "ttft" and row.labels["job"] == "vllm"


def test_status_error_body_is_one_skipped_line():
    body = '{"status":"error","errorType":"bad_data","error":"1:5: parse error: unclosed left parenthesis"}'
    rows = _rows(body, kind="prom_api_json")
    assert len(rows) == 1 and isinstance(rows[0], Skipped)
    assert rows[0].reason == "prometheus error: bad_data: 1:5: parse error: unclosed left parenthesis"


def test_promtool_result_list_and_jsonl():
    listing = '[{"metric":{"__name__":"tgi_queue_size","instance":"a:80"},"values":[[1795992661,"4"]]}]'
    rows = _rows(listing, kind="prom_api_json")
    assert rows[0].name == "tgi_queue_size" and rows[0].labels["metric"] == "queue_depth" and rows[0].host == "a"
    jsonl = MATRIX + "\nnot json\n" + MATRIX.replace('"17"', '"18"') + "\n"
    rows = _rows(jsonl, kind="prom_api_json")
    assert sorted(r.value for r in rows if isinstance(r, SeriesPoint)) == [3.0, 3.0, 17.0, 18.0]


# -- sniffing ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", LATENCY_FILES, ids=[p.name for p in LATENCY_FILES])
def test_sniffed_kind_of_corpus_files(path):
    head = path.read_bytes()[:65536].decode("utf-8", "replace")
    kind, module = registry.sniff(path.name.rsplit(".", 1)[0], head)  # no extension: content must decide
    expected = {"prometheus_text": "prom_text"}.get(corpus_index()[f"latency/{path.name}"]["parsed_labels"]
                                                  .get("format", ""))
    assert kind == (expected or {"log": "prom_query_log", "txt": "bench_summary"}[path.suffix[1:]])


@pytest.mark.parametrize("text", [
    "MemTotal:       16384 kB\nMemFree:        1024 kB\n",
    "nr_free_pages 12345\nnr_zone_inactive_anon 3\n",
    "Max: 2.5\nP90: 0.1\n",
    "timestamp, name, pci.bus_id, utilization.gpu [%]\n2026/11/29 10:00:00.000, H100, 00000000:19:00.0, 5 %\n",
])
def test_sniff_leaves_other_formats_alone(text):
    assert not prometheus.sniff("x.txt", text)


# -- bad input never raises --------------------------------------------------------------------

_LINE = st.one_of(
    st.sampled_from(["# HELP vllm:x help", "# TYPE vllm:x counter", "# EOF", "", "#"]),
    st.builds(lambda n, v, t: f'vllm:num_requests_waiting{{model_name="{n}"}} {v}{t}',
              st.text(max_size=8), st.sampled_from(["NaN", "+Inf", "-Inf", "1.0", "40.000000", "1e308", "x", ""]),
              st.sampled_from(["", " 1395066363000", " -5", " 1.5", " abc"])),
    st.text(max_size=60),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(_LINE, max_size=30), cut=st.integers(min_value=0, max_value=400))
def test_fuzzed_pages_never_raise(lines, cut):
    page = "\n".join(lines)[: cut or None]
    rows = _rows(page)
    assert all(isinstance(r, (SeriesPoint, Skipped)) for r in rows)
    assert all(math.isfinite(r.value) for r in rows if isinstance(r, SeriesPoint))


@settings(max_examples=100, deadline=None)
@given(doc=st.recursive(st.none() | st.booleans() | st.floats() | st.text(max_size=10),
                        lambda children: st.lists(children, max_size=4) | st.dictionaries(
                            st.sampled_from(["status", "data", "result", "resultType", "metric", "values", "value",
                                             "__name__", "instance"]), children, max_size=4), max_leaves=20))
def test_fuzzed_api_json_never_raises(doc):
    rows = _rows(json.dumps(doc), kind="prom_api_json")
    assert all(isinstance(r, (SeriesPoint, Skipped)) for r in rows)


# -- live capture against a loopback server in this process ------------------------------------

class _FakeServer(http.server.BaseHTTPRequestHandler):
    """/metrics serves a page that changes on every scrape; /api/v1/query_range answers like Prometheus."""

    scrapes = 0

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook name
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/metrics":
            type(self).scrapes += 1
            self._send(200, f"vllm:num_requests_waiting{{model_name=\"m\"}} {type(self).scrapes}\n", "text/plain")
            return
        params = urllib.parse.parse_qs(parts.query)
        query = params.get("query", [""])[0]
        if parts.path != "/api/v1/query_range" or "(" in query and ")" not in query:
            self._send(400, '{"status":"error","errorType":"bad_data","error":"unclosed left parenthesis"}',
                       "application/json")
            return
        start, step = float(params["start"][0]), float(params["step"][0])
        values = [[start + i * step, "3"] for i in range(3)]
        body = {"status": "success", "data": {"resultType": "matrix", "result": [
            {"metric": {"__name__": query, "instance": "10.9.8.7:8000", "job": "vllm"}, "values": values}]}}
        self._send(200, json.dumps(body), "application/json")

    def _send(self, code: int, body: str, content_type: str) -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        return


@pytest.fixture
def fake_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    _FakeServer.scrapes = 0
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _capture(tmp_path: Path, *args: str) -> tuple[Path, str]:
    out = tmp_path / "cap.duckdb"
    code, stdout, stderr = run_cli("capture", "-o", out, "--since", "10m", *args)
    assert code == 0, stderr + stdout
    return out, stdout


def test_capture_scrapes_each_url_several_times(tmp_path, fake_server):
    out, _ = _capture(tmp_path, "--only", "prometheus", "--prom", fake_server, "--prom-samples", "3",
                      "--prom-interval", "200ms")
    with Bundle.open(out) as bundle:
        rows = bundle.con.execute("SELECT ts, value, labels FROM series ORDER BY ts").fetchall()
        arts = bundle.artifacts()
        status = bundle.coverage()[0]["status"]
    assert [v for _, v, _ in rows] == [1.0, 2.0, 3.0]
    assert 0.15 < (rows[1][0] - rows[0][0]).total_seconds() < 2
    assert json.loads(rows[0][2])["instance"] == fake_server.split("//")[1]
    assert all(a["kind"] == "prom_text" and json.loads(a["info"])["url"] == fake_server + "/metrics" for a in arts)
    assert status == "ok"


def test_capture_range_queries_and_keeps_error_bodies(tmp_path, fake_server):
    out, stdout = _capture(tmp_path, "--only", "prometheus", "--prom-server", fake_server,
                           "--query", "vllm:num_requests_waiting", "--query", "sum(rate(x[5m]", "--prom-step", "30s")
    with Bundle.open(out) as bundle:
        rows = bundle.con.execute("SELECT ts, host, value FROM series ORDER BY ts").fetchall()
        arts = bundle.con.execute("SELECT source, skipped, skip_reasons FROM artifact ORDER BY id").fetchall()
        cov = bundle.coverage()[0]
    assert [(h, v) for _, h, v in rows] == [("10.9.8.7", 3.0)] * 3
    assert (rows[1][0] - rows[0][0]).total_seconds() == 30
    assert len(arts) == 2 and "query_range?query=vllm%3Anum_requests_waiting" in arts[0][0]
    assert arts[1][1] == 1 and "unclosed left parenthesis" in arts[1][2]
    assert cov["status"] == "partial" and "HTTP 400" in cov["reason"]


def test_capture_reads_latency_files_with_their_own_collectors(tmp_path, corpus):
    csv_file = tmp_path / "lat.csv"
    csv_file.write_text("time,p99_ttft_ms\n2026-11-29T22:00:00Z,120\n2026-11-29T22:00:15Z,130\n")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01")
    page = corpus / "latency" / "sglang_4412_metrics_queue_gauges.prom"
    out, _ = _capture(tmp_path, "--only", "prometheus", "--only", "metrics_csv", "--latency", str(page),
                      "--latency", str(csv_file), "--latency", str(junk), "--latency", str(tmp_path / "missing"))
    with Bundle.open(out) as bundle:
        kinds = dict(bundle.con.execute("SELECT collector, kind FROM artifact").fetchall())
        names = {n for (n,) in bundle.con.execute("SELECT DISTINCT name FROM series").fetchall()}
        cov = {c["collector"]: c for c in bundle.coverage()}
        origins = {o for (o,) in bundle.con.execute(
            "SELECT DISTINCT json_extract_string(labels, '$.ts_origin') FROM series").fetchall()}
    assert kinds == {"prometheus": "prom_text", "metrics_csv": "metrics_csv"}
    assert {"sglang:num_running_reqs", "p99_ttft_ms"} <= names
    assert cov["metrics_csv"]["status"] == "ok"
    assert cov["prometheus"]["status"] == "partial" and "not a recognised" in cov["prometheus"]["reason"]
    assert origins == {"captured", None}  # the page has no clock of its own: capture time, approximate


def test_capture_refuses_other_schemes_and_reports_unreachable(tmp_path):
    out, _ = _capture(tmp_path, "--only", "prometheus", "--prom", "file:///etc/passwd",
                      "--prom", f"http://127.0.0.1:{_closed_port()}", "--prom-samples", "1")
    with Bundle.open(out) as bundle:
        cov = bundle.coverage()[0]
        assert bundle.con.execute("SELECT count(*) FROM artifact").fetchall() == [(0,)]
    assert cov["status"] == "unavailable"
    assert "only http:// and https://" in cov["reason"] and "unavailable:" in cov["reason"]


def test_capture_without_prometheus_options_says_so(tmp_path):
    out, _ = _capture(tmp_path, "--only", "prometheus")
    with Bundle.open(out) as bundle:
        cov = bundle.coverage()[0]
    assert cov["status"] == "unavailable" and "--prom URL" in cov["reason"]


def test_bad_step_is_a_usage_error(tmp_path):
    code, _, err = run_cli("capture", "-o", tmp_path / "x.duckdb", "--prom-step", "soon")
    assert code == 2 and "not a duration" in err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
