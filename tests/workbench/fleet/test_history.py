"""The incident history: three real incidents (ingested scenario evidence), two of them on one GPU
that moved from node04 to node14, one on another GPU that happens to print the same board serial."""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from collectors.base import GpuInventory
from tests.conftest import ROOT, run_cli
from workbench.fleet.history import Culprit, History, HistoryError, Record, record_of
from workbench.store import journal
from workbench.store.bundle import Bundle

SCENARIOS = ROOT / "tests" / "scenarios"
ECC_SERIAL = "1652123019187"
"""The serial of node04's GPU 0000:9b:00.0 in train_ecc_xid94 (and, by nvidia-smi's word, of node07's
fallen GPU in train_pcie_xid79_nodefail, whose UUID differs)."""
MOVED = (("2025-03-10", "2025-06-02"), ("2025-03-09", "2025-06-01"), ("0310 ", "0602 "), ("Mar 10", "Jun 02"),
         ("node[03-04]", "node[13-14]"), ("node04", "node14"), ("node03", "node13"), ("95120", "97311"))
"""train_ecc_xid94 again twelve weeks later, its GPU moved to node14 (2 June 2025 is a Monday, as 10 March is)."""


def rewritten_copy(src: Path, dst: Path, subs: tuple[tuple[str, str], ...]) -> Path:
    """A scenario's evidence with every text replacement applied to contents and paths."""
    for path in sorted(src.rglob("*")):
        if not path.is_file() or path.name == "expected.yaml":
            continue
        rel = str(path.relative_to(src))
        text = path.read_text(encoding="utf-8")
        for old, new in subs:
            rel, text = rel.replace(old, new), text.replace(old, new)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (dst / rel).write_text(text, encoding="utf-8")
    return dst


def build_incidents(root: Path) -> dict[str, Path]:
    """Bundles ``first`` (ECC on node04, 2025-03-10), ``second`` (same GPU on node14, 2025-06-02) and
    ``other`` (a GPU off the bus on node07, 2025-03-01), made as a user makes them: gpuwb ingest."""
    evidence = {"first": SCENARIOS / "train_ecc_xid94",
                "second": rewritten_copy(SCENARIOS / "train_ecc_xid94", root / "second-evidence", MOVED),
                "other": SCENARIOS / "train_pcie_xid79_nodefail"}
    bundles = {}
    for name, folder in evidence.items():
        bundles[name] = root / f"{name}.duckdb"
        code, out, err = run_cli("ingest", bundles[name], folder, "-q")
        assert code == 0, err or out
    return bundles


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_incidents(tmp_path_factory.mktemp("incidents"))


@pytest.fixture(scope="module")
def records(incidents: dict[str, Path]) -> dict[str, Record]:
    out = {}
    for name, path in incidents.items():
        with Bundle.open(path) as bundle:
            out[name] = record_of(bundle)
    return out


@pytest.fixture
def history(tmp_path: Path, records: dict[str, Record]) -> History:
    catalog = History.open(tmp_path / "history", create=True)
    for record in records.values():
        assert catalog.add(record) == "added"
    return catalog


def test_a_record_names_the_culprit_gpu_by_serial_and_uuid(records: dict[str, Record]) -> None:
    first, second, other = records["first"], records["second"], records["other"]
    assert (first.culprits[0].cause, first.culprits[0].host, first.culprits[0].gpu) == \
        ("ecc_uncorrectable", "node04", "0000:9b:00.0")
    assert first.culprits[0].serial == second.culprits[0].serial == ECC_SERIAL
    assert first.culprits[0].uuid == second.culprits[0].uuid == "GPU-7e8f9a0b-1111-2222-3333-444455557777"
    assert second.culprits[0].host == "node14"
    assert other.culprits[0].cause == "gpu_fell_off_bus" and other.culprits[0].uuid != first.culprits[0].uuid
    assert (first.started_at.date().isoformat(), second.started_at.date().isoformat(),
            other.started_at.date().isoformat()) == ("2025-03-10", "2025-06-02", "2025-03-01")
    assert {(e["host"], e["gpu"], e["xid"]) for e in first.events if e["kind"] == "xid"} == {
        ("node04", "0000:9b:00.0", 94), ("node04", "0000:9b:00.0", 63), ("node04", "0000:9b:00.0", 45)}
    assert [e["ts"] for e in first.events] == sorted(e["ts"] for e in first.events)


