"""Overview: the headline says how sure the engine is (the calibrated confidence); below the floor it
says NOT SURE, names the runner-up and what would tell the two apart, evidence text shown as written."""

from __future__ import annotations

from textual.widgets import DataTable, Static

from tests.workbench.tui.conftest import wait_for
from workbench.analysis.findings import Analysis
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit


def _text(app: Cockpit, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


async def test_the_headline_shows_the_calibrated_confidence(incident):
    confidence = incident.analysis.confidence
    assert confidence is not None and confidence.sure_enough  # the demo names its culprit clearly
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.model is not None, seconds=30)
        await pilot.pause()
        assert confidence.label in _text(app, "#head")
        assert "NOT SURE" not in _text(app, "#head")
        assert confidence.label in str(app.screen.query_one("#hypotheses", DataTable).border_title)


async def test_below_the_floor_the_headline_says_not_sure_and_what_tells_them_apart(incident):
    doc = dict(incident.analysis.to_json())
    top = doc["hypotheses"][0]
    doc["confidence"] = {
        "calibrated": 0.41, "level": "not sure", "floor": 0.6, "raw": top["score"], "margin": 0.05,
        "runner_up": {"cause": "pcie_link_degraded", "host": "node[07]", "score": 0.3},
        "tell_apart": [
            {"cause": top["cause"], "host": top["host"], "collect": ["dmesg of the host [bold]Xid 79[/bold]"],
             "checks": ["gpu_off_bus"]},
            {"cause": "pcie_link_degraded", "host": "node[07]", "collect": ["lspci -vvv on the host"],
             "checks": ["pcie_errors"]}]}
    app = Cockpit(SharedBundle(incident.path, "tester"), analysis=Analysis.from_json(doc))
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.model is not None, seconds=30)
        await pilot.pause()
        head = _text(app, "#head")
        assert "NOT SURE 0.41" in head and top["cause"] in head and "pcie_link_degraded on node[07]" in head
        assert "to tell apart: dmesg of the host [bold]Xid 79[/bold]" in head  # as written, not markup
        following = _text(app, "#next")
        assert "tell apart" in following and "lspci -vvv on the host (checks pcie_errors)" in following
        assert "NOT SURE" in str(app.screen.query_one("#hypotheses", DataTable).border_title)
