"""``gpuwb drill score``: a journal that marks the right cause at the right place passes, one that
marks another cause fails, and the scorecard says which layer verdicts matched the truth and how long
the mark took."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from workbench.cli import main
from workbench.prevention.drill import write
from workbench.store import journal
from workbench.store.bundle import Bundle


@pytest.fixture(scope="module")
def drill(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("drill")
    write("gpu_fell_off_bus", "training", 5, out)
    return out


def _created(bundle: Bundle) -> datetime:
    return datetime.fromisoformat(bundle.meta()["created_at"])


def _score(capsys: pytest.CaptureFixture[str], bundle: Path, answer: Path) -> dict:
    assert main(["drill", "score", str(bundle), "--answer", str(answer), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_right_answer_passes(drill: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((drill / "answer.json").read_text())
    copy = tmp_path / "right.duckdb"
    copy.write_bytes((drill / "bundle.duckdb").read_bytes())
    with Bundle.open(copy, write=True) as bundle:
        start = _created(bundle)
        journal.set_verdict(bundle, "alice", "hardware", "fault", "Xid 79", at=start + timedelta(seconds=200))
        journal.set_verdict(bundle, "alice", "network_storage", "clear", at=start + timedelta(seconds=230))
        journal.mark_root_cause(bundle, "alice", "gpu_fell_off_bus", host=truth["host"],
                                gpu=truth["gpu"].upper().removeprefix("0000:"), at=start + timedelta(seconds=312))
    card = _score(capsys, copy, drill)
    assert card["passed"] and card["cause_right"] and card["place_right"]
    assert card["time_to_mark_s"] == 312.0
    assert card["layers_right"] == 2 and card["layers_judged"] == 2
    assert card["layers"]["hardware"] == {"verdict": "fault", "expected": "fault", "right": True}
    assert card["marked"]["author"] == "alice"
    assert main(["drill", "score", str(copy), "--answer", str(drill / "answer.json")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Drill scorecard: PASS") and "time to mark 312 s" in text


def test_a_wrong_answer_fails(drill: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    truth = json.loads((drill / "answer.json").read_text())
    other = truth["host"] + "x"
    copy = tmp_path / "wrong.duckdb"
    copy.write_bytes((drill / "bundle.duckdb").read_bytes())
    with Bundle.open(copy, write=True) as bundle:
        start = _created(bundle)
        journal.set_verdict(bundle, "bob", "network_storage", "fault", "timeouts", at=start + timedelta(seconds=90))
        journal.set_verdict(bundle, "bob", "hardware", "clear", at=start + timedelta(seconds=95))
        journal.mark_root_cause(bundle, "bob", "network_fabric_errors", host=other, at=start + timedelta(seconds=120))
    card = _score(capsys, copy, drill)
    assert not card["passed"] and not card["cause_right"] and card["place_right"] is False
    assert card["layers_right"] == 0 and card["layers_judged"] == 2
    assert card["truth"]["cause"] == "gpu_fell_off_bus"
    assert main(["drill", "score", str(copy), "--answer", str(drill)]) == 0
    assert capsys.readouterr().out.startswith("Drill scorecard: FAIL")


def test_no_mark_scores_nothing_right(drill: Path, capsys: pytest.CaptureFixture[str]) -> None:
    card = _score(capsys, drill / "bundle.duckdb", drill)
    assert card["marked"] is None and not card["passed"] and card["time_to_mark_s"] is None


def test_a_missing_answer_is_one_line(drill: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "score", str(drill / "bundle.duckdb"), "--answer", str(tmp_path)]) == 2
    assert "no drill answer" in capsys.readouterr().err
    assert main(["drill", "score", str(drill / "bundle.duckdb")]) == 2


def _keys(value: object) -> set[str]:
    """Every key of a JSON object, nested ones included."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_every_json_key_is_in_the_cli_contract(drill: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.test_docs import documented_keys

    printed = _keys(_score(capsys, drill / "bundle.duckdb", drill))
    assert main(["drill", "--list", "--json"]) == 0
    printed |= _keys(json.loads(capsys.readouterr().out))
    assert main(["drill", "gpu_oom", "-o", str(tmp_path / "d"), "--no-ingest", "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["bundle"] is None and made["files"] > 0
    printed |= _keys(made)
    layers = {"business", "scheduling", "gpu", "network_storage", "hardware"}
    assert printed - layers - documented_keys("drill") == set()
