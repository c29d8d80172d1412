"""nvidia-smi / DCGM parsers: every corpus/nvml file through the user's path (``gpuwb ingest`` then
``gpuwb timeline --json`` and the bundle tables), asserting what its INDEX.tsv labels say.

Each label key has one checker; a label without a checker fails the test, so a new corpus file with
a new kind of fact cannot pass unexamined. Keys that describe the reporter's context rather than
the text are listed in CONTEXT, and per-file facts the excerpt does not contain in NOT_IN_TEXT,
which the test verifies really are absent from the text."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collectors import nvidia_smi
from collectors.base import Event, GpuInventory, GpuSample, ParseContext, Skipped, normalize_pci
from collectors.framework import registry
from tests.conftest import CORPUS, corpus_files, corpus_index, ingest_timeline
from workbench.store.bundle import Bundle

FILES = corpus_files("nvml")
CONTEXT = {"tool", "resolution", "server", "log"}
"""Labels about how the text was produced or resolved, not facts in it."""
NOT_IN_TEXT = {("l4rz_v100_c4130_hw_power_brake_throttle.txt", "gpu"),
               ("ogkm_387_nvidia-smi_unknown_error_2080ti.txt", "driver"),
               ("dcgm_272_nvvs_log_retired_pages_blank_values.log", "dcgm_version")}
"""Facts the INDEX row adds from the issue's prose; the excerpt itself does not carry them."""
REASON_NAMES = {"idle": "gpu_idle", "gpu_idle": "gpu_idle", "sw power cap": "sw_power_cap",
                "hw slowdown": "hw_slowdown", "hw power brake slowdown": "hw_power_brake",
                "hw thermal slowdown": "hw_thermal",
                "sw thermal slowdown": "sw_thermal", "sync boost": "sync_boost", "none": None}


@dataclass
class View:
    """What the user sees after ingesting one file: the timeline and the GPU tables."""

    text: str
    events: list[dict[str, Any]]
    samples: list[dict[str, Any]]
    inventory: list[dict[str, Any]]
    facts: dict[str, str] = field(default_factory=dict)

    def gpus(self) -> list[str]:
        """GPU keys in the order the file shows them."""
        seen: list[str] = []
        for s in sorted(self.samples, key=lambda s: s["line"] or 0):
            if s["gpu"] not in seen:
                seen.append(s["gpu"])
        return seen

    def sample(self, gpu: int | None) -> dict[str, Any]:
        """The richest sample of the N-th GPU (or of the file's only GPU)."""
        keys = self.gpus()
        pool = [s for s in self.samples if gpu is None or s["gpu"] == keys[gpu]]
        return max(pool, key=lambda s: sum(v is not None for v in s.values()))

    def inv(self, gpu: int | None = None) -> list[dict[str, Any]]:
        return [i for i in self.inventory if gpu is None or i["gpu"] == self.gpus()[gpu]]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["kind"] == kind]


def _rows(con: Any, table: str) -> list[dict[str, Any]]:
    cur = con.execute(f"SELECT * FROM {table}")
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        item = dict(zip(cols, row))
        item["extra"] = json.loads(item["extra"]) if item.get("extra") else {}
        out.append(item)
    return out


@pytest.fixture(scope="module")
def views(tmp_path_factory) -> dict[str, View]:
    out = {}
    for path in FILES:
        bundle = tmp_path_factory.mktemp("nvml") / "b.duckdb"
        events = ingest_timeline(bundle, path)
        with Bundle.open(bundle) as b:
            facts = dict(b.con.execute("SELECT key, value FROM host_inventory").fetchall())
            out[path.name] = View(path.read_text(errors="replace"), events, _rows(b.con, "gpu_sample"),
                                  _rows(b.con, "gpu_inventory"), facts)
    return out


def _num(text: str) -> float:
    return float(text.split()[0].rstrip("x"))


def _reasons(text: str) -> set[str]:
    return {REASON_NAMES[r.strip().lower()] for r in text.split(",") if REASON_NAMES[r.strip().lower()]}


