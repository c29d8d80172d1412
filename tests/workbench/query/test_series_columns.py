"""The column-wise series arithmetic: many histograms, scrapes and counters computed at once must give
what Prometheus' rules give one histogram, one scrape, one counter at a time."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.base import SeriesPoint
from workbench.query import series, series_math
from workbench.store.bundle import Bundle

T0 = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)
STEP = timedelta(seconds=15)


def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' bucketQuantile (promql/quantile.go) for sorted buckets ending in +Inf, written out
    the plain way: the reference the matrix version is held to."""
    running, monotonic = 0.0, []
    for le, count in buckets:
        running = max(running, count)
        monotonic.append((le, running))
    total = monotonic[-1][1]
    if total <= 0:
        return math.nan
    rank = q * total
    b = next(i for i, (_, count) in enumerate(monotonic) if count >= rank or i == len(monotonic) - 1)
    if b == len(monotonic) - 1:
        return monotonic[-2][0]
    if b == 0 and monotonic[0][0] <= 0:
        return monotonic[0][0]
    start, below = monotonic[b - 1] if b > 0 else (0.0, 0.0)
    end, count = monotonic[b]
    return start + (end - start) * (rank - below) / (count - below)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=4, max_size=4), min_size=1, max_size=12),
       st.sampled_from([0.0, 0.25, 0.5, 0.9, 0.99, 1.0]))
def test_quantile_rows_matches_prometheus_row_by_row(increments, q):
    les = np.array([0.1, 0.5, 2.0, math.inf])
    counts = np.cumsum(np.array(increments, dtype=float), axis=1)
    got = series_math.quantile_rows(q, les, counts)
    for row, value in zip(counts.tolist(), got.tolist()):
        with np.errstate(all="ignore"):
            try:
                expected = bucket_quantile(q, list(zip(les.tolist(), row)))
            except ZeroDivisionError:  # q = 0 with an empty first bucket: 0/0, NaN in the matrix
                expected = math.nan
        assert (math.isnan(value) and math.isnan(expected)) or value == pytest.approx(expected, rel=1e-12)


def test_quantile_rows_truncated_and_q_out_of_range():
    counts = np.array([[2.0, 4.0], [0.0, 0.0]])
    les = np.array([0.1, 0.2])
    assert np.isnan(series_math.quantile_rows(0.5, les, counts)).all()  # no +Inf bucket: no answer
    got = series_math.quantile_rows(0.5, les, counts, allow_truncated=True)
    assert got[0] == pytest.approx(0.1) and math.isnan(got[1])
    assert (series_math.quantile_rows(-1, les, counts) == -math.inf).all()
    assert (series_math.quantile_rows(2, les, counts) == math.inf).all()


def test_a_scrape_missing_a_bucket_uses_the_buckets_it_has():
    """The second scrape lost its 0.5 bucket: its interval is computed from 0.1 and +Inf alone (the
    missing bound is not a zero). The third has it again with no predecessor, so it counts from zero
    (40, above the +Inf delta of 10: the running maximum caps the total at 40)."""
    scrapes = [(T0, {0.1: 10.0, 0.5: 20.0, math.inf: 20.0}),
               (T0 + STEP, {0.1: 14.0, math.inf: 30.0}),
               (T0 + 2 * STEP, {0.1: 15.0, 0.5: 40.0, math.inf: 40.0})]
    second, third = series_math.interval_quantiles(scrapes, qs=(0.5,))
    assert second.observations == 10 and second.values[0.5] == pytest.approx(
        series_math.histogram_quantile(0.5, [(0.1, 4.0), (math.inf, 10.0)]))
    assert third.observations == 40 and third.values[0.5] == pytest.approx(0.1 + 0.4 * (20 - 1) / (40 - 1))


def test_counter_deltas_with_a_repeated_timestamp_take_the_later_value():
    points = [(T0, 10.0), (T0 + STEP, 20.0), (T0 + STEP, 25.0), (T0 + 2 * STEP, 30.0)]
    assert [(inc, dt) for _, inc, dt in series_math.counter_deltas(points)] == [(10.0, 15.0), (5.0, 15.0)]


def _histogram(host: str, les: list[float], per_scrape: list[list[float]]) -> list[SeriesPoint]:
    rows, total = [], [0.0] * len(les)
    for i, increments in enumerate(per_scrape):
        total = [t + inc for t, inc in zip(total, np.cumsum(increments).tolist())]
        for le, count in zip(les, total):
            rows.append(SeriesPoint(T0 + STEP * i, "vllm:time_to_first_token_seconds_bucket", count, host,
                                    {"le": "+Inf" if math.isinf(le) else str(le), "metric": "ttft",
                                     "model_name": "m"}))
    return rows


def test_hosts_with_different_bucket_layouts_are_each_computed_on_their_own(tmp_path):
    """Two servers, two bucket layouts, one query: each p50 curve is what interval_quantiles gives for
    that server alone."""
    a_les, b_les = [0.1, math.inf], [0.05, 0.5, 1.0, math.inf]
    a = [[3, 1], [8, 2], [1, 9]]
    b = [[1, 1, 0, 0], [0, 5, 5, 0], [0, 0, 2, 8]]
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(None)
        writer.add_all(_histogram("a", a_les, a) + _histogram("b", b_les, b))
        writer.flush()
        curves = {s.host: s for s in series.signals(bundle.con) if s.stat == "p50"}
    for host, les, per_scrape in (("a", a_les, a), ("b", b_les, b)):
        cumulative = np.cumsum(np.cumsum(np.array(per_scrape, dtype=float), axis=1), axis=0)
        expected = series_math.interval_quantiles([(T0 + STEP * i, dict(zip(les, row)))
                                              for i, row in enumerate(cumulative.tolist())], qs=(0.5,))
        assert [v for _, v in curves[host].points] == pytest.approx([iv.values[0.5] for iv in expected])
        assert len(curves[host].points) == 2
