"""Serving metrics in one vocabulary, and the arithmetic Prometheus does on them.

Parsers store every sample as it was exposed (name, labels, raw value and unit) and add one
label, ``metric``, naming the sample in a common vocabulary (``ttft``, ``tpot``, ``e2e_latency``,
``queue_depth``, ``kv_cache_usage``, ...), so a check can ask for "p99 TTFT" whatever engine
served it. A source label that is itself called ``metric`` is kept as ``exported_metric``, the
way Prometheus renames clashing target labels. Raw values keep their unit; :func:`unit_scale`
turns them into seconds (latency) when a signal is built.

Derived numbers (interval quantiles from bucket deltas, counter rates, error ratios) are not
stored: :func:`signals` recomputes them from the series table, so the anomaly derivation, the
analysis and the report read the same curves. Quantiles follow Prometheus' histogram_quantile:
buckets as deltas between successive scrapes (a decrease means the server restarted: the new
cumulative counts are the delta), linear interpolation inside the bucket holding the rank.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

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
    (re.compile(r"ttft|time.to.first|first.token|first_response"), "ttft"),
    (re.compile(r"tpot|itl\b|itl_|inter.token|time.per.output|per.token"), "tpot"),
    (re.compile(r"e2e|end.to.end|request.latency|request_duration|latency"), "e2e_latency"),
    (re.compile(r"queue.(?:time|duration|wait)"), "queue_time"),
    (re.compile(r"queue|waiting|pending"), "queue_depth"),
    (re.compile(r"kv.?cache|cache.usage|token.usage"), "kv_cache_usage"),
    (re.compile(r"running"), "requests_running"),
    (re.compile(r"preempt"), "preemptions"),
    (re.compile(r"(?:error|fail\w*).?(?:rate|ratio)"), "error_rate"),
    (re.compile(r"(?:fail|error)"), "request_failure"),
    (re.compile(r"(?:output|generat\w*).?(?:token.)?throughput|gen.throughput"), "gen_throughput"),
    (re.compile(r"request.(?:throughput|rate)|req.?/s|rps|qps"), "request_rate"),
)
_QUANTILE_WORD = re.compile(r"(?:^|[^a-z0-9])p(\d{2,3}(?:\.\d+)?)(?:[^0-9]|$)")
_STAT_WORD = re.compile(r"(?:^|[^a-z])(mean|avg|average|median|max|min|std)(?:[^a-z]|$)")
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


# -- quantiles ---------------------------------------------------------------------------------

def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]], *, allow_truncated: bool = False) -> float:
    """The q-quantile of cumulative ``(upper_bound, count)`` buckets, as Prometheus computes it.

    NaN when undefined (no observations, fewer than two buckets, no +Inf bucket). With
    ``allow_truncated`` a histogram cut before its +Inf bucket (a pasted or truncated page) uses
    its highest bucket as the total: the result is then a lower bound of the true quantile."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for le, count in buckets:
        if math.isnan(le) or math.isnan(count):
            continue
        merged[le] = merged.get(le, 0.0) + count
    ordered = sorted(merged.items())
    if not ordered:
        return math.nan
    if not math.isinf(ordered[-1][0]):
        if not allow_truncated:
            return math.nan
        ordered.append((math.inf, ordered[-1][1]))
    running = 0.0
    monotonic = []
    for le, count in ordered:  # float noise can make cumulative counts dip; Prometheus flattens it
        running = max(running, count)
        monotonic.append((le, running))
    if len(monotonic) < 2:
        return math.nan
    total = monotonic[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, count) in enumerate(monotonic) if count >= rank or i == len(monotonic) - 1)
    if b == len(monotonic) - 1:
        return monotonic[-2][0]
    if b == 0 and monotonic[0][0] <= 0:
        return monotonic[0][0]
    start, below = (monotonic[b - 1] if b > 0 else (0.0, 0.0))
    end, count = monotonic[b]
    return start + (end - start) * ((rank - below) / (count - below))


