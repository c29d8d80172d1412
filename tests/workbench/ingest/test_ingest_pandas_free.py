"""Ingest's memory stays flat past any batch size: the row writer never goes through Arrow, whose first
``pa.array`` imports pandas (~90 MB of RSS). Probed in a fresh interpreter, so what another test
imported cannot hide it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

XID = ("Mar  3 10:{m:02d}:{s:02d} node1 kernel: [{i}.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid={i}, "
       "name=python, GPU has fallen off the bus.\n")

PROBE = """
import json, sys
from datetime import datetime, timedelta
from workbench.store.bundle import Bundle
from workbench.store.row_writer import RowWriter
from workbench.cli import main
from collectors.base import SeriesPoint

bundle_path, log, points_bundle = sys.argv[1:4]
code = main(["ingest", "-q", bundle_path, log])
after_ingest = "pandas" in sys.modules
start = datetime(2024, 3, 3)
with Bundle.create(points_bundle) as bundle:
    writer = RowWriter(bundle, None)
    writer.add_all(SeriesPoint(ts=start + timedelta(seconds=i), name="vllm:num_requests_running", value=float(i),
                               host="node1") for i in range(3 * RowWriter.BATCH + 7))
    writer.flush()
    series = bundle.con.execute("SELECT count(*), sum(value) FROM series").fetchone()
with Bundle.open(bundle_path) as bundle:
    events = bundle.con.execute("SELECT count(*) FROM event WHERE kind LIKE 'xid%'").fetchone()[0]
print(json.dumps({"code": code, "events": events, "series": list(series), "batch": RowWriter.BATCH,
                  "pandas_after_ingest": after_ingest, "pandas_after_writer": "pandas" in sys.modules}))
"""


def test_ingest_of_more_rows_than_a_batch_never_loads_pandas(tmp_path: Path) -> None:
    lines = 66_000  # above the former 50,000-row Arrow threshold; the file is over OVERLAP_BYTES (8 MiB)
    log = tmp_path / "kern.log"
    with open(log, "w", encoding="utf-8") as out:
        out.writelines(XID.format(m=(i // 60) % 60, s=i % 60, i=i) for i in range(lines))
    assert log.stat().st_size >= 8 << 20
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "b.duckdb"), str(log),
                           str(tmp_path / "points.duckdb")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    probe = json.loads(proc.stdout.strip().splitlines()[-1])
    assert probe["code"] == 0
    assert probe["events"] == lines
    n = 3 * probe["batch"] + 7
    assert probe["series"] == [n, float(n * (n - 1) // 2)]
    assert probe["pandas_after_ingest"] is False
    assert probe["pandas_after_writer"] is False