def test_the_root_cause_responders_marked_is_the_first_culprit(tmp_path: Path, incidents: dict[str, Path]) -> None:
    copy = tmp_path / "marked.duckdb"
    shutil.copy(incidents["other"], copy)
    with Bundle.open(copy, write=True) as bundle:
        journal.mark_root_cause(bundle, "alice", "pcie_link_degraded", host="node07", gpu="0000:2A:00.0",
                                text="riser card reseated twice before")
    with Bundle.open(copy) as bundle:
        record = record_of(bundle)
    marked = record.culprits[0]
    assert (marked.rank, marked.marked, marked.cause, marked.gpu) == (0, True, "pcie_link_degraded", "0000:2a:00.0")
    assert marked.uuid == "GPU-4f0e1b9a-7c2d-11ee-8c90-0242ac120002" and marked.serial == ECC_SERIAL
    assert record.causes[:2] == ["pcie_link_degraded", "gpu_fell_off_bus"]


def test_two_incidents_on_one_gpu_make_it_a_repeat_offender_with_both_dates(history: History) -> None:
    offenders = history.offenders()
    assert [(o.what, o.serial) for o in offenders] == [("gpu", ECC_SERIAL)]
    gpu = offenders[0]
    assert [(i.started_at.date().isoformat(), i.host, i.causes) for i in gpu.incidents] == [
        ("2025-03-10", "node04", ("ecc_uncorrectable",)), ("2025-06-02", "node14", ("ecc_uncorrectable",))]
    fell = history.offenders(gpu="0000:2a:00.0")[0]
    assert [i.xids for i in fell.incidents] == [(79,)]  # node07's Xid 79, not node08's Xid 13 of the same job
    assert gpu.hosts == ("node04", "node14") and gpu.gpus == ("0000:9b:00.0",)


def test_the_uuid_tells_two_gpus_with_one_board_serial_apart(history: History) -> None:
    """node07's GPU prints the same serial but another UUID: it is not the ECC GPU's third incident."""
    fell = history.offenders(gpu="0000:2a:00.0")
    assert [(o.what, len(o.incidents), o.hosts) for o in fell] == [("gpu", 1, ("node07",))]
    assert [len(o.incidents) for o in history.offenders(gpu=ECC_SERIAL, min_incidents=1)] == [2, 1]


def test_host_and_gpu_filters(history: History) -> None:
    on_node04 = history.offenders(host="node04", min_incidents=1)
    assert {(o.what, o.label) for o in on_node04} == {("gpu", f"GPU serial {ECC_SERIAL}"), ("host", "host node04")}
    by_uuid = history.offenders(gpu="gpu-7e8f9a0b-1111-2222-3333-444455557777")
    assert [len(o.incidents) for o in by_uuid] == [2]
    assert history.offenders(host="node99", min_incidents=1) == []


def test_since_leaves_out_older_incidents(history: History) -> None:
    assert history.offenders(since=datetime(2025, 5, 1)) == []
    recent = history.offenders(since=datetime(2025, 5, 1), min_incidents=1)
    assert {o.label for o in recent} == {f"GPU serial {ECC_SERIAL}", "host node14"}
    assert all(i.started_at >= datetime(2025, 5, 1) for o in recent for i in o.incidents)


def test_seen_before_names_the_earlier_incident_and_only_that(history: History, records: dict[str, Record]) -> None:
    second = history.seen_before(records["second"])
    gpu = next(e for e in second if e["what"] == "gpu")
    assert gpu["count"] == 1 and gpu["serial"] == ECC_SERIAL and gpu["host"] == "node14"
    assert [(i["date"], i["causes"], i["host"], i["xids"]) for i in gpu["incidents"]] == [
        ("2025-03-10", ["ecc_uncorrectable"], "node04", [45, 63, 94])]
    assert [e["count"] for e in second if e["what"] == "host"] == [0]  # node14 had no incident before
    assert [e["count"] for e in history.seen_before(records["first"])] == [0, 0]  # the later one does not count
    assert [e["count"] for e in history.seen_before(records["other"])] == [0, 0]


