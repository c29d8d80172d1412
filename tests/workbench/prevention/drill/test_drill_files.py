"""What a drill writes: the same bytes for the same seed, other places and times for another, the
truth kept out of the evidence, and one-line errors for a cause or folder it cannot use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench.analysis.causes import load_causes
from workbench.cli import main
from workbench.prevention.drill import DrillError, write


def _raw(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(("cause", "workload"), [("gpu_fell_off_bus", "training"), ("traffic_surge", "inference")])
def test_the_same_seed_writes_the_same_bytes(tmp_path: Path, cause: str, workload: str) -> None:
    one = write(cause, workload, 7, tmp_path / "one", ingest=False)
    two = write(cause, workload, 7, tmp_path / "two", ingest=False)
    assert _raw(one.raw) == _raw(two.raw)
    assert [p.stat().st_mtime for p in one.files] == [p.stat().st_mtime for p in two.files]
    assert (tmp_path / "one" / "answer.json").read_bytes() == (tmp_path / "two" / "answer.json").read_bytes()


def test_other_seeds_draw_other_hosts_and_times(tmp_path: Path) -> None:
    truths = [write("gpu_hang", "training", seed, tmp_path / str(seed), ingest=False).truth for seed in (1, 2, 3)]
    assert len({t.host for t in truths}) == 3
    assert len({t.injected_at for t in truths}) == 3
    assert len({t.gpu for t in truths}) > 1
    hosts = [sorted(p.name for p in (tmp_path / str(seed) / "raw").iterdir()) for seed in (1, 2, 3)]
    assert hosts[0] != hosts[1] != hosts[2]


def test_the_truth_stays_out_of_the_evidence(tmp_path: Path) -> None:
    written = write("ecc_uncorrectable", "training", 2, tmp_path / "d", ingest=False)
    answer = json.loads((tmp_path / "d" / "answer.json").read_text())
    assert answer["cause"] == "ecc_uncorrectable" and answer["layer"] == "gpu"
    assert answer["host"] == written.truth.host and answer["gpu"].startswith("0000:")
    evidence = b"".join(_raw(written.raw).values())
    assert b"ecc_uncorrectable" not in evidence and b"answer" not in b" ".join(p.name.encode() for p in written.files)


def test_the_symptoms_show_on_the_other_hosts_too(tmp_path: Path) -> None:
    for seed in (1, 2, 3):  # one log per rank or one srun -l file, as the seed draws
        written = write("gpu_fell_off_bus", "training", seed, tmp_path / str(seed), ingest=False)
        logs = "".join(p.read_text() for p in written.files if p.name.startswith(("rank", "slurm-")))
        ranks: dict[str, set[str]] = {}
        for host, rank in re.findall(r"(\S+):\d+:\d+ \[\d+\] NCCL INFO ncclCommInitRank comm \S+ rank (\d+) ", logs):
            ranks.setdefault(host, set()).add(rank)
        others = set(ranks) - {written.truth.host}
        assert others and written.truth.host in ranks
        watchdog = r"\[rank(\d+)\]:\[E\d+ [\d:.]+ ProcessGroupNCCL.cpp:616\] \[Rank \d+\] Watchdog caught"
        timed_out = set(re.findall(watchdog, logs))
        assert all(ranks[host] <= timed_out for host in others)
        assert str(written.truth.rank) not in timed_out


def test_an_unknown_cause_is_one_line_with_close_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DrillError, match="did you mean gpu_fell_off_bus"):
        write("gpu_fel_off_bus", None, 1, tmp_path / "d")
    assert main(["drill", "nvlink_eror", "-o", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nvlink_error" in err


def test_a_folder_the_drill_did_not_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(DrillError, match="not written by gpuwb drill"):
        write("gpu_oom", None, 1, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine\n"


def test_list_names_every_cause_with_its_workloads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["causes"]
    assert len(rows) == len([c for c, e in load_causes().items() if not e.get("unknown")]) >= 34
    assert {r["cause"]: r["workloads"] for r in rows}["traffic_surge"] == ["inference"]
    assert all(r["workloads"] for r in rows)


def test_the_command_writes_ingests_and_says_how_to_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d"
    assert main(["drill", "nvswitch_fault", "--seed", "4", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"gpuwb open {out / 'bundle.duckdb'}" in text and f"gpuwb drill score {out / 'bundle.duckdb'}" in text
    assert main(["analyze", str(out / "bundle.duckdb"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hypotheses"][0]["cause"] == "nvswitch_fault"
    assert main(["drill", "nvswitch_fault", "--seed", "4", "-o", str(out), "--no-ingest"]) == 0
    assert f"gpuwb ingest {out / 'bundle.duckdb'} {out / 'raw'}" in capsys.readouterr().out
    assert not (out / "bundle.duckdb").exists()


def test_a_workload_the_cause_has_no_drill_for_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "traffic_surge", "--workload", "training", "-o", str(tmp_path / "d")]) == 2
    assert "drilled on inference, not training" in capsys.readouterr().err
    assert main(["drill", "-o", str(tmp_path / "d")]) == 2
    assert main(["drill", "gpu_oom"]) == 2
    assert "-o DIR" in capsys.readouterr().err
