"""Ingest stores a big log in a second thread while it parses it: the bundle is the same either way.

The overlap is forced on (every file counts as big, and the parse may run only a few rows ahead of the
store, so it pauses and resumes) and off; the evidence rows, the artifacts with their parse statistics
and the seal's root digest must be identical, and a duplicate parsed ahead must leave no rows.
"""

from __future__ import annotations

import json
import os
import shutil

from tests.perf.kernel_log_mix import write_log
from workbench import ingest
from workbench.bundle import Bundle


def _evidence(root):
    (root / "gpu-node-017").mkdir(parents=True)
    log = root / "gpu-node-017" / "dmesg.txt"
    write_log(log, "noisy", 1 << 20)
    (root / "gpu-node-018").mkdir()
    write_log(root / "gpu-node-018" / "kern.log", "quiet", 1 << 20, seed=11)
    shutil.copy(log, root / "gpu-node-017" / "dmesg-copy.txt")  # the same bytes on the same host: a duplicate
    for path in root.rglob("*"):
        os.utime(path, (1_764_000_000, 1_764_000_000))
    return root


def _ingested(monkeypatch, path, evidence, overlap: bool) -> dict:
    monkeypatch.setattr(ingest, "OVERLAP_BYTES", 0 if overlap else 1 << 62)
    monkeypatch.setattr(ingest, "PARSE_AHEAD_ROWS", 3)
    with Bundle.create(path) as bundle:
        results = ingest.ingest_paths(bundle, [str(evidence)])
        con = bundle.con
        return {
            "statuses": sorted((r.path.rsplit("/", 1)[-1], r.status, r.events) for r in results),
            "events": con.execute("SELECT * EXCLUDE (artifact), artifact FROM event ORDER BY id").fetchall(),
            "facts": con.execute("SELECT * FROM host_inventory ORDER BY ALL").fetchall(),
            "artifacts": con.execute("SELECT id, sha256, kind, host, size, lines, events, rows, skipped, skip_reasons "
                                     "FROM artifact ORDER BY id").fetchall(),
            "chunks": con.execute("SELECT artifact_id, seq, raw_size FROM artifact_chunk ORDER BY ALL").fetchall(),
            "sealed": {k: v for k, v in json.loads(con.execute(
                "SELECT items FROM seal ORDER BY seq DESC LIMIT 1").fetchall()[0][0]).items() if k != "meta"},
        }


def test_overlapped_store_makes_the_same_bundle(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    threaded = _ingested(monkeypatch, tmp_path / "threaded.duckdb", evidence, overlap=True)
    plain = _ingested(monkeypatch, tmp_path / "plain.duckdb", evidence, overlap=False)
    assert len(threaded["events"]) > 20
    assert [s[1] for s in threaded["statuses"]].count("duplicate") == 1
    assert threaded == plain


def test_a_store_error_in_the_thread_reaches_the_caller(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    monkeypatch.setattr(ingest, "OVERLAP_BYTES", 0)

    def broken(self, stream, **fields):
        stream.read(1 << 20)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Bundle, "add_artifact", broken)
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        results = ingest.ingest_paths(bundle, [str(evidence)])
    assert {r.status for r in results} == {"error"}
    assert all("Input/output error" in r.error for r in results)