def _ts(text: str) -> datetime:
    for fmt in ("%a %b %d %H:%M:%S %Y", "%Y-%m-%d %H:%M:%S.%f"):
        try:
            return datetime.strptime(" ".join(text.split()), fmt)
        except ValueError:
            continue
    raise AssertionError(f"unreadable ts label {text!r}")


def check_reasons(v: View, gpu: int | None, text: str) -> None:
    expected = _reasons(text)
    assert set(v.sample(gpu)["throttle_reasons"] or []) == expected
    bad = expected & {"hw_thermal", "hw_power_brake", "sw_power_cap", "hw_slowdown", "sw_thermal"}
    throttles = v.of("gpu_throttle")
    if bad:
        assert any(set(e["attrs"]["reasons"]) == bad for e in throttles), throttles
    else:
        assert not throttles


def check_ts(v: View, gpu: int | None, text: str) -> None:
    want = _ts(text)
    stamps = [s["ts"] for s in v.samples] + [datetime.fromisoformat(e["ts"]).replace(tzinfo=None)
                                             for e in v.events if e["ts"]]
    assert want in stamps, (want, stamps[:5])
    assert all(e["ts_approx"] for e in v.events if e["ts"]), "local time without a zone is approximate"


def check_gpu(v: View, gpu: int | None, text: str) -> None:
    if text.isdigit():
        keyed = [e for e in v.events if e["attrs"].get("gpu_index") == int(text)
                 or e["attrs"].get("gpu_key") == f"index:{text}"]
        assert keyed, "events name the GPU by its index"
    else:
        assert {i["name"] for i in v.inventory} == {text}


def check_diag_result(test: str) -> Callable[[View, int | None, str], None]:
    def check(v: View, gpu: int | None, text: str) -> None:
        results = {e["attrs"]["result"] for e in v.of("dcgm_diag") if e["attrs"]["test"] == test}
        assert results == {text.lower()}
    return check


