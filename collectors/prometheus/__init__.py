"""Serving metrics from Prometheus: /metrics pages (vLLM, SGLang, TGI, Triton), API responses, and
scrapes and range queries made at capture time.

Three offline kinds: ``prom_text`` (the text exposition format, OpenMetrics included),
``prom_api_json`` (``/api/v1/query_range`` and ``/api/v1/query`` bodies, error bodies too) and
``prom_query_log`` (tool logs that print API responses, such as the GKE benchmark's PromQL log).
Each sample becomes a SeriesPoint with its exposed name and labels plus the vocabulary label of
:mod:`workbench.query.series`. A page without per-sample timestamps takes the UTC stamp in its file name
(``pod-20261129T221500Z.prom``, the part before the stamp being the instance), else the file's
mtime (or, for a file read at capture, the capture time), marked ``ts_origin=mtime`` /
``captured`` in the labels because it is approximate.

Live, ``--prom URL`` scrapes each URL several times across the capture and stores each scrape
under that file-name convention, its body verbatim after one header line of gpuwb's own
(``# gpuwb-scrape url=... time=...``, a comment to any exposition parser): it says when the page
was fetched, and keeps two identical pages fetched at different times from being stored as one
artifact (the bundle keeps identical bytes once). Live and offline scrapes share one parser;
``--prom-server URL --query Q`` runs query_range over the capture window. Only http(s) URLs the

The package, one module per format:

    exposition.py  ``prom_text``: the text exposition format, Prometheus and OpenMetrics
    api_json.py    ``prom_api_json``: HTTP API bodies (query, query_range, errors), whole or cut short
    query_log.py   ``prom_query_log``: tool logs that print API responses
    scrape.py      live capture: --prom scrapes, --prom-server range queries, --latency files
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, ParseContext, Row
from collectors.framework.lazy_re import lazy_regex
from collectors.prometheus import scrape
from collectors.prometheus.api_json import parse_api
from collectors.prometheus.exposition import parse_text
from collectors.prometheus.query_log import parse_query_log
from collectors.prometheus.scrape import add_capture_arguments

NAME = "prometheus"
LAYER = "business"
KINDS = ("prom_text", "prom_api_json", "prom_query_log")
TIMEOUT = 30.0
PRIORITY = 50

_SAMPLE_HEAD = lazy_regex(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^\n]*\})?[ \t]+\S+(?:[ \t]+-?\d+(?:\.\d+)?)?[ \t]*$")
_TYPE_LINE = lazy_regex(r"^#\s*TYPE\s+\S+\s+(?:counter|gauge|histogram|summary|untyped|gaugehistogram|info|"
                        r"stateset|unknown)\s*$", re.MULTILINE)
_HELP_LINE = lazy_regex(r"^#\s*HELP\s+\S+", re.MULTILINE)
_SERVING_PREFIX = lazy_regex(r"^(?:vllm:|sglang:|tgi_|nv_inference_|nv_gpu_|nv_trt_llm_)", re.MULTILINE)
_SERVING_WORDS = ("vllm:", "sglang:", "tgi_", "nv_")
"""What every _SERVING_PREFIX match holds: a text without any is not searched."""
_API_HEAD = lazy_regex(r'^\s*[\[{].*"(?:resultType|errorType)"', re.DOTALL)
_LOGGED_RESPONSE = lazy_regex(r"""['"]status['"]\s*:\s*['"](?:success|error)['"]""")


# -- sniffing ----------------------------------------------------------------------------------

def _sniffed_lines(text: str) -> list[str]:
    """The head's first 400 non-blank lines, less a last line cut mid-way."""
    lines = [line for line in text.splitlines()[:400] if line.strip()]
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]
    return lines


def sniff(name: str, head: str) -> dict[str, int]:
    """Which Prometheus shape the first bytes look like (and how sure we are)."""
    text = head.lstrip("\ufeff")
    if not text.strip():
        return {}
    start = text[:4096]
    if (_API_HEAD.match(start) and '"status"' in start) or re.match(r'\s*\[\s*\{\s*"metric"', start):
        return {"prom_api_json": 90}
    if "resultType" in text and not text.lstrip().startswith("{") and any(
            "resultType" in line and _LOGGED_RESPONSE.search(line) for line in _sniffed_lines(text)):
        return {"prom_query_log": 85}
    typed = (len(_TYPE_LINE.findall(text)) if "TYPE" in text else 0) + (
        len(_HELP_LINE.findall(text)) if "HELP" in text else 0)
    named = name.lower().endswith((".prom", ".metrics"))
    if typed < 2 and not named and 'le="' not in text and not (
            any(word in text for word in _SERVING_WORDS) and _SERVING_PREFIX.search(text)):
        return {}  # no verdict below can hold, whatever the samples: spares splitting and a match per line
    lines = _sniffed_lines(text)
    data = [line for line in lines if not line.startswith("#")]
    samples = sum(1 for line in data if _SAMPLE_HEAD.match(line))
    share = samples / len(data) if data else 0.0
    dcgm = "DCGM_FI_" in text  # leave DCGM exporter pages to a DCGM-specific parser if one claims them
    if typed >= 2 and (share >= 0.5 or not data):
        return {"prom_text": 60 if dcgm else 90}
    if named and (share >= 0.5 or typed):
        return {"prom_text": 85}
    if samples >= 2 and share >= 0.8 and (_SERVING_PREFIX.search(text) or 'le="' in text):
        return {"prom_text": 70}
    return {}


# -- parsing -----------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "prom_api_json":
        yield from parse_api(stream, ctx)
    elif kind == "prom_query_log":
        yield from parse_query_log(stream, ctx)
    else:
        yield from parse_text(stream, ctx)


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    options = ctx.options
    budget = float(options.get(f"timeout_{NAME}") or TIMEOUT) * float(options.get("timeout_scale") or 1.0)
    deadline = time.monotonic() + budget - 2.0
    if not (options.get("prom") or options.get("prom_server") or options.get("latency")):
        ctx.missing("serving metrics", "not requested: pass --prom URL, --prom-server URL or --latency FILE")
        return
    yield from scrape.capture_files(ctx, NAME, report_unclaimed=True)
    for server in options.get("prom_server") or []:
        for query in options.get("query") or [scrape.default_query()]:
            artifact = scrape.range_query(ctx, server, query, options.get("prom_step"), deadline)
            if artifact is not None:
                yield artifact
    urls = [u for u in (options.get("prom") or []) if scrape.usable(ctx, u)]
    samples = max(1, int(options.get("prom_samples") or 3))
    interval = float(options.get("prom_interval") or 5.0)
    if urls and samples > 1 and (samples - 1) * interval > deadline - time.monotonic() - scrape.REQUEST_TIMEOUT:
        interval = max(0.5, (deadline - time.monotonic() - scrape.REQUEST_TIMEOUT) / (samples - 1))
        ctx.missing("--prom-interval", f"shortened to {interval:.1f} s to fit the collector's time budget")
    for i in range(samples if urls else 0):
        tick = time.monotonic()
        for url in urls:
            artifact = scrape.scrape_page(ctx, url, deadline)
            if artifact is not None:
                yield artifact
        if i + 1 < samples:
            pause = interval - (time.monotonic() - tick)
            if time.monotonic() + max(pause, 0) > deadline:
                ctx.missing("--prom-samples", f"stopped after {i + 1} scrape(s): time budget reached")
                break
            time.sleep(max(pause, 0))


__all__ = ["KINDS", "LAYER", "NAME", "PRIORITY", "TIMEOUT", "add_capture_arguments", "capture", "parse", "sniff"]
