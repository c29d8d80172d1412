"""Ingest parses big files in a worker process while it stores them: the bundle is the same either way.

The worker is forced on (every file counts as big, and only one frame of rows may wait, so the worker
pauses and resumes) and off; the evidence rows, host facts, artifacts with their parse statistics and the
seal's root digest must be identical, a duplicate parsed ahead must leave no rows, and clocks learned
from a file the worker parsed must reach the next file.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from tests.perf.kernel_log_mix import write_log
from workbench.ingest import parse_worker
from workbench.ingest import session as ingest
from workbench.store.bundle import Bundle


def _evidence(root):
    (root / "gpu-node-017").mkdir(parents=True)
    log = root / "gpu-node-017" / "dmesg.txt"
    write_log(log, "noisy", 1 << 20)
    (root / "gpu-node-018").mkdir()
    write_log(root / "gpu-node-018" / "kern.log", "quiet", 1 << 20, seed=11)
    shutil.copy(log, root / "gpu-node-017" / "dmesg-copy.txt")  # the same bytes on the same host: a duplicate
    # dmesg without a wall clock, dated by the uptime and date files of its host (parsed first)
    (root / "gpu-node-019").mkdir()
    (root / "gpu-node-019" / "uptime").write_text("3600.00 7000.00\n")
    (root / "gpu-node-019" / "date").write_text("Tue Mar 10 14:00:00 UTC 2025\n")
    (root / "gpu-node-019" / "dmesg-raw.txt").write_text(
        "[ 3000.123456] NVRM: Xid (PCI:0000:5d:00): 79, pid=1234, GPU has fallen off the bus.\n")
    for path in root.rglob("*"):
        os.utime(path, (1_764_000_000, 1_764_000_000))
    return root


def _ingested(monkeypatch, path, evidence, worker: bool, ahead: int = 1) -> dict:
    monkeypatch.setattr(ingest, "WORKER_BYTES", 0 if worker else 1 << 62)
    monkeypatch.setattr(ingest, "SEND_AHEAD", ahead if worker else 0)
    monkeypatch.setattr(parse_worker, "AHEAD_BYTES", 1)  # one frame at a time: the worker waits, resumes
    started = []
    real_parse = parse_worker.ParseWorker.parse

    def counted(self, *args):
        job = real_parse(self, *args)
        if job is not None:
            started.append(args[1])
        return job

    monkeypatch.setattr(parse_worker.ParseWorker, "parse", counted)
    with Bundle.create(path) as bundle:
        results = ingest.ingest_paths(bundle, [str(evidence)])
        con = bundle.con
        return {
            "statuses": sorted((r.path.rsplit("/", 1)[-1], r.status, r.events, r.lines, r.error) for r in results),
            "events": con.execute("SELECT * EXCLUDE (artifact), artifact FROM event ORDER BY id").fetchall(),
            "facts": con.execute("SELECT * FROM host_inventory ORDER BY ALL").fetchall(),
            "artifacts": con.execute("SELECT id, sha256, kind, host, size, lines, events, rows, skipped, skip_reasons "
                                     "FROM artifact ORDER BY id").fetchall(),
            "chunks": con.execute("SELECT artifact_id, seq, raw_size FROM artifact_chunk ORDER BY ALL").fetchall(),
            "sealed": {k: v for k, v in json.loads(con.execute(
                "SELECT items FROM seal ORDER BY seq DESC LIMIT 1").fetchall()[0][0]).items()
                if not k.startswith("meta")},
        }, len(started)


def test_the_worker_makes_the_same_bundle(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    in_worker, started = _ingested(monkeypatch, tmp_path / "worker.duckdb", evidence, worker=True)
    in_process, none_started = _ingested(monkeypatch, tmp_path / "plain.duckdb", evidence, worker=False)
    assert started >= 5 and none_started == 0
    assert len(in_worker["events"]) > 20
    assert [s[1] for s in in_worker["statuses"]].count("duplicate") == 1
    dated = [e for e in in_worker["events"] if "gpu-node-019" in e]
    assert dated and all(e[1].isoformat().startswith("2025-03-10T13:50:00") for e in dated)  # uptime + date
    assert in_worker == in_process
    sent_ahead, _ = _ingested(monkeypatch, tmp_path / "ahead.duckdb", evidence, worker=True, ahead=3)
    assert sent_ahead == in_process


def test_a_worker_that_cannot_start_leaves_the_parse_here(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    plain, _ = _ingested(monkeypatch, tmp_path / "plain.duckdb", evidence, worker=False)
    monkeypatch.setattr(parse_worker.sys, "executable", "/bin/false")  # starts, answers nothing, exits
    dead, _ = _ingested(monkeypatch, tmp_path / "dead.duckdb", evidence, worker=True)
    assert dead == plain


def test_a_store_error_reaches_the_caller_and_stops_the_worker(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    monkeypatch.setattr(ingest, "WORKER_BYTES", 0)
    workers = []
    real_init = parse_worker.ParseWorker.__init__
    monkeypatch.setattr(parse_worker.ParseWorker, "__init__", lambda self: workers.append(self) or real_init(self))

    def broken(self, stream, **fields):
        stream.read(1 << 20)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(Bundle, "add_artifact", broken)
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        results = ingest.ingest_paths(bundle, [str(evidence)])
    assert {r.status for r in results} == {"error"}
    assert all("Input/output error" in r.error for r in results)
    assert workers and all(w.proc is None for w in workers)


FAKE_WORKER = """#!{python}
import pickle, struct, sys
sys.path.insert(0, {root!r})
from collectors.base import HostFact
from workbench.store.row_columns import prepared
size = struct.unpack("<Q", sys.stdin.buffer.read(8))[0]
sys.stdin.buffer.read(size)
data = b"r" + pickle.dumps(("rows", *prepared([HostFact("kernel", "6.8.0")])))
sys.stdout.buffer.write(struct.pack("<Q", len(data)) + data)
sys.stdout.buffer.flush()
"""


def test_a_worker_that_dies_mid_file_costs_that_file_a_counted_skip(monkeypatch, tmp_path):
    evidence = _evidence(tmp_path / "evidence")
    plain, _ = _ingested(monkeypatch, tmp_path / "plain.duckdb", evidence, worker=False)
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_WORKER.format(python=sys.executable, root=str(Path(ingest.__file__).parents[2])))
    fake.chmod(0o755)
    monkeypatch.setattr(parse_worker.sys, "executable", str(fake))  # answers one row of the first file, then exits
    cut, started = _ingested(monkeypatch, tmp_path / "cut.duckdb", evidence, worker=True)
    assert started == 1  # no file is sent to a worker that has died
    first = [s for s in cut["statuses"] if s[4]]
    assert [s[4] for s in first] == ["the parse worker ended unexpectedly"]
    rest = [s for s in cut["statuses"] if not s[4]]
    assert rest == [s for s in plain["statuses"] if s[0] != first[0][0]]