def bucket_deltas(previous: dict[float, float] | None, current: dict[float, float]) -> tuple[dict[float, float], bool]:
    """Observations between two scrapes of one histogram: (per-bucket deltas, reset). Any bucket
    that went down means the server restarted, so the new cumulative counts are the delta."""
    if previous is None:
        return dict(current), False
    reset = any(current.get(le, 0.0) < count for le, count in previous.items() if le in current)
    if reset:
        return dict(current), True
    return {le: count - previous.get(le, 0.0) for le, count in current.items()}, False


@dataclass
class IntervalQuantiles:
    """Quantiles of the observations made between the previous scrape and ``ts``."""

    ts: datetime
    observations: float
    values: dict[float, float]
    reset: bool = False


def interval_quantiles(scrapes: Sequence[tuple[datetime, dict[float, float]]],
                       qs: Sequence[float] = (0.5, 0.95, 0.99), *, allow_truncated: bool = False,
                       include_first: bool = False) -> list[IntervalQuantiles]:
    """Per-interval quantiles from successive cumulative scrapes of one histogram (sorted by time).

    The first scrape has no predecessor; with ``include_first`` its quantiles cover everything
    since the server started. Intervals without new observations are left out."""
    out: list[IntervalQuantiles] = []
    previous: dict[float, float] | None = None
    for ts, buckets in sorted(scrapes, key=lambda s: s[0]):
        if previous is None and not include_first:
            previous = buckets
            continue
        delta, reset = bucket_deltas(previous, buckets)
        previous = buckets
        finite = [v for v in delta.values() if not math.isnan(v)]
        observations = max(finite) if finite else 0.0
        if observations <= 0:
            continue
        values = {q: histogram_quantile(q, delta.items(), allow_truncated=allow_truncated) for q in qs}
        out.append(IntervalQuantiles(ts, observations, values, reset))
    return out


def counter_deltas(points: Sequence[tuple[datetime, float]]) -> list[tuple[datetime, float, float]]:
    """(ts, increase, seconds since the previous point) for a counter; a decrease is a restart
    (Prometheus' rule), so the new value itself is the increase. NaN/Inf points are ignored."""
    out: list[tuple[datetime, float, float]] = []
    previous: tuple[datetime, float] | None = None
    for ts, value in sorted(points, key=lambda p: p[0]):
        if not math.isfinite(value):
            continue
        if previous is not None and ts > previous[0]:
            increase = value if value < previous[1] else value - previous[1]
            out.append((ts, increase, (ts - previous[0]).total_seconds()))
        previous = (ts, value)
    return out


# -- signals: the curves a responder looks at --------------------------------------------------

@dataclass
class Signal:
    """One curve per server/model: p99 TTFT, queue depth, error ratio, request rate, ..."""

    host: str | None
    metric: str
    stat: str
    unit: str
    identity: dict[str, str]
    points: list[tuple[datetime, float]] = field(default_factory=list)
    approx: bool = False
    source: str = ""