def test_the_same_bundle_added_twice_counts_once(tmp_path: Path, history: History, incidents: dict[str, Path],
                                                 records: dict[str, Record]) -> None:
    assert history.add(records["first"]) == "already in history"
    copy = tmp_path / "copy-of-first.duckdb"
    shutil.copy(incidents["first"], copy)
    with Bundle.open(copy) as bundle:
        assert history.add(record_of(bundle)) == "already in history"
    assert len(history.incidents()) == 3 and len(history.files("incidents")) == 3
    assert [len(o.incidents) for o in history.offenders()] == [2]


def test_a_bundle_sealed_again_replaces_its_incident(tmp_path: Path, history: History,
                                                     incidents: dict[str, Path]) -> None:
    copy = tmp_path / "first-plus.duckdb"
    shutil.copy(incidents["first"], copy)
    note = tmp_path / "late" / "node04"
    note.mkdir(parents=True)
    (note / "notes.txt").write_text("handed over later\n", encoding="utf-8")
    assert run_cli("ingest", copy, tmp_path / "late", "-q")[0] == 0
    with Bundle.open(copy) as bundle:
        record = record_of(bundle)
    assert history.add(record) == "updated"
    assert history.incidents()[record.incident_id]["root_digest"] == record.root_digest
    assert len(history.incidents()) == 3 and [len(o.incidents) for o in history.offenders()] == [2]


def test_a_merged_bundle_and_its_parts_are_one_incident(tmp_path: Path, history: History, incidents: dict[str, Path],
                                                         records: dict[str, Record]) -> None:
    merged = tmp_path / "merged.duckdb"
    code, out, err = run_cli("merge", merged, incidents["first"], incidents["other"])
    assert code == 0, err or out
    with Bundle.open(merged) as bundle:
        record = record_of(bundle)
    assert sorted(record.merged_from) == sorted([records["first"].incident_id, records["other"].incident_id])
    assert [e["count"] for e in history.seen_before(record)] == [0, 0, 0, 0]  # its own parts are not "before" it
    assert history.add(record) == "added"
    assert set(history.incidents()) == {record.incident_id, records["second"].incident_id}
    (gpu,) = history.offenders()
    assert [i.incident_id for i in gpu.incidents] == [record.incident_id, records["second"].incident_id]


def test_an_add_cut_short_before_its_incident_row_is_invisible(history: History, records: dict[str, Record]) -> None:
    lone = Record(incident_id="feedfacecafe", root_digest="0" * 64, title="half", started_at=datetime(2025, 7, 1),
                  ended_at=None, workload="training", impact="failure", summary="", bundle="-",
                  culprits=[Culprit(cause="ecc_uncorrectable", layer="gpu", score=0.9, marked=False, host="node14",
                                    gpu="0000:9b:00.0", serial=ECC_SERIAL, rank=1)])
    history._write("culprits", lone.incident_id, [{"incident_id": lone.incident_id, "cause": "ecc_uncorrectable",
                                                    "host": "node14", "gpu": "0000:9b:00.0", "serial": ECC_SERIAL}])
    assert [len(o.incidents) for o in history.offenders()] == [2]
    assert history.add(lone) == "added"  # run again, it completes
    groups = history.offenders(gpu=ECC_SERIAL)
    assert sorted(len(o.incidents) for o in groups) == [1, 3] or sorted(len(o.incidents) for o in groups) == [2, 2]
    assert "feedfacecafe" in {i.incident_id for o in groups for i in o.incidents}
    # the serial-only row joins one of the two GPUs that print this serial, never both into one
    assert not any({"node04", "node07"} <= set(o.hosts) for o in groups)


