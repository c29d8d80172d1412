"""Big row batches go into DuckDB as numpy object arrays, small ones as list parameters: the stored rows
are the same either way, on the whole real-log corpus (every evidence table, lists and JSON included)."""

from __future__ import annotations

import os

from tests.perf.kernel_log_mix import write_log
from workbench import ingest
from workbench.bundle import Bundle, RowWriter

TABLES = ("event", "gpu_sample", "gpu_inventory", "topology", "series", "host_inventory")


def _stored(monkeypatch, path, inputs, array_rows: int) -> dict:
    monkeypatch.setattr(RowWriter, "ARRAY_ROWS", array_rows)
    monkeypatch.setattr(ingest, "SEND_AHEAD", 0)  # in process: the monkeypatched writer is the one used
    with Bundle.create(path) as bundle:
        ingest.ingest_paths(bundle, [str(p) for p in inputs])
        stored = {t: bundle.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
        stored["types"] = {t: bundle.con.execute(f"SELECT typeof(COLUMNS(*)) FROM {t} LIMIT 1").fetchall()
                           for t in TABLES}
        return stored


def test_rows_stored_from_arrays_equal_rows_stored_from_list_parameters(monkeypatch, tmp_path, corpus):
    log = tmp_path / "kern.log"
    write_log(log, "noisy", 1 << 20)
    os.utime(log, (1_764_000_000, 1_764_000_000))
    inputs = [corpus, log]
    arrays = _stored(monkeypatch, tmp_path / "arrays.duckdb", inputs, array_rows=1)
    lists = _stored(monkeypatch, tmp_path / "lists.duckdb", inputs, array_rows=1 << 62)
    assert len(arrays["event"]) > 300 and arrays["gpu_sample"] and arrays["series"] and arrays["topology"]
    assert any(row for row in arrays["gpu_sample"] if any(isinstance(v, list) and v for v in row))
    assert arrays == lists
