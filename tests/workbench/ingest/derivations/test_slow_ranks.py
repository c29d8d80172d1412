"""Slow ranks and slow steps from per-rank step times, through ``gpuwb ingest`` + ``timeline --json``:
a rank that stays 1.5x slower is named with its host and GPU, noisy but even ranks are not, and a job
whose every step slows down gets one throughput_drop."""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import ingest_timeline

T0 = datetime(2025, 3, 12, 6, 0, 0)
HOSTS = ("gpu-a01", "gpu-a02")
BUS = ("18000", "2a000", "3a000", "5d000")


def _init(rank: int, nranks: int) -> str:
    host, dev = HOSTS[rank // 4], rank % 4
    pid = 4100 + rank
    return (f"{host}:{pid}:{pid + 9} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d7{rank:04x}0 rank {rank} nranks "
            f"{nranks} cudaDev {dev} nvmlDev {dev} busId {BUS[dev]} commId 0x3e1a2b7c9d4f5e60 - Init COMPLETE\n")


def _deepspeed_job(folder: Path, compute_ms, steps: int = 40, every: int = 10) -> None:
    """Eight ranks' logs with DeepSpeed's progress line and wall-clock breakdown every ``every`` steps;
    ``compute_ms(rank, i)`` is rank's forward+backward(+optimizer) time at the i-th print."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(8):
        lines = [_init(rank, 8)]
        for i in range(steps):
            when = T0 + timedelta(seconds=15 * i)
            stamp = f"[{when:%Y-%m-%d %H:%M:%S},{rank:03d}] [INFO] [logging.py:96:log_dist]"
            ms = compute_ms(rank, i)
            wall = max(compute_ms(r, i) for r in range(8)) + 20.0
            lines.append(f"{stamp} [Rank {rank}] step={every * (i + 1)}, skipped=0, lr=[0.0003], mom=[(0.9, 0.95)]\n")
            lines.append(f"{stamp} [Rank {rank}] rank={rank} time (ms) | forward: {ms * 0.3:.2f} | "
                         f"backward: {wall - ms * 0.3:.2f} | backward_inner: {ms * 0.6:.2f} | "
                         f"backward_allreduce: {wall - ms * 0.9:.2f} | step: {ms * 0.1:.2f}\n")
        (folder / f"rank{rank}.log").write_text("".join(lines))


def _of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def test_a_rank_one_and_a_half_times_slower_for_twenty_steps_is_flagged(tmp_path):
    rng = random.Random(7)
    _deepspeed_job(tmp_path / "logs",
                   lambda r, i: 1000.0 * (1.5 if r == 5 and i >= 20 else 1.0) * (1 + rng.uniform(-0.04, 0.04)))
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert len(_of(events, "step_time")) == 8 * 40
    (slow,) = _of(events, "straggler_rank")
    assert (slow["rank"], slow["host"], slow["gpu"]) == (5, "gpu-a02", "0000:2a:00.0")
    attrs = slow["attrs"]
    assert attrs["reason"] == "slow_steps" and attrs["measure"] == "compute" and attrs["ranks_compared"] == 8
    assert attrs["steps"] == 20 and attrs["first_step"] == 210 and attrs["last_step"] == 400
    assert attrs["ratio"] == pytest.approx(1.5, abs=0.06)
    assert attrs["median_s"] == pytest.approx(1.0, abs=0.05) and attrs["rank_s"] == pytest.approx(1.5, abs=0.08)
    assert slow["ts"].startswith("2025-03-12T06:05:00") and slow["source"] == "slow_ranks"
    assert len(attrs["step_events"]) == 20 and all(ref["line"] for ref in attrs["step_events"])
    (drop,) = _of(events, "throughput_drop")
    assert drop["attrs"]["ratio"] == pytest.approx(1.5, abs=0.08) and drop["attrs"]["first_step"] == 210
    assert drop["attrs"]["nodes"] == list(HOSTS) and drop["layer"] == "business"


@pytest.mark.parametrize("seed", range(4))
def test_noisy_but_even_ranks_are_not_flagged(tmp_path, seed):
    rng = random.Random(seed)
    _deepspeed_job(tmp_path / "logs", lambda r, i: 1000.0 * (1 + rng.gauss(0, 0.06)) * (1.25 if rng.random() < 0.03
                                                                                          else 1.0))
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert len(_of(events, "step_time")) == 8 * 40
    assert _of(events, "straggler_rank") == [] and _of(events, "throughput_drop") == []


def test_a_short_burst_is_not_a_straggler(tmp_path):
    _deepspeed_job(tmp_path / "logs", lambda r, i: 1000.0 * (1.8 if r == 2 and i in (9, 10, 30) else 1.0))
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert _of(events, "straggler_rank") == []


def test_whole_step_times_slow_together_give_one_throughput_drop(tmp_path):
    """Megatron prints the iteration time on the last rank only; a synchronous job's wall time is the same
    on every rank, so there is no straggler to name, only the job getting slower."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [_init(7, 8)]
    for i in range(30):
        when = T0 + timedelta(minutes=i)
        ms = 1432.1 if i >= 18 else 1021.7 + (i % 3) * 4
        lines.append(f" [{when:%Y-%m-%d %H:%M:%S}] iteration {100 * (i + 1):8d}/  500000 | consumed samples: "
                     f"{6400 * (i + 1):12d} | elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.500E-04 | "
                     f"global batch size:    64 | lm loss: 2.345678E+00 | loss scale: 1.0 | grad norm: 0.812 | "
                     f"number of skipped iterations:   0 | number of nan iterations:   0 |\n")
    (logs / "rank7.log").write_text("".join(lines))
    events = ingest_timeline(tmp_path / "b.duckdb", logs)
    assert {e["rank"] for e in _of(events, "step_time")} == {7}
    assert _of(events, "straggler_rank") == []
    (drop,) = _of(events, "throughput_drop")
    attrs = drop["attrs"]
    assert attrs["first_step"] == 1900 and attrs["points"] == 12 and attrs["measure"] == "step"
    assert attrs["baseline_s"] == pytest.approx(1.0257, abs=0.005) and attrs["slow_s"] == pytest.approx(1.4321)
    assert drop["host"] == "gpu-a02" and drop["ts"].startswith("2025-03-12T06:18:00")


def test_long_per_step_logs_are_thinned_on_the_same_steps(tmp_path):
    """Past the budget every rank keeps the same step numbers, so ranks stay comparable."""
    from collectors.nccl.findings import STEP_BUDGET

    logs = tmp_path / "logs"
    logs.mkdir()
    n = STEP_BUDGET * 5
    for rank in range(3):
        (logs / f"rank{rank}.log").write_text(_init(rank, 3) + "".join(
            f"{T0 + timedelta(seconds=s):%Y-%m-%d %H:%M:%S},000 - INFO - [rank{rank}] step {s} | loss 2.1 | "
            f"step_time {1.0 + 0.5 * (rank == 2 and s > n - 500):.2f}s\n" for s in range(1, n + 1)))
    events = ingest_timeline(tmp_path / "b.duckdb", logs)
    kept = {r: {e["attrs"]["step"] for e in _of(events, "step_time") if e["rank"] == r} for r in range(3)}
    assert kept[0] == kept[1] == kept[2] and len(kept[0]) < n * 0.6
    assert max(kept[0]) >= n - 4
    (slow,) = _of(events, "straggler_rank")
    assert slow["rank"] == 2 and slow["attrs"]["ratio"] == pytest.approx(1.5)
