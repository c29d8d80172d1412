"""Keyset paging: walking a filtered timeline page by page, forwards and back, visits every event
exactly once and in the same order as ``iter_events`` (what ``gpuwb timeline`` prints)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import pytest

from collectors.base import Event
from workbench.query import events as query
from workbench.query.events import EventFilter
from workbench.store.bundle import Bundle


def _fill(path, n: int = 90, seed: int = 7) -> None:
    rng = random.Random(seed)
    base = datetime(2025, 3, 14, 9, 0)
    with Bundle.create(path) as bundle:
        writer = bundle.writer(None)
        for i in range(n):
            ts = None if rng.random() < 0.1 else base + timedelta(seconds=rng.choice(range(0, 600, 7)))
            writer.add(Event(ts=ts, source=rng.choice(["kernel", "nccl"]), kind=rng.choice(["xid", "nccl_warn"]),
                             message=f"event {i}", host=rng.choice(["node01", "node02", "node03"]),
                             severity=rng.choice(["info", "warning", "error"]), layer="gpu",
                             rank=rng.choice([None, 0, 1, 2])))
        writer.flush()


@pytest.fixture
def busy_bundle(tmp_path):
    path = tmp_path / "b.duckdb"
    _fill(path)
    return path


@pytest.mark.parametrize("flt", [EventFilter(), EventFilter(hosts=("node02",)),
                                 EventFilter(severities=("error",), ranks=(1, 2)), EventFilter(text="event 1")])
@pytest.mark.parametrize("size", [4, 64])
def test_pages_forward_and_back_visit_every_event_once_in_timeline_order(busy_bundle, flt, size):
    with Bundle.open(busy_bundle) as bundle:
        expected = [r["id"] for r in query.iter_events(bundle, flt)]
        assert expected, "the filter should match something"
        seen, pg = [], query.page(bundle, flt, limit=size)
        assert not pg.more_before
        while True:
            seen += [r["id"] for r in pg.rows]
            if not pg.more_after:
                break
            pg = query.page(bundle, flt, after=pg.last, limit=size)
        assert seen == expected
        back = []
        while True:
            back = [r["id"] for r in pg.rows] + back
            if not pg.more_before:
                break
            pg = query.page(bundle, flt, before=pg.first, limit=size)
        assert back == expected


def test_undated_events_come_last_and_seek_finds_the_next_error(busy_bundle):
    with Bundle.open(busy_bundle) as bundle:
        rows = list(query.iter_events(bundle))
        dated = [r["ts"] is not None for r in rows]
        assert dated == sorted(dated, reverse=True)
        first_error = next(i for i, r in enumerate(rows) if r["severity"] == "error")
        cur = query.seek(bundle, None, after=None, severities=("error",))
        assert query.position(bundle, None, cur) == first_error
        nxt = query.seek(bundle, None, after=cur, severities=("error",))
        second = next(i for i, r in enumerate(rows) if r["severity"] == "error" and i > first_error)
        assert query.position(bundle, None, nxt) == second
        assert query.seek(bundle, None, after=nxt, severities=("error",), backwards=True) == cur


def test_a_page_can_start_at_a_moment(busy_bundle):
    with Bundle.open(busy_bundle) as bundle:
        rows = list(query.iter_events(bundle))
        moment = rows[40]["ts"]
        pg = query.page(bundle, at_or_after=query.cursor_at(moment), limit=5)
        assert pg.rows[0]["ts"] == moment and pg.more_before
        assert all(r["ts"] < moment for r in rows[: query.position(bundle, None, pg.first)])


def test_facets_count_what_the_filters_can_pick(busy_bundle):
    with Bundle.open(busy_bundle) as bundle:
        facets = query.facets(bundle)
        hosts = dict(facets["host"])
        assert sum(hosts.values()) == query.count_events(bundle)
        assert hosts["node02"] == query.count_events(bundle, EventFilter(hosts=("node02",)))


def test_the_last_page_ends_with_the_last_event(busy_bundle):
    with Bundle.open(busy_bundle) as bundle:
        ids = [r["id"] for r in query.iter_events(bundle)]
        pg = query.page(bundle, last=True, limit=7)
        assert [r["id"] for r in pg.rows] == ids[-7:] and pg.more_before and not pg.more_after


def test_a_host_without_a_source_the_others_have_is_a_gap(tmp_path):
    path = tmp_path / "gaps.duckdb"
    with Bundle.create(path) as bundle:
        writer = bundle.writer(None)
        for host in ("n1", "n2", "n3"):
            writer.add(Event(kind="xid", message="k", host=host, source="kernel"))
        for host in ("n1", "n2"):
            writer.add(Event(kind="nccl_warn", message="w", host=host, source="nccl"))
        writer.add(Event(kind="straggler_rank", message="d", host="n3", source="stragglers", ts_origin="derived"))
        writer.add(Event(kind="job_state", message="j", host="n1", source="slurm"))
        writer.flush()
    with Bundle.open(path) as bundle:
        assert query.missing_sources(bundle) == {"nccl": ["n3"]}