CHECKS: dict[str, Callable[[View, int | None, str], None]] = {
    "driver": lambda v, g, t: assert_any(t, [i["driver"] for i in v.inventory] + [v.facts.get("versions.driver")]),
    "cuda": lambda v, g, t: assert_any(t, [i["cuda"] for i in v.inventory]),
    "attached_gpus": lambda v, g, t: assert_any(int(t), [i["extra"].get("attached_gpus") for i in v.inventory]),
    "bus": lambda v, g, t: assert_any(normalize_pci(t), [i["gpu"] for i in v.inv(g)]),
    "pstate": lambda v, g, t: assert_eq(v.sample(g)["extra"]["pstate"], t),
    "pcie_gen_current": lambda v, g, t: assert_eq(v.sample(g)["pcie_gen"], int(t)),
    "pcie_gen_max": lambda v, g, t: assert_eq(v.sample(g)["extra"]["pcie_max_gen"], int(t)),
    "pcie_width": lambda v, g, t: assert_eq(v.sample(g)["pcie_width"], int(_num(t))),
    "event_reasons_active": check_reasons,
    "event_reason_active": check_reasons,
    "throttle_reasons_active": check_reasons,
    "power_draw": lambda v, g, t: assert_eq(v.sample(g)["power_w"], _num(t)),
    "power_limit": lambda v, g, t: assert_eq(v.sample(g)["power_limit_w"], _num(t)),
    "temp": lambda v, g, t: assert_eq(v.sample(g)["temp_c"], _num(t)),
    "sm_clock": lambda v, g, t: assert_eq(v.sample(g)["sm_clock_mhz"], _num(t)),
    "mem_clock": lambda v, g, t: assert_eq(v.sample(g)["mem_clock_mhz"], _num(t)),
    "fb_total": lambda v, g, t: assert_eq(v.sample(g)["mem_total_mib"], _num(t)),
    "fb_used": lambda v, g, t: assert_eq(v.sample(g)["mem_used_mib"], _num(t)),
    "ecc_mode": lambda v, g, t: assert_any(t, [i["extra"].get("ecc_mode") for i in v.inventory]),
    "dram_uncorrectable_volatile": lambda v, g, t: (
        assert_eq(v.sample(g)["ecc_volatile_uncorrected"], int(t)),
        assert_eq(v.sample(g)["extra"]["ecc"]["volatile"]["dram_uncorrectable"], int(t))),
    "remapped_rows_pending": lambda v, g, t: assert_eq(v.sample(g)["remap_pending"], t == "Yes"),
    "virtualization": lambda v, g, t: assert_any(t, [i["extra"].get("virtualization") for i in v.inventory]),
    "gpu_uuid": lambda v, g, t: assert_any(t, [i["uuid"] for i in v.inv(g)]),
    "uuid": lambda v, g, t: assert_any(t, [i["uuid"] for i in v.inv(g)]),
    "name": lambda v, g, t: assert_any(t, [i["name"] for i in v.inv(g)]),
    "ts": check_ts,
    "gpu": check_gpu,
    "gpu_recovery_action": lambda v, g, t: assert_eq(
        [e["attrs"]["action"] for e in v.of("gpu_recovery_action")], [] if t == "None" else [t]),
    "xid": lambda v, g, t: assert_eq([e["attrs"]["xid"] for e in v.of("xid")], [int(t)]),
    "dcgm_field": lambda v, g, t: assert_eq({t.split()[0] in e["attrs"]["via"] for e in v.of("xid")}, {True}),
    "dcgm_overall_health": lambda v, g, t: assert_eq([e["attrs"]["overall"] for e in v.of("dcgm_health")], [t]),
    "gpus": lambda v, g, t: assert_eq(len(v.gpus()), int(t)),
    "dcgm_version": lambda v, g, t: (assert_eq(v.facts.get("versions.dcgm"), t),
                                     assert_eq([e["attrs"]["dcgm_version"] for e in v.of("dcgm_diag_run")], [t])),
    "device_ids": lambda v, g, t: assert_eq(v.of("dcgm_diag_run")[0]["attrs"]["device_ids"],
                                            [t.split()[0]] * int(t.split()[1].lstrip("x"))),
    "software": check_diag_result("software"),
    "host": lambda v, g, t: assert_eq({e["host"] for e in v.events}, {t}),
    "pod": lambda v, g, t: assert_eq(v.of("dcgm_diag_run")[0]["attrs"]["pod"], t),
    "fields": lambda v, g, t: assert_eq({e["attrs"]["field"] for e in v.of("dcgm_log")}, set(t.split(","))),
    "value": lambda v, g, t: assert_eq({(e["attrs"]["value"], e["attrs"]["blank"] is not None)
                                        for e in v.of("dcgm_log")}, {(int(t.split()[0]), True)}),
    "gpu_ids": lambda v, g, t: assert_eq({e["attrs"]["gpu_index"] for e in v.of("dcgm_log")},
                                         {int(x) for x in t.split(",")}),
    "level": lambda v, g, t: assert_eq({e["attrs"]["level"] for e in v.of("dcgm_log")}, {t}),
    "dtd": lambda v, g, t: assert_any(t.removesuffix(".dtd"), [i["extra"].get("dtd") for i in v.inventory]),
    "sw_power_cap_counter_us": lambda v, g, t: assert_eq(
        v.sample(g)["extra"]["throttle_counters_us"]["sw_power_cap"], int(t)),
    "well_formed": lambda v, g, t: assert_eq(bool(v.inventory) and t == "false", True),
    "links_per_gpu": lambda v, g, t: assert_eq({s["extra"]["nvlink_links"] for s in v.samples}, {int(t)}),
    "link_speed": lambda v, g, t: assert_eq({tuple(s["extra"]["nvlink_speeds_gbps"]) for s in v.samples},
                                            {(_num(t),)}),
    "inactive_links": lambda v, g, t: (
        assert_eq(sum(len(s["extra"]["nvlink_inactive"]) for s in v.samples), int(t)),
        assert_eq(bool(v.of("nvlink_down")), int(t) > 0)),
    "pci": lambda v, g, t: assert_eq([e["attrs"]["pci"] for e in v.of("nvidia_smi_error")], [normalize_pci(t)]),
    "error": lambda v, g, t: assert_eq([e["attrs"]["error"] for e in v.of("nvidia_smi_error")], [t]),
    "reason": lambda v, g, t: assert_eq([e["attrs"]["reason"] for e in v.of("nvidia_smi_error")], [t]),
    "hw_thermal_slowdown": lambda v, g, t: assert_eq(
        "hw_thermal" in v.sample(g)["extra"]["throttle_not_available"], t == "N/A"),
    "section_name": lambda v, g, t: assert_eq(v.sample(g)["throttle_reasons"] is not None and t in v.text, True),
}


