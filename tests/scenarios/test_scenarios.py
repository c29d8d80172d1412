"""The scenario suite: multi-source incidents in their native formats, taken through ``gpuwb ingest``
and ``gpuwb analyze --json`` exactly as a responder would, checked against each folder's
expected.yaml (workload, layer, cause, culprit host/GPU/rank, first anomaly, and the symptom kinds the cause
must explain).

Files are copied to a temporary folder first and given the scenario's capture time as mtime: a
responder's copies carry the time they were taken, and snapshot outputs without a clock of their
own (ibstat, df, nvidia-smi errors) are dated by it."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from workbench.analysis.hypotheses import LOW_SCORE

HERE = Path(__file__).resolve().parent
FOLDERS = sorted(p for p in HERE.iterdir() if (p / "expected.yaml").is_file())


TRAINING = [f for f in FOLDERS if yaml.safe_load((f / "expected.yaml").read_text())["workload"] == "training"]
CASES = [(f, "as_is") for f in FOLDERS] + [(f, v) for v in ("no_nccl_info", "old_init") for f in TRAINING]
"""Every training scenario also as a job that ran with NCCL_DEBUG below INFO, and as one whose NCCL predates
the 2.19 init lines (no commId, no nRanks/localRanks summary, bus ids in the channel lines)."""


def hand_over(folder: Path, tmp_path: Path, captured_at: str) -> Path:
    """The evidence as the responder has it: the folder without expected.yaml, files dated at capture."""
    target = tmp_path / folder.name
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns("expected.yaml"))
    stamp = datetime.fromisoformat(captured_at.replace("Z", "+00:00")).timestamp()
    for path in target.rglob("*"):
        if path.is_file():
            os.utime(path, (stamp, stamp))
    return target


def analyze(folder: Path, tmp_path: Path, variant: str = "as_is") -> tuple[dict, dict]:
    want = yaml.safe_load((folder / "expected.yaml").read_text())
    evidence = hand_over(folder, tmp_path, want["captured_at"])
    rewrite(evidence, variant)
    bundle = tmp_path / "incident.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence)
    assert code == 0, err or out
    code, out, err = run_cli("analyze", bundle, "--json")
    assert code == 0, err
    return json.loads(out), want


_OLD_COMPLETE = re.compile(r"NCCL INFO (?:ncclCommInitRank )?comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) "
                           r"nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+) nvmlDev \d+ busId (?P<bus>[0-9a-f]+) "
                           r"commId 0x[0-9a-f]+ - Init COMPLETE")
_NEW_ONLY = re.compile(r"NCCL INFO (?:ncclCommInitRank comm .* - Init START|comm 0x[0-9a-f]+ rank \d+ nRanks )")
_CHANNEL = re.compile(r"Channel (?P<ch>\d+)/\d+ : (?P<src>\d+)\[\d+\] -> (?P<dst>\d+)\[\d+\]")


def rewrite(folder: Path, variant: str) -> None:
    """The scenario as another job would have logged it: ``no_nccl_info`` drops every NCCL INFO line
    (NCCL_DEBUG=WARN, or unset); ``old_init`` writes NCCL's init lines as releases before 2.19 did
    (``comm 0x7fdf08000d00 rank 15 nranks 16 cudaDev 7 busId e7000 - Init COMPLETE``,
    https://github.com/NVIDIA/nccl/issues/629; ``Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC``)."""
    if variant == "as_is":
        return
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    texts = {p: p.read_text(errors="surrogateescape") for p in files}
    bus = {m["rank"]: m["bus"] for text in texts.values() for m in _OLD_COMPLETE.finditer(text)}
    for path, text in texts.items():
        lines = text.splitlines(keepends=True)
        if variant == "no_nccl_info":
            kept = [line for line in lines if "NCCL INFO" not in line]
        else:
            kept = [_old(line, bus) for line in lines if not _NEW_ONLY.search(line)]
        if kept != lines:
            stat = path.stat()
            path.write_text("".join(kept), errors="surrogateescape")
            os.utime(path, (stat.st_atime, stat.st_mtime))
    gone = {"no_nccl_info": "NCCL INFO", "old_init": "commId"}[variant]
    left = [p.name for p in files if gone in p.read_text(errors="surrogateescape")]
    assert not left, f"the {variant} variant left {gone!r} in {left}"


def _old(line: str, bus: dict[str, str]) -> str:
    line = _OLD_COMPLETE.sub(lambda m: f"NCCL INFO comm {m['comm']} rank {m['rank']} nranks {m['nranks']} "
                                       f"cudaDev {m['dev']} busId {m['bus']} - Init COMPLETE", line)
    return _CHANNEL.sub(lambda m: f"Channel {m['ch']} : {m['src']}[{bus.get(m['src'], '0')}] -> "
                                  f"{m['dst']}[{bus.get(m['dst'], '0')}]", line)


def test_suite_covers_both_workloads_and_every_layer() -> None:
    wants = [yaml.safe_load((f / "expected.yaml").read_text()) for f in FOLDERS]
    assert len(FOLDERS) >= 10
    assert {w["workload"] for w in wants} == {"training", "inference"}
    assert {w["layer"] for w in wants if "layer" in w} == {"business", "scheduling", "gpu", "network_storage",
                                                          "hardware"}
    assert any(w.get("no_anomaly") for w in wants)


@pytest.mark.parametrize(("folder", "variant"), CASES, ids=[f"{f.name}-{v}" for f, v in CASES])
def test_scenario(folder: Path, variant: str, tmp_path: Path) -> None:
    result, want = analyze(folder, tmp_path, variant)
    assert result["workload"] == want["workload"]
    hyps = result["hypotheses"]
    if want.get("no_anomaly"):
        assert all(h["score"] < LOW_SCORE for h in hyps), [(h["cause"], h["host"], h["score"]) for h in hyps]
        assert {v["verdict"] for v in result["layers"].values()} <= {"clear", "no_evidence"}, result["layers"]
        assert result["first_anomaly"] is None
        return
    assert hyps, "no hypothesis at all"
    top = hyps[0]
    summary = [(h["layer"], h["cause"], h["host"], h["gpu"], h["score"]) for h in hyps[:4]]
    assert (top["layer"], top["cause"]) == (want["layer"], want["cause"]), summary
    assert top["score"] >= LOW_SCORE, summary
    if "host" in want:
        assert top["host"] == want["host"], summary
    if "gpu" in want:
        assert top["gpu"] == want["gpu"], summary
    if "rank" in want:
        assert want["rank"] in top["ranks"], top["ranks"]
    if "ranks" in want:
        assert set(want["ranks"]) <= set(top["ranks"]), top["ranks"]
    assert set(want.get("consequences", [])) <= set(top["consequences"]), top["consequences"]
    for kind in want.get("symptoms", []):
        groups = [g for g in result["symptoms"] if g["kind"] == kind]
        assert groups and all(g["explained_by"] == want["cause"] for g in groups), (kind, groups)
        placed = [g for g in groups if g["host"] is not None]
        if "host" in want and kind == "straggler_rank":
            assert {g["host"] for g in placed} == {want["host"]}, placed
        if "gpu" in want and kind == "straggler_rank":
            assert all(g["gpus"] == [want["gpu"]] for g in placed), placed
    assert result["layers"][want["layer"]]["verdict"] == "fault"
    first = result["first_anomaly"]
    assert first is not None
    assert first["kind"] == want["first_anomaly"]["kind"], first
    if "host" in want["first_anomaly"]:
        assert first["host"] == want["first_anomaly"]["host"], first
    for host, seconds in (want.get("clock_offsets") or {}).items():
        assert result["clock_offsets"].get(host) == pytest.approx(seconds, abs=1.0)