def test_the_files_are_plain_parquet_that_duckdb_reads(history: History) -> None:
    root = history.root
    rows = duckdb.sql(
        "SELECT c.serial, count(DISTINCT c.incident_id) AS incidents, list(DISTINCT i.started_at::DATE ORDER BY "
        "i.started_at::DATE) AS dates FROM read_parquet($culprits) c JOIN read_parquet($incidents) i "
        "USING (incident_id) WHERE c.uuid = 'GPU-7e8f9a0b-1111-2222-3333-444455557777' GROUP BY ALL",
        params={"culprits": str(root / "culprits" / "*.parquet"),
                "incidents": str(root / "incidents" / "*.parquet")}).fetchall()
    assert [(s, n, [d.isoformat() for d in dates]) for s, n, dates in rows] == [
        (ECC_SERIAL, 2, ["2025-03-10", "2025-06-02"])]
    xids = duckdb.sql("SELECT DISTINCT xid FROM read_parquet($events) WHERE kind = 'xid' ORDER BY xid",
                      params={"events": str(root / "events" / "*.parquet")}).fetchall()
    assert (79,) in xids and (94,) in xids
    assert not list(root.rglob(".*part*"))  # no temporary file left behind


@pytest.mark.parametrize("make", ["missing", "file"])
def test_a_history_folder_that_is_not_one_is_refused_in_one_line(tmp_path: Path, make: str) -> None:
    target = tmp_path / "h"
    if make == "file":
        target.write_text("not a folder\n", encoding="utf-8")
    with pytest.raises(HistoryError, match=str(target)):
        History.open(target)


def test_a_history_without_its_parent_folder_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match="does not exist"):
        History.open(tmp_path / "no" / "such", create=True)


def test_an_unreadable_parquet_file_is_one_error(tmp_path: Path) -> None:
    catalog = History.open(tmp_path / "h", create=True)
    (catalog.root / "incidents").mkdir()
    (catalog.root / "incidents" / "broken.parquet").write_bytes(b"this is no parquet file")
    with pytest.raises(HistoryError, match="cannot be read"):
        catalog.offenders()


@pytest.mark.parametrize(("a", "b", "same"), [
    (dict(uuid="GPU-1", serial="S1"), dict(uuid="gpu-1", serial="S2"), True),   # the UUID decides
    (dict(uuid="GPU-1", serial="S1"), dict(uuid="GPU-2", serial="S1"), False),  # one board serial, two GPUs
    (dict(serial="S1"), dict(uuid="GPU-2", serial="S1"), True),                 # no UUID on one side: serial
    (dict(host="n2"), dict(host="n1"), False),                                  # no identity: slot, other host
    (dict(), dict(), True),                                                     # no identity: same slot
    (dict(serial="S9"), dict(), False),                                         # a known GPU vs an unknown one
])
def test_same_gpu(a: dict, b: dict, same: bool) -> None:
    def culprit(**kw: str) -> Culprit:
        return Culprit(**{"cause": "x", "layer": None, "score": None, "marked": False, "host": "n1",
                          "gpu": "0000:5d:00.0", **kw})

    assert culprit(**a).same_gpu(culprit(**b)) is same
    assert culprit(**b).same_gpu(culprit(**a)) is same


def test_a_culprit_gpu_takes_its_serial_from_a_listing_that_names_it_by_uuid(tmp_path: Path) -> None:
    """``nvidia-smi --query-gpu=uuid,serial,name`` without pci.bus_id keys its row by UUID; the kernel ties
    that UUID to the bus id the analysis names. The culprit's serial and name come from the store's binding."""
    uuid = "GPU-4f0e1b9a-7c2d-11ee-8c90-0242ac120009"
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(None)
        writer.add_all([GpuInventory(gpu="0000:9b:00.0", host="n1", uuid=uuid),
                        GpuInventory(gpu=uuid, host="n1", uuid=uuid, serial=ECC_SERIAL, name="NVIDIA A100-SXM4-80GB")])
        writer.flush()
        record = record_of(bundle, {"hypotheses": [{"cause": "gpu_ecc_uncorrectable", "layer": "hardware",
                                                    "score": 0.9, "host": "n1", "gpu": "0000:9B:00.0"}]},
                           events=False)
    culprit = record.culprits[0]
    assert (culprit.gpu, culprit.uuid, culprit.serial, culprit.gpu_name) == (
        "0000:9b:00.0", uuid, ECC_SERIAL, "NVIDIA A100-SXM4-80GB")
