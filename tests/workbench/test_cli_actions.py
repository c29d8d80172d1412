"""CLI conventions of the commands with sub-actions (record, history, cluster): each action is a real
sub-command, so its options may follow it and its --help lists only its own; listings take --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_docs import documented_keys
from workbench.store.bundle import Bundle


def _help(*words: str) -> str:
    code, out, _ = run_cli(*words, "--help")
    assert code == 0
    return out


def test_each_action_has_its_own_help():
    manifest = _help("cluster", "manifest")
    assert "--image" in manifest and "--node-timeout" not in manifest and "--no-merge" not in manifest
    capture = _help("cluster", "capture")
    assert "--node-timeout" in capture and "--image" not in capture
    status = _help("record", "status")
    assert "--json" in status and "--kernel-log" not in status
    assert "--reason" in _help("record", "trigger")
    show = _help("history", "show")
    assert "--since" in show and "BUNDLE" not in show


@pytest.mark.parametrize("argv", [
    ("record", "status", "--out", "{out}", "--json"),
    ("record", "--out", "{out}", "status", "--json"),
])
def test_record_status_json_wherever_out_is_given(tmp_path: Path, argv: tuple[str, ...]):
    out = tmp_path / "rec"
    out.mkdir()
    (out / "status.json").write_text(json.dumps({"pid": 0, "updated_at": 0, "sources": [], "ring": {}}))
    code, text, err = run_cli(*(a.format(out=out) for a in argv))
    assert code == 0, err
    assert json.loads(text)["state"] == "not running"


def test_record_trigger_takes_its_options_on_either_side(tmp_path: Path):
    out = tmp_path / "rec"
    out.mkdir()
    for argv in (("record", "trigger", "--out", out, "--reason", "epilog"),
                 ("record", "--out", out, "trigger", "--reason", "epilog")):
        code, text, err = run_cli(*argv)
        assert code == 0 and "trigger dropped" in text, err
    assert len(list((out / "triggers").glob("*.trigger"))) == 2


def test_cluster_collect_json_is_the_coverage_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    nodes = tmp_path / "job-7" / "nodes"
    nodes.mkdir(parents=True)
    with Bundle.create(nodes / "n1.duckdb", meta={"captured_on": "n1"}) as b:
        b.seal()
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm client here: rows without a Slurm state
    code, out, err = run_cli("cluster", "collect", "--json", "--nodes", "n[1-2]", "--out", tmp_path / "job-7")
    assert code == 1, err
    doc = json.loads(out)  # stdout is the one object; the table went to stderr
    assert [n["node"] for n in doc["nodes"]] == ["n1", "n2"] and doc["summary"] == {"answered": 1, "no answer": 1}
    assert doc["merged"] == str(tmp_path / "job-7" / "merged.duckdb")
    assert doc == {**json.loads((tmp_path / "job-7" / "coverage.json").read_text()),
                   "coverage_file": doc["coverage_file"], "coverage_bundle": doc["coverage_bundle"],
                   "merged": doc["merged"]}
    assert "Coverage per node" in err
    assert {"coverage_file", "coverage_bundle", "merged"} <= documented_keys("cluster")
