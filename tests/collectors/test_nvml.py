"""NVML collector: capture through a fake pynvml that replays real recorded values, the derived
events, NVML errors turned into nulls with reasons, the hard timeout on a hanging NVML, and the
real no-driver path of this machine."""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
import time
from typing import Any

import pynvml
import pytest

from collectors import nvml
from collectors.base import Event, GpuInventory, GpuSample, ParseContext, SeriesPoint, Skipped
from collectors.nvml.adapter import NvmlAdapter
from collectors.nvml.recording import record
from collectors.nvml.shared import decode_reasons
from tests.conftest import run_cli
from tests.nvml_replay import FakeNvml, nvml_error, recording
from workbench.capture.live import capture
from workbench.store.bundle import Bundle


def replay(rec: dict[str, Any], samples: int = 3) -> tuple[dict[str, Any], list]:
    """Record through the adapter as capture does, then parse the document as ingest does."""
    doc = record(NvmlAdapter(FakeNvml(rec)), samples=samples, interval=0.01, host="gpu-node")
    data = json.dumps(doc).encode()
    rows = list(nvml.parse("nvml_json", io.BytesIO(data), ParseContext(host="gpu-node")))
    return doc, rows


def of(rows: list, kind: type) -> list:
    return [r for r in rows if isinstance(r, kind)]


def events(rows: list, kind: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == kind]


def test_rtx4090_replay_gives_inventory_samples_and_sw_power_cap_throttle():
    doc, rows = replay(recording("replay_rtx4090_sw_power_cap.json"))
    assert doc["format"] == nvml.FORMAT and len(doc["samples"]) == 3
    inv = {i.gpu: i for i in of(rows, GpuInventory)}
    assert set(inv) == {"0000:01:00.0", "0000:23:00.0"}
    idle, busy = inv["0000:01:00.0"], inv["0000:23:00.0"]
    assert idle.uuid == "GPU-370465f5-30e0-6877-b85c-16729f41b90f" and idle.index == 0
    assert busy.name == "NVIDIA GeForce RTX 4090" and busy.uuid == "GPU-8f4d1755-9c8a-3a19-b71e-c190b3801dec"
    assert (busy.driver, busy.cuda, busy.vbios, busy.persistence) == ("535.154.05", "12.2", "95.02.18.C0.09", "Enabled")
    assert (busy.power_limit_w, busy.pcie_max_gen, busy.pcie_max_width, busy.memory_total_mib) == (450.0, 4, 16, 24564)
    assert busy.serial is None and busy.extra["unsupported"]["serial"] == "NotSupported"
    assert busy.mig_mode is None and busy.extra["ecc_mode"] == "Disabled"

    samples = of(rows, GpuSample)
    assert len(samples) == 6
    hot = [s for s in samples if s.gpu == "0000:23:00.0"]
    assert {(s.power_w, s.temp_c, s.util_gpu, s.util_mem, s.mem_used_mib) for s in hot} == {(445.38, 72, 97, 35, 21608)}
    assert all(s.throttle_reasons == ["sw_power_cap"] and s.extra["pstate"] == "P2" for s in hot)
    assert all(s.sm_clock_mhz is None and s.extra["unsupported"]["sm_clock_mhz"] == "NotSupported" for s in hot)
    cold = [s for s in samples if s.gpu == "0000:01:00.0"]
    assert all(s.throttle_reasons == ["gpu_idle"] and (s.pcie_gen, s.pcie_width) == (1, 16) for s in cold)
    assert all(s.ecc_volatile_uncorrected is None and s.extra["unsupported"]["ecc_volatile_uncorrected"]
               == "NotSupported" for s in cold)
    assert all(s.remap_pending is False and s.remap_failure is False for s in samples)

    throttle = events(rows, "gpu_throttle")
    assert len(throttle) == 1, "one event per episode, not one per sample"
    assert throttle[0].gpu == "0000:23:00.0" and throttle[0].attrs["reasons"] == ["sw_power_cap"]
    assert throttle[0].attrs["util_gpu"] == 97 and throttle[0].attrs["idle"] is False
    assert throttle[0].layer == "hardware" and throttle[0].ts is not None
    assert not events(rows, "pcie_link_degraded"), "an idle GPU at Gen1 of Gen4 is power saving, not a fault"