def assert_eq(got: Any, want: Any) -> None:
    assert got == want, f"got {got!r}, label says {want!r}"


def assert_any(want: Any, got: list[Any]) -> None:
    assert want in got, f"label says {want!r}, rows have {got!r}"


def _split(key: str) -> tuple[int | None, str]:
    """``gpu1_power_draw`` -> (1, 'power_draw'); ``gpu0`` -> (0, 'name'); ``gpu0_uuid`` -> (0, 'uuid')."""
    head, _, rest = key.partition("_")
    if head.startswith("gpu") and head[3:].isdigit():
        return int(head[3:]), rest or "name"
    return None, key


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_file_matches_its_index_labels(path: Path, views: dict[str, View]):
    view = views[path.name]
    labels = corpus_index()[f"nvml/{path.name}"]["parsed_labels"]
    assert labels, "every corpus file has labels"
    checked = 0
    for key, text in labels.items():
        if key in CONTEXT:
            continue
        if (path.name, key) in NOT_IN_TEXT:
            assert text not in view.text, f"{key}={text} is in the text after all: parse it"
            continue
        gpu, name = _split(key)
        assert name in CHECKS, f"no checker for label {key!r}: add one"
        CHECKS[name](view, gpu, text)
        checked += 1
    assert checked >= 1


def test_every_corpus_file_is_sniffed_as_nvidia_smi_or_dcgm():
    for path in FILES:
        head = path.read_bytes()[:65536].decode("utf-8", "replace")
        found = registry.sniff(path.name, head)
        assert found is not None and found[1].NAME in ("nvidia_smi", "dcgm"), path.name


def test_gpu_throttle_event_carries_the_load_and_the_line(views):
    (event,) = views["gpud_nvidia-smi-q_535_rtx4090_sw_power_cap_active.txt"].of("gpu_throttle")
    assert event["gpu"] == "0000:23:00.0" and event["layer"] == "hardware"
    assert event["attrs"]["util_gpu"] == 97 and event["attrs"]["idle"] is False
    text = (CORPUS / "nvml" / "gpud_nvidia-smi-q_535_rtx4090_sw_power_cap_active.txt").read_text().splitlines()
    assert text[event["line"] - 1].split(":")[0].strip() == "SW Power Cap"


def test_idle_gpus_at_low_pcie_gen_are_not_degraded(views):
    for name in ("gpud_nvidia-smi-q_535_rtx4090_sw_power_cap_active.txt",
                 "a10_passthrough_550_nvidia-smi_table_and_q.txt", "rtx4070_laptop_575_nvidia-smi-q-x_partial.xml"):
        assert not views[name].of("pcie_link_degraded"), name


def test_cut_xml_counts_nothing_it_did_not_read(views, bundle_path):
    ingest_timeline(bundle_path, CORPUS / "nvml" / "a0s_1_nvidia-smi-q-x_v10_430_header.xml")
    with Bundle.open(bundle_path) as b:
        skipped, reasons = b.con.execute("SELECT skipped, skip_reasons FROM artifact").fetchall()[0]
    assert skipped == 1 and "not nvidia-smi or DCGM output" in reasons, "only the shell prompt line is skipped"


def _parse(text: str) -> list:
    return list(nvidia_smi.parse("nvidia_smi", io.BytesIO(text.encode()), ParseContext(host="h")))


