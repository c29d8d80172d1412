"""The straggler derivation over many ranks' logs: the rank that stopped first, its host and GPU."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CORPUS, ingest_timeline
from tests.data.nccl_multirank import write_job
from workbench.store.bundle import Bundle


def _of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def test_sixteen_ranks_two_hosts_one_behind(tmp_path):
    job = write_job(tmp_path / "logs", hosts=2, gpus_per_host=8, seq=4242, straggler=5)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    timeouts = _of(events, "nccl_timeout")
    assert len(timeouts) == 16 and {t["rank"] for t in timeouts} == set(range(16))
    (straggler,) = _of(events, "straggler_rank")
    assert straggler["rank"] == 5
    assert straggler["host"] == job.host_of(5) == "gpu-node-07"
    assert straggler["gpu"] == job.bus_of(5) == "0000:ab:00.0"
    assert straggler["layer"] == "gpu" and straggler["ts_origin"] == "derived"
    attrs = straggler["attrs"]
    assert (attrs["seq"], attrs["expected_seq"], attrs["evidence"], attrs["pg"]) == (4241, 4242, "seq", "default_pg")
    assert attrs["comm_id"] == "0x5ae77eb5ea4ec1ee"
    assert attrs["waiting_ranks"] == [r for r in range(16) if r != 5]
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        ids = dict(bundle.con.execute(
            "SELECT id, rank FROM event WHERE kind = 'nccl_timeout' AND rank <> 5").fetchall())
    assert sorted(attrs["timeout_events"]) == sorted(ids), "every other rank's timeout is linked"
    assert {e["rank"] for e in attrs["waiting_events"]} == set(ids.values())
    assert attrs["progress"]["5"] == {"stuck_seq": 4241, "last_enqueued": 4241, "last_completed": 4240}
    assert "rank 5" in straggler["message"] and "gpu-node-07" in straggler["message"]


def test_silent_rank_is_the_straggler(tmp_path):
    job = write_job(tmp_path / "logs", hosts=2, gpus_per_host=8, straggler=12, silent=True)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert 12 not in {t["rank"] for t in _of(events, "nccl_timeout")}
    (straggler,) = _of(events, "straggler_rank")
    assert (straggler["rank"], straggler["host"], straggler["gpu"]) == (12, job.host_of(12), job.bus_of(12))
    assert straggler["attrs"]["evidence"] == "no_timeout" and straggler["attrs"]["seq"] is None
    assert len(straggler["attrs"]["timeout_events"]) == 15


def test_missing_rank_logs_are_not_stragglers(tmp_path):
    write_job(tmp_path / "logs", hosts=2, gpus_per_host=8, straggler=3, silent=True)
    for rank in range(8):
        (tmp_path / "logs" / "gpu-node-07" / f"rank{rank}.log").unlink()
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert _of(events, "straggler_rank") == [], "ranks 0-7 left no evidence at all: nobody to blame"


def test_all_ranks_at_the_same_seq_and_no_topology(bundle_path):
    events = ingest_timeline(bundle_path, CORPUS / "nccl" / "basicsr_737_watchdog_allreduce_pg_guid.log")
    assert _of(events, "straggler_rank") == [] and _of(events, "collective_mismatch") == []


def test_desync_rank_far_behind(bundle_path):
    events = ingest_timeline(bundle_path, CORPUS / "nccl" / "pytorch_118369_watchdog_stale_25625s_ptl.log")
    (straggler,) = _of(events, "straggler_rank")
    assert (straggler["rank"], straggler["attrs"]["seq"], straggler["attrs"]["expected_seq"]) == (7, 64088, 96117)


def test_collective_mismatch_at_one_seq(bundle_path):
    events = ingest_timeline(bundle_path, CORPUS / "nccl" / "nccl_1409_watchdog_broadcast_vs_allreduce_mismatch.log")
    (mismatch,) = _of(events, "collective_mismatch")
    assert mismatch["attrs"]["seq"] == 80078
    assert mismatch["attrs"]["ops"] == {"3": "ALLREDUCE", "7": "BROADCAST"}
    assert _of(events, "straggler_rank") == []


def test_flight_recorder_missing_ranks(tmp_path):
    job = write_job(tmp_path / "logs", hosts=1, gpus_per_host=8, straggler=6, silent=True)
    report = Path(tmp_path / "logs" / "fr_trace.txt")
    report.write_text("Not all ranks joining collective: sequence number: 4242\ninternal record id: 4241\n"
                      "group info: 0:default_pg\ncollective: nccl:all_reduce\nmissing ranks: {6}\n"
                      "world size: 8\nexpected ranks: {0, 1, 2, 3, 4, 5, 6, 7}\ncollective state: scheduled\n")
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    by_evidence = {s["attrs"]["evidence"]: s for s in _of(events, "straggler_rank")}
    assert set(by_evidence) == {"no_timeout", "flight_recorder"}
    fr = by_evidence["flight_recorder"]
    assert (fr["rank"], fr["host"], fr["gpu"], fr["attrs"]["expected_seq"]) == (6, job.host_of(6), job.bus_of(6), 4242)
    assert fr["attrs"]["waiting_ranks"] == [0, 1, 2, 3, 4, 5, 7]


def test_rederived_not_duplicated(tmp_path):
    write_job(tmp_path / "a", hosts=2, gpus_per_host=8, straggler=9)
    ingest_timeline(tmp_path / "b.duckdb", tmp_path / "a")
    extra = tmp_path / "extra" / "note.log"
    extra.parent.mkdir()
    extra.write_text("2026-03-14 10:00:00,000 - INFO - train - restarted\n{'loss': nan, 'epoch': 1.0}\n")
    events = ingest_timeline(tmp_path / "b.duckdb", extra)
    assert [s["rank"] for s in _of(events, "straggler_rank")] == [9]


def test_per_node_srun_logs_with_interleaved_ranks(tmp_path):
    job = write_job(tmp_path / "logs", hosts=4, gpus_per_host=4, straggler=10, per_host=True)
    assert len(list((tmp_path / "logs").rglob("*.log"))) == 4
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert {t["rank"] for t in _of(events, "nccl_timeout")} == set(range(16))
    (straggler,) = _of(events, "straggler_rank")
    assert (straggler["rank"], straggler["host"], straggler["gpu"]) == (10, job.host_of(10), job.bus_of(10))
    assert len(straggler["attrs"]["timeout_events"]) == 15
