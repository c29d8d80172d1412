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


def _gpu_points(bundle: Bundle, sha: str, ts: datetime, values: dict[str, float], gpu: str) -> None:
    writer = bundle.writer(sha)
    for name, value in values.items():
        writer.add(SeriesPoint(ts=ts, name=name, value=value, host="g", labels={"gpu": gpu, "class": "error"}))
    writer.flush()


def test_gpu_counters_that_rose_between_captures_give_the_gpu_readers_events(tmp_path: Path) -> None:
    """A GPU's counter series (collectors/nvml/counters.py) go through the same derivation: an NVLink or
    uncorrectable-ECC rise is the nvlink_error / ecc_uncorrectable the checks read, with HealthTracker's
    attrs; corrected ECC and PCIe replays rising make no event; nothing GPU-side is a counter_rising."""
    t0, t1 = datetime(2026, 11, 28, 10, tzinfo=timezone.utc), datetime(2026, 11, 28, 10, 5, tzinfo=timezone.utc)
    pci = "0000:07:00.0"
    before = {"DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 2.0, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0.0,
              "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0.0, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 1.0,
              "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3.0, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 5.0}
    after = {**before, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 9.0,
             "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 1.0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2.0,
             "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 3.0}
    with Bundle.create(tmp_path / "g.duckdb") as bundle:
        _gpu_points(bundle, "a" * 64, t0, before, pci)
        _gpu_points(bundle, "b" * 64, t1, after, pci)
        _gpu_points(bundle, "c" * 64, t0, {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 1.0,
                                           "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 1.0}, "index:3")
        _gpu_points(bundle, "d" * 64, t1, {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 8.0,
                                           "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 90.0}, "index:3")
        events = {e.kind: e for e in counter_deltas.derive(bundle.con)}
    assert set(events) == {"nvlink_error", "ecc_uncorrectable"}
    nvlink, ecc = events["nvlink_error"], events["ecc_uncorrectable"]
    assert nvlink.gpu == pci and nvlink.layer == "hardware" and nvlink.ts == t1.replace(tzinfo=None)
    assert nvlink.attrs == {"total": 10, "links": {}}
    assert "crc_flit +7" in nvlink.message and "replay +1" in nvlink.message
    assert ecc.attrs == {"volatile": 2, "aggregate": 3} and ecc.layer == "gpu" and ecc.severity == "error"


def test_a_gpu_known_by_index_keeps_its_key_in_attrs(tmp_path: Path) -> None:
    t0, t1 = datetime(2026, 11, 28, 10, tzinfo=timezone.utc), datetime(2026, 11, 28, 10, 5, tzinfo=timezone.utc)
    with Bundle.create(tmp_path / "k.duckdb") as bundle:
        _gpu_points(bundle, "a" * 64, t0, {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 0.0}, "index:2")
        _gpu_points(bundle, "b" * 64, t1, {"DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 4.0}, "index:2")
        (event,) = counter_deltas.derive(bundle.con)
    assert event.gpu is None and event.attrs == {"total": 4, "links": {}, "gpu_key": "index:2"}