def test_xml_error_midway_keeps_the_gpu_and_is_one_skip():
    text = ("<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<driver_version>535.1</driver_version>\n"
            "<gpu id=\"00000000:19:00.0\">\n<product_name>NVIDIA H100</product_name>\n"
            "<performance_state>P0</performance_state>\n<bad></oops>\n<more>x</more>\n<still>y</still>\n")
    rows = _parse(text)
    inv = [r for r in rows if isinstance(r, GpuInventory)]
    assert [(i.gpu, i.name, i.driver) for i in inv] == [("0000:19:00.0", "NVIDIA H100", "535.1")]
    assert [r.line for r in rows if isinstance(r, Skipped)] == [7], "the damaged <gpu> is one counted skip"


@pytest.mark.parametrize("line,error,reason", [
    ("No devices were found", "No devices were found", None),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "NVIDIA-SMI has failed",
     "it couldn't communicate with the NVIDIA driver"),
    ("Failed to initialize NVML: Driver/library version mismatch", "Failed to initialize NVML",
     "Driver/library version mismatch"),
    ("Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
     "Unable to determine the device handle", "GPU is lost"),
])
def test_nvidia_smi_failures_are_events_not_crashes(line, error, reason):
    (event,) = [r for r in _parse(line + "\n") if isinstance(r, Event)]
    assert event.kind == "nvidia_smi_error" and event.layer == "gpu"
    assert event.attrs["error"] == error and event.attrs["reason"] == reason


def test_query_gpu_csv_with_units_and_a_throttle_bitmask():
    text = ("timestamp, index, name, pci.bus_id, pstate, utilization.gpu [%], temperature.gpu, power.draw [W], "
            "power.limit [W], clocks_throttle_reasons.active, pcie.link.gen.current, pcie.link.gen.max, "
            "pcie.link.width.current, pcie.link.width.max, ecc.errors.uncorrected.volatile.total\n"
            "2024/07/08 08:11:21.123, 0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, P0, 100 %, 87, 699.12 W, "
            "700.00 W, 0x0000000000000020, 5, 5, 8, 16, 0\n"
            "2024/07/08 08:11:22.124, 0, NVIDIA H100 80GB HBM3, 00000000:19:00.0, P0, 100 %, 88, 699.50 W, "
            "700.00 W, 0x0000000000000020, 5, 5, 8, 16, 3\n")
    rows = _parse(text)
    samples = [r for r in rows if isinstance(r, GpuSample)]
    assert [s.temp_c for s in samples] == [87, 88] and samples[0].throttle_reasons == ["sw_thermal"]
    assert samples[0].ts == datetime.fromisoformat("2024-07-08T08:11:21.123+00:00")
    kinds = [r.kind for r in rows if isinstance(r, Event)]
    assert kinds == ["gpu_throttle", "pcie_link_degraded", "ecc_uncorrectable"]


def test_query_gpu_lost_value_is_an_error_event():
    rows = _parse("index, pci.bus_id, temperature.gpu\n0, 00000000:3B:00.0, [GPU is lost]\n")
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert event.kind == "nvidia_smi_error" and event.attrs["reason"] == "GPU is lost"
    assert event.gpu == "0000:3b:00.0"


def test_nvlink_status_with_an_inactive_link_and_error_counters():
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n"
            + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(18))
            + "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n"
            + "".join(f"\t Link {n}: 26.562 GB/s\n" for n in range(17)) + "\t Link 17: <inactive>\n"
            + "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: Replay Errors: 0\n"
            "\t Link 0: Recovery Errors: 2\n\t Link 0: CRC Errors: 7\n")
    rows = _parse(text)
    (down,) = [r for r in rows if isinstance(r, Event) and r.kind == "nvlink_down"]
    assert down.attrs["links"] == [17] and down.attrs["gpu_key"] == "GPU-bbbb"
    (err,) = [r for r in rows if isinstance(r, Event) and r.kind == "nvlink_error"]
    assert err.attrs["total"] == 9 and err.attrs["links"] == {"0": {"recovery": 2, "crc": 7}}


def test_dcgm3_diag_failures_name_gpus_and_warnings():
    text = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| Persistence Mode          | Pass                                           |
