"""Many curves scanned at once: each curve's onset is the one it has alone, a baseline never reaches
into the curve laid before it, and detect() reads hand-made curves without a bundle."""

from __future__ import annotations

import math
import random
import statistics
from datetime import datetime, timedelta

import pytest

from workbench.ingest.derivations.series_anomaly import (
    BASELINE_POINTS,
    MAD_TO_SIGMA,
    Onset,
    Shape,
    detect,
    find_onset,
    find_onsets,
)
from workbench.query.series import Signal

T0 = datetime(2026, 11, 29, 22, 0)
STEP = timedelta(seconds=15)


def _curve(rng: random.Random, n: int, level: float, step_at: int | None, factor: float) -> list[float]:
    values = [level * (1 + rng.gauss(0, 0.1)) * (factor if step_at is not None and i >= step_at else 1)
              for i in range(n)]
    if rng.random() < 0.3:
        values[rng.randrange(n)] = math.nan
    return values


def onset_by_hand(values: list[float], shape: Shape, persist: int, z: float = 5.0) -> Onset | None:
    """The rule as the module docstring states it, point by point with statistics.median: the reference."""
    values = [v for v in values if math.isfinite(v)]
    for i in range(5, len(values)):
        window = values[max(0, i - BASELINE_POINTS):i]
        median = statistics.median(window)
        need = max(shape.rel * abs(median), shape.floor)
        scale = max(MAD_TO_SIGMA * statistics.median(abs(b - median) for b in window), 0.01 * abs(median), 1e-12)

        def score(v: float, median: float = median, need: float = need, scale: float = scale) -> float:
            shift = shape.direction * (v - median)
            return shift / scale if shift >= need and shift > 0 else 0.0

        if score(values[i]) < z:
            continue
        j = i
        while j + 1 < len(values) and score(values[j + 1]) >= z:
            j += 1
        if j - i + 1 >= persist or (j == len(values) - 1 and score(values[i]) >= 2 * z):
            run = values[i:j + 1]
            return Onset(i, j, median, max(run) if shape.direction > 0 else min(run), max(map(score, run)))
    return None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("persist", [1, 2, 3])
def test_batched_onsets_follow_the_rule_point_by_point(seed, persist):
    """Spiky curves (single outliers, short bursts, a step near the end) in one batch against the reference."""
    rng = random.Random(seed)
    curves, shapes = [], []
    for _ in range(10):
        values = [10 * (1 + rng.gauss(0, 0.05)) for _ in range(rng.randint(4, 160))]
        for _ in range(rng.randint(0, 4)):
            at = rng.randrange(len(values))
            for k in range(rng.randint(1, 3)):
                if at + k < len(values):
                    values[at + k] *= rng.choice([0.1, 3.0, 40.0])
        curves.append(values)
        shapes.append(Shape(rng.choice([1, -1]), 0.5, 0.0))
    curves += [[10.0] * 20 + [400.0] * 3 + [10.0] * 5, [10.0] * 30]  # one onset for sure, one flat curve
    shapes += [Shape(1, 0.5, 0.0)] * 2
    got = find_onsets(curves, shapes, persist=persist)
    expected = [onset_by_hand(c, s, persist) for c, s in zip(curves, shapes)]
    assert [(o.start, o.end) if o else None for o in got] == [(o.start, o.end) if o else None for o in expected]
    for o, e in zip(got, expected):
        if o:
            assert (o.baseline, o.peak) == (e.baseline, e.peak) and o.z == pytest.approx(e.z)
    assert any(expected) and not all(expected)


@pytest.mark.parametrize("seed", range(8))
def test_a_batch_finds_what_each_curve_finds_alone(seed):
    rng = random.Random(seed)
    curves, shapes = [], []
    for _ in range(12):
        n = rng.randint(3, 300)
        step_at = rng.choice([None, rng.randint(0, n)])
        curves.append(_curve(rng, n, rng.choice([0.05, 3.0, 400.0]), step_at, rng.choice([0.2, 3.0, 8.0])))
        shapes.append(Shape(rng.choice([1, -1]), rng.choice([0.5, 1.0]), rng.choice([0.0, 0.5])))
    together = find_onsets(curves, shapes)
    alone = [find_onset(c, direction=s.direction, rel=s.rel, floor=s.floor) for c, s in zip(curves, shapes)]
    assert together == alone
    assert any(o is not None for o in together) and any(o is None for o in together)


def test_a_baseline_never_reaches_into_the_previous_curve():
    """Laid end to end, a high curve then a low one: had the low curve's first baseline borrowed the high
    curve's last points, its early points would read as a drop."""
    high = [100.0 + (i % 3) for i in range(50)]
    low = [1.0 + 0.01 * (i % 3) for i in range(50)]
    assert find_onsets([high, low], [Shape(-1, 0.5, 0.0)] * 2) == [None, None]
    assert find_onsets([low, high + [1.0, 1.0]], [Shape(-1, 0.5, 0.0)] * 2)[1].start == 50


def test_detect_reads_curves_without_a_bundle():
    flat = [0.08 + 0.001 * (i % 5) for i in range(30)]
    p99 = Signal("gpu07", "ttft", "p99", "s", {"model_name": "m"},
                 [(T0 + STEP * i, v) for i, v in enumerate(flat + [0.9, 0.95, 0.92])])
    mean = Signal("gpu07", "ttft", "mean", "s", {"model_name": "m"}, [(T0 + STEP * i, 0.05) for i in range(33)])
    (event,) = detect([mean, p99])
    assert event.kind == "latency_spike" and event.ts == T0 + STEP * 30
    assert event.attrs["stat"] == "p99" and event.attrs["peak"] == 0.95 and event.attrs["points"] == 3
