"""Serving symptoms from metric curves: a step is flagged at its onset, noise is not, bad data does not crash."""

from __future__ import annotations

import math
import random
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.conftest import ingest_timeline
from workbench.ingest.derivations.series_anomaly import find_onset, find_saturation

T0 = datetime(2026, 11, 29, 22, 0, tzinfo=timezone.utc)
STEP = timedelta(seconds=15)
LES = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, math.inf)


# -- the detector on plain values --------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_step_is_flagged_at_its_onset(seed):
    rng = random.Random(seed)
    values = [0.08 * (1 + rng.gauss(0, 0.1)) for _ in range(30)] + [0.3 * (1 + rng.gauss(0, 0.1)) for _ in range(10)]
    onset = find_onset(values)
    assert onset is not None and abs(onset.start - 30) <= 1
    assert onset.baseline == pytest.approx(0.08, rel=0.1) and onset.peak > 0.25


@pytest.mark.parametrize("seed", range(20))
def test_noisy_flat_series_is_not_flagged(seed):
    rng = random.Random(seed)
    assert find_onset([0.08 * (1 + rng.gauss(0, 0.15)) for _ in range(200)]) is None
    assert find_onset([rng.randint(0, 4) for _ in range(200)], rel=1.0, floor=5.0) is None  # idle queue


def test_single_blip_is_not_a_run_but_an_extreme_last_point_is():
    flat = [10.0, 10.5, 9.5, 10.2, 9.8, 10.1, 9.9]
    assert find_onset(flat + [40.0] + flat) is None
    assert find_onset(flat + [400.0]).start == len(flat)


def test_drop_direction_and_nan_inf_values():
    values = [100.0, 98.0, 103.0, math.nan, 101.0, 99.0, math.inf, 100.0, 20.0, 18.0, 22.0]
    onset = find_onset(values, direction=-1)
    assert onset is not None and onset.peak == 18.0 and onset.baseline == pytest.approx(100.0)


def test_saturation_must_be_sustained():
    assert find_saturation([0.5, 0.95, 0.5, 0.6], 0.9) is None
    hit = find_saturation([0.5, 0.5, 0.92, 0.97, 0.99, 0.7], 0.9)
    assert (hit.start, hit.end, hit.peak, hit.baseline) == (2, 4, 0.99, 0.5)


# -- through ingest: scrape folders -> series -> derived events ---------------------------------

def _page(cum: list[float], waiting: float, kv: float, success: float, failure: float, gen: float,
          extra: str = "") -> str:
    m = 'model_name="llama"'
    lines = ["# TYPE vllm:time_to_first_token_seconds histogram"]
    lines += [f'vllm:time_to_first_token_seconds_bucket{{{m},le="{"+Inf" if math.isinf(le) else le}"}} {c}'
              for le, c in zip(LES, cum)]
    lines += [f"vllm:num_requests_waiting{{{m}}} {waiting}", f"vllm:gpu_cache_usage_perc{{{m}}} {kv}",
              f'vllm:request_success_total{{{m},finished_reason="stop"}} {success}',
              f'vllm:request_success_total{{{m},finished_reason="abort"}} {failure}',
              f"vllm:generation_tokens_total{{{m}}} {gen}"]
    return "\n".join(lines) + "\n" + extra