def test_v100_hw_power_brake_replay_through_the_old_throttle_function():
    doc, rows = replay(recording("replay_v100_hw_power_brake.json"), samples=2)
    assert doc["unsupported"]["driver"] == "NotSupported"
    sample = of(rows, GpuSample)[0]
    assert sample.gpu == "index:0" and sample.sm_clock_mhz == 382 and sample.mem_clock_mhz == 877
    assert sample.throttle_reasons == ["hw_slowdown", "hw_power_brake"]
    (event,) = events(rows, "gpu_throttle")
    assert event.attrs["reasons"] == ["hw_power_brake", "hw_slowdown"]
    inv = of(rows, GpuInventory)[0]
    assert inv.name == "Tesla V100-SXM2-32GB" and inv.driver is None


def test_8xa100_nvlink_all_active_and_xid_from_the_event_set():
    doc, rows = replay(recording("replay_8xa100_nvlink.json"))
    inv = of(rows, GpuInventory)
    assert len(inv) == 8 and {i.name for i in inv} == {"NVIDIA A100-SXM4-80GB"}
    assert all(s.extra["nvlink_links"] == 12 and s.nvlink_errors is None for s in of(rows, GpuSample))
    assert not events(rows, "nvlink_down") and not events(rows, "nvlink_error")
    (xid,) = events(rows, "xid")
    assert xid.attrs["xid"] == 119 and xid.attrs["gpu_index"] == 1 and xid.attrs["via"] == "nvml_event_set"
    assert doc["events"][0]["index"] == 1


