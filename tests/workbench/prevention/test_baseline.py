"""Accepted baseline and drift: a node saved at acceptance (nvidia-smi -q, nvlink -s, dcgmi diag of an
H100 node, tests/data/baseline/accepted) compared with later captures of the same node, each a copy of
those files with the one change a real incident would show."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from workbench.prevention import baseline
from workbench.store.bundle import Bundle

ACCEPTED = ROOT / "tests" / "data" / "baseline" / "accepted"
SECOND_GPU = "GPU 00000000:5D:00.0"
LATER = {"Timestamp                                 : Mon Nov  2 10:14:07 2026":
         "Timestamp                                 : Thu Nov 26 03:41:55 2026",
         "Gpu                               : 98 %": "Gpu                               : 91 %",
         "Power Draw                        : 612.48 W": "Power Draw                        : 588.10 W",
         "GPU Current Temp                  : 61 C": "GPU Current Temp                  : 66 C"}
"""What differs between two healthy captures of one node: the time and the readings, never the configuration."""


def capture(tmp_path: Path, name: str, *, q: dict[str, str] | None = None, second_gpu: dict[str, str] | None = None,
            files: dict[str, str | None] | None = None) -> Path:
    """A later capture of node07: the accepted files with ``q`` replaced in the whole -q text,
    ``second_gpu`` replaced in the 0000:5d:00.0 block only, and ``files`` replacing (None: dropping) files."""
    evidence = tmp_path / name
    shutil.copytree(ACCEPTED, evidence)
    node = evidence / "node07"
    text = (node / "nvidia-smi-q.txt").read_text()
    for old, new in {**LATER, **(q or {})}.items():
        assert old in text, old
        text = text.replace(old, new)
    head, block = text.split(SECOND_GPU)
    for old, new in (second_gpu or {}).items():
        assert old in block, old
        block = block.replace(old, new)
    (node / "nvidia-smi-q.txt").write_text(head + SECOND_GPU + block)
    for file, content in (files or {}).items():
        if content is None:
            (node / file).unlink()
        else:
            (node / file).write_text(content)
    bundle = tmp_path / f"{name}.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence)
    assert code == 0, err or out
    return bundle


@pytest.fixture
def accepted(tmp_path: Path) -> Path:
    """The baseline file saved from the acceptance capture."""
    bundle = tmp_path / "acceptance.duckdb"
    assert run_cli("ingest", bundle, ACCEPTED)[0] == 0
    path = tmp_path / "node07.baseline.json"
    code, out, err = run_cli("baseline", "save", bundle, "-o", path)
    assert code == 0, err
    assert "1 host(s), 2 GPU(s)" in out
    return path


def diff(bundle: Path, base: Path) -> tuple[int, dict]:
    code, out, err = run_cli("baseline", "diff", bundle, base, "--json")
    assert err == ""
    return code, json.loads(out)


def test_the_baseline_keeps_what_acceptance_showed(accepted: Path) -> None:
    doc = json.loads(accepted.read_text())
    assert (doc["format"], doc["version"]) == ("gpuwb-baseline", baseline.VERSION)
    node = doc["hosts"]["node07"]
    assert node["versions"] == {"cuda": "12.2", "dcgm": "3.3.5", "driver": "535.129.03", "fabricmanager": "535.129.03"}
    assert node["dcgm_diag"] == {"diagnostic": "pass", "memory": "pass", "pcie": "pass", "software": "pass",
                                 "targeted_stress": "pass"}
    gpu = node["gpus"]["0000:5d:00.0"]
    assert (gpu["pcie_gen"], gpu["pcie_width"], gpu["pcie_gen_under_load"]) == (5, 16, True)
    assert (gpu["nvlink_links"], gpu["nvlink_active"], gpu["nvlink_speed_gbps"]) == (18, 18, 26.562)
    assert (gpu["serial"], gpu["vbios"], gpu["ecc_mode"], gpu["power_limit_w"]) == (
        "1652923011492", "96.00.89.00.01", "Enabled", 700.0)
    assert gpu["applications_clocks_mhz"] == {"graphics": 1755.0, "memory": 2619.0}
    assert baseline.load(accepted) == doc


def test_a_degraded_link_and_a_changed_driver_are_the_drift(tmp_path: Path, accepted: Path) -> None:
    later = capture(tmp_path, "degraded",
                    q={"Driver Version                            : 535.129.03":
                       "Driver Version                            : 535.183.01",
                       "GSP Firmware Version                  : 535.129.03":
                       "GSP Firmware Version                  : 535.183.01"},
                    second_gpu={"Current                   : 5": "Current                   : 4",
                                "Device Current            : 5": "Device Current            : 4",
                                "Current                   : 16x": "Current                   : 8x"},
                    files={"dcgmi-diag-r3.txt": None})
    code, result = diff(later, accepted)
    assert code == 1
    assert [(d["kind"], d["severity"], d["host"], d["gpu"], d["message"]) for d in result["drift"]] == [
        ("pcie_link_down", "error", "node07", "0000:5d:00.0", "0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16"),
        ("version_changed", "warning", "node07", None, "node07 runs driver 535.183.01; accepted at 535.129.03")]
    assert [d["supports"] for d in result["drift"]] == ["pcie_link_degraded", "driver_stack_mismatch"]
    assert result["unchecked"] == ["node07: dcgm version not seen", "node07: no dcgmi diag run in this bundle"]
    code, out, _ = run_cli("baseline", "diff", later, accepted)
    assert code == 1 and "0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16" in out
    assert out.rstrip().endswith("2 drift(s): 1 error, 1 warning")


def test_an_unchanged_node_flags_nothing(tmp_path: Path, accepted: Path) -> None:
    code, result = diff(capture(tmp_path, "unchanged"), accepted)
    assert (code, result["drift"], result["unchecked"], result["hosts"]) == (0, [], [], ["node07"])


def test_an_idle_gpu_at_gen1_is_not_a_degraded_link(tmp_path: Path, accepted: Path) -> None:
    idle = {"Current                   : 5": "Current                   : 1",
            "Device Current            : 5": "Device Current            : 1",
            "Performance State                     : P0": "Performance State                     : P8",
            "Gpu                               : 91 %": "Gpu                               : 0 %"}
    code, result = diff(capture(tmp_path, "idle", second_gpu=idle), accepted)
    assert (code, result["drift"]) == (0, [])
    narrow = capture(tmp_path, "idle_narrow", second_gpu={**idle, "Current                   : 16x":
                                                           "Current                   : 8x"})
    (d,) = diff(narrow, accepted)[1]["drift"]
    assert d["message"] == "0000:5d:00.0 runs PCIe x8 (idle: generation not comparable); accepted at Gen5 x16"


def test_a_swapped_gpu_at_the_same_bus_id_is_flagged(tmp_path: Path, accepted: Path) -> None:
    old_uuid, new_uuid = "GPU-9e03a5c2-71b4-d8f6-3a29-c58e104b7d63", "GPU-0d6f7a21-93c8-4be2-a1f0-6b2e94c3d815"
    nvlink = (ACCEPTED / "node07" / "nvidia-smi-nvlink-s.txt").read_text().replace(old_uuid, new_uuid)
    later = capture(tmp_path, "swapped", second_gpu={"1652923011492": "1652923017720", old_uuid: new_uuid},
                    files={"nvidia-smi-nvlink-s.txt": nvlink})
    code, result = diff(later, accepted)
    assert code == 1
    assert [(d["kind"], d["gpu"], d["accepted"], d["now"]) for d in result["drift"]] == [
        ("gpu_swapped", "0000:5d:00.0", "1652923011492", "1652923017720")]
    assert result["drift"][0]["message"] == \
        "0000:5d:00.0 holds another GPU (serial 1652923017720); accepted with serial 1652923011492"


def test_links_down_a_failing_diag_and_a_missing_gpu(tmp_path: Path, accepted: Path) -> None:
    nvlink = (ACCEPTED / "node07" / "nvidia-smi-nvlink-s.txt").read_text()
    head, gpu1 = nvlink.split("GPU 1:")
    gpu1 = re.sub(r"Link (3|11): 26\.562 GB/s", r"Link \1: <inactive>", gpu1)
    diag = (ACCEPTED / "node07" / "dcgmi-diag-r3.txt").read_text()
    diag = diag.replace("| pcie                      | Pass       ", "| pcie                      | Fail       ", 1)
    later = capture(tmp_path, "links", files={"nvidia-smi-nvlink-s.txt": head + "GPU 1:" + gpu1,
                                              "dcgmi-diag-r3.txt": diag})
    _, result = diff(later, accepted)
    assert [(d["kind"], d["gpu"], d["what"], d["message"]) for d in result["drift"]] == [
        ("dcgm_diag_failing", None, "pcie", "dcgmi diag pcie now fails on node07; accepted: pass"),
        ("nvlink_down", "0000:5d:00.0", "nvlink", "0000:5d:00.0 has 16 of 18 NVLink links up; accepted with 18")]
    q = (ACCEPTED / "node07" / "nvidia-smi-q.txt").read_text().split(SECOND_GPU)[0]
    lost = capture(tmp_path, "lost", files={"nvidia-smi-q.txt": q, "nvidia-smi-nvlink-s.txt": head})
    (d,) = diff(lost, accepted)[1]["drift"]
    assert (d["kind"], d["severity"], d["message"]) == (
        "gpu_missing", "error", "0000:5d:00.0 not seen; accepted with NVIDIA H100 80GB HBM3 serial 1652923011492")


def test_another_host_is_unchecked_not_drift(tmp_path: Path, accepted: Path) -> None:
    evidence = tmp_path / "other"
    shutil.copytree(ACCEPTED / "node07", evidence / "node08")
    bundle = tmp_path / "other.duckdb"
    assert run_cli("ingest", bundle, evidence)[0] == 0
    code, result = diff(bundle, accepted)
    assert (code, result["drift"], result["hosts"], result["unchecked"]) == (0, [], [], ["node07: not in this bundle"])


@pytest.mark.parametrize(("content", "message"), [
    (b"not json at all", "is not JSON"),
    (b"\xbe\xef\x00", "is not a gpuwb baseline (not UTF-8 text)"),
    (json.dumps({"format": "something-else", "version": 1, "hosts": {}}).encode(), "is not a gpuwb baseline"),
    (json.dumps({"format": "gpuwb-baseline", "version": 99, "hosts": {}}).encode(), "version 99; this gpuwb reads"),
    (json.dumps({"format": "gpuwb-baseline", "version": "1", "hosts": {}}).encode(), "has no valid version"),
    (json.dumps({"format": "gpuwb-baseline", "version": 1, "hosts": {"n": {"gpus": []}}}).encode(), "is malformed"),
    (json.dumps({"format": "gpuwb-baseline", "version": 1, "hosts": {"n": {"versions": ["535"]}}}).encode(),
     "is malformed"),
    (json.dumps({"format": "gpuwb-baseline", "version": 1,
                 "hosts": {"n": {"gpus": {"0000:5d:00.0": {"pcie_gen": "five"}}}}}).encode(), "is malformed"),
    (json.dumps({"format": "gpuwb-baseline", "version": 1,
                 "hosts": {"n": {"nccl_busbw_gbps": {"all_reduce_perf": "fast"}}}}).encode(), "is malformed"),
])
def test_a_bad_baseline_file_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, ACCEPTED)[0] == 0
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    code, out, err = run_cli("baseline", "diff", bundle, bad)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gpuwb: error: ") and message in err
    code, _, err = run_cli("baseline", "diff", bundle, tmp_path / "missing.json")
    assert code == 2 and err.startswith("gpuwb: error: cannot read baseline") and err.count("\n") == 1


def test_save_refuses_a_host_the_bundle_lacks(tmp_path: Path) -> None:
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, ACCEPTED)[0] == 0
    code, _, err = run_cli("baseline", "save", bundle, "-o", tmp_path / "x.json", "--host", "node99")
    assert code == 2 and "no GPU, version or DCGM evidence for host node99" in err
    assert not (tmp_path / "x.json").exists()
    with Bundle.open(bundle) as b:
        assert set(baseline.build(b, host="node07")["hosts"]) == {"node07"}


def degraded(tmp_path: Path) -> Path:
    return capture(tmp_path, "degraded",
                   q={"Driver Version                            : 535.129.03":
                      "Driver Version                            : 535.183.01"},
                   second_gpu={"Current                   : 5": "Current                   : 4",
                               "Current                   : 16x": "Current                   : 8x"})


def test_analyze_lists_drift_as_evidence_of_the_hypothesis_it_supports(tmp_path: Path, accepted: Path) -> None:
    later = degraded(tmp_path)
    code, out, err = run_cli("analyze", later, "--json", "--baseline", accepted)
    assert code == 0, err
    doc = json.loads(out)
    section = doc["baseline_drift"]
    assert set(section) == {"baseline", "hosts", "drift", "unchecked"}
    link = next(d for d in section["drift"] if d["kind"] == "pcie_link_down")
    hypothesis = next(h for h in doc["hypotheses"] if h["rank"] == link["hypothesis"])
    assert (hypothesis["cause"], hypothesis["host"], hypothesis["gpu"]) == ("pcie_link_degraded", "node07",
                                                                           "0000:5d:00.0")
    code, text, _ = run_cli("analyze", later, "--baseline", accepted)
    assert code == 0
    tail = text[text.index("Drift from the accepted baseline"):]
    assert f"error   node07: 0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16  (supports #{link['hypothesis']} " \
           "pcie_link_degraded)" in tail
    assert "warning node07: node07 runs driver 535.183.01; accepted at 535.129.03" in tail
    assert "baseline_drift" not in json.loads(run_cli("analyze", later, "--json")[1])
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    code, out, err = run_cli("analyze", later, "--baseline", bad)
    assert (code, out) == (2, "") and "is not a gpuwb baseline" in err


def test_a_bus_bandwidth_drop_past_ten_percent_is_drift(tmp_path: Path, accepted: Path) -> None:
    assert json.loads(accepted.read_text())["hosts"]["node07"]["nccl_busbw_gbps"] == {"all_reduce_perf": 337.591}
    run = (ACCEPTED / "node07" / "all_reduce_perf.txt").read_text()
    slower = capture(tmp_path, "slower", files={"all_reduce_perf.txt": run.replace("337.591", "171.204")})
    (d,) = diff(slower, accepted)[1]["drift"]
    assert (d["kind"], d["severity"], d["what"], d["message"]) == (
        "busbw_dropped", "error", "all_reduce_perf",
        "node07 all_reduce_perf bus bandwidth 171.204 GB/s; accepted at 337.591 GB/s (-49%)")
    noise = capture(tmp_path, "noise", files={"all_reduce_perf.txt": run.replace("337.591", "318.4")})
    assert diff(noise, accepted)[1]["drift"] == []
    gone = capture(tmp_path, "gone", files={"all_reduce_perf.txt": None})
    assert diff(gone, accepted)[1]["unchecked"] == ["node07: no all_reduce_perf run in this bundle"]


def test_the_report_has_a_drift_section_only_with_a_baseline(tmp_path: Path, accepted: Path) -> None:
    later = degraded(tmp_path)
    code, md, err = run_cli("report", later, "--baseline", accepted, "--no-verify", "--generated-at",
                            "2026-11-27T00:00:00Z")
    assert code == 0, err
    section = md[md.index("## Drift from the accepted baseline"):md.index("## Contributing factors")]
    assert "- **error** `node07`: 0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16 (supports \\#" in section
    assert "- **warning** `node07`: node07 runs driver 535.183.01; accepted at 535.129.03" in section
    plain = run_cli("report", later, "--no-verify", "--generated-at", "2026-11-27T00:00:00Z")[1]
    assert "Drift from the accepted baseline" not in plain
    assert plain == md.replace(section, "")
    html = run_cli("report", later, "--baseline", accepted, "--no-verify", "-f", "html")[1]
    assert '<a href="#baseline-drift">' in html and "0000:5d:00.0 runs PCIe Gen4 x8; accepted at Gen5 x16" in html
    doc = json.loads(run_cli("report", later, "--baseline", accepted, "--no-verify", "-f", "json")[1])
    assert [d["kind"] for d in doc["baseline_drift"]["drift"]] == ["pcie_link_down", "version_changed"]
    assert "baseline_drift" not in json.loads(run_cli("report", later, "--no-verify", "-f", "json")[1])


def test_a_changed_nvlink_topology_is_drift(tmp_path: Path, accepted: Path) -> None:
    assert json.loads(accepted.read_text())["hosts"]["node07"]["gpu_topology"] == {"GPU0-GPU1": "NV18"}
    topo = (ACCEPTED / "node07" / "nvidia-smi-topo-m.txt").read_text()
    assert topo.count("NV18") == 2
    later = capture(tmp_path, "topo", files={"nvidia-smi-topo-m.txt": topo.replace("NV18", "SYS")})
    (d,) = diff(later, accepted)[1]["drift"]
    assert (d["kind"], d["severity"], d["what"], d["supports"], d["message"]) == (
        "nvlink_topology_changed", "error", "GPU0-GPU1", "nvlink_error", "node07 GPU0 to GPU1 is SYS; accepted at NV18")
    fewer = capture(tmp_path, "fewer", files={"nvidia-smi-topo-m.txt": topo.replace("NV18", "NV12")})
    assert [d["severity"] for d in diff(fewer, accepted)[1]["drift"]] == ["error"]
    gone = capture(tmp_path, "no_topo", files={"nvidia-smi-topo-m.txt": None})
    assert diff(gone, accepted)[1]["unchecked"] == ["node07: no nvidia-smi topo -m in this bundle"]


def test_fabric_manager_drift_is_its_own(tmp_path: Path, accepted: Path) -> None:
    """A driver update is driver drift; Fabric Manager drifts only when nv-fabricmanager --version moved too."""
    later = capture(tmp_path, "fm", q={"Driver Version                            : 535.129.03":
                                       "Driver Version                            : 535.183.01"})
    assert [d["message"] for d in diff(later, accepted)[1]["drift"]] == [
        "node07 runs driver 535.183.01; accepted at 535.129.03"]
    fm = capture(tmp_path, "fm_too", q={"Driver Version                            : 535.129.03":
                                        "Driver Version                            : 535.183.01"},
                 files={"nv-fabricmanager-version.txt": "Fabric Manager version is : 535.183.01\n"})
    assert [(d["what"], d["now"]) for d in diff(fm, accepted)[1]["drift"]] == [
        ("driver", "535.183.01"), ("fabricmanager", "535.183.01")]
