"""Overview: without a key pressed it names the culprit host and GPU; Enter opens the raw line."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from tests.workbench.tui.conftest import wait_for
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit


def _text(app: Cockpit, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_the_first_screen_names_the_culprit_without_a_key(incident, size):
    app = Cockpit(SharedBundle(incident.path, "tester"))  # the real path: analysis in the background
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model is not None, seconds=30)
        await pilot.pause()
        top = app.analysis.top
        table = app.screen.query_one("#hypotheses", DataTable)
        first = [str(c) for c in table.get_row_at(0)]
        assert top.cause in first[1] and top.host in first[2] and top.gpu in first[2]
        assert "hw ✗" in _text(app, "#layers") or "Hardware ✗ fault" in _text(app, "#layers")
        assert "GPU-h lost" in _text(app, "#head") or size[0] < 120


async def test_enter_on_evidence_opens_the_raw_line(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        evidence = app.screen.query_one("#evidence", DataTable)
        xid = next(i for i, e in enumerate(incident.analysis.top.evidence) if "Xid" in e.text)
        evidence.focus()
        evidence.move_cursor(row=xid)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.current_mode == "evidence")
        await pilot.pause()
        lines = app.screen.query_one("#lines", DataTable)
        row = [str(c) for c in lines.get_row_at(lines.cursor_row)]
        wanted = incident.analysis.top.evidence[xid]
        assert row[0].strip().lstrip("▶").strip() == str(wanted.line)
        assert "fallen off the bus" in row[1]
        assert wanted.artifact in _text(app, "#provenance")
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.current_mode == "overview")


async def test_q_quits_cleanly(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test() as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code in (0, None)


async def test_the_command_palette_offers_every_screen_and_the_screen_s_own_actions(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("t")
        await wait_for(pilot, lambda: app.current_mode == "timeline")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert {f"Go to {spec.title}" for spec in app.specs} <= set(titles)
        assert {"Next error", "First anomaly", "Filter"} <= set(titles)
        assert {"Playbook: override a verdict", "Playbook: times", "Report: export Markdown"} <= set(titles)
        go = next(c for c in app.get_system_commands(app.screen) if c.title == "Go to Overview")
        go.callback()
        await wait_for(pilot, lambda: app.current_mode == "overview")
        jump = next(c for c in app.get_system_commands(app.screen) if c.title == "Timeline: first anomaly")
        jump.callback()
        await wait_for(pilot, lambda: app.current_mode == "timeline" and app.screen.window_rows
                       and app.screen.selected()["ts"] == incident.analysis.first_anomaly.ts)
