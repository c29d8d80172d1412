"""Drill levels: ``default`` is the drill as it always was, ``hard`` and ``hardest`` add distractors and
gaps that really are in the raw files, each deterministic, none hiding the culprit's own evidence, and
the truth (on the reference clock) says what each did."""

# ruff: noqa: E501  (log lines and their stamps are kept whole)

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from workbench.analysis.engine import analyze
from workbench.cli import main
from workbench.prevention.drill import DrillError, distractors, generate, stamps, write
from workbench.store.bundle import Bundle


def _raw(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _entry(truth_distractors: list[dict], name: str) -> dict:
    return next(x for x in truth_distractors if x["name"] == name)


@pytest.mark.parametrize(("cause", "workload"), [("gpu_fell_off_bus", "training"), ("gpu_oom", "inference")])
def test_the_default_level_is_the_drill_without_a_level(tmp_path: Path, cause: str, workload: str) -> None:
    omitted = write(cause, workload, 5, tmp_path / "omitted", ingest=False)
    default = write(cause, workload, 5, tmp_path / "default", ingest=False, level="default")
    hard = write(cause, workload, 5, tmp_path / "hard", ingest=False, level="hard")
    assert _raw(omitted.raw) == _raw(default.raw)
    assert (tmp_path / "omitted" / "answer.json").read_bytes() == (tmp_path / "default" / "answer.json").read_bytes()
    assert _raw(hard.raw) != _raw(default.raw)
    answer = json.loads((tmp_path / "omitted" / "answer.json").read_text())
    assert answer["level"] == "default" and answer["distractors"] == []
    # the harder level draws its own: the places, times and truth of the drill stay the default's
    assert {k: v for k, v in hard.truth.to_json().items() if k not in ("level", "distractors")} == \
        {k: v for k, v in default.truth.to_json().items() if k not in ("level", "distractors")}


@pytest.mark.parametrize("level", ["hard", "hardest"])
@pytest.mark.parametrize(("cause", "workload"), [("nvlink_error", "training"), ("traffic_surge", "inference")])
def test_each_level_writes_the_same_bytes_for_the_same_seed(tmp_path: Path, cause: str, workload: str, level: str) -> None:
    one = write(cause, workload, 3, tmp_path / "one", ingest=False, level=level)
    two = write(cause, workload, 3, tmp_path / "two", ingest=False, level=level)
    assert _raw(one.raw) == _raw(two.raw)
    assert (tmp_path / "one" / "answer.json").read_bytes() == (tmp_path / "two" / "answer.json").read_bytes()
    answer = json.loads((tmp_path / "one" / "answer.json").read_text())
    assert answer["level"] == level
    names = [x["name"] for x in answer["distractors"]]
    assert names == [x.name for x in distractors.of_level(level) if x.name in names]
    assert all(x["description"] for x in answer["distractors"])
    assert {"other_jobs", "missing_source"} <= set(names)


def test_another_jobs_old_failure_is_on_another_host_hours_before(tmp_path: Path) -> None:
    kinds = set()
    for seed in range(1, 7):
        w = write("gpu_hang", "training", seed, tmp_path / str(seed), ingest=False, level="hard")
        old = _entry(w.truth.distractors, "other_jobs")
        raw = w.raw
        assert old["host"] != w.truth.host
        hours = (w.truth.injected_at - datetime.fromisoformat(old["at"].replace("Z", "+00:00"))).total_seconds() / 3600
        assert 3 < hours < 12
        assert re.search(rf"^{old['job']}\|[^\n]*\|FAILED\|[^\n]*\|{old['host']}$", (raw / "slurm/sacct.txt").read_text(), re.M)
        out = (raw / f"slurm/slurm-{old['job']}.out").read_text()
        kinds.add(old["kind"])
        if old["kind"] == "cuda_oom":
            assert "CUDA out of memory" in out
        elif old["kind"] == "nccl_timeout":
            assert "Watchdog caught collective operation timeout" in out
        else:
            dmesg = (raw / old["host"] / "dmesg.txt").read_text() if (raw / old["host"] / "dmesg.txt").exists() else ""
            assert "Illegal Instruction Encoding" in dmesg or "kernel_log" in _entry(w.truth.distractors, "missing_source")["sources"]
    assert len(kinds) > 1
    w = write("traffic_surge", "inference", 2, tmp_path / "inf", ingest=False, level="hard")
    old = _entry(w.truth.distractors, "other_jobs")
    events = json.loads((w.raw / "k8s/events.json").read_text())["items"]
    assert any(e["involvedObject"]["name"] == old["pod"] and e["source"].get("host") == old["host"] for e in events)


def test_a_missing_source_is_missing_and_the_culprits_evidence_is_not(tmp_path: Path) -> None:
    seen = set()
    for cause in ("node_drained", "network_misconfigured", "gpu_fell_off_bus"):
        for seed in (1, 2, 3):
            w = write(cause, "training", seed, tmp_path / f"{cause}{seed}", ingest=False, level="hardest")
            gap = _entry(w.truth.distractors, "missing_source")
            seen |= set(gap["sources"])
            files = _raw(w.raw)
            for source, removed in gap["removed"].items():
                if source != "nccl_info":
                    assert removed and not set(removed) & set(files)
            if "kernel_log" in gap["sources"] and w.truth.host:
                assert not gap["removed"]["kernel_log"][0].startswith(f"{w.truth.host}/")
                assert f"{w.truth.host}/dmesg.txt" in files
            logs = b"".join(v for k, v in files.items() if k.startswith("slurm/slurm-") or "/rank" in k)
            assert (b" NCCL INFO " in logs) == ("nccl_info" not in gap["sources"])
            if cause == "node_drained":  # its drain is in the scheduler's log: that log stays
                assert b"reason set to" in files["slurm/slurmctld.log"]
            if cause == "network_misconfigured":  # its evidence is NCCL INFO interface lines: they stay
                assert b"NCCL INFO NET/Socket" in logs
    assert {"kernel_log", "nccl_info", "scheduler_log"} <= seen


def test_a_second_fault_sits_on_another_host(tmp_path: Path) -> None:
    shows = {"ecc_corrected": ("dmesg", "EDAC MC"), "aer_corrected": ("dmesg", "AER: Corrected error received"),
             "idle_throttle": ("gpu-query.csv", "Active"), "tmp_full": ("df-h.txt", "100% /tmp")}
    kinds = set()
    for seed in range(1, 9):
        w = write("gpu_hang", "training", seed, tmp_path / str(seed), ingest=False, level="hardest")
        second = _entry(w.truth.distractors, "second_fault")
        assert second["host"] != w.truth.host
        kinds.add(second["kind"])
        name, text = shows[second["kind"]]
        where = [p for p in (w.raw / second["host"]).iterdir() if p.name.startswith(name)]
        missing = second["kind"] in ("ecc_corrected", "aer_corrected") and not where
        assert missing or any(text in p.read_text() for p in where)
    assert len(kinds) >= 3
    for seed in range(1, 6):  # never one like the drill's own cause
        w = write("ecc_uncorrectable", "training", seed, tmp_path / f"ecc{seed}", ingest=False, level="hardest")
        assert _entry(w.truth.distractors, "second_fault")["kind"] != "ecc_corrected"


def test_the_ranks_output_is_one_srun_out_labelled_by_node(tmp_path: Path) -> None:
    for seed in (1, 2):
        w = write("gpu_oom", "training", seed, tmp_path / str(seed), ingest=False, level="hardest")
        merged = _entry(w.truth.distractors, "slurm_out")
        files = _raw(w.raw)
        assert not [k for k in files if re.search(r"/rank\d+\.log$", k)]
        lines = files[merged["file"]].decode().splitlines()
        hosts = merged["tasks"]
        workers = [line for line in lines if re.match(r"^\d+: \[default\d+\]:", line)]
        agents = [line for line in lines if line not in workers]
        assert len(workers) > len(agents) and all(re.match(r"^\d+: (I\d{4} |  \w+=)", line) for line in agents)
        world = int(re.search(r"world_size=(\d+)", workers[0]).group(1))
        per_node = world // len(hosts)
        for line in workers:
            m = re.match(r"^(\d+): \[default(\d+)\]:.*\[[Rr]ank ?(\d+)\]", line)
            if m:
                task, local, rank = map(int, m.groups())
                assert (task, local) == divmod(rank, per_node)
        assert {line.split(":")[0] for line in lines} == set(hosts)
        for task in hosts:  # each node's agent says which global ranks its task runs
            ranks = list(range(int(task) * per_node, (int(task) + 1) * per_node))
            assert f"{task}:   global_ranks={ranks}" in lines
        assert hosts[str(w.truth.rank // per_node)] == w.truth.host
        assert any(f"[rank{w.truth.rank}]: torch.OutOfMemoryError" in line for line in lines)


@pytest.mark.parametrize(("cause", "workload"), [("app_gpu_fault", "training"), ("app_gpu_fault", "inference")])
def test_a_skewed_hosts_lines_are_shifted_by_its_recorded_skew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              cause: str, workload: str) -> None:
    skewed = generate(cause, workload, 4, "hardest")
    monkeypatch.setattr(distractors, "REGISTRY", [x for x in distractors.REGISTRY if x.name != "clock_skew"])
    straight = generate(cause, workload, 4, "hardest")
    skews = _entry(skewed.distractors, "clock_skew")["skews_s"]
    assert skews and len(skews) < len(skewed.hosts) and all(5 <= abs(s) <= 90 for s in skews.values())
    assert skewed.fault == straight.fault and skewed.truth("gpu").injected_at == straight.truth("gpu").injected_at
    year, shifted = skewed.start.year, 0
    for rel, lines in straight.files.items():
        host = rel.split("/")[0]
        for before, after in zip(lines, skewed.files[rel]):
            label = re.match(r"^(\d+): ", before)
            if host in skews and not rel.endswith("dmesg.txt"):
                want = skews[host]
            elif label and rel.startswith("slurm/slurm-") and skewed.workload == "training":
                want = skews.get(skewed.hosts[int(label.group(1))], 0)
            else:
                assert after == before
                continue
            t0, t1 = stamps.stamp(before, year), stamps.stamp(after, year)
            assert (t0 is None and after == before) or (t1 - t0).total_seconds() == want
            shifted += t0 is not None and want != 0
    assert shifted > 0
    for host, seconds in skews.items():
        if f"{host}/uptime-s.txt" in straight.texts:
            boot = [datetime.strptime(d.texts[f"{host}/uptime-s.txt"].strip(), "%Y-%m-%d %H:%M:%S") for d in (straight, skewed)]
            assert boot[1] - boot[0] == timedelta(seconds=seconds)


def test_stamps_read_and_shift_every_shape_and_merge_in_time_order() -> None:
    when = datetime(2026, 3, 9, 23, 59, 50, 250_000, tzinfo=timezone.utc)
    by = timedelta(seconds=17)
    examples = [
        "2026-03-09 23:59:50,250 - INFO - hello", "[2026-03-09 23:59:50,250] [INFO] [logging.py:96:log_dist] x",
        "[2026-03-09T23:59:50.250] sched: Allocate", "2026/03/09 23:59:50.250, 0, 00000000:5D:00.0, 100 %",
        "[rank3]:[E309 23:59:50.250000951 ProcessGroupNCCL.cpp:616] boom", "E0309 23:59:50.250000 4242 torch/x.py:1] y",
        "ERROR 03-09 23:59:50 engine.py:158] ValueError", "[Mon Mar  9 23:59:50 2026] NVRM: Xid",
        "Mar 09 23:59:50 node01 systemd[1]: Failed", "   1 | 03/09/2026 | 23:59:50 | Power Supply PS1",
    ]
    for line in examples:
        read = stamps.stamp(line, 2026)
        assert read is not None and abs((read - when).total_seconds()) < 1, line
        moved = stamps.shift(line, by, 2026)
        assert moved != line and stamps.stamp(moved, 2026) - read == by, line
        assert re.sub(r"\d", "0", moved.split("]")[-1]) == re.sub(r"\d", "0", line.split("]")[-1])
    assert stamps.shift("NCCL INFO Using network IB", by, 2026) == "NCCL INFO Using network IB"
    merged = stamps.merge([("0: ", ["2026-03-09 10:00:02,000 - INFO - a", "Traceback", "2026-03-09 10:00:01,000 - INFO - c"]),
                           ("1: ", ["2026-03-09 10:00:01,500 - INFO - b", "2026-03-09 10:00:02,000 - INFO - d"])],
                          2026, when)
    assert [(line[:2], line.split(" ")[-1]) for line in merged] == \
        [("1:", "b"), ("0:", "a"), ("0:", "Traceback"), ("0:", "c"), ("1:", "d")]


def test_the_cli_writes_the_hardest_level_and_refuses_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    assert main(["drill", "gpu_hang", "--level", "hardest", "--seed", "2", "-o", str(out), "--no-ingest", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["level"] == "hardest" and "clock_skew" in printed["distractors"]
    assert json.loads((out / "answer.json").read_text())["level"] == "hardest"
    with pytest.raises(SystemExit) as refused:
        main(["drill", "gpu_hang", "--level", "harder", "-o", str(tmp_path / "e")])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "harder" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(DrillError, match="unknown drill level"):
        generate("gpu_hang", "training", 1, "harder")


HARD = [("gpu_oom", "training"), ("gpu_oom", "inference"), ("host_oom_kill", "training"),
        ("host_oom_kill", "inference"), ("ecc_uncorrectable", "training"), ("ecc_uncorrectable", "inference"),
        ("gpu_fell_off_bus", "training"), ("gpu_fell_off_bus", "inference"), ("preemption", "training"),
        ("preemption", "inference")]


@pytest.mark.parametrize(("cause", "workload"), HARD)
def test_the_analysis_still_names_the_cause_at_the_hard_level(tmp_path: Path, cause: str, workload: str) -> None:
    for seed in (1, 2):
        w = write(cause, workload, seed, tmp_path / str(seed), level="hard")
        with Bundle.open(w.bundle) as bundle:
            top = (analyze(bundle)["hypotheses"] or [{}])[0]
        assert top.get("cause") == cause, f"seed {seed}: {top.get('cause')} ({w.truth.distractors})"
