"""Latency and serving metrics handed over as tables: CSV exports and benchmark summaries.

``metrics_csv`` reads the two shapes dashboards and scripts write: long (``ts,name,value`` plus
label columns, as Grafana's "series as rows" export) and wide (``ts,p99_ms,queue,...``, one
column per series, label columns such as ``host`` or ``model`` allowed). Which columns hold
numbers is decided on the first rows, then the file is streamed. Times may be ISO 8601 (naive
ones are taken as UTC) or Unix seconds/ms/us/ns.

``bench_summary`` reads the "Serving Benchmark Result" block that vLLM's benchmark_serving and
SGLang's bench_serving print: each numeric line becomes a point named ``bench_serving:<key>``
with its vocabulary metric, statistic and unit; text lines (backend) become labels. The block
has no time of its own, so the points take the file's mtime, marked ``ts_origin=mtime``.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.lazy_re import lazy_regex
from collectors.prometheus.exposition import host_of
from collectors.prometheus.scrape import capture_files

NAME = "metrics_csv"
LAYER = "business"
KINDS = ("metrics_csv", "bench_summary")
TIMEOUT = 10.0
PRIORITY = 50

TIME_COLUMNS = ("ts", "time", "timestamp", "date", "datetime", "_time", "@timestamp", "time_utc", "timestamp_utc",
                "epoch", "unix_time", "timestamp_ms", "t")
NAME_COLUMNS = ("name", "metric", "__name__", "series", "metric_name")
VALUE_COLUMNS = ("value", "val", "_value", "y")
HOST_COLUMNS = ("host", "hostname", "node", "nodename")
NOT_OURS = ("pci.bus_id", "utilization.gpu", "[mib]", "[%]", "memory.used")
"""Header words of ``nvidia-smi --query-gpu`` CSV, which the GPU collectors read."""
ROLE_ROWS = 20
_FIELD_LIMIT = csv.field_size_limit()
"""csv.reader refuses a longer cell; a line this short cannot hold one."""

_BENCH_START = lazy_regex(r"^\s*=+\s*(?P<title>[^=]*?(?:Result|Benchmark)[^=]*?)\s*=+\s*$", re.I)
_BENCH_RULE = lazy_regex(r"^\s*=+\s*$")
_BENCH_SECTION = lazy_regex(r"^\s*-{3,}(?P<title>[^-].*?)?-*\s*$")
_BENCH_LINE = lazy_regex(r"^\s*(?P<key>[A-Za-z][^:]{0,80}?)\s*:\s+(?P<value>\S(?:.*\S)?)\s*$")
_UNIT = lazy_regex(r"\((ms|s|us|µs|tok/s|req/s|tokens/s|%)\)\s*$")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """The CSV and benchmark files among ``--latency FILE`` (an option the prometheus collector declares)."""
    yield from capture_files(ctx, NAME)


# -- sniffing ----------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    if "Serving Benchmark Result" in head or (_BENCH_START.search(head) and re.search(r"(?m)^\s*Mean TTFT", head)):
        return {"bench_summary": 85}
    lines = [line for line in head.splitlines()[: ROLE_ROWS + 2] if line.strip() and not line.startswith("#")]
    if len(lines) < 2 or not lines[-1].strip():
        return {}
    delimiter = _delimiter(lines[0])
    if delimiter is None:
        return {}
    header = [c.strip().strip('"').lower() for c in _cells(lines[0], delimiter)]
    if any(word in cell for cell in header for word in NOT_OURS):
        return {}
    time_col = _find(header, TIME_COLUMNS)
    if time_col is None:
        return {}
    rows = [_cells(line, delimiter) for line in lines[1:]]
    rows = [r for r in rows if len(r) == len(header)]
    if not rows or not all(parse_time(r[time_col]) for r in rows[:5]):
        return {}
    numeric = [i for i in range(len(header)) if i != time_col and _numeric_column(rows, i)]
    if not numeric:
        return {}
    if _find(header, NAME_COLUMNS) is not None and _find(header, VALUE_COLUMNS) is not None:
        return {"metrics_csv": 92}  # time + name + value columns: unmistakably a long-form series table
    known = any(vocabulary.canonical_from_words(header[i]) for i in numeric)
    return {"metrics_csv": 65 if known or name.lower().endswith((".csv", ".tsv")) else 40}


def _delimiter(line: str) -> str | None:
    counts = {d: line.count(d) for d in (",", "\t", ";")}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] >= 1 else None


def _find(header: list[str], names: tuple[str, ...]) -> int | None:
    for wanted in names:
        if wanted in header:
            return header.index(wanted)
    return None


def _number(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _numeric_column(rows: list[list[str]], index: int) -> bool:
    """Mostly numbers in the first rows (a stray "n/a" does not turn a value column into a label)."""
    cells = [r[index].strip() for r in rows if index < len(r) and r[index].strip()]
    numeric = sum(1 for c in cells if _number(c) is not None or c.lower() in ("nan", "inf", "-inf", "+inf"))
    return bool(cells) and numeric > 0.5 * len(cells)


def parse_time(text: str) -> datetime | None:
    """A CSV time cell as UTC: ISO 8601 (naive means UTC) or Unix seconds / ms / us / ns."""
    text = text.strip().strip('"')
    if not text:
        return None
    number = _number(text)
    if number is not None:
        for limit, divisor in ((1e17, 1e9), (1e14, 1e6), (1e11, 1e3), (1e8, 1.0)):
            if abs(number) >= limit:
                try:
                    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=number / divisor)
                except OverflowError:
                    return None
        return None
    iso = text.replace("Z", "+00:00").replace("z", "+00:00")
    if re.search(r"[+-]\d{4}$", iso):
        iso = iso[:-2] + ":" + iso[-2:]
    try:
        when = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


# -- parsing -----------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "bench_summary":
        yield from _parse_bench(stream, ctx)
    else:
        yield from _parse_csv(stream, ctx)


def _parse_csv(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    numbered = ((n, line) for n, line in ctx.lines(stream) if line.strip() and not line.lstrip().startswith("#"))
    first = next(numbered, None)
    if first is None:
        return
    delimiter = _delimiter(first[1]) or ","
    header = [c.strip().strip('"') for c in _cells(first[1], delimiter)]
    lower = [c.lower() for c in header]
    time_col = _find(lower, TIME_COLUMNS)
    if time_col is None:
        yield Skipped(first[0], "CSV header without a time column")
        return
    buffered: list[tuple[int, list[str]]] = []
    for n, line in numbered:
        buffered.append((n, _cells(line, delimiter)))
        if len(buffered) >= ROLE_ROWS:
            break
    name_col, value_col = _find(lower, NAME_COLUMNS), _find(lower, VALUE_COLUMNS)
    long_form = name_col is not None and value_col is not None
    rows_only = [cells for _, cells in buffered if len(cells) == len(header)]
    if long_form:
        values = [value_col]
        labels = [i for i in range(len(header)) if i not in (time_col, name_col, value_col)]
    else:
        values = [i for i in range(len(header)) if i != time_col and _numeric_column(rows_only, i)]
        labels = [i for i in range(len(header)) if i != time_col and i not in values]
    host_col = _find(lower, HOST_COLUMNS)
    instance_col = _find(lower, ("instance",))
    column_labels = {i: vocabulary.word_labels(header[i]) for i in values}

    def rows() -> Iterator[tuple[int, list[str]]]:
        yield from buffered
        for n, line in numbered:
            yield n, _cells(line, delimiter)

    # a long-format CSV repeats each time stamp and series name on many rows: each is read once
    when_of = lru_cache(maxsize=4096)(parse_time)

    @lru_cache(maxsize=4096)
    def metric_of(name: str, reason: str) -> str | None:
        return vocabulary.canonical(name, {"finished_reason": reason} if reason else None) or \
            (vocabulary.canonical_from_words(name) if long_form else None)

    reason_col = max((i for i in labels if header[i] == "finished_reason"), default=None)  # the label kept
    for n, cells in rows():
        if len(cells) != len(header):
            yield Skipped(n, f"expected {len(header)} columns, found {len(cells)}")
            continue
        when = when_of(cells[time_col])
        if when is None:
            yield Skipped(n, f"unreadable time {cells[time_col][:40]!r}")
            continue
        host = (cells[host_col].strip() if host_col is not None else None) or \
            (host_of(cells[instance_col]) if instance_col is not None else None) or ctx.host
        reason = cells[reason_col].strip() if reason_col is not None else ""
        for i in values:
            text = cells[i].strip()
            if not text:
                continue
            value = _number(text)
            if value is None:
                yield Skipped(n, f"not a finite number in column {header[i][:40]!r}")
                continue
            name = (cells[name_col].strip() or "value") if long_form else header[i]
            stored = {header[j]: cell for j in labels if (cell := cells[j].strip())}
            if "metric" in stored:  # as vocabulary.tag: a source label called metric is kept as exported_metric
                stored["exported_metric"] = stored.pop("metric")
            if metric := metric_of(name, reason):
                stored["metric"] = metric
            if not long_form:
                for key, label in column_labels[i].items():
                    stored.setdefault(key, label)
            yield SeriesPoint(ts=when, name=name, value=value, host=host, labels=stored)


def _cells(line: str, delimiter: str) -> list[str]:
    if '"' not in line and "\r" not in line and "\n" not in line and len(line) <= _FIELD_LIMIT:
        return line.split(delimiter)  # what csv.reader makes of a line without quotes or line breaks
    try:
        return next(csv.reader([line], delimiter=delimiter))
    except (csv.Error, StopIteration):
        return []


def _slug(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower().replace("/", "_per_")).strip("_")


def _parse_bench(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """Benchmark result blocks; a block is flushed at its closing rule, at the next block or at EOF."""
    when = ctx.mtime or ctx.captured_at
    origin = "mtime" if ctx.mtime else "captured"
    run = 0
    block: list[tuple[int, str, str]] | None = None
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        if _BENCH_START.match(line):
            if block is not None:
                yield from _bench_points(block, run, when, origin, ctx)
            run += 1
            block = []
            continue
        if block is None:
            yield Skipped(n, "outside a benchmark result block")
            continue
        if _BENCH_RULE.match(line):
            yield from _bench_points(block, run, when, origin, ctx)
            block = None
            continue
        if _BENCH_SECTION.match(line):
            continue
        m = _BENCH_LINE.match(line)
        if not m:
            yield Skipped(n, "not a 'key: value' benchmark line")
            continue
        if len(block) < 1000:
            block.append((n, m.group("key"), m.group("value")))
    if block is not None:
        yield from _bench_points(block, run, when, origin, ctx)


def _bench_points(block: list[tuple[int, str, str]], run: int, when: datetime | None, origin: str,
                  ctx: ParseContext) -> Iterator[Row]:
    common = {"tool": "bench_serving", "run": str(run)}
    numbers: list[tuple[int, str, float]] = []
    for n, key, text in block:
        value = _number(text)
        if value is None:
            common[_slug(key)] = text
        else:
            numbers.append((n, key, value))
    for n, key, value in numbers:
        if when is None:
            yield Skipped(n, "benchmark summary without a time (no mtime)")
            continue
        labels = dict(common)
        labels.update(vocabulary.word_labels(key))
        if unit := _UNIT.search(key):
            labels["unit"] = unit.group(1)
        labels["ts_origin"] = origin
        yield SeriesPoint(ts=when, name=f"bench_serving:{_slug(key)}", value=value, host=ctx.host, labels=labels)
