"""Timeline: filter by facets and text, jump to errors and the first anomaly, open the raw line."""

from __future__ import annotations

from textual.widgets import DataTable, Input

from tests.workbench.tui.conftest import wait_for
from workbench.query import events as query
from workbench.query.events import EventFilter
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit


async def _open_timeline(pilot, app):
    await pilot.press("t")
    await wait_for(pilot, lambda: app.current_mode == "timeline")
    await pilot.pause()
    return app.screen


async def test_typing_a_filter_narrows_the_rows_to_what_the_query_layer_returns(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open_timeline(pilot, app)
        with Bundle.open(incident.path) as bundle:
            everything = query.count_events(bundle)
            wanted = [r["id"] for r in query.iter_events(bundle, EventFilter(hosts=("node03",), layers=("hardware",)))]
        assert screen.match_count == everything
        await pilot.press("slash")
        box = screen.query_one("#search", Input)
        assert box.has_focus
        box.value = "host:node03 layer:hw"
        await pilot.press("enter")
        await pilot.pause()
        assert [r["id"] for r in screen.window_rows] == wanted[: len(screen.window_rows)]
        assert screen.match_count == len(wanted) and 0 < len(wanted) < everything
        await pilot.press("x")
        await pilot.pause()
        assert screen.match_count == everything


async def test_jumps_to_first_anomaly_and_errors_and_down_to_the_raw_line(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open_timeline(pilot, app)
        await pilot.press("a")
        await pilot.pause()
        row = screen.selected()
        first = incident.analysis.first_anomaly
        assert row["ts"] == first.ts and row["host"] == first.host
        await pilot.press("right_square_bracket")
        await pilot.pause()
        after = screen.selected()
        assert after["severity"] in ("error", "critical") and after["cursor"] > row["cursor"]
        await pilot.press("left_square_bracket")
        await pilot.pause()
        assert screen.selected()["cursor"] < after["cursor"]
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.current_mode == "evidence")
        await pilot.pause()
        lines = app.screen.query_one("#lines", DataTable)
        shown = [str(c) for c in lines.get_row_at(lines.cursor_row)]
        target = screen.selected()
        assert shown[0].strip().lstrip("▶").strip() == str(target["line"])


async def test_a_bad_filter_is_said_in_one_line_and_changes_nothing(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        screen = await _open_timeline(pilot, app)
        before = screen.match_count
        screen.apply_filter("layer:gpus")
        await pilot.pause()
        assert screen.match_count == before and screen.flt == EventFilter()
        assert any("not a layer" in str(n.message) for n in app._notifications)


async def test_scrolling_past_the_window_keeps_the_row_numbers_right(incident):
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(120, 30)) as pilot:
        screen = await _open_timeline(pilot, app)
        with Bundle.open(incident.path) as bundle:
            ordered = [r["id"] for r in query.iter_events(bundle)]
        table = screen.query_one("#events", DataTable)
        for _ in range(8):  # walk down through several windows, one edge at a time
            table.move_cursor(row=len(screen.window_rows) - 1)
            await pilot.pause()
            row = screen.selected()
            assert ordered[screen.window_start + table.cursor_row] == row["id"]
        await pilot.press("home")
        await pilot.pause()
        assert screen.window_start == 0 and screen.selected()["id"] == ordered[0]