+-----  Stress  ------------+------------------------------------------------+
| Memory Bandwidth          | Fail - GPU: 2                                  |
|                           | Pass - GPU: 0, 1, 3                            |
| Warning                   | GPU 2 Error using CUDA API cudaMemcpy Check    |
|                           | DCGM and system logs for errors.               |
+---------------------------+------------------------------------------------+
"""
    events = [r for r in _parse(text) if isinstance(r, Event)]
    fail = next(e for e in events if e.attrs["result"] == "fail")
    assert fail.attrs["test"] == "Memory Bandwidth" and fail.attrs["gpus"] == [2] and fail.severity == "error"
    assert fail.layer == "hardware" and "cudaMemcpy Check DCGM and system logs" in fail.attrs["warnings"][0]
    passed = next(e for e in events if e.attrs["test"] == "Memory Bandwidth" and e.attrs["result"] == "pass")
    assert passed.attrs["gpus"] == [0, 1, 3]


def test_dcgm_health_table_with_an_incident():
    text = """+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Warning                                                  |
| GPU ID: 0                 | Warning                                                  |
|                           | PCIe system: Warning - Detected more than 8 PCIe replays |
|                           |  per minute for GPU 0 : 13                               |
+---------------------------+----------------------------------------------------------+
"""
    (event,) = [r for r in _parse(text) if isinstance(r, Event)]
    assert event.kind == "dcgm_health" and event.severity == "warning" and event.attrs["gpus"] == {"0": "Warning"}
    assert event.attrs["incidents"][0]["system"] == "PCIe system"
    assert event.attrs["incidents"][0]["message"].endswith("per minute for GPU 0 : 13")


def test_old_q_layout_single_double_bit_ecc_and_retired_pages():
    text = """==============NVSMI LOG==============

Timestamp                           : Tue Mar  5 10:00:00 2019
Driver Version                      : 418.67

Attached GPUs                       : 1
GPU 00000000:3B:00.0
    Product Name                    : Tesla V100-SXM2-16GB
    ECC Errors
        Volatile
            Single Bit
                Device Memory       : 3
                Total               : 3
            Double Bit
                Device Memory       : 1
                Total               : 1
        Aggregate
            Single Bit
                Total               : 10
            Double Bit
                Total               : 1
    Retired Pages
        Single Bit ECC              : 2
        Double Bit ECC              : 1
        Pending                     : Yes
