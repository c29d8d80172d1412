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
user gave are fetched, through urllib with a timeout; nothing is ever passed to a shell.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any, BinaryIO

from collectors.base import Artifact, CaptureContext, ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.framing import format_iso
from collectors.framework.json_items import Damage, decoded, no_lone_surrogates, values
from collectors.framework.lazy_re import lazy_regex

NAME = "prometheus"
LAYER = "business"
KINDS = ("prom_text", "prom_api_json", "prom_query_log")
TIMEOUT = 30.0
PRIORITY = 50

MAX_JSON_BYTES = 64 << 20
"""An API body is one JSON document and must be read whole (as Python objects, ~10x its size); larger
ones are refused with a counted skip rather than loaded. Split such queries by time or series."""
MAX_FETCH_BYTES = 64 << 20
REQUEST_TIMEOUT = 10.0
MAX_POINTS = 11_000
"""Prometheus refuses range queries with more points than this per series."""

_NAME = lazy_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = lazy_regex(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SAMPLE_HEAD = lazy_regex(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^\n]*\})?[ \t]+\S+(?:[ \t]+-?\d+(?:\.\d+)?)?[ \t]*$")
_TYPE_LINE = lazy_regex(r"^#\s*TYPE\s+\S+\s+(?:counter|gauge|histogram|summary|untyped|gaugehistogram|info|"
                        r"stateset|unknown)\s*$", re.MULTILINE)
_HELP_LINE = lazy_regex(r"^#\s*HELP\s+\S+", re.MULTILINE)
_SERVING_PREFIX = lazy_regex(r"^(?:vllm:|sglang:|tgi_|nv_inference_|nv_gpu_|nv_trt_llm_)", re.MULTILINE)
_SERVING_WORDS = ("vllm:", "sglang:", "tgi_", "nv_")
"""What every _SERVING_PREFIX match holds: a text without any is not searched."""
_STAMP = lazy_regex(r"(\d{8}T\d{6}(?:[.,]\d{1,9})?Z)")
_API_HEAD = lazy_regex(r'^\s*[\[{].*"(?:resultType|errorType)"', re.DOTALL)
_LOGGED_RESPONSE = lazy_regex(r"""['"]status['"]\s*:\s*['"](?:success|error)['"]""")
_FINDING = lazy_regex(r"Finding\s+(?P<stat>\S+)\s+(?P<metric>[a-zA-Z_:][\w:]*)\s+with the following query:"
                      r"\s*(?P<q>.+)$")
_METRIC_NAME = lazy_regex(r"^\s*Metric Name:\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*$")
_STAT_LINE = lazy_regex(r"^\s*(?P<stat>Mean|Median|Min|Max|Avg|P\d+(?:\.\d+)?)\s*:\s*(?P<value>\S+)\s*$", re.I)
_HQ = lazy_regex(r"histogram_quantile\(\s*(?P<q>[0-9.]+)\s*,.*?(?P<metric>[a-zA-Z_:][\w:]*)_bucket\b", re.DOTALL)
_SELECTOR = lazy_regex(r"^\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*$")
_MATCHER = lazy_regex(r"""(?P<name>[a-zA-Z_]\w*)\s*=\s*(?P<quote>['"])(?P<value>(?:[^'"\\]|\\.)*)(?P=quote)""")
_RANGE = lazy_regex(r"\[(?P<range>\d+[smhdwy])\]")
_RESULT_TYPE = lazy_regex(r'"resultType"\s*:\s*"(\w+)"')
_SCRAPE_MARK = lazy_regex(r"^# gpuwb-scrape url=(?P<url>\S+) time=(?P<time>\S+)\s*$")
_LOOPBACK = lazy_regex(r"^(?:127\.\d+\.\d+\.\d+|localhost|::1|0\.0\.0\.0)$", re.I)


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
        yield from _parse_api(stream, ctx)
    elif kind == "prom_query_log":
        yield from _parse_query_log(stream, ctx)
    else:
        yield from _parse_text(stream, ctx)


