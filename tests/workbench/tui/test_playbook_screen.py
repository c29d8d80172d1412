"""Playbook: the responder walks the layers with keys only; every verdict, note, root cause,
action item and field goes to the bundle's journal and is there again after a restart."""

from __future__ import annotations

from datetime import datetime

from textual.widgets import DataTable, Input, Tree

from tests.workbench.tui.conftest import type_text, wait_for
from workbench.analysis import playbook_review
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.times import parse_iso
from workbench.tui.app import Cockpit
from workbench.tui.dialogs import ActionItemDialog, NoteDialog, RootCauseDialog, TimesDialog, VerdictDialog
from workbench.tui.screens._playbook_text import Node
from workbench.tui.screens.playbook import PlaybookScreen


def _state(path) -> journal.JournalState:
    with Bundle.open(path) as bundle:
        return journal.state(bundle)


async def _playbook(app: Cockpit, pilot, key: str = "p") -> PlaybookScreen:
    """From the Overview, ``p`` (or a layer's number) to the Playbook, its tree built."""
    await wait_for(pilot, lambda: app.analysis is not None)
    await pilot.press(key)
    await wait_for(pilot, lambda: isinstance(app.screen, PlaybookScreen) and bool(app.screen.nodes))
    return app.screen


def _label(screen: PlaybookScreen, ref: Node) -> str:
    return screen.nodes[ref].label.plain


async def test_verdict_with_reason_and_pinned_note_survive_a_restart(incident):
    hardware = incident.analysis.checks_in("hardware")
    app = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _playbook(app, pilot, "5")  # Overview's 5: straight to the hardware layer
        await wait_for(pilot, lambda: screen.current == Node("layer", "hardware"))
        await pilot.press("v")
        dialog = app.screen
        assert isinstance(dialog, VerdictDialog)
        await pilot.press("right", "right", "enter")  # fault -> suspect -> clear, no reason: refused
        assert app.screen is dialog
        await pilot.press("tab")
        await type_text(pilot, "replaced riser")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen)

        await pilot.press("down")
        assert screen.current == Node("check", hardware[0].id)
        await pilot.press("c")
        await wait_for(pilot, lambda: bool(screen.rows))  # the check's rows, loaded in the background
        rows = screen.query_one("#pb-rows", DataTable)
        await pilot.press("enter")  # Enter on a check: down to its evidence rows
        assert app.focused is rows
        pinned_row = screen.rows[0]
        await pilot.press("n")
        note = app.screen
        assert isinstance(note, NoteDialog) and pinned_row["text"][:40] in note.pinned
        await type_text(pilot, "riser reseated, Xid 79 gone after reboot")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.press("enter")  # Enter on a row: its raw line
        await wait_for(pilot, lambda: app.current_mode == "evidence")
        assert app.evidence_target == (pinned_row["artifact"], pinned_row["line"])

    again = Cockpit(SharedBundle(incident.path, "bob"), analysis=incident.analysis)
    async with again.run_test(size=(160, 50)) as pilot:
        screen = await _playbook(again, pilot)
        assert "✗ fault" in _label(screen, Node("layer", "hardware"))
        assert "→ ✓ clear by alice: replaced riser" in _label(screen, Node("layer", "hardware"))
        assert "confirmed by alice" in _label(screen, Node("check", hardware[0].id))
        notes = [n.label.plain for n in screen.nodes[Node("notes")].children]
        assert any("alice: riser reseated" in n for n in notes)

        carol = SharedBundle(incident.path, "carol")  # a third responder, in another session
        with carol.write() as bundle:
            journal.add_note(bundle, carol.author, "PSU swapped on node03")
        await pilot.press("escape", "p")  # away and back: the Playbook reads the journal again

        def carols_note_shown() -> bool:
            return any("carol: PSU swapped" in n.label.plain for n in screen.nodes[Node("notes")].children)

        await wait_for(pilot, carols_note_shown)

    state = _state(incident.path)
    assert state.verdicts["hardware"].body == {"verdict": "clear", "reason": "replaced riser"}
    assert state.check_verdicts[hardware[0].id].body["verdict"] == hardware[0].verdict
    mine = next(n for n in state.notes if n.author == "alice")
    assert parse_iso(mine.body["ts"]) == pinned_row["ts"]  # pinned to the event's time


