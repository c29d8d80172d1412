"""Many curves scanned at once: each curve's onset is the one it has alone, a baseline never reaches
into the curve laid before it, and detect() reads hand-made curves without a bundle."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta

import pytest

from workbench.derivations.series_anomaly import Shape, detect, find_onset, find_onsets
from workbench.series import Signal

T0 = datetime(2026, 11, 29, 22, 0)
STEP = timedelta(seconds=15)


def _curve(rng: random.Random, n: int, level: float, step_at: int | None, factor: float) -> list[float]:
    values = [level * (1 + rng.gauss(0, 0.1)) * (factor if step_at is not None and i >= step_at else 1)
              for i in range(n)]
    if rng.random() < 0.3:
        values[rng.randrange(n)] = math.nan
    return values


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
