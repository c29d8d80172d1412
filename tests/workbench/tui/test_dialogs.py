"""The cockpit's forms, driven by keys only: Enter saves, Esc cancels, Tab moves, ←/→ choose; a form
refuses what the journal would refuse and says why on its error line."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from textual.app import App
from textual.widgets import Input, Static

from workbench.store.journal import ActionItem
from workbench.tui.dialogs import (
    ActionItemDialog,
    Choice,
    FieldDialog,
    NoteDialog,
    RootCauseChoice,
    RootCauseDialog,
    TimesDialog,
    VerdictChoice,
    VerdictDialog,
)

MISSING = object()


async def run_forms(*cases, check=None):
    """Open each (dialog, keys) in turn in one app and press its keys; returns per dialog what it
    returned (or MISSING when it stayed open) and its error line. ``check(dialog)`` runs on each
    dialog left open, while the app is still up."""
    app = App()
    out = []
    async with app.run_test(size=(120, 40)) as pilot:
        for dialog, keys in cases:
            box: list = []
            app.push_screen(dialog, box.append)
            await pilot.pause()
            for key in keys:
                if isinstance(key, Typed):
                    app.focused.insert_text_at_cursor(key.text)
                    await pilot.pause()
                else:
                    await pilot.press(key)
            await pilot.pause()
            if box:
                out.append((box[0], ""))
                continue
            out.append((MISSING, str(dialog.query_one("#dialog-error", Static).render())))
            if check is not None:
                check(dialog)
            dialog.dismiss(None)
            await pilot.pause()
    return out


@dataclass(frozen=True)
class Typed:
    """Text typed into the focused field in one go (key by key costs the Pilot ~50 ms a key)."""

    text: str


def typed(text: str) -> list[Typed]:
    return [Typed(text)]


async def test_note_returns_its_text_shows_the_pinned_event_and_escape_cancels():
    def pinned_is_shown(dialog):
        if dialog.pinned:
            assert "kernel.log:35" in str(dialog.query_one("#pinned", Static).render())

    pinned = "03-14 09:21:16 node03 kernel.log:35"
    saved, empty, cancelled, left_open = await run_forms(
        (NoteDialog(pinned=pinned), [*typed("riser reseated"), "enter"]),
        (NoteDialog(), ["enter"]),
        (NoteDialog(), [*typed("half a thought"), "escape"]),
        (NoteDialog(pinned=pinned), []),
        check=pinned_is_shown)
    assert saved == ("riser reseated", "")
    assert empty[0] is MISSING and "needs text" in empty[1]
    assert cancelled == (None, "")
    assert left_open == (MISSING, "")


async def test_verdict_override_needs_a_reason_and_the_review_rule_asks_for_one():
    rule = "2 check(s) of this layer not reviewed yet"
    results = await run_forms(
        (VerdictDialog("layer Hardware", "fault"), ["right", "right", "enter"]),  # fault -> suspect -> clear
        (VerdictDialog("layer Hardware", "fault"), ["right", "right", "tab", *typed("replaced riser"), "enter"]),
        (VerdictDialog("check gpu_off_bus", "fault"), ["enter"]),
        (VerdictDialog("layer Network", "clear", explain={"clear": rule}), ["enter"]),
        (VerdictDialog("layer Network", "clear", explain={"clear": rule}), ["tab", *typed("no fabric"), "enter"]),
        (VerdictDialog("layer Network", "clear", explain={"clear": rule}), ["left", "enter"]),
    )
    no_reason, overridden, confirmed, unreviewed, explained, suspect = results
    assert no_reason[0] is MISSING and "needs a reason" in no_reason[1]
    assert overridden[0] == VerdictChoice("clear", "replaced riser")
    assert confirmed[0] == VerdictChoice("fault", "")
    assert unreviewed == (MISSING, rule)
    assert explained[0] == VerdictChoice("clear", "no fabric")
    assert suspect[0] is MISSING and "needs a reason" in suspect[1]


async def test_choice_wraps_and_clicks():
    choice = Choice([("a", "alpha"), ("b", "beta"), ("c", "gamma")], "a")

    class One(App):
        def compose(self):
            yield choice

    async with One().run_test(size=(60, 5)) as pilot:
        choice.focus()
        await pilot.press("left")
        assert choice.value == "c"
        await pilot.press("right", "right")
        assert choice.value == "b"
        await pilot.click(Choice, offset=(2, 0))
        assert choice.value == "a"


async def test_action_items_new_and_edited():
    at = datetime(2026, 3, 14, 10)
    item = ActionItem(id="A1", title="Alert on AER", owner="hw", priority="P2", status="open", due=None, source=None,
                      created_by="alice", created_at=at, changed_by="alice", changed_at=at)
    new, untitled, bad_due, edited, unchanged = await run_forms(
        (ActionItemDialog(), [*typed("Alert on AER"), "tab", *typed("hw-team"), "tab", "left", "tab",
                              *typed("2026-04-01"), "enter"]),
        (ActionItemDialog(), ["enter"]),
        (ActionItemDialog(), [*typed("x"), "tab", "tab", "tab", *typed("next week"), "enter"]),
        (ActionItemDialog(item), ["tab", "tab", "tab", "tab", "right", "right", "enter"]),
        (ActionItemDialog(item), ["enter"]),
    )
    assert new[0] == {"title": "Alert on AER", "owner": "hw-team", "priority": "P1", "due": "2026-04-01"}
    assert untitled[0] is MISSING and "needs a title" in untitled[1]
    assert bad_due[0] is MISSING and "not a date" in bad_due[1]
    assert edited[0] == {"status": "done"}
    assert unchanged[0] == {}


async def test_root_cause_completes_cause_ids_and_refuses_unknown_ones():
    titles = []

    def keep_title(dialog):
        titles.append(str(dialog.query_one("#cause-title", Static).render()))

    prefilled = RootCauseDialog("gpu_fell_off_bus", host="node03", gpu="0000:5d:00.0", text="Xid 79 after AER")
    completed, described, unknown, kept = await run_forms(
        (RootCauseDialog(), [*typed("gpu_fell"), "right", "tab", *typed("node03"), "enter"]),
        (RootCauseDialog(), [*typed("gpu_fell"), "right"]),
        (RootCauseDialog(), [*typed("cosmic_rays"), "enter"]),
        (prefilled, ["enter"]),
        check=keep_title)
    assert completed[0] == RootCauseChoice("gpu_fell_off_bus", "node03", None, "")
    assert described == (MISSING, "") and "fell off" in titles[0].lower()
    assert unknown[0] is MISSING and "unknown cause id" in unknown[1]
    assert kept[0] == RootCauseChoice("gpu_fell_off_bus", "node03", "0000:5d:00.0", "Xid 79 after AER")


async def test_times_and_fields_return_only_what_changed():
    detected = datetime(2026, 3, 14, 9, 33, 40)
    focus = []
    results = await run_forms(
        (TimesDialog({"detection": detected}), ["tab", *typed("2026-03-14T11:00:00+01:00"), "enter"]),
        (TimesDialog({"detection": detected}), ["tab", *typed("2026-03-14 09:00"), "enter"]),
        (TimesDialog(), [*typed("yesterday"), "enter"]),
        (FieldDialog(None, "investigating"), ["right", "right", "tab", "right", "enter"]),
        (FieldDialog("SEV2", "investigating"), ["enter"]),
        (VerdictDialog("layer GPU", "suspect"), ["tab"]),
        check=lambda dialog: focus.append(dialog.focused))
    mitigated, out_of_order, unreadable, fields, same, _ = results
    assert mitigated[0] == {"mitigation": datetime(2026, 3, 14, 10, 0)}  # +01:00 read as UTC 10:00
    assert out_of_order[0] is MISSING and "in that order" in out_of_order[1]
    assert unreadable[0] is MISSING and unreadable[1].startswith("detection:")
    assert fields[0] == {"severity": "SEV2", "status": "mitigated"}
    assert same[0] == {}
    assert isinstance(focus[-1], Input) and focus[-1].id == "reason"  # tab: from the choice to the reason
