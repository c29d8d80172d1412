"""How the cockpit feels on a big incident: first paint, a filter change, a page scroll.

Builds a bundle of ``--size`` events (1M by default; the same bulk builder as analyze_bench.py), then
drives the real cockpit headless (Textual's Pilot) and times what a responder waits for:

- Overview first paint (title, counts) and the moment the culprit is named (analysis in background);
- Timeline first paint, a filter change, a scroll past the loaded window (keyset page);
- as baselines measured in the same run: the same page fetched with ``OFFSET`` near the end of the
  timeline (what keyset paging avoids), and a bare ``count(*)``.

    python tests/perf/tui_bench.py [--size 1000000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from analyze_bench import build  # noqa: E402  (the shared bulk builder beside this file)

from workbench.query import events as query  # noqa: E402
from workbench.store.bundle import Bundle  # noqa: E402
from workbench.store.shared_bundle import SharedBundle  # noqa: E402
from workbench.table import format_table  # noqa: E402
from workbench.tui.app import Cockpit  # noqa: E402
from workbench.tui.screens.timeline import WINDOW_AFTER, WINDOW_BEFORE  # noqa: E402


async def _until(pilot, condition, timeout: float = 120.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        if time.perf_counter() > deadline:
            raise TimeoutError("the cockpit did not get there")
        await pilot.pause(0.005)


async def drive(path: Path) -> dict[str, float]:
    """One cockpit session; seconds for each step."""
    out: dict[str, float] = {}
    started = time.perf_counter()
    app = Cockpit(SharedBundle(path, "bench"))
    async with app.run_test(size=(160, 50)) as pilot:
        await _until(pilot, lambda: "hosts" in str(app.screen.query_one("#head").render())
                     if app.screen.query("#head") else False)
        out["overview first paint"] = time.perf_counter() - started
        await _until(pilot, lambda: app.model is not None)
        out["overview names the culprit"] = time.perf_counter() - started
        t0 = time.perf_counter()
        await pilot.press("t")
        await _until(pilot, lambda: app.current_mode == "timeline" and getattr(app.screen, "window_rows", None))
        out["timeline first paint"] = time.perf_counter() - t0
        screen = app.screen
        t0 = time.perf_counter()
        screen.apply_filter("host:node017 sev:debug")
        await pilot.pause()
        out["filter change (host + severity)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        screen.apply_filter("NET/IB")
        await pilot.pause()
        out["filter change (text search)"] = time.perf_counter() - t0
        screen.apply_filter("")
        await pilot.pause()
        scrolls = []
        for _ in range(5):
            table = screen.query_one("#events")
            t0 = time.perf_counter()
            table.move_cursor(row=len(screen.window_rows) - 1)
            await pilot.pause()
            scrolls.append(time.perf_counter() - t0)
        out["page scroll (past the window)"] = statistics.median(scrolls)
        t0 = time.perf_counter()
        await pilot.press("end")
        await pilot.pause()
        out["jump to the end"] = time.perf_counter() - t0
        await pilot.press("q")
    return out


def baselines(path: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    limit = WINDOW_BEFORE + WINDOW_AFTER
    with Bundle.open(path) as bundle:
        total = query.count_events(bundle)
        t0 = time.perf_counter()
        bundle.con.execute("SELECT count(*) FROM event").fetchall()
        out["baseline: count(*)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        query.events(bundle, limit=limit, offset=max(0, total - limit))
        out["baseline: the last page by OFFSET"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        query.page(bundle, last=True, limit=limit)
        out["keyset: the last page"] = time.perf_counter() - t0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="events in the bundle (default 1M)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwb-tui-bench-") as tmp:
        path = Path(tmp) / "big.duckdb"
        build_s = build(path, args.size)
        runs = [asyncio.run(drive(path)) for _ in range(args.repeat)]
        base = [baselines(path) for _ in range(args.repeat)]
    rows = [["build bundle", f"{build_s:.2f}", "-", f"{args.size:,} events"]]
    for results in (runs, base):
        for name in results[0]:
            values = [r[name] for r in results]
            rows.append([name, f"{min(values):.3f}", f"{statistics.median(values):.3f}", ""])
    print(format_table(["step", "best s", "median s", "notes"], rows))


if __name__ == "__main__":
    main()
