"""Two cockpits on one bundle (two responders): both read, both write notes, both rows are kept,
and each sees the other's entry after its next refresh."""

from __future__ import annotations

from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit


async def test_two_apps_on_one_bundle_both_write_and_both_rows_are_kept(incident):
    alice = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    bob = Cockpit(SharedBundle(incident.path, "bob"), analysis=incident.analysis)
    async with alice.run_test(size=(120, 40)) as pa, bob.run_test(size=(120, 40)) as pb:
        await pa.pause()
        await pb.pause()
        for app, who in ((alice, "alice"), (bob, "bob"), (alice, "alice again")):
            with app.store.write() as bundle:
                journal.add_note(bundle, app.author, f"{who}: seen it")
            app.journal_written()
        await pa.press("t")
        await pb.press("t")
        await pa.pause()
        await pb.pause()
        assert alice.screen.match_count == bob.screen.match_count > 0
    with Bundle.open(incident.path) as bundle:
        notes = journal.state(bundle).notes
    mine = [(n.author, n.body["text"]) for n in notes if n.body["text"].endswith("seen it")]
    assert mine == [("alice", "alice: seen it"), ("bob", "bob: seen it"), ("alice", "alice again: seen it")]
