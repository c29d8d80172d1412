"""The cockpit's main screens pinned as pictures at 80x24 and 160x50 (pytest-textual-snapshot).

A change to what a responder sees shows up here as a diff to review; regenerate with
``pytest tests/workbench/tui/test_snapshots.py --snapshot-update`` when the change is intended."""

from __future__ import annotations

import pytest

from tests.workbench.tui.conftest import wait_for
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit

SIZES = [(80, 24), (160, 50)]


def _cockpit(incident) -> Cockpit:
    return Cockpit(SharedBundle(incident.path, "tester"), analysis=incident.analysis)


def _after(*keys: str):
    async def run_before(pilot) -> None:
        await wait_for(pilot, lambda: pilot.app.model is not None, seconds=30)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x50"])
def test_overview(snap_compare, incident, size):
    assert snap_compare(_cockpit(incident), terminal_size=size, run_before=_after())


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x50"])
def test_timeline_at_the_first_anomaly(snap_compare, incident, size):
    assert snap_compare(_cockpit(incident), terminal_size=size, run_before=_after("t", "a"))


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x50"])
def test_playbook(snap_compare, incident, size):
    assert snap_compare(_cockpit(incident), terminal_size=size, run_before=_after("p"))
