"""The baseline from what ``gpuwb capture`` records: NVML documents made by the collector through the real
NVML values of tests/data/nvml (an RTX 4090 pair, one idle at Gen1 and one busy at Gen4; an 8x A100 with 12
NVLinks each), changed the way a later capture of a degraded node would answer."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from collectors.nvml.adapter import NvmlAdapter
from collectors.nvml.recording import record
from tests.conftest import run_cli
from tests.nvml_replay import FakeNvml, recording

DGX_A100_BUSES = ("07", "0f", "47", "4e", "87", "90", "b7", "bd")
"""PCI buses of a DGX A100's eight GPUs: the A100 recording has no nvmlDeviceGetPciInfo, real NVML always answers it."""


def bundle_of(tmp_path: Path, name: str, rec: dict[str, Any]) -> Path:
    """Record ``rec`` through the NVML collector as a capture does, then ingest the document."""
    doc = record(NvmlAdapter(FakeNvml(rec)), samples=2, interval=0.01, host="gpu-node")
    folder = tmp_path / name / "gpu-node"
    folder.mkdir(parents=True)
    (folder / "nvml.json").write_text(json.dumps(doc))
    bundle = tmp_path / f"{name}.duckdb"
    code, out, err = run_cli("ingest", bundle, tmp_path / name)
    assert code == 0, err or out
    return bundle


def save(tmp_path: Path, bundle: Path) -> Path:
    path = tmp_path / "gpu-node.baseline.json"
    assert run_cli("baseline", "save", bundle, "-o", path)[0] == 0
    return path


def drift(bundle: Path, base: Path) -> list[dict]:
    code, out, _ = run_cli("baseline", "diff", bundle, base, "--json")
    assert code in (0, 1)
    return json.loads(out)["drift"]


def test_nvml_link_driver_and_power_limit_drift(tmp_path: Path) -> None:
    rec = recording("replay_rtx4090_sw_power_cap.json")
    base = save(tmp_path, bundle_of(tmp_path, "accepted", rec))
    gpus = json.loads(base.read_text())["hosts"]["gpu-node"]["gpus"]
    assert (gpus["0000:23:00.0"]["pcie_gen"], gpus["0000:23:00.0"]["pcie_width"]) == (4, 16)
    assert gpus["0000:23:00.0"]["pcie_gen_under_load"] is True
    assert (gpus["0000:01:00.0"]["pcie_gen"], gpus["0000:01:00.0"]["pcie_gen_under_load"]) == (1, False)  # idle
    assert drift(bundle_of(tmp_path, "same", rec), base) == []
    later = copy.deepcopy(rec)
    later["system"]["nvmlSystemGetDriverVersion"] = "535.183.01"
    later["devices"][1].update({"nvmlDeviceGetCurrPcieLinkGeneration": 3, "nvmlDeviceGetCurrPcieLinkWidth": 8})
    later["devices"][0].update({"nvmlDeviceGetPowerManagementLimit": 300000, "nvmlDeviceGetEnforcedPowerLimit": 300000})
    later["devices"][0]["nvmlDeviceGetCurrPcieLinkWidth"] = 4  # idle at acceptance: its width only
    assert [(d["kind"], d["message"]) for d in drift(bundle_of(tmp_path, "later", later), base)] == [
        ("pcie_link_down", "0000:01:00.0 runs PCIe x4 (idle: generation not comparable); accepted at x16"),
        ("pcie_link_down", "0000:23:00.0 runs PCIe Gen3 x8; accepted at Gen4 x16"),
        ("version_changed", "gpu-node runs driver 535.183.01; accepted at 535.154.05"),
        ("power_limit_changed", "0000:01:00.0 runs at a 300 W power limit; accepted at 450 W")]


def test_nvml_nvlink_links_down(tmp_path: Path) -> None:
    rec = recording("replay_8xa100_nvlink.json")
    for device, bus in zip(rec["devices"], DGX_A100_BUSES):
        device["nvmlDeviceGetPciInfo"] = {"busId": f"00000000:{bus.upper()}:00.0"}
    base = save(tmp_path, bundle_of(tmp_path, "accepted", rec))
    gpus = json.loads(base.read_text())["hosts"]["gpu-node"]["gpus"]
    assert len(gpus) == 8 and {(g["nvlink_links"], g["nvlink_active"]) for g in gpus.values()} == {(12, 12)}
    later = copy.deepcopy(rec)
    later["devices"][2]["nvlinks"]["active"] = [n for n in range(12) if n not in (3, 7)]
    assert [(d["kind"], d["gpu"], d["message"]) for d in drift(bundle_of(tmp_path, "later", later), base)] == [
        ("nvlink_down", "0000:47:00.0", "0000:47:00.0 has 10 of 12 NVLink links up; accepted with 12")]
