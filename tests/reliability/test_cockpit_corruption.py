"""A damaged bundle in the cockpit: one line where the damage is, never a traceback.

The damage is real: a table dropped from the file, a byte flipped in one of DuckDB's data blocks (DuckDB
checks every block's checksum when it reads it, and refuses it). A bundle that cannot be opened at all
stops ``gpuwb open`` with the one-line error and exit 2 every other command gives.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from tests.workbench.tui.conftest import Incident, Terminal, demo_incident, wait_for
from workbench.query import events as query
from workbench.query import samples
from workbench.store import journal
from workbench.store.bundle import Bundle, BundleDamaged
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit

BLOCK = 256 << 10
"""DuckDB's block size; the file starts with three 4 KiB headers."""
HEADERS = 3 * 4096


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Incident:
    return demo_incident(tmp_path_factory.mktemp("corruption"))


def _flip(path: Path, block: int) -> None:
    """One byte of data block ``block`` inverted, as a bad sector or a torn copy leaves it."""
    at = HEADERS + block * BLOCK + 5000
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


READS: dict[str, Callable[[Bundle], object]] = {
    "events": lambda b: list(query.iter_events(b, query.EventFilter())),
    "GPU samples": samples.gpus,
    "artifacts": lambda b: b.artifacts(),
    "journal": journal.state,
}


def _damaged_blocks(demo: Incident, tmp_path: Path) -> tuple[dict[str, Path], Path | None]:
    """Copies of the bundle with one block damaged: for each kind of read, one that opens but fails that
    read; and one that cannot be opened at all (None if no block does that)."""
    blocks = (demo.path.stat().st_size - HEADERS) // BLOCK
    failing: dict[str, Path] = {}
    unopenable = None
    for block in range(blocks):
        copy = tmp_path / f"block{block}.duckdb"
        shutil.copyfile(demo.path, copy)
        _flip(copy, block)
        try:
            bundle = Bundle.open(copy)
        except Exception:  # noqa: BLE001 (whatever it is, the cockpit's own test below says how it is told)
            unopenable = unopenable or copy
            continue
        with bundle:
            for what, read in READS.items():
                if what in failing:
                    continue
                try:
                    read(bundle)
                except duckdb.Error:
                    failing[what] = copy
    return failing, unopenable


def _notifications(app: Cockpit) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def _settle(app: Cockpit, pilot) -> None:
    """Until the background work is done: the analysis and the postmortem model, or what stopped them."""
    await wait_for(pilot, lambda: app.model is not None or app.analysis_error is not None
                   or any("postmortem not refreshed" in line for line in _notifications(app)), seconds=60)


async def _visit_every_screen(app: Cockpit, pilot) -> None:
    for spec in app.specs:
        await pilot.press(spec.key)
        await wait_for(pilot, lambda spec=spec: app.current_mode == spec.name)
        await pilot.pause(0.3)


def _drop(path: Path, table: str) -> None:
    con = duckdb.connect(str(path))
    try:
        con.execute(f"DROP TABLE {table}")
    finally:
        con.close()


@pytest.mark.parametrize("table", ["event", "gpu_sample", "journal", "artifact_chunk"])
async def test_a_missing_table_is_one_line_on_the_screens_that_need_it(demo, tmp_path, table):
    """A bundle missing a table is refused whole when the cockpit starts (``gpuwb open`` prints that line and
    exits 2); one that loses it while open — every read is its own connection — says so on each screen."""
    path = tmp_path / "incident.duckdb"
    shutil.copyfile(demo.path, path)
    app = Cockpit(SharedBundle(path, "alice"))
    async with app.run_test(size=(160, 50)) as pilot:
        await _settle(app, pilot)
        _drop(path, table)
        await _visit_every_screen(app, pilot)
        if table == "artifact_chunk":
            e = next(e for h in demo.analysis.hypotheses for e in h.evidence if e.artifact)
            app.open_evidence(e.artifact, e.line)
            await pilot.pause(0.5)
        said = _notifications(app) + ([app.analysis_error] if app.analysis_error else [])
        assert said, "the damage was not told"
        assert any(table in line for line in said), said
        assert all("\n" not in line and "Traceback" not in line for line in said), said
    assert app.return_code in (None, 0)
    with pytest.raises(BundleDamaged, match=f"table {table} is missing"):
        SharedBundle(path, "alice")


async def test_a_flipped_byte_is_one_line_wherever_it_is_read(demo, tmp_path):
    failing, _ = _damaged_blocks(demo, tmp_path)
    assert {"events", "GPU samples", "journal"} <= set(failing), failing  # the demo's tables span many blocks
    for what in ("events", "GPU samples", "journal"):
        app = Cockpit(SharedBundle(failing[what], "alice"))
        async with app.run_test(size=(160, 50)) as pilot:
            await _settle(app, pilot)
            await _visit_every_screen(app, pilot)
            said = _notifications(app) + ([app.analysis_error] if app.analysis_error else [])
            assert any("Corrupt database file" in line for line in said), (what, said)
            assert all("\n" not in line and "Traceback" not in line for line in said), said
        assert app.return_code in (None, 0), what


def test_gpuwb_open_on_a_bundle_that_cannot_be_read_is_one_line_and_exit_2(demo, tmp_path):
    _, unopenable = _damaged_blocks(demo, tmp_path)
    assert unopenable is not None
    term = Terminal("open", str(unopenable), "--author", "alice")
    try:
        status = term.finish()
    finally:
        term.close()
    text = term.output.decode("utf-8", "replace")
    assert status == 2
    assert text.strip().count("\n") == 0 and text.startswith("gpuwb: error: "), text
    assert "Corrupt database file" in text and "Traceback" not in text
    assert "\x1b[?1049h" not in text  # the cockpit never took the screen
