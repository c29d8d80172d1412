"""GPUs screen: the GPU the analysis blames is listed first and marked (not only coloured), and choosing a
GPU shows its samples and its own events."""

from __future__ import annotations

from datetime import datetime

import pytest
from textual.widgets import DataTable, Static

from tests.workbench.tui.conftest import wait_for
from workbench.query.samples import Gpu, Samples
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens.gpus import GpusScreen, render_detail, strip


def _detail(app: Cockpit) -> str:
    return str(app.screen.query_one("#gpus-detail", Static).render())


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_the_blamed_gpu_is_first_and_marked(training_incident, size):
    given = None if size[0] > 120 else training_incident.analysis  # once as a user starts it: analysis in the back
    app = Cockpit(SharedBundle(training_incident.path, "tester"), analysis=given)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: app.analysis is not None, seconds=30)
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpusScreen))
        await pilot.pause()
        top = app.analysis.top
        assert (top.host, top.gpu) == ("node03", "0000:5d:00.0")
        table = app.screen.query_one("#gpus-table", DataTable)
        first = [str(c) for c in table.get_row_at(0)]
        assert first[0] == "◀ #1" and first[1:3] == ["node03", "0000:5d:00.0"]
        named = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        blamed: dict[tuple, int] = {}
        for h in app.analysis.hypotheses:
            if h.gpu:
                blamed.setdefault((h.host, h.gpu), h.rank)  # a GPU named twice carries its best rank
        blamed = set(blamed.values())
        assert {int(m.split("#")[1]) for m in named if m} == blamed
        assert named[: len([m for m in named if m])] == [m for m in named if m]  # every marked row on top
        assert table.row_count == 32
        detail = _detail(app)
        assert "◀ #1" in detail and top.cause in detail
        assert "no samples" in detail and "Xid" in detail  # off the bus: NVML has nothing, the kernel log does
        assert table.region.height > 3 and app.screen.query_one("#gpus-detail-box").region.height > 3


def test_strip_scales_between_extremes_and_leaves_gaps():
    assert strip([78, 91, None, 84.5]) == "▁█ ▅"
    assert strip([5, 5]) == "▄▄" and strip([0, 0]) == "▁▁" and strip([None]) == " "



async def test_enter_opens_the_culprits_worst_raw_line_and_another_gpu_shows_samples(training_incident):
    app = Cockpit(SharedBundle(training_incident.path, "tester"), analysis=training_incident.analysis)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("g")
        await wait_for(pilot, lambda: isinstance(app.screen, GpusScreen))
        await pilot.pause()
        table = app.screen.query_one("#gpus-table", DataTable)
        table.focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.current_mode == "evidence")
        artifact, line = app.evidence_target
        with Bundle.open(training_incident.path) as bundle:
            raw, *after = bundle.artifact_lines(artifact, line, 6)
        # the earliest critical line of the GPU: the fatal PCIe error its driver printed right before
        # its Xid 79, not a later symptom
        assert "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Fatal)" in raw
        assert any("Xid (PCI:0000:5d:00): 79" in text for text in after)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, GpusScreen))
        row = next(i for i in range(table.row_count) if not str(table.get_row_at(i)[0]))
        table.move_cursor(row=row)
        await pilot.pause()
        host, gpu = str(table.get_row_at(row)[1]), str(table.get_row_at(row)[2])
        detail = _detail(app)
        assert app.screen.query_one("#gpus-detail-box").border_title.endswith(f"{host} {gpu}")
        assert "temp °C" in detail and "power W" in detail and "of 700 limit" in detail
        assert "◀" not in detail


def test_detail_strips_mark_throttling_remap_and_a_narrow_link_in_words():
    rows = []
    for i in range(6):
        hot = i >= 3
        rows.append({"ts": datetime(2025, 3, 12, 8, i), "temp_c": 91.0 if hot else 78.0, "power_w": 500.0,
                     "power_limit_w": 700.0, "sm_clock_mhz": 1410.0 if hot else 1980.0, "remap_pending": i >= 4,
                     "pcie_gen": 4, "pcie_width": 8 if i == 5 else 16, "samples": 1,
                     "throttle_reasons": ["hw_thermal"] if hot else ["gpu_idle"]})
    for row in rows:
        for column in ("mem_clock_mhz", "mem_used_mib", "mem_total_mib", "util_gpu", "util_mem", "remap_failure",
                       "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                       "ecc_aggregate_uncorrected", "retired_pages_sbe", "retired_pages_dbe", "retired_pending",
                       "pcie_replay", "nvlink_errors"):
            row.setdefault(column, None)
    gpu = Gpu("node05", "0000:2a:00.0", {"pcie_max_gen": 5, "pcie_max_width": 16, "name": "H100"}, 6,
              rows[0]["ts"], rows[-1]["ts"], rows[-1], {})
    lines = render_detail(gpu, Samples(rows, None, 6), (1, "hardware/thermal_throttling")).plain.splitlines()
    line = {label: next(text for text in lines if text.startswith(label)) for label in
            ("⏷ hw_thermal", "⏷ gpu_idle", "remap pending", "PCIe link", "power W", "SM clock MHz")}
    assert "···███" in line["⏷ hw_thermal"] and "!" in line["⏷ hw_thermal"]
    assert "!" not in line["⏷ gpu_idle"]
    assert "····██" in line["remap pending"] and "✗ yes" in line["remap pending"]
    assert "·····█" in line["PCIe link"] and "✗ narrower than max" in line["PCIe link"]
    assert "of 700 limit" in line["power W"] and "(min 1410)" in line["SM clock MHz"]
