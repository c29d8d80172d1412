"""The drill bench's measuring functions (tests/perf/drill_bench.py): what it counts right is what its
docstring says, and its main prints the tables on a one-drill run."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import duckdb
import pytest

from tests.perf import drill_bench
from tests.perf.drill_bench import (
    BenchError,
    Sampling,
    Task,
    calibration_table,
    choose_levels,
    judge,
    sampling_at,
    write_drill,
)

TRUTH = {"cause": "ecc_uncorrectable", "host": "node07", "gpu": "0000:5d:00.0",
         "first_anomaly_at": "2026-03-04T10:20:30.250000Z"}


def result(cause: str = "ecc_uncorrectable", host: str = "node07", gpu: str | None = "5D:00.0",
           first: str | None = "2026-03-04T10:20:30.250Z") -> dict[str, Any]:
    return {"hypotheses": [{"cause": cause, "host": host, "gpu": gpu, "score": 0.71}],
            "first_anomaly": {"ts": first} if first else None}


def test_a_right_answer_counts_right_on_every_criterion() -> None:
    v = judge(result(), TRUTH)
    assert (v.cause, v.host, v.gpu, v.first, v.all, v.answer) == (True, True, True, True, True, True)
    assert v.score == 0.71 and v.named_gpu == "0000:5d:00.0" and v.misses() == []


def test_a_wrong_host_counts_wrong_and_the_answer_with_it() -> None:
    v = judge(result(host="node08"), TRUTH)
    assert v.cause is True and v.host is False and not v.all and not v.answer
    assert v.misses() == ["host"]


def test_a_wrong_cause_and_gpu_count_wrong() -> None:
    v = judge(result(cause="nvlink_error", gpu="0000:9a:00.0"), TRUTH)
    assert (v.cause, v.gpu) == (False, False) and v.misses() == ["cause", "GPU"]


def test_a_truth_without_a_place_does_not_count_host_or_gpu() -> None:
    v = judge(result(host="anywhere", gpu=None), {**TRUTH, "host": None, "gpu": None})
    assert (v.host, v.gpu) == (None, None) and v.all


def test_no_hypothesis_and_no_first_anomaly_are_wrong() -> None:
    v = judge({"hypotheses": [], "first_anomaly": None}, TRUTH)
    assert (v.cause, v.host, v.gpu, v.first) == (False, False, False, False) and v.score == 0.0


def test_a_first_anomaly_half_a_second_off_is_right() -> None:
    assert judge(result(first="2026-03-04T10:20:30.750Z"), TRUTH).first is True
    assert judge(result(first="2026-03-04T10:20:29.750Z"), TRUTH).first is True


def test_a_first_anomaly_40_s_off_with_no_series_is_wrong() -> None:
    late = result(first="2026-03-04T10:21:10.250Z")
    assert judge(late, TRUTH, Sampling(on_line=True)).first is False
    assert judge(late, TRUTH, Sampling(on_line=False)).first is False  # the 30 s default does not stretch to 40
    assert judge(late, TRUTH, Sampling(on_line=False)).first_off_s == pytest.approx(40.0)


def test_within_a_30_s_scrape_interval_is_right_where_the_truth_falls_on_no_line() -> None:
    late = result(first="2026-03-04T10:20:55Z")
    assert judge(late, TRUTH, Sampling(on_line=False, interval_s=30.0)).first is True
    assert judge(late, TRUTH, Sampling(on_line=False, interval_s=15.0)).first is False
    assert judge(late, TRUTH, Sampling(on_line=True, interval_s=30.0)).first is False  # a line the engine could name


def bundle_like(events: list[tuple[str, str, str]], series: list[tuple[str, str]]) -> duckdb.DuckDBPyConnection:
    """A connection with the tables sampling_at reads: event (host, ts, ts_origin) and series (host, ts)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE event (host VARCHAR, ts TIMESTAMP, ts_origin VARCHAR)")
    con.execute("CREATE TABLE series (ts TIMESTAMP, host VARCHAR, name VARCHAR, labels JSON, value DOUBLE)")
    con.execute("CREATE TABLE gpu_sample (ts TIMESTAMP, host VARCHAR, gpu VARCHAR)")
    for row in events:
        con.execute("INSERT INTO event VALUES (?, ?, ?)", list(row))
    for host, ts in series:
        con.execute("INSERT INTO series VALUES (?, ?, 'dcgm_temp', '{}', 1.0)", [ts, host])
    return con


def test_sampling_finds_the_line_under_the_truth_and_reads_it_through_clock_offsets() -> None:
    con = bundle_like([("node07", "2026-03-04 10:20:30.5", "iso"), ("node08", "2026-03-04 10:20:30", "derived")], [])
    assert sampling_at(con, TRUTH) == Sampling(on_line=True, interval_s=None)
    derived_only = bundle_like([("node08", "2026-03-04 10:20:30", "derived")], [])
    assert sampling_at(derived_only, TRUTH).on_line is False
    skewed = bundle_like([("node07", "2026-03-04 10:21:10.5", "iso")], [])  # its clock runs 40 s ahead
    assert sampling_at(skewed, TRUTH).on_line is False
    assert sampling_at(skewed, TRUTH, {"node07": 40.0}).on_line is True


