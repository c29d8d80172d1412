"""Report: the preview is the postmortem with the journal merged in, and follows it; m and h write
it beside the bundle (never over it), and the written file carries the responders' work."""

from __future__ import annotations

import shutil

from textual.widgets import Markdown

from tests.workbench.tui.conftest import wait_for
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens.report import ReportScreen, export_path

NOTE = "Reseated the riser of node03 slot 5; Xid 79 gone after reboot"
REASON = "fabric counters flat on every port during the window"
ACTION = "Alert on PCIe AER uncorrected errors per slot"


async def test_preview_follows_the_journal_and_export_writes_it_never_over_a_bundle(incident):
    app = Cockpit(SharedBundle(incident.path, "alice"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.model is not None)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen) and bool(app.screen.source))
        screen = app.screen
        assert incident.analysis.top.cause in screen.source
        assert NOTE not in screen.source
        with app.store.write() as bundle:  # what the Playbook screen writes, written directly
            journal.add_note(bundle, "alice", NOTE)
            journal.set_verdict(bundle, "alice", "network_storage", "suspect", REASON)
            journal.add_action_item(bundle, "alice", ACTION, owner="hw-team", priority="P1")
        app.journal_written()
        await wait_for(pilot, lambda: NOTE in screen.source)  # the preview follows the model
        assert screen.query_one(Markdown).source == screen.source

        md, html = export_path(incident.path, "md"), export_path(incident.path, "html")
        shutil.copyfile(incident.path, md)  # a bundle that happens to carry the report's name
        decoy = md.read_bytes()
        await pilot.press("m")
        await wait_for(pilot, lambda: any("export failed" in n.message for n in app._notifications))
        assert screen.written == [] and md.read_bytes() == decoy
        md.unlink()

        await pilot.press("m", "h")
        await wait_for(pilot, lambda: len(screen.written) == 2)

        await pilot.press("escape")  # away: a hidden preview waits, and catches up when shown again
        with app.store.write() as bundle:
            journal.add_note(bundle, "bob", "Spare GPU burn-in passed")
        app.journal_written()
        await wait_for(pilot, lambda: any(r["text"] == "Spare GPU burn-in passed" for r in app.model["timeline"]))
        assert "burn-in" not in screen.source
        await pilot.press("r")
        await wait_for(pilot, lambda: "Spare GPU burn-in passed" in screen.source)

    assert set(screen.written) == {md, html}
    assert md.name == "incident-postmortem.md" and md.parent == incident.path.parent
    text = md.read_text(encoding="utf-8")
    for said in (NOTE, REASON, ACTION, "hw-team", "alice"):
        assert said in text, said
    assert NOTE in html.read_text(encoding="utf-8") and "<html" in html.read_text(encoding="utf-8").lower()
    with Bundle.open(incident.path) as bundle:  # the bundle is intact: evidence and seal untouched
        assert bundle.verify() == []



async def test_without_an_analysis_the_postmortem_is_still_exported(incident, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("engine broke")

    monkeypatch.setattr("workbench.analysis.findings.run", broken)
    app = Cockpit(SharedBundle(incident.path, "alice"))  # the real path: the analysis runs, and fails
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.analysis_error is not None)
        await pilot.press("r")
        await wait_for(pilot, lambda: isinstance(app.screen, ReportScreen))
        screen = app.screen
        assert "analysis failed: RuntimeError: engine broke" in str(screen.query_one("#rp-head").render())
        await pilot.press("m")
        await wait_for(pilot, lambda: len(screen.written) == 1, seconds=30)
    assert "Training job 48213" in export_path(incident.path, "md").read_text(encoding="utf-8")
