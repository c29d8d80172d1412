"""The cockpit's GPUs screen with an accepted baseline: the drifted GPU says so in its row and its panel,
its host's driver change shows beside it, and a GPU as accepted says that too."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from tests.workbench.prevention.test_baseline import accepted, degraded  # noqa: F401 (accepted is a fixture)
from tests.workbench.tui.conftest import wait_for
from workbench.prevention import baseline
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens.gpus import GpusScreen


async def test_the_gpus_screen_marks_drift_from_the_baseline(tmp_path: Path, accepted: Path) -> None:  # noqa: F811
    bundle = degraded(tmp_path)
    app = Cockpit(SharedBundle(bundle, "tester"), baseline=baseline.load(accepted))
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for(pilot, lambda: app.analysis is not None, seconds=60)
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpusScreen))
        await pilot.pause()
        head = str(app.screen.query_one("#gpus-head", Static).render())
        assert "2 drifts from the accepted baseline" in head
        table = app.screen.query_one("#gpus-table", DataTable)
        rows = {str(table.get_row_at(i)[2]): i for i in range(table.row_count)}
        assert {"0000:18:00.0", "0000:5d:00.0"} <= set(rows)  # nvlink -s rows, keyed by UUID, are listed too
        assert str(table.get_row_at(rows["0000:5d:00.0"])[7]).startswith("✗ pcie_link_down")
        assert "pcie_link_down" not in str(table.get_row_at(rows["0000:18:00.0"])[7])
        table.move_cursor(row=rows["0000:5d:00.0"])
        await pilot.pause()
        detail = str(app.screen.query_one("#gpus-detail", Static).render())
        assert "drift from the accepted baseline" in detail
        assert "0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16" in detail
        assert "node07 runs driver 535.183.01; accepted at 535.129.03" in detail
        table.move_cursor(row=rows["0000:18:00.0"])
        await pilot.pause()
        detail = str(app.screen.query_one("#gpus-detail", Static).render())
        assert "runs PCIe" not in detail and "node07 runs driver 535.183.01" in detail


async def test_without_a_baseline_the_screen_says_nothing_of_drift(tmp_path: Path) -> None:
    app = Cockpit(SharedBundle(degraded(tmp_path), "tester"))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpusScreen))
        await pilot.pause()
        assert "baseline" not in str(app.screen.query_one("#gpus-head", Static).render())
        assert "baseline" not in str(app.screen.query_one("#gpus-detail", Static).render())
