"""Overview of a fleet-sized incident: the bad node leads the activity panel and the others are
counted, and a collector missing on every node is one line in 'What we don't know'."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from tests.conftest import run_cli
from tests.perf.fleet_nodes import culprit_of, host_name, write_node
from tests.workbench.tui.conftest import wait_for
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens.overview import ACTIVITY_LANES

NODES = 40


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fleet")
    for n in range(NODES):
        write_node(root / "evidence" / host_name(n), n, NODES)
    path = root / "fleet.duckdb"
    code, _, err = run_cli("ingest", "-q", path, root / "evidence")
    assert code == 0, err
    with Bundle.open(path, write=True) as bundle:
        for n in range(NODES):
            bundle.record_capture("nvml", host=host_name(n), status="unavailable", reason="no NVIDIA driver")
    return path


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_the_bad_node_leads_and_the_rest_are_counted(fleet: Path, size: tuple[int, int]) -> None:
    culprit = host_name(culprit_of(NODES))
    assert culprit_of(NODES) >= ACTIVITY_LANES, "sorted by name, the culprit would not be drawn"
    app = Cockpit(SharedBundle(fleet, "tester"))
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.model is not None, seconds=60)
        await pilot.pause()
        activity = str(app.screen.query_one("#activity", Static).render()).splitlines()
        unknown = str(app.screen.query_one("#unknown", Static).render())
    lanes = [line for line in activity if line.startswith("gpu")]
    assert lanes[0].startswith(culprit)
    assert len(lanes) == ACTIVITY_LANES - 1
    assert f"… {NODES - len(lanes)} more host(s)" in "\n".join(activity)
    assert f"nvml on {NODES} hosts: unavailable (no NVIDIA driver)" in unknown
    assert "gpu0002" not in unknown