def test_sampling_takes_the_step_of_the_series_around_the_truth() -> None:
    every_15 = [("node07", f"2026-03-04 10:{m:02d}:{s:02d}") for m in range(15, 26) for s in (0, 15, 30, 45)]
    assert sampling_at(bundle_like([], every_15), TRUTH) == Sampling(on_line=False, interval_s=15.0)
    before_only = [("node07", "2026-03-04 10:10:00"), ("node07", "2026-03-04 10:10:15")]
    assert sampling_at(bundle_like([], before_only), TRUTH).interval_s is None  # does not bracket the truth
    assert sampling_at(bundle_like([], before_only), TRUTH).tolerance_s == drill_bench.DEFAULT_SCRAPE_S
    one_sample = [("node07", "2026-03-04 10:20:30")]
    assert sampling_at(bundle_like([], one_sample), TRUTH).interval_s is None


def test_sampling_prefers_the_truth_hosts_series() -> None:
    mine = [("node07", f"2026-03-04 10:{m:02d}:00") for m in range(0, 60, 10)]
    finer_elsewhere = [("node09", f"2026-03-04 10:20:{s:02d}") for s in range(0, 60, 5)]
    assert sampling_at(bundle_like([], mine + finer_elsewhere), TRUTH).interval_s == 600.0
    assert sampling_at(bundle_like([], finer_elsewhere), TRUTH).interval_s == 5.0


def test_calibration_bins_hold_their_edges() -> None:
    table = calibration_table([(0.5, True), (0.49, False), (1.0, True), (0.8, False), (0.1, False)])
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[2:8]}
    assert rows["0.35-0.50"][:2] == ["1", "0"] and rows["0.50-0.65"][:2] == ["1", "1"]
    assert rows["0.80-1.00"][:2] == ["2", "1"] and rows["0.00-0.20"][:2] == ["1", "0"]
    assert "score >= 0.5: right 66.7 % (2 of 3" in table


def test_a_level_the_drills_do_not_have_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from workbench.prevention import drill

    def old_write(cause: str, workload: str | None, seed: int, out: Any, *, ingest: bool = True) -> None:
        raise AssertionError("never reached")

    monkeypatch.setattr(drill, "write", old_write)
    assert choose_levels(None, quick=False) == ["default"]
    with pytest.raises(BenchError, match="^this checkout's drills have no level hardest$"):
        choose_levels("default,hardest", quick=False)
    with pytest.raises(BenchError, match="^this checkout's drills have no level hard$"):
        write_drill(Task("gpu_oom", "training", 1, "hard"), None)  # type: ignore[arg-type]


def test_writing_calibration_without_the_module_says_so(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    monkeypatch.setitem(sys.modules, "workbench.analysis.confidence", None)
    code = drill_bench.main(["--cause", "gpu_oom", "--seeds", "1", "--levels", "default",
                             "--write-calibration", str(tmp_path / "c.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "write_calibration" in err
    assert not (tmp_path / "c.yaml").exists()


def test_main_prints_the_tables_for_one_drill(capsys: pytest.CaptureFixture[str], tmp_path: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out_json = tmp_path / "rows.json"
    handed: list[tuple] = []
    from workbench.analysis import confidence

    monkeypatch.setattr(confidence, "write_calibration",
                        lambda path, pairs, source, margins: handed.append((path, pairs, source, margins)))
    code = drill_bench.main(["--cause", "gpu_oom", "--workload", "training", "--seeds", "1", "--levels", "default",
                             "--jobs", "1", "--json", str(out_json), "--write-calibration", str(tmp_path / "c.yaml")])
    out = capsys.readouterr().out
    assert code == 0
    assert "level default: 1 drills (1 cause/workload pairs x 1 seeds)" in out
    for label in ("cause", "host", "GPU", "first anomaly", "all"):
        assert any(line.startswith(label + " ") for line in out.splitlines()), label
    assert "baseline (loudest line)" in out and "raw score >= 0.5: right" in out and "misses (" in out
    assert "calibrated confidence (what the cockpit shows) >= 0.5: right" in out
    import json

    rows = json.loads(out_json.read_text())["drills"]
    assert [(r["cause"], r["workload"], r["seed"], r["level"]) for r in rows] == [("gpu_oom", "training", 1, "default")]
    assert rows[0]["truth"]["cause"] == "gpu_oom" and isinstance(rows[0]["engine"]["cause"], bool)
    assert datetime.fromisoformat(rows[0]["truth"]["first_anomaly_at"].replace("Z", "+00:00"))
    [(path, pairs, source, margins)] = handed
    assert path == tmp_path / "c.yaml" and source.startswith("tests/perf/drill_bench.py: 1 drills")
    assert pairs == [(rows[0]["engine"]["score"], rows[0]["engine"]["cause"] and rows[0]["engine"]["host"] is not False
                      and rows[0]["engine"]["gpu"] is not False)]
    assert margins == [(rows[0]["engine"]["margin"], pairs[0][1])] and 0.0 <= margins[0][0] <= pairs[0][0]
