"""The Playbook screen's query layer (workbench.analysis.playbook_review) and the check_verdict journal kind:
a check's rows are the engine's rows, a check verdict is journaled with its layer, and a layer is
not called clear without a word while one of its checks is unreviewed."""

from __future__ import annotations

import shutil

import pytest

from workbench.analysis.playbook_review import check_rows, clear_needs_reason, judge_check, unreviewed
from workbench.errors import InputError
from workbench.store import journal
from workbench.store.bundle import Bundle


@pytest.fixture
def bundle(training_incident, tmp_path):
    path = tmp_path / "incident.duckdb"
    shutil.copyfile(training_incident.path, path)
    with Bundle.open(path, write=True) as b:
        yield b


def test_check_rows_are_the_rows_behind_the_engine_verdict(training_incident):
    analysis = training_incident.analysis
    with Bundle.open(training_incident.path) as b:
        for check in analysis.checks:
            got = check_rows(b, analysis.workload, check.id)
            assert got.total == check.rows, check.id
            assert got.error == check.error
            strengths = [r["strength"] for r in got.rows]
            assert strengths == sorted(strengths, reverse=True)
        off_bus = check_rows(b, analysis.workload, "gpu_off_bus")
    assert off_bus.rows and all(r["artifact"] and r["line"] for r in off_bus.rows)
    assert any("Xid" in (r["text"] or "") and r["host"] == analysis.top.host for r in off_bus.rows)


def test_check_rows_refuses_a_check_outside_the_playbook(training_incident):
    with Bundle.open(training_incident.path) as b, pytest.raises(InputError, match="not in the training playbook"):
        check_rows(b, "training", "no_such_check")


def test_check_verdict_is_journaled_with_its_layer_and_the_latest_wins(bundle):
    judge_check(bundle, "alice", "gpu_off_bus", "fault")
    judge_check(bundle, "bob", "gpu_off_bus", "suspect", "AER only, no Xid on the spare")
    st = journal.state(bundle)
    latest = st.check_verdicts["gpu_off_bus"]
    assert (latest.author, latest.body["verdict"], latest.body["layer"]) == ("bob", "suspect", "hardware")
    assert [e.author for e in st.check_verdict_history["gpu_off_bus"]] == ["alice", "bob"]
    assert "hardware" not in st.verdicts  # a check's verdict is not the layer's


@pytest.mark.parametrize("check, verdict", [("no_such_check", "fault"), ("gpu_off_bus", "maybe")])
def test_bad_check_verdict_is_refused_without_writing(bundle, check, verdict):
    before = len(journal.entries(bundle))
    with pytest.raises(InputError):
        judge_check(bundle, "alice", check, verdict)
    assert len(journal.entries(bundle)) == before


def test_a_layer_is_clear_without_a_reason_only_when_every_check_was_reviewed(bundle, training_incident):
    analysis = training_incident.analysis
    checks = analysis.checks_in("network_storage")
    assert len(checks) >= 2
    why = clear_needs_reason(analysis, journal.state(bundle), "network_storage")
    assert why is not None and why.startswith(f"{len(checks)} check(s)")
    for check in checks[:-1]:
        judge_check(bundle, "alice", check.id, check.verdict)
    assert [c.id for c in unreviewed(analysis, journal.state(bundle), "network_storage")] == [checks[-1].id]
    judge_check(bundle, "alice", checks[-1].id, "clear", "fabric counters flat")
    assert clear_needs_reason(analysis, journal.state(bundle), "network_storage") is None


def test_a_layer_with_a_check_judged_faulty_is_not_clear_without_a_reason(bundle, training_incident):
    analysis = training_incident.analysis
    checks = analysis.checks_in("network_storage")
    for check in checks:
        judge_check(bundle, "alice", check.id, check.verdict)
    judge_check(bundle, "bob", checks[0].id, "suspect", "one port flapped at 09:20")
    why = clear_needs_reason(analysis, journal.state(bundle), "network_storage")
    assert why is not None and checks[0].title in why and "fault or suspect" in why
