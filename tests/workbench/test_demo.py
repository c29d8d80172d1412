"""`gpuwb demo`: raw files in native formats, ingested as a user would, analyzed and written up, fast,
with no network, no GPU and no TUI; the training analysis names the culprit host and GPU."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import html5lib
import pytest

from tests.conftest import run_cli
from workbench.demo import inference, training
from workbench.store.bundle import Bundle

# Runs the demo the way the README does, in a fresh interpreter, with every socket connection
# refused (no network) and a check that the TUI library was never imported.
_RUNNER = """
import json, socket, sys, time
def refuse(*a, **k):
    raise OSError("network disabled in the demo test")
socket.socket.connect = refuse
socket.create_connection = refuse
from workbench.cli import main
t0 = time.monotonic()
code = main(["demo", "--out", sys.argv[1]])
print(json.dumps({"code": code, "seconds": time.monotonic() - t0, "textual": "textual" in sys.modules}))
"""


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "gpuwb-demo"
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(out)], capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"out": out, "stdout": proc.stdout, "status": status, "wall": wall}


def _analysis(path: Path) -> dict:
    code, out, err = run_cli("analyze", path, "--json")
    assert code == 0, err
    return json.loads(out)


def test_demo_runs_fast_offline_and_without_the_tui(demo):
    assert demo["status"]["code"] == 0
    assert not demo["status"]["textual"], "the demo must not import textual"
    assert demo["wall"] < 120, f"demo took {demo['wall']:.1f} s"


def test_demo_prints_the_analysis_and_the_report_paths(demo):
    out = demo["out"]
    for name in ("training", "inference"):
        for file in ("postmortem.md", "postmortem.html", "incident.duckdb"):
            path = out / name / file
            assert path.exists() and str(path) in demo["stdout"]
    assert "Workload: training" in demo["stdout"] and "Workload: inference" in demo["stdout"]


def test_demo_evidence_is_raw_native_files_ingested_like_a_user_would(demo):
    evidence = demo["out"] / "training" / "evidence"
    assert (evidence / "node03" / "dmesg.txt").read_text().count("NVRM: Xid (PCI:0000:5d:00): 79") == 1
    scrapes = sorted((demo["out"] / "inference" / "evidence" / "metrics").glob("*.prom"))
    assert len(scrapes) > 200 and scrapes[0].name.endswith("-20260321T140000Z.prom")
    with Bundle.open(demo["out"] / "training" / "incident.duckdb") as bundle:
        kinds = dict(bundle.con.execute("SELECT kind, count(*) FROM artifact GROUP BY kind").fetchall())
        assert bundle.verify() == []
        sources = {Path(a["source"]).relative_to(evidence).as_posix() for a in bundle.artifacts()}
    assert "unknown" not in kinds, f"every demo file must be recognised: {kinds}"
    assert {"node03/dmesg.txt", "slurm/sacct.txt", "node01/torchrun-48213.log"} <= sources


def test_training_analysis_names_the_culprit_host_and_gpu(demo):
    result = _analysis(demo["out"] / "training" / "incident.duckdb")
    top = result["hypotheses"][0]
    assert result["workload"] == "training"
    assert (top["host"], top["gpu"]) == (training.CULPRIT_HOST, training.CULPRIT_GPU), \
        f"top hypothesis: {top['cause']} on {top['host']} {top['gpu']} (score {top['score']})"


def test_inference_analysis_finds_the_traffic_surge(demo):
    result = _analysis(demo["out"] / "inference" / "incident.duckdb")
    assert result["workload"] == "inference"
    assert result["hypotheses"][0]["cause"] == "traffic_surge"
    kinds = {k for h in result["hypotheses"] for k in h["symptoms"]}
    assert {"queue_backlog"} <= kinds


def test_postmortems_are_complete_and_valid(demo):
    out = demo["out"]
    md = (out / "training" / "postmortem.md").read_text()
    assert training.CULPRIT_HOST in md and "GPU-hours lost" in md and "Evidence appendix" in md
    for name in ("training", "inference"):
        parser = html5lib.HTMLParser(strict=True)
        parser.parse((out / name / "postmortem.html").read_text())
        assert parser.errors == [], name
    html = (out / "inference" / "postmortem.html").read_text()
    assert "OOM kills: 2" in html
    assert f"SLO {inference.SLO_P99_MS / 1000:.1f} s" in html


def test_demo_refuses_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    code, _, err = run_cli("demo", "--out", tmp_path, "--only", "training")
    assert code == 2 and "not written by gpuwb demo" in err
    assert (tmp_path / "precious.txt").read_text() == "keep me"