"""
    rows = _parse(text)
    (sample,) = [r for r in rows if isinstance(r, GpuSample)]
    assert (sample.ecc_volatile_corrected, sample.ecc_volatile_uncorrected) == (3, 1)
    assert (sample.ecc_aggregate_corrected, sample.ecc_aggregate_uncorrected) == (10, 1)
    assert (sample.retired_pages_sbe, sample.retired_pages_dbe, sample.retired_pending) == (2, 1, True)
    kinds = {r.kind: r for r in rows if isinstance(r, Event)}
    assert set(kinds) == {"ecc_uncorrectable", "retired_pages_pending"}
    assert kinds["ecc_uncorrectable"].line == 16 and kinds["ecc_uncorrectable"].ts_raw == "Tue Mar  5 10:00:00 2019"


def test_sniff_leaves_other_formats_alone():
    for head in ("Mar 29 15:38:59 node kernel: NVRM: Xid (PCI:0000:01:00): 79\n",
                 "host:1:2 [0] NCCL INFO Bootstrap : Using eth0\n", "a,b,c\n1,2,3\n", "{\"hostname\": \"x\"}\n"):
        assert nvidia_smi.sniff("x.log", head) == {}, head


@pytest.mark.parametrize("data", [b"\xff\xfe\xfa<?xml \x00 <gpu>\n" * 50, b"\x00" * 5000,
                                  b"GPU 00000000:01:00.0\n" + b"    Product Name : \xff\xfe\n" * 10,
                                  b"<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n" + b"<gpu>" * 5000,
                                  b"{" * 10000 + b"\n", b"| " + b"x" * (10 << 20) + b" |\n",
                                  b"GPU 0: x (UUID: GPU-1)\n\t Link 99999999999999999999: 1 GB/s\n"],
                         ids=["xml_junk", "nul", "bad_utf8_q", "deep_xml", "braces", "10mb_table_line", "big_link"])
def test_parse_survives_junk(data):
    rows = list(nvidia_smi.parse("nvidia_smi", io.BytesIO(data), ParseContext(host="h")))
    assert all(isinstance(r, (Skipped, Event, GpuSample, GpuInventory)) for r in rows)


def _fake_nvidia_smi(folder: Path, xml_fails: bool) -> None:
    """An nvidia-smi that prints real recorded outputs from the corpus, by argument."""
    nvml = CORPUS / "nvml"
    xml = nvml / "rtx4070_laptop_575_nvidia-smi-q-x_partial.xml"
    text = nvml / "gpud_nvidia-smi-q_535_rtx4090_sw_power_cap_active.txt"
    nvlink = nvml / "gpud_nvidia-smi_nvlink_status_8xA100.txt"
    first = "echo 'Failed to initialize NVML: Unknown Error'; exit 255" if xml_fails else f'cat "{xml}"'
    lines = ["#!/bin/sh", 'case "$*" in', f'  "-q -x") {first} ;;', f'  "-q") cat "{text}" ;;',
             f'  "nvlink --status") cat "{nvlink}" ;;', '  "nvlink -e") exit 0 ;;', "  *) exit 2 ;;", "esac", ""]
    script = folder / "nvidia-smi"
    script.write_text("\n".join(lines))
    script.chmod(0o755)


@pytest.mark.parametrize("xml_fails", [False, True], ids=["xml", "xml_fails_q_fallback"])
def test_live_capture_runs_nvidia_smi(tmp_path, monkeypatch, xml_fails):
    from workbench.capture.live import capture

    _fake_nvidia_smi(tmp_path, xml_fails)
    monkeypatch.setenv("PATH", f"{tmp_path}:{__import__('os').environ['PATH']}")
    path, outcomes, _ = capture(tmp_path / "b.duckdb", only=["nvidia_smi"])
    (outcome,) = outcomes
    assert outcome.status == "ok", outcome.reason
    with Bundle.open(path) as b:
        artifacts = [(a["source"], a["kind"]) for a in b.artifacts()]
        throttles = b.con.execute("SELECT gpu FROM event WHERE kind = 'gpu_throttle'").fetchall()
        names = {r[0] for r in b.con.execute("SELECT name FROM gpu_inventory").fetchall()}
    expected = [("nvidia-smi -q -x", "nvidia_smi_xml")] + ([("nvidia-smi -q", "nvidia_smi_q")] if xml_fails else [])
    assert artifacts == expected + [("nvidia-smi nvlink --status", "nvidia_smi_nvlink"),
                                    ("nvidia-smi nvlink -e", "nvidia_smi_nvlink")]
    assert "NVIDIA A100-SXM4-80GB" in names
    if xml_fails:
        assert throttles == [("0000:23:00.0",)] and "NVIDIA GeForce RTX 4090" in names
    else:
        assert throttles == [] and "NVIDIA GeForce RTX 4070 Laptop GPU" in names
        assert "NVIDIA GeForce RTX 4090" not in names


def test_live_capture_without_nvidia_smi_says_so(tmp_path, monkeypatch):
    from workbench.capture.live import capture

    monkeypatch.setenv("PATH", str(tmp_path))
    path, outcomes, _ = capture(tmp_path / "b.duckdb", only=["nvidia_smi"])
    (outcome,) = outcomes
    assert (outcome.status, outcome.reason) == ("unavailable", "unavailable: command not found")


def test_safe_capture_skips_every_collector_that_touches_the_gpu():
    touching = {m.NAME for m in registry.all_collectors() if getattr(m, "TOUCHES_GPU", False)}
    assert {"nvml", "nvidia_smi"} <= touching


@pytest.mark.parametrize("header", ["timestamp,value", "timestamp, name, value", "index,name,uuid",
                                    "pid, process_name, used_memory"])
def test_generic_csv_headers_are_not_nvidia_smi(header):
    assert nvidia_smi.sniff("data.csv", header + "\n1,2,3\n") == {}


def test_query_gpu_header_is_sniffed():
    assert nvidia_smi.sniff("q.csv", "index, name, temperature.gpu, utilization.gpu [%]\n0, A100, 30, 0 %\n") == \
        {"nvidia_smi_csv": 90}
