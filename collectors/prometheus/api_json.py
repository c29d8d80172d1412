"""Prometheus HTTP API bodies (``/api/v1/query_range``, ``/api/v1/query``, error bodies, promtool's bare result
lists), whole, one per line, or cut short: one SeriesPoint per [time, value] pair. A result that lost
``__name__`` is named from its PromQL (``describe_query``)."""

from __future__ import annotations

import contextlib
import json
import math
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.json_items import Damage, decoded, values
from collectors.framework.lazy_re import lazy_regex
from collectors.prometheus.exposition import host_of, utc

MAX_JSON_BYTES = 64 << 20
"""An API body is one JSON document and must be read whole (as Python objects, ~10x its size); larger
ones are refused with a counted skip rather than loaded. Split such queries by time or series."""
_HQ = lazy_regex(r"histogram_quantile\(\s*(?P<q>[0-9.]+)\s*,.*?(?P<metric>[a-zA-Z_:][\w:]*)_bucket\b", re.DOTALL)
_SELECTOR = lazy_regex(r"^\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*$")
_MATCHER = lazy_regex(r"""(?P<name>[a-zA-Z_]\w*)\s*=\s*(?P<quote>['"])(?P<value>(?:[^'"\\]|\\.)*)(?P=quote)""")
_RANGE = lazy_regex(r"\[(?P<range>\d+[smhdwy])\]")
_RESULT_TYPE = lazy_regex(r'"resultType"\s*:\s*"(\w+)"')


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


def parse_api(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
            yield from api_doc(doc, ctx, query, line, seen)


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


def api_doc(doc: Any, ctx: ParseContext, query: str | None, line: int | None, seen: set[tuple[Any, ...]],
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
        when = utc(float(stamp))
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer too large for a float
        return Skipped(None, "malformed [time, value] pair")
    if not math.isfinite(value):
        return Skipped(None, "non-finite value (NaN/Inf)")
    if when is None:
        return Skipped(None, "timestamp out of range")
    return SeriesPoint(ts=when, name=name, value=value, host=host, labels=dict(labels))
