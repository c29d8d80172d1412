"""Responder journal: append-only rows, latest word wins, history kept, evidence untouched."""

from __future__ import annotations

import io
from datetime import datetime

import pytest

from workbench.store import journal
from workbench.store.bundle import Bundle, BundleError
from workbench.times import parse_iso

T0 = datetime(2026, 3, 14, 9, 30)


@pytest.fixture
def bundle(bundle_path):
    with Bundle.create(bundle_path, title="journal test") as b:
        b.add_artifact(io.BytesIO(b"evidence\n"), kind="unknown", source="x")
        b.seal()
        yield b


def _rows(bundle):
    return bundle.con.execute("SELECT id, author, kind, target, body FROM journal ORDER BY id").fetchall()


def test_override_is_a_new_row_and_the_latest_wins(bundle):
    journal.set_verdict(bundle, "alice", "hardware", "suspect", "AER only", at=T0)
    first = _rows(bundle)
    journal.set_verdict(bundle, "bob", "hardware", "fault", "Xid 79 confirms", at=T0.replace(minute=40))
    rows = _rows(bundle)
    assert rows[: len(first)] == first and len(rows) == 2
    st = journal.state(bundle)
    assert st.verdicts["hardware"].author == "bob" and st.verdicts["hardware"].body["verdict"] == "fault"
    assert [e.author for e in st.verdict_history["hardware"]] == ["alice", "bob"]
    assert st.responders == ["alice", "bob"]


def test_action_item_updates_merge_and_keep_creator(bundle):
    item = journal.add_action_item(bundle, "alice", "Alert on PCIe AER uncorrected", owner="hw-team",
                                   priority="P1", at=T0)
    assert item == "A1"
    assert journal.add_action_item(bundle, "alice", "Drill: GPU off the bus", at=T0) == "A2"
    journal.update_action_item(bundle, "bob", item, status="done", owner="fleet", at=T0.replace(hour=11))
    st = journal.state(bundle)
    a1 = next(a for a in st.actions if a.id == "A1")
    assert (a1.title, a1.owner, a1.priority, a1.status) == ("Alert on PCIe AER uncorrected", "fleet", "P1", "done")
    assert (a1.created_by, a1.changed_by) == ("alice", "bob")
    assert len([r for r in _rows(bundle) if r[2] == "action"]) == 3


def test_retracted_note_disappears_from_state_but_stays_in_history(bundle):
    keep = journal.add_note(bundle, "alice", "Paged by NCCL timeout alert", ts=T0, at=T0)
    gone = journal.add_note(bundle, "alice", "Suspect the switch", at=T0)
    journal.retract(bundle, "alice", gone, "wrong guess", at=T0)
    st = journal.state(bundle)
    assert [n.id for n in st.notes] == [keep]
    assert parse_iso(st.notes[0].body["ts"]) == T0
    assert any(e.id == gone for e in st.entries)


def test_times_fields_summary_and_root_cause(bundle):
    journal.set_time(bundle, "alice", "detection", T0)
    journal.set_field(bundle, "alice", "severity", "SEV2")
    journal.set_summary(bundle, "alice", "GPU fell off the bus.")
    journal.mark_root_cause(bundle, "bob", "gpu_fell_off_bus", host="node03", gpu="0000:5d:00.0")
    journal.add_retro(bundle, "carol", "lucky", "Checkpoint had just been written")
    st = journal.state(bundle)
    assert parse_iso(st.times["detection"].body["ts"]) == T0
    assert st.fields["severity"].body["value"] == "SEV2"
    assert st.summary.body["text"] == "GPU fell off the bus."
    assert st.root_cause.body["gpu"] == "0000:5d:00.0" and st.root_cause.author == "bob"
    assert st.retro["lucky"][0].author == "carol"


@pytest.mark.parametrize("call", [
    lambda b: journal.set_verdict(b, "a", "firmware", "fault"),
    lambda b: journal.set_verdict(b, "a", "gpu", "maybe"),
    lambda b: journal.add_note(b, "", "no author"),
    lambda b: journal.add_action_item(b, "a", "x", priority="urgent"),
    lambda b: journal.update_action_item(b, "a", "A9", status="done"),
    lambda b: journal.set_field(b, "a", "severity", "critical"),
    lambda b: journal.retract(b, "a", 999),
])
def test_bad_input_is_refused_without_writing(bundle, call):
    with pytest.raises(ValueError):
        call(bundle)
    assert _rows(bundle) == []


def test_journal_does_not_touch_evidence_or_the_seal(bundle):
    digest = bundle.last_seal()["root_digest"]
    journal.add_note(bundle, "alice", "note")
    journal.set_field(bundle, "alice", "title", "Renamed incident")
    assert bundle.verify() == [] and bundle.root_digest() == digest


def test_read_only_bundle_refuses_writes(bundle_path):
    with Bundle.create(bundle_path) as b:
        b.seal()
    with Bundle.open(bundle_path) as ro, pytest.raises(BundleError, match="read-only"):
        journal.add_note(ro, "alice", "x")
