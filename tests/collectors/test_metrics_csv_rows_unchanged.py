"""The metrics CSV parser's fast path (cells split without csv.reader when a line has no quotes, times
and vocabulary names read once per distinct text) writes the rows a straightforward reading does: the
reference below reads every line with csv.reader and tags every row through the vocabulary, as the
parser did before, and both read the same generated tables, quirks included."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import metrics_csv
from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.prometheus.exposition import host_of

NAMES = ("vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket", "tgi_queue_size", "p99_ttft_ms",
         "Mean ITL (ms)", "vllm:metric_3", "nv_inference_request_duration_us", "", " padded_queue_wait ")
REASONS = ("stop", "abort", "", " ERROR ", "length")
TIMES = ("1700000000", "1700000015000", " 1700000030 ", "2026-11-29T22:51:01Z", "2026-11-29 22:51:02",
         "2026-11-29T22:51:03+0200", "yesterday", "", "1700000045.5")
VALUES = ("3", "17.25", "", " 4 ", "n/a", "inf", "NaN", "-0.5", "1e3")


def _reference_cells(line: str, delimiter: str) -> list[str]:
    try:
        return next(csv.reader([line], delimiter=delimiter))
    except (csv.Error, StopIteration):
        return []


def _reference(text: str, host: str | None = None) -> Iterator[Row]:
    """The table as read line by line with csv.reader, each row tagged through the vocabulary."""
    ctx = ParseContext(host=host, source_name="metrics.csv")
    numbered = ((n, line) for n, line in ctx.lines(io.BytesIO(text.encode()))
                if line.strip() and not line.lstrip().startswith("#"))
    first = next(numbered)
    delimiter = metrics_csv._delimiter(first[1]) or ","
    header = [c.strip().strip('"') for c in _reference_cells(first[1], delimiter)]
    lower = [c.lower() for c in header]
    time_col = metrics_csv._find(lower, metrics_csv.TIME_COLUMNS)
    rows = [(n, _reference_cells(line, delimiter)) for n, line in numbered]
    name_col, value_col = metrics_csv._find(lower, metrics_csv.NAME_COLUMNS), metrics_csv._find(
        lower, metrics_csv.VALUE_COLUMNS)
    long_form = name_col is not None and value_col is not None
    role_rows = [cells for _, cells in rows[:metrics_csv.ROLE_ROWS] if len(cells) == len(header)]
    if long_form:
        values = [value_col]
        labels = [i for i in range(len(header)) if i not in (time_col, name_col, value_col)]
    else:
        values = [i for i in range(len(header)) if i != time_col and metrics_csv._numeric_column(role_rows, i)]
        labels = [i for i in range(len(header)) if i != time_col and i not in values]
    host_col, instance_col = metrics_csv._find(lower, metrics_csv.HOST_COLUMNS), metrics_csv._find(lower, ("instance",))
    for n, cells in rows:
        if len(cells) != len(header):
            yield Skipped(n, f"expected {len(header)} columns, found {len(cells)}")
            continue
        when = metrics_csv.parse_time(cells[time_col])
        if when is None:
            yield Skipped(n, f"unreadable time {cells[time_col][:40]!r}")
            continue
        row_labels = {header[i]: cells[i].strip() for i in labels if cells[i].strip()}
        row_host = (cells[host_col].strip() if host_col is not None else None) or \
            (host_of(cells[instance_col]) if instance_col is not None else None) or ctx.host
        for i in values:
            value = metrics_csv._number(cells[i]) if cells[i].strip() else None
            if not cells[i].strip():
                continue
            if value is None:
                yield Skipped(n, f"not a finite number in column {header[i][:40]!r}")
                continue
            if long_form:
                name = cells[name_col].strip() or "value"
                metric = vocabulary.canonical(name, row_labels) or vocabulary.canonical_from_words(name)
                stored = vocabulary.tag(name, row_labels, metric)
            else:
                name = header[i]
                stored = vocabulary.tag(name, row_labels)
                for key, label in vocabulary.word_labels(header[i]).items():
                    stored.setdefault(key, label)
            yield SeriesPoint(ts=when, name=name, value=value, host=row_host, labels=stored)


def _fast(text: str, host: str | None = None) -> list[Row]:
    ctx = ParseContext(host=host, source_name="metrics.csv")
    return list(metrics_csv.parse("metrics_csv", io.BytesIO(text.encode()), ctx))


def _comparable(rows: list[Row]) -> list[tuple]:
    """Rows with their label order (the stored JSON follows it)."""
    return [(r, list(r.labels.items())) if isinstance(r, SeriesPoint) else (r,) for r in rows]


def _cell(rng: random.Random, text: str, delimiter: str) -> str:
    """A cell as exporters write it: mostly bare, sometimes quoted, rarely with a delimiter or a stray CR."""
    roll = rng.random()
    if roll < 0.1:
        return '"' + text.replace('"', '""') + '"'
    if roll < 0.13:
        return f'"{text}{delimiter}x"'
    if roll < 0.15:
        return text + "\r" + text
    return text


def _long_table(rng: random.Random, rows: int, delimiter: str) -> str:
    header = ["ts", "name", "value", "host", "finished_reason", "metric", "instance", "model_name"]
    lines = [delimiter.join(header)]
    for _ in range(rows):
        cells = [rng.choice(TIMES), rng.choice(NAMES), rng.choice(VALUES), rng.choice(("node1", "", " node2 ")),
                 rng.choice(REASONS), rng.choice(("", "exported", "ttft")), rng.choice(("10.0.0.5:8000", "")),
                 rng.choice(("llama", "", "mistral"))]
        if rng.random() < 0.03:
            cells = cells[:-1]
        lines.append(delimiter.join(_cell(rng, c, delimiter) for c in cells))
    return "\n".join(lines) + "\n"


def _wide_table(rng: random.Random, rows: int) -> str:
    lines = ["time,p99_ttft_ms,queue,finished_reason,model,vllm:request_success_total"]
    for _ in range(rows):
        cells = [rng.choice(TIMES[:6]), rng.choice(VALUES[:4]), str(rng.randint(0, 40)), rng.choice(REASONS),
                 rng.choice(("llama", "", "x,y")), str(rng.randint(0, 9))]
        lines.append(",".join(_cell(rng, c, ",") for c in cells))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_long_format_rows_equal_the_straightforward_reading(delimiter):
    text = _long_table(random.Random(11), 6000, delimiter)
    fast = _fast(text, host="fallback")
    assert sum(isinstance(r, SeriesPoint) for r in fast) > 2000
    assert sum(isinstance(r, Skipped) for r in fast) > 200
    assert any(isinstance(r, SeriesPoint) and r.labels.get("metric") == "request_failure" for r in fast)
    assert _comparable(fast) == _comparable(list(_reference(text, host="fallback")))


def test_wide_format_rows_equal_the_straightforward_reading():
    text = _wide_table(random.Random(5), 3000)
    fast = _fast(text)
    assert sum(isinstance(r, SeriesPoint) for r in fast) > 3000
    assert _comparable(fast) == _comparable(list(_reference(text)))


def test_more_distinct_times_and_names_than_are_remembered():
    lines = ["ts,name,value"] + [f"{1_700_000_000 + k},{NAMES[k % 5]}_{k % 5000},{k}" for k in range(12_000)]
    text = "\n".join(lines) + "\n"
    assert _comparable(_fast(text)) == _comparable(list(_reference(text)))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('ab ,;\t"\r\x00x1')), min_size=1, max_size=30),
       st.sampled_from([",", ";", "\t"]))
def test_cells_split_as_csv_reader_splits(line, delimiter):
    assert metrics_csv._cells(line, delimiter) == _reference_cells(line, delimiter)