def parse_sample(line: str) -> tuple[str, dict[str, str], float, float | None]:
    """One exposition sample line -> (name, labels, value, timestamp in Unix seconds or None).

    Raises ValueError with a short reason for anything that is not a complete sample."""
    n = len(line)
    pos = _skip_ws(line, 0)
    name = None
    m = _NAME.match(line, pos)
    if m:
        name, pos = m.group(), m.end()
    labels: dict[str, str] = {}
    if pos < n and line[pos] == "{":
        name, pos = _parse_labels(line, pos + 1, name, labels)
    if not name:
        raise ValueError("no metric name")
    if pos < n and line[pos] not in " \t":
        raise ValueError("bad character after the metric name")
    rest = line[pos:].split()
    if "#" in rest:  # OpenMetrics exemplar: `value [ts] # {trace_id="..."} 1.0`
        rest = rest[: rest.index("#")]
    if not rest:
        raise ValueError("sample without a value")
    if len(rest) > 2:
        raise ValueError("trailing text after the sample")
    value = _number(rest[0])
    stamp = _timestamp(rest[1]) if len(rest) == 2 else None
    return name, labels, value, stamp


def _skip_ws(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _parse_labels(line: str, pos: int, name: str | None, labels: dict[str, str]) -> tuple[str | None, int]:
    n = len(line)
    while True:
        pos = _skip_ws(line, pos)
        if pos >= n:
            raise ValueError("unclosed label set (truncated line?)")
        if line[pos] == "}":
            return name, pos + 1
        if line[pos] == '"':
            key, pos = _quoted(line, pos)
            pos = _skip_ws(line, pos)
            if pos < n and line[pos] != "=":  # Prometheus 3 UTF-8 name inside the braces
                if name:
                    raise ValueError("two metric names")
                name = key
                pos = _after_label(line, pos)
                continue
        else:
            m = _LABEL_NAME.match(line, pos)
            if not m:
                raise ValueError("bad label name")
            key, pos = m.group(), m.end()
        pos = _skip_ws(line, pos)
        if pos >= n or line[pos] != "=":
            raise ValueError("label without '='")
        pos = _skip_ws(line, pos + 1)
        if pos >= n or line[pos] != '"':
            raise ValueError("label value not quoted")
        labels[key], pos = _quoted(line, pos)
        pos = _after_label(line, pos)


def _after_label(line: str, pos: int) -> int:
    pos = _skip_ws(line, pos)
    if pos < len(line) and line[pos] == ",":
        return pos + 1
    if pos < len(line) and line[pos] == "}":
        return pos
    raise ValueError("unclosed label set (truncated line?)")


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _quoted(line: str, pos: int) -> tuple[str, int]:
    """A double-quoted string starting at ``pos`` with Prometheus escapes (\\\\, \\", \\n)."""
    out: list[str] = []
    i = pos + 1
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\" and i + 1 < n:
            nxt = line[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise ValueError("unterminated label value (truncated line?)")


def _number(token: str) -> float:
    if "_" in token or token.lower().startswith("0x"):
        raise ValueError(f"not a number: {token[:40]}")
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"not a number: {token[:40]}") from None


def _timestamp(token: str) -> float:
    """Prometheus text writes integer milliseconds; OpenMetrics writes (fractional) seconds."""
    value = _number(token)
    if not math.isfinite(value):
        raise ValueError("timestamp is not finite")
    if "." not in token and "e" not in token.lower() and abs(value) >= 1e11:
        return value / 1000.0
    return value


def scrape_stamp(source_name: str) -> tuple[datetime | None, str | None]:
    """(UTC time, instance) from a scrape file named like ``pod-20261129T221500Z.prom``."""
    base = source_name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _STAMP.search(base)
    if not m:
        return None, None
    stamp = m.group(1).replace(",", ".").rstrip("Z")
    whole, _, frac = stamp.partition(".")
    try:
        when = datetime.strptime(whole, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None, None
    if frac:
        when = when.replace(microsecond=int(frac[:6].ljust(6, "0")))
    instance = base[: m.start()].rstrip("-_.@ ") or None
    return when, instance


def _scrape_mark(line: str) -> tuple[datetime, str] | None:
    """(time, instance) of the header line a live scrape starts with."""
    m = _SCRAPE_MARK.match(line)
    if not m:
        return None
    try:
        when = datetime.fromisoformat(m.group("time").replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None
    return when, urllib.parse.urlsplit(m.group("url")).netloc or m.group("url")


def host_of(instance: str | None) -> str | None:
    """The host part of a Prometheus instance (``10.0.0.5:8000`` -> ``10.0.0.5``); None for loopback,
    where the host is whoever captured it."""
    if not instance:
        return None
    text = instance.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    if not text or _LOOPBACK.match(text):
        return None
    return text


def _utc(seconds: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def _parse_text(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    stamped, file_instance = scrape_stamp(ctx.source_name)
    scrape_time = stamped or ctx.mtime or ctx.captured_at
    origin = None if stamped else ("mtime" if ctx.mtime else "captured")
    for n, line in ctx.lines(stream):
        text = line.strip()
        if text.startswith("# gpuwb-scrape ") and (mark := _scrape_mark(text)):
            scrape_time, file_instance, origin = mark[0], mark[1], None
            continue
        if not text or text.startswith("#"):
            continue
        try:
            name, labels, value, stamp = parse_sample(text)
        except ValueError as exc:
            yield Skipped(n, f"not a metrics sample: {exc}")
            continue
        if not math.isfinite(value):
            yield Skipped(n, "non-finite value (NaN/Inf)")
            continue
        when = _utc(stamp) if stamp is not None else scrape_time
        if when is None:
            yield Skipped(n, "no time for this sample (no timestamp, no stamp in the file name, no mtime)")
            continue
        host = host_of(labels.get("instance")) or ctx.host or host_of(file_instance)
        if file_instance and "instance" not in labels:
            labels["instance"] = file_instance
        stored = vocabulary.tag(name, labels)
        if stamp is None and origin:
            stored["ts_origin"] = origin
        yield SeriesPoint(ts=when, name=name, value=value, host=host, labels=stored)


# -- API responses -----------------------------------------------------------------------------

def query_of(source_name: str) -> str | None:
    """The PromQL of a captured API call, from its URL (the artifact's source name)."""
    if "?" not in source_name:
        return None
    values = urllib.parse.parse_qs(source_name.split("?", 1)[1]).get("query")
    return values[0] if values else None


def describe_query(query: str | None) -> tuple[str | None, dict[str, str]]:
    """(series name, labels) for results of an expression that lost ``__name__``:
    ``histogram_quantile(0.9, ... X_bucket{job='j'}[6h] ...)`` -> (X, quantile 0.9, job j, range 6h)."""
    if not query:
        return None, {}
    labels: dict[str, str] = {"query": query}
    for m in _MATCHER.finditer(query):  # equality matchers only: `=~` and `!=` do not fit the pattern
        labels.setdefault(m.group("name"), m.group("value"))
    if r := _RANGE.search(query):
        labels["range"] = r.group("range")
    if m := _HQ.search(query):
        q = m.group("q")
        labels["quantile"] = q
        with contextlib.suppress(ValueError):  # ``0.9.9`` in a hand-written query: no stat
            labels["stat"] = f"p{float(q) * 100:g}"
        return m.group("metric"), labels
    if m := _SELECTOR.match(query):
        return m.group("metric"), labels
    return query[:200], labels


def _parse_api(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    raw = stream.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        yield Skipped(None, f"API response larger than {MAX_JSON_BYTES >> 20} MiB: not parsed")
        return
    text = decoded(raw)
    ctx.lines_read = text.count("\n") + 1
    query = query_of(ctx.source_name)
    seen: set[tuple[Any, ...]] = set()
    for line, doc in _api_responses(text):
        if isinstance(doc, Damage):
            yield Skipped(line, doc.reason[:200])
        else:
            yield from _api_doc(doc, ctx, query, line, seen)


def _api_responses(text: str) -> list[tuple[int | None, Any]]:
    """(line, response) of an API body: the whole text, else one response per line (a tool's log), else
    the one response cut short or damaged, as the complete series of its result list (see
    collectors/framework/json_items.py); each part that is not JSON is a Damage."""
    try:
        return [(None, json.loads(text))]
    except (ValueError, RecursionError):
        pass
    per_line: list[tuple[int | None, Any]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            per_line.append((n, json.loads(line)))
        except (ValueError, RecursionError):
            per_line.append((n, Damage("not a JSON API response")))
    if any(_is_response(doc) for _, doc in per_line):
        return per_line
    responses: list[Any] = []  # whole responses before the damage
    series: list[Any] = []  # the complete series of the response it is in
    damage: list[tuple[int | None, Any]] = []
    for value in values(text, "result"):
        if isinstance(value, Damage):
            damage.append((None, Damage(f"API response: {value.reason}")))
        elif isinstance(value, dict) and ("data" in value or "status" in value):
            responses.append(value)
        else:
            series.append(value)
    if series:
        kind = _RESULT_TYPE.search(text)
        responses.append({"data": {"resultType": kind.group(1) if kind else "matrix", "result": series}})
    return [(None, doc) for doc in responses] + damage if responses else per_line


def _is_response(doc: Any) -> bool:
    """A whole API response on one line (an object, or promtool's list of series), not a stray piece
    of a pretty-printed one (a ``"3"`` or a ``[t, "v"]`` pair alone on its line)."""
    return isinstance(doc, dict) or (isinstance(doc, list) and bool(doc) and all(isinstance(d, dict) for d in doc))


def _api_doc(doc: Any, ctx: ParseContext, query: str | None, line: int | None, seen: set[tuple[Any, ...]],
             extra: dict[str, str] | None = None) -> Iterator[Row]:
    """Rows of one API response (dict with status/data, or a bare result list as promtool prints)."""
    if isinstance(doc, dict) and doc.get("status") == "error":
        yield Skipped(line, f"prometheus error: {doc.get('errorType', '?')}: {str(doc.get('error', ''))[:160]}")
        return
    data = doc.get("data") if isinstance(doc, dict) else doc
    if isinstance(data, dict):
        result_type, result = data.get("resultType"), data.get("result")
    else:
        result_type, result = "matrix", data
    if result_type in ("scalar", "string"):
        result = [{"metric": {}, "value": result}]
    if not isinstance(result, list):
        yield Skipped(line, "API response without a result list")
        return
    named, described = describe_query(query)
    for item in result:
        if not isinstance(item, dict):
            yield Skipped(line, "result entry is not an object")
            continue
        raw_metric = item.get("metric") or {}
        values = item.get("values") if item.get("values") is not None else (
            [item["value"]] if item.get("value") is not None else [])
        if not isinstance(raw_metric, dict) or not isinstance(values, list):
            yield Skipped(line, "malformed result entry")
            continue
        metric = {str(k): str(v) for k, v in raw_metric.items()}
        name = metric.pop("__name__", None)
        labels = dict(metric)
        if name is None:
            name = named or "promql"
            for key, value in described.items():
                labels.setdefault(key, value)
        elif query:
            labels.setdefault("query", query)
        labels.update(extra or {})
        if item.get("histograms") or item.get("histogram"):
            yield Skipped(line, "native histogram samples are not supported")
        stored = vocabulary.tag(name, labels, vocabulary.canonical(name, labels))
        host = host_of(metric.get("instance")) or ctx.host
        for pair in values:
            row = _api_point(pair, name, stored, host)
            if isinstance(row, SeriesPoint):
                key = (row.name, row.ts, row.value, tuple(sorted(row.labels.items())))
                if key in seen:
                    continue
                if len(seen) > 200_000:
                    seen.clear()
                seen.add(key)
            elif row is not None:
                row.line = line
            if row is not None:
                yield row


def _api_point(pair: Any, name: str, labels: dict[str, str], host: str | None) -> Row | None:
    try:
        stamp, text = pair
        value = float(text)
        when = _utc(float(stamp))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return Skipped(None, "malformed [time, value] pair")
    if not math.isfinite(value):
        return Skipped(None, "non-finite value (NaN/Inf)")
    if when is None:
        return Skipped(None, "timestamp out of range")
    return SeriesPoint(ts=when, name=name, value=value, host=host, labels=dict(labels))


# -- logs that print API responses (GKE benchmarking tool) -------------------------------------

def _logged_doc(line: str) -> Any:
    """The JSON or Python-repr dict printed on a log line, or None."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start:
        return None
    body = no_lone_surrogates(line[start: end + 1])
    try:
        return json.loads(body)
    except ValueError:
        pass
    try:
        return ast.literal_eval(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _parse_query_log(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """Responses printed by a tool, each labelled with the statistic and metric its log names.

    The tool logs ``Finding P90 <metric> with the following query: <q>``, the response, then
    ``P90: <value>``. A response cut from its ``Finding`` line (an excerpt's first lines) takes
    its statistic from the ``Max: ...`` line that follows and its metric from the next
    ``Finding`` line of the same block, marked ``metric_inferred``."""
    context: dict[str, str] | None = None
    orphans: list[SeriesPoint] = []
    orphan_stat: str | None = None
    seen: set[tuple[Any, ...]] = set()
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        if m := _METRIC_NAME.match(line):
            yield from _flush_orphans(orphans, orphan_stat, None)
            orphans, orphan_stat, context = [], None, None
            continue
        if m := _FINDING.search(line):
            context = {"stat": m.group("stat").lower(), "metric": m.group("metric"), "query": m.group("q").strip()}
            yield from _flush_orphans(orphans, orphan_stat, context["metric"])
            orphans, orphan_stat = [], None
            continue
        if _LOGGED_RESPONSE.search(line):
            doc = _logged_doc(line)
            if doc is None:
                yield Skipped(n, "unreadable API response")
                continue
            extra = {}
            if context:
                extra = {"stat": context["stat"], "query": context["query"]}
                quantile = vocabulary.stat_from_words(context["stat"])[1]
                if quantile:
                    extra["quantile"] = quantile
            for row in _api_doc(doc, ctx, context["query"] if context else None, n, seen, extra):
                if isinstance(row, SeriesPoint) and context:
                    yield _named(row, context["metric"], context.get("query"))
                elif isinstance(row, SeriesPoint):
                    orphans.append(row)
                    del orphans[:-1000]
                else:
                    yield row
            continue
        if m := _STAT_LINE.match(line):
            if context is None:
                orphan_stat = m.group("stat").lower()
            context = None
            continue
        yield Skipped(n, "not a query log line")
    yield from _flush_orphans(orphans, orphan_stat, None)


def _named(row: SeriesPoint, metric: str, query: str | None) -> SeriesPoint:
    """A response value filed under the metric its log line names (with the query's matchers)."""
    _, described = describe_query(query)
    labels = {k: v for k, v in row.labels.items() if k != "metric"}
    for key, value in described.items():
        labels.setdefault(key, value)
    row.name = metric
    row.labels = vocabulary.tag(metric, labels)
    return row


def _flush_orphans(orphans: list[SeriesPoint], stat: str | None, metric: str | None) -> Iterator[SeriesPoint]:
    for row in orphans:
        if stat:
            row.labels["stat"] = stat
            quantile = vocabulary.stat_from_words(stat)[1]
            if quantile:
                row.labels.setdefault("quantile", quantile)
        if metric:
            row = _named(row, metric, None)
            row.labels["metric_inferred"] = "next_query"
        yield row


# -- live capture ------------------------------------------------------------------------------

def _duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 15, 15s, 1m, 500ms)")
    factor = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    return float(m.group(1)) * factor


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("serving metrics (Prometheus)")
    group.add_argument("--prom", metavar="URL", action="append", default=[],
                       help="scrape this /metrics URL several times during the capture (repeatable)")
    group.add_argument("--prom-samples", metavar="N", type=int, default=3, help="scrapes per --prom URL (default 3)")
    group.add_argument("--prom-interval", metavar="SECONDS", type=_duration, default=5.0,
                       help="time between scrapes (default 5s)")
    group.add_argument("--prom-server", metavar="URL", action="append", default=[],
                       help="Prometheus server to run --query over the capture window (repeatable)")
    group.add_argument("--query", metavar="PROMQL", action="append", default=[],
                       help="query_range for each --prom-server (repeatable; default: the serving metrics)")
    group.add_argument("--prom-step", metavar="DURATION", type=_duration, default=None,
                       help="query_range step (default: window / 1000, at least 1s)")
    group.add_argument("--latency", metavar="FILE", action="append", default=[],
                       help="a latency/metrics file to include: .prom page, API JSON, CSV (repeatable)")


def default_query() -> str:
    """Every family of the serving vocabulary in one selector, for a server given without --query."""
    names = sorted({re.escape(n) for n in vocabulary.VOCABULARY})
    return '{__name__=~"(' + "|".join(names) + ')(_bucket|_sum|_count|_total)?"}'


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    options = ctx.options
    budget = float(options.get(f"timeout_{NAME}") or TIMEOUT) * float(options.get("timeout_scale") or 1.0)
    deadline = time.monotonic() + budget - 2.0
    if not (options.get("prom") or options.get("prom_server") or options.get("latency")):
        ctx.missing("serving metrics", "not requested: pass --prom URL, --prom-server URL or --latency FILE")
        return
    yield from capture_files(ctx, NAME, report_unclaimed=True)
    for server in options.get("prom_server") or []:
        for query in options.get("query") or [default_query()]:
            artifact = _range_query(ctx, server, query, options.get("prom_step"), deadline)
            if artifact is not None:
                yield artifact
    urls = [u for u in (options.get("prom") or []) if _usable(ctx, u)]
    samples = max(1, int(options.get("prom_samples") or 3))
    interval = float(options.get("prom_interval") or 5.0)
    if urls and samples > 1 and (samples - 1) * interval > deadline - time.monotonic() - REQUEST_TIMEOUT:
        interval = max(0.5, (deadline - time.monotonic() - REQUEST_TIMEOUT) / (samples - 1))
        ctx.missing("--prom-interval", f"shortened to {interval:.1f} s to fit the collector's time budget")
    for i in range(samples if urls else 0):
        tick = time.monotonic()
        for url in urls:
            artifact = _scrape(ctx, url, deadline)
            if artifact is not None:
                yield artifact
        if i + 1 < samples:
            pause = interval - (time.monotonic() - tick)
            if time.monotonic() + max(pause, 0) > deadline:
                ctx.missing("--prom-samples", f"stopped after {i + 1} scrape(s): time budget reached")
                break
            time.sleep(max(pause, 0))


def capture_files(ctx: CaptureContext, owner: str, *, report_unclaimed: bool = False) -> Iterator[Artifact]:
    """The ``--latency`` files whose sniffed kind collector ``owner`` parses (each collector stores
    its own kinds, so the right parser reads them). With ``report_unclaimed``, files no running
    collector will take are recorded as missing, with the reason."""
    from collectors.framework import registry  # deferred: the registry imports every collector, this one included

    running = set(ctx.options.get("only") or [m.NAME for m in registry.all_collectors()])
    running -= set(ctx.options.get("skip") or [])
    for path in ctx.options.get("latency") or []:
        try:
            with open(path, "rb") as f:
                head = f.read(64 << 10).decode("utf-8", "replace")
        except OSError as exc:
            if report_unclaimed:
                ctx.missing(path, f"unavailable: {exc.strerror or exc}")
            continue
        found = registry.sniff(path, head)
        if found is not None and found[1].NAME == owner:
            artifact = ctx.read_file(path, kind=found[0])
            if artifact is not None:
                yield artifact
        elif report_unclaimed and found is None:
            ctx.missing(path, "not a recognised latency or metrics format")
        elif report_unclaimed and found is not None and found[1].NAME not in running:
            ctx.missing(path, f"{found[0]} is read by collector {found[1].NAME}, which is not running")


def _usable(ctx: CaptureContext, url: str) -> bool:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        ctx.missing(url, "unsupported URL: only http:// and https:// are fetched")
        return False
    return True


def _metrics_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def fetch(url: str, timeout: float, accept: str) -> tuple[int | None, bytes, str]:
    """GET ``url``: (HTTP status or None, body up to MAX_FETCH_BYTES, error text). Loopback
    addresses bypass any proxy from the environment."""
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers: list[Any] = [urllib.request.ProxyHandler({})] if _LOOPBACK.match(host) else []
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "gpuwb-capture"})
    try:
        with opener.open(request, timeout=max(timeout, 0.5)) as response:
            return response.status, response.read(MAX_FETCH_BYTES), ""
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_FETCH_BYTES) if exc.fp else b""
        return exc.code, body, f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, b"", f"unavailable: {reason}"


def _scrape(ctx: CaptureContext, url: str, deadline: float) -> Artifact | None:
    target = _metrics_url(url)
    started = datetime.now(timezone.utc)
    began = time.monotonic()
    status, body, error = fetch(target, min(REQUEST_TIMEOUT, deadline - began),
                                "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5,*/*;q=0.1")
    if status != 200:
        ctx.missing(target, error or f"HTTP {status}")
        return None
    instance = urllib.parse.urlsplit(target).netloc
    stamp = started.strftime("%Y%m%dT%H%M%S.") + f"{started.microsecond // 1000:03d}Z"
    mark = f"# gpuwb-scrape url={urllib.parse.quote(target, safe=':/?&=%')} time={format_iso(started)}\n".encode()
    return Artifact(source=f"{instance}-{stamp}.prom", kind="prom_text", data=mark + body, captured_at=started,
                    info={"url": target, "http_status": status, "duration_s": round(time.monotonic() - began, 3),
                          "bytes": len(body), "truncated": len(body) >= MAX_FETCH_BYTES})


def _range_query(ctx: CaptureContext, server: str, query: str, step: float | None,
                 deadline: float) -> Artifact | None:
    if not _usable(ctx, server):
        return None
    end = time.time()
    start = ctx.since.timestamp() if ctx.since else end - 3600
    window = max(end - start, 1.0)
    step = max(step or max(1.0, round(window / 1000)), window / MAX_POINTS)
    params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    url = server.rstrip("/") + "/api/v1/query_range?" + params
    began = time.monotonic()
    status, body, error = fetch(url, min(REQUEST_TIMEOUT, deadline - began), "application/json")
    if status is None:
        ctx.missing(url, error)
        return None
    if status != 200:
        ctx.missing(url, f"{error}: {body[:200].decode('utf-8', 'replace')}")
        if not body:
            return None
    return Artifact(source=url, kind="prom_api_json", data=body, captured_at=datetime.now(timezone.utc),
                    info={"url": url, "query": query, "http_status": status, "step_s": step,
                          "duration_s": round(time.monotonic() - began, 3), "bytes": len(body)})
