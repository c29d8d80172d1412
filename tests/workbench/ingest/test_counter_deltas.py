"""counter_deltas: error counters that rose between two captures of one host and port."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

from collectors.base import SeriesPoint
from tests.conftest import CORPUS, ingest_timeline
from workbench.ingest.derivations import counter_deltas
from workbench.store.bundle import Bundle

PERFQUERY = (CORPUS / "network_storage" / "infiniband-diags_16_perfquery_x_extended.txt").read_text()


def _perfquery(symbol_errors: int, link_downed: int) -> str:
    text = PERFQUERY.replace("SymbolErrorCounter:..............0", f"SymbolErrorCounter:..............{symbol_errors}")
    return text.replace("LinkDownedCounter:...............0", f"LinkDownedCounter:...............{link_downed}")


def _files(root: Path, host: str, *samples: tuple[int, int, int]) -> None:
    folder = root / host
    folder.mkdir(parents=True, exist_ok=True)
    for n, (epoch, symbol, downed) in enumerate(samples):
        path = folder / f"perfquery-{n}.txt"
        path.write_text(_perfquery(symbol, downed))
        os.utime(path, (epoch, epoch))


def test_rise_between_two_captures_of_one_host(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    _files(evidence, "node01", (1_764_324_000, 0, 0), (1_764_324_600, 40, 3))
    _files(evidence, "node02", (1_764_324_000, 5, 0), (1_764_324_600, 1, 0))
    events = ingest_timeline(tmp_path / "b.duckdb", evidence)
    rising = [e for e in events if e["kind"] == "counter_rising"]
    assert len(rising) == 1, "node02's counter went down: a reset, not a rise"
    event = rising[0]
    assert event["host"] == "node01" and event["layer"] == "network_storage"
    assert event["attrs"]["counters"] == {"symbol_error": 40.0, "link_downed": 3.0}
    assert event["attrs"]["seconds"] == 600.0 and event["attrs"]["family"] == "ib"
    assert event["ts"] == "2025-11-28T10:10:00.000000Z"
    assert event["attrs"]["device"] == "lid 10" and event["attrs"]["port"] == "1"


def test_points_of_one_artifact_and_traffic_counters_are_not_compared(tmp_path: Path) -> None:
    t0, t1 = datetime(2026, 11, 28, 10, tzinfo=timezone.utc), datetime(2026, 11, 28, 10, 5, tzinfo=timezone.utc)
    with Bundle.create(tmp_path / "c.duckdb") as bundle:
        for sha, ts, value, cls in (("a" * 64, t0, 1.0, "error"), ("a" * 64, t1, 9.0, "error"),
                                    ("b" * 64, t0, 1.0, "traffic"), ("c" * 64, t1, 9.0, "traffic")):
            writer = bundle.writer(sha)
            writer.add(SeriesPoint(ts=ts, name="nic.rx_x", value=value, host="h",
                                   labels={"device": "eth0", "class": cls}))
            writer.flush()
        assert list(counter_deltas.derive(bundle.con)) == []