def _scrape_folder(root: Path, incident_at: int | None, n: int = 40, seed: int = 0, reset_at: int | None = None,
                   junk: bool = False) -> Path:
    """One vLLM pod scraped every 15 s; from ``incident_at`` on, TTFT x8, queue 40+, KV 0.97, 30 % aborts,
    generation rate quartered and arrivals tripled."""
    rng = random.Random(seed)
    folder = root / "metrics"
    folder.mkdir(parents=True)
    cum = [0.0] * len(LES)
    success = failure = gen = 0.0
    for i in range(n):
        bad = incident_at is not None and i >= incident_at
        if reset_at is not None and i == reset_at:
            cum, success, failure, gen = [0.0] * len(LES), 0.0, 0.0, 0.0
        arrivals = rng.randint(55, 65) * (3 if bad else 1)
        for _ in range(arrivals):
            v = rng.lognormvariate(math.log(0.03 * (8 if bad else 1)), 0.3)
            cum = [c + (1 if v <= le else 0) for c, le in zip(cum, LES)]
        aborted = int(arrivals * 0.3) if bad else 0
        success += arrivals - aborted
        failure += aborted
        gen += rng.randint(5800, 6200) / (4 if bad else 1)
        waiting = 40 + rng.randint(0, 5) if bad else rng.randint(0, 2)
        kv = 0.97 if bad else 0.4 + rng.random() * 0.1
        extra = 'vllm:num_requests_running{model_name="llama"} NaN\nbroken{line 1\n' if junk else ""
        stamp = (T0 + STEP * i).strftime("%Y%m%dT%H%M%SZ")
        (folder / f"vllm-0-{stamp}.prom").write_text(_page(cum, waiting, kv, success, failure, gen, extra))
    return folder


def _derived(bundle_path: Path, folder: Path) -> dict[str, dict]:
    events = [e for e in ingest_timeline(bundle_path, folder) if e["ts_origin"] == "derived"]
    kinds = [e["kind"] for e in events]
    assert len(kinds) == len(set(kinds)), kinds
    return {e["kind"]: e for e in events}


def test_incident_in_scrapes_gives_each_symptom_at_its_onset(tmp_path, bundle_path):
    events = _derived(bundle_path, _scrape_folder(tmp_path, incident_at=30))
    assert set(events) == {"latency_spike", "queue_backlog", "kv_cache_saturation", "error_rate_spike",
                           "throughput_drop", "request_rate_surge"}
    onset = T0 + STEP * 30
    for kind, event in events.items():
        ts = datetime.fromisoformat(event["ts"].replace("Z", "+00:00"))
        assert abs(ts - onset) <= STEP, (kind, event["ts"])
        assert event["host"] == "vllm-0" and event["attrs"]["model_name"] == "llama"
        assert event["layer"] == ("gpu" if kind == "kv_cache_saturation" else "business")
    spike = events["latency_spike"]["attrs"]
    assert spike["metric"] == "ttft" and spike["stat"] == "p99" and spike["unit"] == "s"
    assert spike["baseline"] < 0.1 < 0.3 < spike["peak"] and spike["method"] == "robust_z"
    assert events["error_rate_spike"]["severity"] == "error"
    assert events["error_rate_spike"]["attrs"]["peak"] == pytest.approx(0.3, abs=0.02)
    assert events["kv_cache_saturation"]["attrs"]["threshold"] == 0.9
    assert events["throughput_drop"]["attrs"]["metric"] == "generation_tokens"


@pytest.mark.parametrize("seed", range(3))
def test_healthy_scrapes_give_no_symptom(tmp_path, bundle_path, seed):
    assert _derived(bundle_path, _scrape_folder(tmp_path, incident_at=None, seed=seed)) == {}


def test_counter_reset_nan_and_broken_lines_do_not_crash_or_alarm(tmp_path, bundle_path):
    events = _derived(bundle_path, _scrape_folder(tmp_path, incident_at=None, reset_at=20, junk=True))
    assert events == {}


def test_csv_series_with_a_step(tmp_path, bundle_path):
    lines = ["time,host,p99_ttft_ms,queue_depth"]
    for i in range(30):
        lines.append(f"{(T0 + STEP * i).isoformat()},gpu07,{80 + (i % 3) if i < 20 else 900},{i % 2}")
    (tmp_path / "latency.csv").write_text("\n".join(lines) + "\n")
    events = _derived(bundle_path, tmp_path / "latency.csv")
    assert set(events) == {"latency_spike"}
    assert events["latency_spike"]["ts"].startswith((T0 + STEP * 20).strftime("%Y-%m-%dT%H:%M:%S"))
    assert events["latency_spike"]["attrs"]["peak"] == pytest.approx(0.9)
