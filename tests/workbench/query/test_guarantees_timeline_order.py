"""Timeline order, over random bundles: oldest first, undated events last, file order kept among events
at the same instant; `gpuwb timeline --json`, the query layer and the postmortem's timeline agree."""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from workbench.postmortem import report
from workbench.query import events as query
from workbench.store.bundle import Bundle

T0 = datetime(2026, 3, 14, 10, 0)
ARTIFACTS = ("a" * 64, "b" * 64, "c" * 64)

_event = st.fixed_dictionaries({
    # few distinct instants, so that ties (several events at one second) are common
    "ts": st.one_of(st.none(), st.integers(0, 12).map(lambda s: T0 + timedelta(seconds=s)),
                    st.integers(0, 10**9).map(lambda us: T0 + timedelta(microseconds=us))),
    "artifact": st.one_of(st.none(), st.sampled_from(ARTIFACTS)),
    "line": st.one_of(st.none(), st.integers(1, 50)),
    "host": st.sampled_from(("node01", "node02", None)),
    "kind": st.sampled_from(("xid", "nccl_timeout", "oom_kill", "job_state")),
})
_events = st.lists(_event, min_size=1, max_size=30)


def _write(path: Path, events: list[dict]) -> None:
    """Rows inserted in the generated order (the "file order"), each with a unique message."""
    with Bundle.create(path, title="random") as bundle:
        bundle.con.executemany(
            "INSERT INTO event (id, ts, ts_origin, ts_approx, host, source, layer, kind, severity, message, attrs, "
            "artifact, line) VALUES (?, ?, 'parsed', false, ?, 'kernel', 'gpu', ?, 'error', ?, '{}', ?, ?)",
            [[i + 1, e["ts"], e["host"], e["kind"], f"event {i}", e["artifact"], e["line"]]
             for i, e in enumerate(events)])
        bundle.seal()


def _assert_timeline_order(rows: list[dict], count: int) -> None:
    """The promise itself, independent of how the query spells it."""
    assert sorted(r["message"] for r in rows) == sorted(f"event {i}" for i in range(count))
    dated = [r["ts"] for r in rows if r["ts"] is not None]
    assert dated == sorted(dated), "dated events out of time order"
    first_undated = next((n for n, r in enumerate(rows) if r["ts"] is None), len(rows))
    assert all(r["ts"] is None for r in rows[first_undated:]), "an undated event sorts before a dated one"
    for before, after in zip(rows, rows[1:]):
        same_place = before["ts"] == after["ts"] and before["artifact"] == after["artifact"]
        if same_place and before["line"] is not None and after["line"] is not None:
            assert before["line"] <= after["line"], "file order lost among events at one instant"


def _walk(bundle: Bundle, size: int, count: int) -> tuple[list[dict], list[dict]]:
    """Keyset pages, first to last, then back from the last event to the first; a page that repeats
    rows fails, never loops."""
    forward, cursor = [], None
    for _ in range(count + 1):
        chunk = query.page(bundle, after=cursor, limit=size)
        forward += chunk.rows
        if not chunk.more_after:
            break
        cursor = chunk.last
    cursor = forward[-1]["cursor"]
    backward_pages = [[forward[-1]]]
    for _ in range(count + 1):
        chunk = query.page(bundle, before=cursor, limit=size)
        if not chunk.rows:
            break
        backward_pages.insert(0, chunk.rows)
        if not chunk.more_before:
            break
        cursor = chunk.first
    return forward, [r for rows in backward_pages for r in rows]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_events, batch=st.integers(1, 7), page_size=st.integers(1, 7))
def test_every_reader_returns_the_timeline_in_time_order(events, batch, page_size):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "b.duckdb"
        _write(path, events)
        with Bundle.open(path) as bundle:
            listed = query.events(bundle)
            streamed = list(query.iter_events(bundle, batch=batch))
            forward, backward = _walk(bundle, page_size, len(events))
            offsets = [r for n in range(0, len(events), page_size)
                       for r in query.events(bundle, limit=page_size, offset=n)]
        code, out, err = run_cli("timeline", path, "--json")
        assert code == 0, err
    printed = [json.loads(line) for line in out.splitlines()]
    _assert_timeline_order(listed, len(events))
    order = [r["message"] for r in listed]
    assert [r["message"] for r in streamed] == order
    assert [r["message"] for r in offsets] == order
    assert [r["message"] for r in forward] == order
    assert [r["message"] for r in backward] == order
    assert [r["message"] for r in printed] == order
    assert [r["ts"] for r in printed] == [r["ts"].isoformat(timespec="microseconds") + "Z" if r["ts"] else None
                                          for r in listed]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=_events)
def test_the_postmortem_timeline_keeps_the_query_order(events):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "b.duckdb"
        _write(path, events)
        with Bundle.open(path) as bundle:
            listed = query.events(bundle)
            model = report.build(bundle, analysis={}, causes={}, verify=False)
    position = {r["message"]: n for n, r in enumerate(listed)}
    shown = [r for r in model["timeline"] if r["text"] in position]
    assert all(r["ts"] is not None for r in shown), "the postmortem shows an undated event on its timeline"
    times = [r["ts"] for r in shown]
    assert times == sorted(times)
    assert times == sorted(listed[position[r["text"]]]["ts"] for r in shown)
