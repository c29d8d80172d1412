"""A drill worked the way a responder works it: in the cockpit, the root cause marked from the
Playbook (prefilled from the top hypothesis), then ``gpuwb drill score`` on the same bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.workbench.tui.conftest import wait_for
from workbench.analysis.engine import analyze
from workbench.analysis.findings import Analysis
from workbench.cli import main
from workbench.prevention.drill import write
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.dialogs import RootCauseDialog
from workbench.tui.screens._playbook_text import Node
from workbench.tui.screens.playbook import PlaybookScreen


async def test_a_drill_marked_in_the_cockpit_scores_right(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written = write("nvlink_error", "training", 6, tmp_path / "drill")
    with Bundle.open(written.bundle) as bundle:
        analysis = Analysis.from_json(analyze(bundle))
    app = Cockpit(SharedBundle(written.bundle, "carol"), analysis=analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.analysis is not None)
        await pilot.press("p")
        await wait_for(pilot, lambda: isinstance(app.screen, PlaybookScreen) and bool(app.screen.nodes))
        screen = app.screen
        await pilot.press("R")
        assert isinstance(app.screen, RootCauseDialog)
        await pilot.press("enter")
        await wait_for(pilot, lambda: "(by carol)" in screen.nodes[Node("root")].label.plain)
    assert main(["drill", "score", str(written.bundle), "--answer", str(tmp_path / "drill"), "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["passed"] and card["marked"]["author"] == "carol"
    assert card["marked"]["host"] == written.truth.host
    assert card["time_to_mark_s"] is not None and card["time_to_mark_s"] >= 0
