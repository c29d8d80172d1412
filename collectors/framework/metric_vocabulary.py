"""Serving metrics in one vocabulary: what each engine's exposed metric means, and its unit.

Parsers store every sample as it was exposed (name, labels, raw value and unit) and add one
label, ``metric``, naming the sample in a common vocabulary (``ttft``, ``tpot``, ``e2e_latency``,
``queue_depth``, ``kv_cache_usage``, ...), so a check can ask for "p99 TTFT" whatever engine
served it. A source label that is itself called ``metric`` is kept as ``exported_metric``, the
way Prometheus renames clashing target labels. Raw values keep their unit; :func:`unit_scale`
turns them into seconds (latency).

It lives with the parsers that tag samples (collectors/prometheus/, collectors/metrics_csv.py);
``workbench/query/series.py`` builds curves from the tagged rows with the same names.
"""

from __future__ import annotations

from collectors.framework.lazy_re import lazy_regex

SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")

# family name -> canonical metric. Latency families are histograms or summaries unless listed in
# CUMULATIVE_LATENCY (Triton's *_duration_us counters: total time, divided by requests served).
VOCABULARY: dict[str, str] = {
    # vLLM (V0 and V1 names)
    "vllm:time_to_first_token_seconds": "ttft",
    "vllm:time_per_output_token_seconds": "tpot",
    "vllm:inter_token_latency_seconds": "tpot",
    "vllm:request_time_per_output_token_seconds": "tpot",
    "vllm:e2e_request_latency_seconds": "e2e_latency",
    "vllm:request_queue_time_seconds": "queue_time",
    "vllm:request_inference_time_seconds": "compute_time",
    "vllm:request_prefill_time_seconds": "prefill_time",
    "vllm:request_decode_time_seconds": "decode_time",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "queue_depth",
    "vllm:num_requests_swapped": "requests_swapped",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:cpu_cache_usage_perc": "cpu_cache_usage",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:num_preemptions": "preemptions",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:prompt_tokens": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:generation_tokens": "generation_tokens",
    "vllm:request_success_total": "request_success",
    "vllm:request_success": "request_success",
    "vllm:avg_generation_throughput_toks_per_s": "gen_throughput",
    "vllm:avg_prompt_throughput_toks_per_s": "prompt_throughput",
    "vllm:gpu_prefix_cache_hit_rate": "prefix_cache_hit_rate",
    # SGLang
    "sglang:time_to_first_token_seconds": "ttft",
    "sglang:inter_token_latency_seconds": "tpot",
    "sglang:time_per_output_token_seconds": "tpot",
    "sglang:e2e_request_latency_seconds": "e2e_latency",
    "sglang:queue_time_seconds": "queue_time",
    "sglang:num_running_reqs": "requests_running",
    "sglang:num_queue_reqs": "queue_depth",
    "sglang:token_usage": "kv_cache_usage",
    "sglang:num_used_tokens": "kv_tokens_used",
    "sglang:gen_throughput": "gen_throughput",
    "sglang:prompt_tokens_total": "prompt_tokens",
    "sglang:generation_tokens_total": "generation_tokens",
    "sglang:num_requests_total": "requests_total",
    "sglang:num_aborted_requests_total": "request_failure",
    "sglang:cache_hit_rate": "prefix_cache_hit_rate",
    # Hugging Face TGI (a TGI "batch" is its set of running requests)
    "tgi_request_duration": "e2e_latency",
    "tgi_request_queue_duration": "queue_time",
    "tgi_request_inference_duration": "compute_time",
    "tgi_request_mean_time_per_token_duration": "tpot",
    "tgi_batch_inference_duration": "batch_forward_time",
    "tgi_queue_size": "queue_depth",
    "tgi_batch_current_size": "requests_running",
    "tgi_request_success": "request_success",
    "tgi_request_failure": "request_failure",
    "tgi_request_count": "requests_total",
    "tgi_request_generated_tokens": "generation_tokens_per_request",
    "tgi_request_input_length": "prompt_tokens_per_request",
    # NVIDIA Triton
    "nv_inference_request_duration_us": "e2e_latency",
    "nv_inference_queue_duration_us": "queue_time",
    "nv_inference_compute_input_duration_us": "compute_input_time",
    "nv_inference_compute_infer_duration_us": "compute_time",
    "nv_inference_compute_output_duration_us": "compute_output_time",
    "nv_inference_request_summary_us": "e2e_latency",
    "nv_inference_queue_summary_us": "queue_time",
    "nv_inference_compute_input_summary_us": "compute_input_time",
    "nv_inference_compute_infer_summary_us": "compute_time",
    "nv_inference_compute_output_summary_us": "compute_output_time",
    "nv_inference_first_response_histogram_ms": "ttft",
    "nv_inference_request_success": "request_success",
    "nv_inference_request_failure": "request_failure",
    "nv_inference_count": "inference_count",
    "nv_inference_exec_count": "exec_count",
    "nv_inference_pending_request_count": "queue_depth",
    "nv_gpu_utilization": "gpu_utilization",
}

CUMULATIVE_LATENCY = frozenset({
    "nv_inference_request_duration_us", "nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us"})

LATENCY = frozenset({"ttft", "tpot", "e2e_latency", "queue_time", "compute_time", "prefill_time", "decode_time",
                     "compute_input_time", "compute_output_time", "batch_forward_time"})