async def test_a_layer_is_not_called_clear_while_a_check_is_unreviewed(incident):
    checks = incident.analysis.checks_in("network_storage")
    assert incident.analysis.layer_verdicts["network_storage"] == "clear" and len(checks) >= 2
    with Bundle.open(incident.path, write=True) as bundle:  # another responder reviewed all but the last
        for check in checks[:-1]:
            playbook_review.judge_check(bundle, "bob", check.id, check.verdict)
    app = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _playbook(app, pilot, "4")
        await wait_for(pilot, lambda: screen.current == Node("layer", "network_storage"))
        assert f"{len(checks) - 1}/{len(checks)} reviewed" in _label(screen, Node("layer", "network_storage"))
        await pilot.press("c")  # confirm "clear" with a check unreviewed: asks why
        dialog = app.screen
        assert isinstance(dialog, VerdictDialog) and checks[-1].title in dialog.explain["clear"]
        await pilot.press("enter")
        assert app.screen is dialog  # no reason, not saved
        await pilot.press("escape")
        assert "network_storage" not in _state(incident.path).verdicts

        screen.query_one("#pb-tree", Tree).move_cursor(screen.nodes[Node("check", checks[-1].id)])
        await wait_for(pilot, lambda: screen.current == Node("check", checks[-1].id))
        await pilot.press("c", "shift+left")  # review the last check, back up to its layer
        assert screen.current == Node("layer", "network_storage")
        await pilot.press("c")  # every check reviewed: confirmed without a question
        assert app.screen is screen
    state = _state(incident.path)
    assert state.verdicts["network_storage"].body == {"verdict": "clear", "reason": ""}
    assert state.verdicts["network_storage"].author == "alice"
    assert set(state.check_verdicts) == {c.id for c in checks}


async def test_root_cause_action_items_severity_and_times(incident):
    top = incident.analysis.top
    app = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _playbook(app, pilot)
        await pilot.press("R")
        dialog = app.screen
        assert isinstance(dialog, RootCauseDialog)
        assert dialog.query_one("#cause", Input).value == top.cause  # prefilled from the top hypothesis
        await pilot.press("enter")
        await wait_for(pilot, lambda: "(by alice)" in _label(screen, Node("root")))

        await pilot.press("a")
        assert isinstance(app.screen, ActionItemDialog)
        await type_text(pilot, "Alert on PCIe AER uncorrected errors")
        await pilot.press("tab")
        await type_text(pilot, "hw-team")
        await pilot.press("enter")
        await wait_for(pilot, lambda: Node("action", "A1") in screen.nodes)
        assert not screen.check_action("edit_action", ())  # A applies to an action item only
        item = screen.nodes[Node("action", "A1")]
        item.parent.expand()
        await pilot.pause()
        screen.query_one("#pb-tree", Tree).move_cursor(item)
        await wait_for(pilot, lambda: screen.current == Node("action", "A1"))
        await pilot.press("A")
        assert isinstance(app.screen, ActionItemDialog)
        await pilot.press("tab", "tab", "tab", "tab", "right", "right", "enter")  # status: open -> done
        await wait_for(pilot, lambda: "done" in _label(screen, Node("action", "A1")))

        await pilot.press("S", "right", "right", "enter")  # severity: none -> SEV1 -> SEV2
        await wait_for(pilot, lambda: "SEV2" in str(screen.query_one("#pb-head").render()))

        await pilot.press("T", "tab", "tab")  # to the recovery time
        assert isinstance(app.screen, TimesDialog) and app.focused.id == "recovery"
        app.focused.value = "2026-03-14 10:20:00"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is screen)

    state = _state(incident.path)
    assert (state.root_cause.body["cause"], state.root_cause.body["host"], state.root_cause.body["gpu"]) == \
        (top.cause, top.host, top.gpu)
    (action,) = state.actions
    assert (action.title, action.owner, action.status, action.created_by) == \
        ("Alert on PCIe AER uncorrected errors", "hw-team", "done", "alice")
    assert state.fields["severity"].body["value"] == "SEV2"
    assert parse_iso(state.times["recovery"].body["ts"]) == datetime(2026, 3, 14, 10, 20)
    assert state.times["recovery"].author == "alice"


async def test_w_walks_the_other_workloads_playbook(incident):
    app = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _playbook(app, pilot)
        assert incident.analysis.workload == "training"
        await pilot.press("w")
        await wait_for(pilot, lambda: app.analysis.workload == "inference", seconds=30)
        await wait_for(pilot, lambda: "workload inference" in str(screen.query_one("#pb-head").render()))
        shown = {ref.key for ref in screen.nodes if ref.kind == "check"}
        assert shown == {c.id for c in app.analysis.checks}
        assert shown != {c.id for c in incident.analysis.checks}
