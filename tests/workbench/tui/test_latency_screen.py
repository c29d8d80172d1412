"""Latency screen: the inference demo's serving curves are listed and charted with their anomaly onsets and
the incident window marked; a training incident says in one line that it has no series."""

from __future__ import annotations

from datetime import datetime

import pytest
from textual.widgets import OptionList, Static

from tests.workbench.tui.conftest import Incident, wait_for
from workbench.analysis.engine import analyze
from workbench.analysis.findings import Analysis
from workbench.demo import inference
from workbench.ingest.session import ingest_paths
from workbench.query import samples
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens.latency import LatencyScreen, render_chart


@pytest.fixture(scope="module")
def inference_incident(tmp_path_factory) -> Incident:
    """The demo's inference incident (traffic surge, KV cache full, p99 up), ingested and analyzed once."""
    out = tmp_path_factory.mktemp("tui-latency")
    inference.write(out / "evidence")  # the demo's raw files, ingested as `gpuwb demo` does (no postmortem)
    path = out / "incident.duckdb"
    with Bundle.create(path, title=inference.TITLE) as bundle:
        ingest_paths(bundle, [str(out / "evidence")])
    with Bundle.open(path) as bundle:
        return Incident(path, Analysis.from_json(analyze(bundle)))


def _options(app: Cockpit) -> list[str]:
    series = app.screen.query_one("#lat-series", OptionList)
    return [str(series.get_option_at_index(i).prompt) for i in range(series.option_count)]


def _chart(app: Cockpit, metric: str) -> str:
    return str(app.screen.query_one(f"#lat-chart-{metric}", Static).render())


async def _open(app: Cockpit, pilot) -> None:
    await wait_for(pilot, lambda: app.analysis is not None, seconds=30)
    await pilot.press("l")
    await wait_for(pilot, lambda: isinstance(app.screen, LatencyScreen) and bool(app.screen.query(".lat-chart")))
    await pilot.pause()


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
async def test_kv_cache_and_p99_charted_with_onsets_then_toggled_and_narrowed(inference_incident, size):
    with Bundle.open(inference_incident.path) as bundle:
        kv_onsets = {a.onset for a in samples.anomalies(bundle) if a.kind == "kv_cache_saturation"}
    assert kv_onsets
    app = Cockpit(SharedBundle(inference_incident.path, "tester"), analysis=inference_incident.analysis)
    async with app.run_test(size=size) as pilot:
        await _open(app, pilot)
        screen = app.screen
        options = _options(app)
        assert any("kv_cache_usage" in o and "▲" in o for o in options)
        assert any(o.strip("✓ ▲").startswith("p99 ") for o in options)
        chart = _chart(app, "kv_cache_usage")
        axis = next(line for line in chart.splitlines() if "└" in line)
        assert "▲" in axis and "]" in axis  # "[" may share its column with an onset's ▲ on a narrow chart
        w0, w1 = inference_incident.analysis.window
        head = str(screen.query_one("#lat-head", Static).render())
        assert f"[{min(w0, app.analysis.first_anomaly.ts):%H:%M:%S} → {w1:%H:%M:%S}]" in head
        assert any(f"▲ onset {onset:%H:%M:%S} kv_cache_saturation" in chart for onset in kv_onsets)
        assert "100.0 %" in chart

        series = screen.query_one("#lat-series", OptionList)
        hidden = next(i for i, o in enumerate(_options(app)) if not o.startswith("✓"))
        metric = series.get_option_at_index(hidden).id
        series.focus()
        series.highlighted = hidden
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(screen.query(f"#lat-chart-{metric}")))
        assert _options(app)[hidden].startswith("✓")
        await pilot.press("enter")
        await wait_for(pilot, lambda: not screen.query(f"#lat-chart-{metric}"))
        hosts = screen.query_one("#lat-hosts", OptionList)
        host = hosts.get_option_at_index(1).id
        hosts.focus()
        hosts.highlighted = 1
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.host == host and "worst of" not in _chart(app, "kv_cache_usage"))
        assert host in str(screen.query_one("#lat-head", Static).render())
        assert screen.onsets("kv_cache_usage") and all(a.host == host for a in screen.onsets("kv_cache_usage"))


async def test_a_training_incident_says_it_has_no_series(training_incident):
    app = Cockpit(SharedBundle(training_incident.path, "tester"), analysis=training_incident.analysis)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("l")
        head = lambda: str(app.screen.query_one("#lat-head", Static).render())  # noqa: E731
        await wait_for(pilot, lambda: isinstance(app.screen, LatencyScreen) and "No serving series" in head())
        assert "\n" not in head().strip()
        assert not app.screen.query_one("#lat-body").display


def test_chart_brackets_the_window_and_marks_onsets_under_their_column():
    t = [datetime(2025, 1, 1, 10, m) for m in range(0, 50, 5)]
    values = [1, 1, 1, 1, 9, 9, 9, 1, 1, 1]
    curve = samples.Curve("queue_depth", "value", "", "h", (), len(t), t[0], t[-1], list(zip(t, values)))
    onset = samples.Anomaly(t[4], t[6], "queue_backlog", "queue_depth", "value", "", "h", (), 1.0, 9.0, "warning", "")
    text = render_chart([curve], metric="queue_depth", unit="", start=t[0], end=t[-1], width=9 + 1 + 10, height=3,
                        window=(t[3], t[7]), onsets=[onset]).plain.splitlines()
    axis = text[3][10:]
    assert axis.index("[") == 3 and axis.index("]") == 7 and axis.index("▲") == 4
    top = text[0][10:]
    assert [col for col, ch in enumerate(top) if ch != " "] == [4, 5, 6]