COUNTERS = frozenset({"preemptions", "prompt_tokens", "generation_tokens", "request_success", "request_failure",
                      "requests_total", "inference_count", "exec_count"})

FAILED_FINISH = frozenset({"abort", "error"})
"""vLLM counts every finished request in request_success_total; these finished_reason values are failures."""

IDENTITY_LABELS = ("instance", "pod", "namespace", "job", "model_name", "model", "method", "gpu_uuid")
"""Labels that tell one server or model apart; every other label (engine, version, reason, le, ...) is
summed over when a signal is built."""

_WORDS = (  # free-form column and summary names (CSV, benchmark output): first match wins
    (lazy_regex(r"ttft|time.to.first|first.token|first_response"), "ttft"),
    (lazy_regex(r"tpot|itl\b|itl_|inter.token|time.per.output|per.token"), "tpot"),
    (lazy_regex(r"e2e|end.to.end|request.latency|request_duration|latency"), "e2e_latency"),
    (lazy_regex(r"queue.(?:time|duration|wait)"), "queue_time"),
    (lazy_regex(r"queue|waiting|pending"), "queue_depth"),
    (lazy_regex(r"kv.?cache|cache.usage|token.usage"), "kv_cache_usage"),
    (lazy_regex(r"running"), "requests_running"),
    (lazy_regex(r"preempt"), "preemptions"),
    (lazy_regex(r"(?:error|fail\w*).?(?:rate|ratio)"), "error_rate"),
    (lazy_regex(r"(?:fail|error)"), "request_failure"),
    (lazy_regex(r"(?:output|generat\w*).?(?:token.)?throughput|gen.throughput"), "gen_throughput"),
    (lazy_regex(r"request.(?:throughput|rate)|req.?/s|rps|qps"), "request_rate"),
)
_QUANTILE_WORD = lazy_regex(r"(?:^|[^a-z0-9])p(\d{2,3}(?:\.\d+)?)(?:[^0-9]|$)")
_STAT_WORD = lazy_regex(r"(?:^|[^a-z])(mean|avg|average|median|max|min|std)(?:[^a-z]|$)")
_UNIT_SUFFIX = (("_microseconds", 1e-6), ("_milliseconds", 1e-3), ("_seconds", 1.0), ("_us", 1e-6), ("_ms", 1e-3),
                ("_s", 1.0))


def family(name: str) -> tuple[str, str]:
    """(family, suffix): ``vllm:ttft..._bucket`` -> (``vllm:ttft...``, ``_bucket``). Names the
    vocabulary knows whole (``vllm:num_preemptions_total``) keep their suffix."""
    if name in VOCABULARY:
        return name, ""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)], suffix
    return name, ""


def canonical(name: str, labels: dict[str, str] | None = None) -> str | None:
    """The vocabulary name of an exposed sample, or None for metrics we do not interpret."""
    base, _ = family(name)
    metric = VOCABULARY.get(name) or VOCABULARY.get(base)
    if metric == "request_success" and labels and labels.get("finished_reason", "").lower() in FAILED_FINISH:
        return "request_failure"
    return metric


def tag(name: str, labels: dict[str, str], metric: str | None = None) -> dict[str, str]:
    """Labels as stored: the source's labels plus ``metric`` (the vocabulary name, when known);
    a source label already called ``metric`` is kept as ``exported_metric``."""
    out = dict(labels)
    if "metric" in out:
        out["exported_metric"] = out.pop("metric")
    metric = metric or canonical(name, labels)
    if metric:
        out["metric"] = metric
    return out


def canonical_from_words(text: str) -> str | None:
    """Vocabulary name for a free-form column or benchmark key such as ``p99_ttft_ms`` or ``Mean ITL (ms)``."""
    low = text.lower()
    exact = canonical(text)
    if exact:
        return exact
    for pattern, metric in _WORDS:
        if pattern.search(low):
            return metric
    return None


def stat_from_words(text: str) -> tuple[str | None, str | None]:
    """(stat, quantile) named in a column or key: ``P99 TTFT`` -> ("p99", "0.99"), ``Median`` -> ("median", "0.5")."""
    low = text.lower()
    if m := _QUANTILE_WORD.search(low):
        digits = m.group(1)
        q = float(digits) / (10 ** len(digits.split(".")[0]))
        return f"p{digits}", f"{q:g}"
    if m := _STAT_WORD.search(low):
        word = {"avg": "mean", "average": "mean"}.get(m.group(1), m.group(1))
        return word, ("0.5" if word == "median" else None)
    return None, None


def word_labels(text: str) -> dict[str, str]:
    """``metric``/``stat``/``quantile`` labels for a free-form name (CSV column, benchmark key)."""
    metric = canonical_from_words(text)
    if not metric:
        return {}  # "Max request concurrency" is a setting, not a statistic of a metric we know
    out = {"metric": metric}
    stat, quantile = stat_from_words(text)
    if stat:
        out["stat"] = stat
    if quantile:
        out["quantile"] = quantile
    return out


def unit_scale(name: str) -> float:
    """Factor that turns a raw value of ``name`` into base units (seconds for latency)."""
    low = family(name)[0].lower().replace(" ", "")
    if "(ms)" in low:
        return 1e-3
    if "(us)" in low or "(µs)" in low:
        return 1e-6
    for suffix, factor in _UNIT_SUFFIX:
        if low.endswith(suffix):
            return factor
    return 1.0