def test_a_link_down_and_link_errors_on_one_a100():
    rec = recording("replay_8xa100_nvlink.json")
    # Scenario built on the real 8xA100 layout: GPU 2 lost link 3, and link 5 counts recovery errors.
    rec["devices"][2]["nvlinks"]["active"] = [n for n in range(12) if n != 3]
    rec["devices"][2]["nvlinks"]["errors"] = {"5": {str(pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 4}}
    _, rows = replay(rec)
    (down,) = events(rows, "nvlink_down")
    assert down.gpu is None, "no PCI id in this recording: the event's gpu stays null, the key goes to attrs"
    assert down.attrs == {"links": [3], "active": 11, "expected": 12,
                          "gpu_key": "GPU-483e6bb6-bb11-8916-e22f-d1d69abbafaa"}
    (err,) = events(rows, "nvlink_error")
    assert err.attrs["total"] == 4 and err.attrs["links"] == {"5": {"recovery": 4}}


def test_ecc_remap_and_pcie_width_events_from_nonzero_counters():
    rec = recording("replay_rtx4090_sw_power_cap.json")
    busy = rec["devices"][1]
    # Counter values injected into the real RTX 4090 recording (the corpus has no non-zero NVML case).
    busy["nvmlDeviceGetTotalEccErrors(1,0)"] = {"seq": [0, 2, 2]}
    busy["nvmlDeviceGetTotalEccErrors(1,1)"] = 2
    busy["nvmlDeviceGetRemappedRows"] = [0, 2, 1, 0]
    busy["nvmlDeviceGetRetiredPagesPendingStatus"] = 1
    busy["nvmlDeviceGetCurrPcieLinkWidth"] = 8
    _, rows = replay(rec)
    ecc = events(rows, "ecc_uncorrectable")
    assert [e.attrs for e in ecc] == [{"volatile": 0, "aggregate": 2}, {"volatile": 2, "aggregate": 2}]
    assert ecc[0].layer == "gpu" and ecc[0].severity == "error"
    (remap,) = events(rows, "row_remap_pending")
    assert remap.attrs == {"correctable": 0, "uncorrectable": 2} and remap.layer == "hardware"
    assert len(events(rows, "retired_pages_pending")) == 1 and not events(rows, "row_remap_failure")
    (pcie,) = events(rows, "pcie_link_degraded")
    assert pcie.attrs["reason"] == "width" and (pcie.attrs["width"], pcie.attrs["max_width"]) == (8, 16)


def test_gen_below_max_is_degraded_only_under_load():
    rec = recording("replay_rtx4090_sw_power_cap.json")
    rec["devices"][1]["nvmlDeviceGetCurrPcieLinkGeneration"] = 3
    _, rows = replay(rec)
    (pcie,) = events(rows, "pcie_link_degraded")
    assert pcie.gpu == "0000:23:00.0" and pcie.attrs["reason"] == "gen" and pcie.attrs["util_gpu"] == 97


def test_every_nvml_error_becomes_null_with_its_reason():
    rec = recording("replay_rtx4090_sw_power_cap.json")
    for dev in rec["devices"]:
        for key in list(dev):
            dev[key] = {"error": "NoPermission"}
    rec["system"] = {"nvmlSystemGetDriverVersion": {"error": "Unknown"}}
    doc, rows = replay(rec, samples=1)
    reading = doc["samples"][0]["gpus"][0]
    assert reading["power_mw"] is None and reading["unsupported"]["power_mw"] == "NoPermission"
    assert reading["unsupported"]["nvlink"] == "NoPermission"
    assert doc["unsupported"]["driver"] == "Unknown"
    samples = of(rows, GpuSample)
    assert len(samples) == 2 and all(s.power_w is None and s.throttle_reasons is None for s in samples)
    assert not [r for r in rows if isinstance(r, Event)]


def test_init_failures_map_to_coverage_reasons():
    class NoLib:
        NVMLError = pynvml.NVMLError

        def nvmlInit(self):
            raise nvml_error("LibraryNotFound")

    class NoDriver(NoLib):
        def nvmlInit(self):
            raise nvml_error("DriverNotLoaded")

    assert NvmlAdapter(NoLib()).init() == "unavailable: NVML library not found"
    assert NvmlAdapter(NoDriver()).init() == "unavailable: NVIDIA driver not loaded"


def test_decode_reasons_names_every_bit():
    assert decode_reasons(0x1FF) == ["gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown",
                                          "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake",
                                          "display_clocks"]
    assert decode_reasons(0x1000) == ["0x1000"] and decode_reasons(None) is None


def test_fake_nvml_capture_through_the_cli_shows_ok_coverage(tmp_path, monkeypatch):
    fake = FakeNvml(recording("replay_rtx4090_sw_power_cap.json"))
    monkeypatch.setattr(nvml, "load_nvml", lambda: fake)
    out = tmp_path / "fake.duckdb"
    code, stdout, stderr = run_cli("capture", "-o", out, "--only", "nvml", "--only", "host",
                                   "--nvml-samples", "2", "--nvml-interval", "0.05")
    assert code == 0, stderr
    coverage_line = next(line for line in stdout.splitlines() if line.startswith("nvml"))
    assert " ok " in coverage_line
    with Bundle.open(out) as bundle:
        counts = dict(bundle.con.execute(
            "SELECT 'inv', count(*) FROM gpu_inventory UNION ALL SELECT 'samples', count(*) FROM gpu_sample "
            "UNION ALL SELECT 'throttle', count(*) FROM event WHERE kind = 'gpu_throttle'").fetchall())
        kinds = [r[0] for r in bundle.con.execute("SELECT kind FROM artifact WHERE collector = 'nvml'").fetchall()]
    assert counts == {"inv": 2, "samples": 4, "throttle": 1}
    assert kinds == ["nvml_json"]


def test_hanging_nvml_is_cut_off_while_host_completes(tmp_path, monkeypatch):
    fake = FakeNvml(recording("replay_rtx4090_sw_power_cap.json"), hang_on="nvmlDeviceGetHandleByIndex")
    monkeypatch.setattr(nvml, "load_nvml", lambda: fake)
    began = time.monotonic()
    path, outcomes, complete = capture(tmp_path / "hang.duckdb", only=["nvml", "host"],
                                       options={"timeout_nvml": 2, "nvml_samples": 2, "nvml_interval": 0.05})
    elapsed = time.monotonic() - began
    status = {o.name: o for o in outcomes}
    assert status["nvml"].status == "timeout" and status["host"].status == "ok"
    assert complete and elapsed < 20
    with Bundle.open(path) as bundle:
        coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
        assert coverage == {"nvml": "timeout", "host": "ok"}
        assert bundle.verify() == []


def _nvml_library_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_real_capture_on_this_machine(tmp_path):
    """The user's command on this host. Without a driver, pynvml raises NVMLError_LibraryNotFound and the
    coverage says so; on a GPU host the same command records the GPUs."""
    out = tmp_path / "x.duckdb"
    proc = subprocess.run([sys.executable, "-m", "workbench.cli", "capture", "-o", str(out), "--only", "nvml",
                           "--only", "host", "--nvml-samples", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(out) as bundle:
        rows = {r["collector"]: r for r in bundle.coverage()}
        inventory = bundle.con.execute("SELECT count(*) FROM gpu_inventory").fetchall()[0][0]
    if _nvml_library_present():
        assert rows["nvml"]["status"] in ("ok", "partial") and inventory > 0
    else:
        assert rows["nvml"]["status"] == "unavailable"
        assert rows["nvml"]["reason"] == "unavailable: NVML library not found"
        assert "unavailable: NVML library not found" in proc.stdout
        assert rows["host"]["status"] == "ok" and inventory == 0


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b'{"devices": 3}', b'{"devices": [1, {"index": "x"}]}',
                                  b'{"devices": [], "samples": [{"gpus": [{"ecc": 5}]}]}',
                                  b"\xff\xfe\x00" * 100])
def test_parse_never_raises_on_bad_documents(data):
    rows = list(nvml.parse("nvml_json", io.BytesIO(data), ParseContext(host="h")))
    assert all(isinstance(r, (Skipped, GpuInventory, GpuSample, Event)) for r in rows)


def test_capture_document_is_stable_json_with_a_format_tag():
    doc, _ = replay(recording("replay_rtx4090_sw_power_cap.json"), samples=1)
    again = json.loads(json.dumps(doc))
    assert again == copy.deepcopy(doc)
    assert nvml.sniff("x.json", json.dumps(doc, indent=1)[:4096]) == {"nvml_json": 95}


def test_counters_are_written_as_series_under_dcgm_exporter_names():
    """NVLink, PCIe-replay and ECC counters become series points (collectors/nvml/counters.py), one per
    reading, so counter_deltas sees their growth and rules/alerts.yaml's series names match."""
    rec = recording("replay_rtx4090_sw_power_cap.json")
    busy = rec["devices"][1]
    busy["nvmlDeviceGetTotalEccErrors(1,0)"] = {"seq": [0, 2, 2]}
    busy["nvmlDeviceGetPcieReplayCounter"] = {"seq": [1, 1, 7]}
    _, rows = replay(rec)
    points = [p for p in rows if isinstance(p, SeriesPoint)]
    samples = of(rows, GpuSample)
    busy_key = samples[1].gpu
    dbe = [p.value for p in points if p.name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL" and p.labels["gpu"] == busy_key]
    assert dbe == [0.0, 2.0, 2.0]
    replays = [p.value for p in points if p.name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" and p.labels["gpu"] == busy_key]
    assert len(replays) == 3 and (replays[0], replays[-1]) == (1.0, 7.0)
    assert all(p.labels["class"] == "error" and p.host == "gpu-node" and p.ts is not None for p in points)
    assert {p.ts for p in points} == {s.ts for s in samples}


def test_nvlink_counters_are_summed_per_kind_over_links():
    rec = recording("replay_8xa100_nvlink.json")
    rec["devices"][2]["nvlinks"]["errors"] = {"5": {str(pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 4},
                                              "7": {str(pynvml.NVML_NVLINK_ERROR_DL_RECOVERY): 1}}
    _, rows = replay(rec)
    points = {(p.labels["gpu"], p.name): p.value for p in rows if isinstance(p, SeriesPoint)}
    (err,) = events(rows, "nvlink_error")
    key = err.attrs["gpu_key"]
    assert points[(key, "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")] == 5.0
    assert points[(key, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL")] == 0.0
    assert points[(key, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL")] == 0.0
    assert not [k for k in points if k[0] != key and "NVLINK" in k[1]], "links whose counters NVML refused: no series"
