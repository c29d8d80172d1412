"""Logs that print Prometheus API responses (the GKE benchmarking tool's PromQL log), each response labelled
with the statistic and metric its log lines name."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.json_items import no_lone_surrogates
from collectors.framework.lazy_re import lazy_regex
from collectors.prometheus.api_json import api_doc, describe_query

_LOGGED_RESPONSE = lazy_regex(r"""['"]status['"]\s*:\s*['"](?:success|error)['"]""")
_FINDING = lazy_regex(r"Finding\s+(?P<stat>\S+)\s+(?P<metric>[a-zA-Z_:][\w:]*)\s+with the following query:"
                      r"\s*(?P<q>.+)$")
_METRIC_NAME = lazy_regex(r"^\s*Metric Name:\s*(?P<metric>[a-zA-Z_:][\w:]*)\s*$")
_STAT_LINE = lazy_regex(r"^\s*(?P<stat>Mean|Median|Min|Max|Avg|P\d+(?:\.\d+)?)\s*:\s*(?P<value>\S+)\s*$", re.I)


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


def parse_query_log(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
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
            for row in api_doc(doc, ctx, context["query"] if context else None, n, seen, extra):
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