@dataclass
class _Rows:
    """The rows of one (host, identity) group, split by how they must be combined."""

    buckets: dict[tuple[str, str], dict[datetime, dict[float, float]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(dict)))
    quantiles: dict[tuple[str, str, str], dict[datetime, float]] = field(
        default_factory=lambda: defaultdict(dict))
    plain: dict[tuple[str, str, str], dict[datetime, float]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    approx: bool = False


def load_rows(con: Any, metrics: Iterable[str] | None = None) -> Iterator[tuple[datetime, str | None, str,
                                                                                dict[str, str], float]]:
    """Series rows that carry a vocabulary name, oldest first, fetched in batches."""
    sql = ("SELECT ts, host, name, labels, value FROM series "
           "WHERE json_extract_string(labels, '$.metric') IS NOT NULL AND ts IS NOT NULL")
    params: list[Any] = []
    wanted = sorted(set(metrics or ()))
    if wanted:
        sql += f" AND json_extract_string(labels, '$.metric') IN ({', '.join('?' for _ in wanted)})"
        params = wanted
    cur = con.execute(sql + " ORDER BY ts", params)
    while True:
        batch = cur.fetchmany(50_000)
        if not batch:
            return
        for ts, host, name, labels, value in batch:
            yield ts, host, name, json.loads(labels) if labels else {}, value


def signals(con: Any, metrics: Iterable[str] | None = None) -> list[Signal]:
    """Every curve the series table supports, per host and server identity.

    Histograms give per-interval p50/p95/p99 (stat ``p50``...), summaries and quantile-labelled
    values give their quantiles, Triton cumulative durations give a per-interval ``mean``,
    gauges their ``value``, counters a per-second ``rate``; failure vs success counters give
    ``error_rate`` (ratio), and request counters a ``request_rate``. Latencies are in seconds."""
    groups: dict[tuple[str | None, tuple[tuple[str, str], ...]], _Rows] = defaultdict(_Rows)
    for ts, host, name, labels, value in load_rows(con, metrics):
        if value is None or math.isnan(value):
            continue
        metric = labels.get("metric", "")
        identity = tuple((k, labels[k]) for k in IDENTITY_LABELS if labels.get(k))
        rows = groups[(host, identity)]
        rows.approx = rows.approx or labels.get("ts_origin") in ("mtime", "captured")
        base, suffix = family(name)
        if suffix == "_bucket" and "le" in labels:
            try:
                le = float(labels["le"])
            except ValueError:
                continue
            per_ts = rows.buckets[(metric, base)][ts]
            per_ts[le] = per_ts.get(le, 0.0) + value
        elif "quantile" in labels and suffix not in ("_sum", "_count"):
            stat = labels.get("stat") or _quantile_stat(labels["quantile"])
            per_ts = rows.quantiles[(metric, base, stat)]
            per_ts[ts] = max(per_ts.get(ts, value), value)  # quantiles do not add up: keep the worst
        else:
            kind = "cumulative" if base in CUMULATIVE_LATENCY else (suffix or "value")
            stat = labels.get("stat")
            rows.plain[(metric, name if stat is None else f"{name}|{stat}", kind)][ts] += value
    out: list[Signal] = []
    for (host, identity), rows in groups.items():
        out.extend(_group_signals(host, dict(identity), rows))
    return out


def _quantile_stat(quantile: str) -> str:
    try:
        return f"p{float(quantile) * 100:g}"
    except ValueError:
        return f"q{quantile}"


def _group_signals(host: str | None, identity: dict[str, str], rows: _Rows) -> Iterator[Signal]:
    def signal(metric: str, stat: str, unit: str, points: list[tuple[datetime, float]], source: str) -> Signal:
        return Signal(host, metric, stat, unit, identity, points, rows.approx, source)

    for (metric, base), by_ts in rows.buckets.items():
        scale = unit_scale(base)
        intervals = interval_quantiles(sorted(by_ts.items()), allow_truncated=True)
        for q in (0.5, 0.95, 0.99):
            points = [(iv.ts, iv.values[q] * scale) for iv in intervals if math.isfinite(iv.values[q])]
            if points:
                yield signal(metric, _quantile_stat(str(q)), "s" if metric in LATENCY else "", points, base)
    for (metric, base, stat), by_ts in rows.quantiles.items():
        scale = unit_scale(base) if metric in LATENCY else 1.0
        points = [(ts, v * scale) for ts, v in sorted(by_ts.items()) if math.isfinite(v)]
        yield signal(metric, stat, "s" if metric in LATENCY else "", points, base)
    served = _served(rows)
    counters: dict[str, list[list[tuple[datetime, float]]]] = defaultdict(list)
    for (metric, key, kind), by_ts in rows.plain.items():
        name = key.split("|")[0]
        stat = key.split("|")[1] if "|" in key else None
        points = sorted(by_ts.items())
        if kind == "cumulative":
            mean = _ratio_of_increases(points, served)
            if mean:
                yield signal(metric, "mean", "s", [(ts, v * unit_scale(name)) for ts, v in mean], name)
        elif kind in ("_sum", "_count"):
            continue
        elif metric in COUNTERS or kind == "_total":
            counters[metric].append(points)
        elif metric in LATENCY:
            yield signal(metric, stat or "value", "s", [(ts, v * unit_scale(name)) for ts, v in points], name)
        else:
            yield signal(metric, stat or "value", "", points, name)
    yield from _sum_count_means(rows, signal)
    rates = {metric: _merge([p for points in series for p in _rate(points)]) for metric, series in counters.items()}
    for metric, points in rates.items():
        if points:
            yield signal(metric, "rate", "1/s", points, metric)
    yield from _derived_rates(rows, rates, signal)


def _merge(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    merged: dict[datetime, float] = defaultdict(float)
    for ts, value in points:
        merged[ts] += value
    return sorted(merged.items())


def _rate(points: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    return [(ts, inc / dt) for ts, inc, dt in counter_deltas(points) if dt > 0]


def _served(rows: _Rows) -> list[tuple[datetime, float]]:
    """Requests completed (success + failure) per scrape time, for Triton's cumulative durations."""
    merged: dict[datetime, float] = defaultdict(float)
    for (metric, _, _), by_ts in rows.plain.items():
        if metric in ("request_success", "request_failure"):
            for ts, value in by_ts.items():
                merged[ts] += value
    return sorted(merged.items())


def _ratio_of_increases(numerator: list[tuple[datetime, float]],
                        denominator: list[tuple[datetime, float]]) -> list[tuple[datetime, float]]:
    den = {ts: inc for ts, inc, _ in counter_deltas(denominator)}
    return [(ts, inc / den[ts]) for ts, inc, _ in counter_deltas(numerator) if den.get(ts, 0) > 0]


def _sum_count_means(rows: _Rows, signal: Any) -> Iterator[Signal]:
    """Mean latency per interval from a histogram's or summary's _sum and _count."""
    sums: dict[str, tuple[str, dict[datetime, float]]] = {}
    counts: dict[str, dict[datetime, float]] = {}
    for (metric, key, kind), by_ts in rows.plain.items():
        if metric not in LATENCY or "|" in key:
            continue
        if kind == "_sum":
            sums[family(key)[0]] = (metric, by_ts)
        elif kind == "_count":
            counts[family(key)[0]] = by_ts
    for base, (metric, by_ts) in sums.items():
        if base in counts:
            mean = _ratio_of_increases(sorted(by_ts.items()), sorted(counts[base].items()))
            if mean:
                yield signal(metric, "mean", "s", [(ts, v * unit_scale(base)) for ts, v in mean], base)


def _derived_rates(rows: _Rows, rates: dict[str, list[tuple[datetime, float]]], signal: Any) -> Iterator[Signal]:
    """Error ratio (failures / finished requests) and request arrival rate per interval."""
    failure = dict(rates.get("request_failure", []))
    success = dict(rates.get("request_success", []))
    if failure:
        ratio = [(ts, f / (f + success.get(ts, 0.0))) for ts, f in sorted(failure.items())
                 if f + success.get(ts, 0.0) > 0]
        if ratio and success:
            yield signal("error_rate", "ratio", "", ratio, "request_failure/request_success")
    if "requests_total" in rates:
        yield signal("request_rate", "rate", "1/s", rates["requests_total"], "requests_total")
    elif success:
        total = [(ts, s + failure.get(ts, 0.0)) for ts, s in sorted(success.items())]
        yield signal("request_rate", "rate", "1/s", total, "request_success+request_failure")
    else:
        for (metric, key, kind), by_ts in rows.plain.items():
            if kind == "_count" and metric in ("e2e_latency", "ttft") and "|" not in key:
                yield signal("request_rate", "rate", "1/s", _rate(sorted(by_ts.items())), key)
                return
