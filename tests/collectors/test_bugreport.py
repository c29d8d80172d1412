"""nvidia-bug-report.log: sniffed, split into sections, each section read by the parser that knows it.

The fixture tests/data/nvml/nvidia-bug-report_xid79_fallen_off_bus.log follows the section layout
nvidia-bug-report.sh writes (prologue, ``*** FILE`` sections with their ``*** ls:`` line, ``dmesg:``,
the driver's /proc files, ``/usr/bin/nvidia-smi --query`` and ``--query --unit``). It is assembled from
real outputs: the dmesg lines of NVIDIA/nvidia-docker#1553 (Xid 79, GPU 0000:09:00 fell off the bus),
nvidia-smi's "Unable to determine the device handle" line as open-gpu-kernel-modules#387 shows it
(moved to that GPU's bus id), and the -q of the RTX 4090 in leptonai/gpud's testdata for the GPU that
still answers."""

from __future__ import annotations

import gzip
import io
import shutil
from pathlib import Path

import pytest

from collectors import bugreport
from collectors.base import Event, GpuInventory, HostFact, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import ingest_timeline
from workbench.store.bundle import Bundle

REPORT = Path(__file__).resolve().parents[1] / "data" / "nvml" / "nvidia-bug-report_xid79_fallen_off_bus.log"
LINES = REPORT.read_text().splitlines()


def line_of(text: str) -> int:
    return next(i for i, line in enumerate(LINES, start=1) if text in line)


@pytest.fixture(scope="module")
def timeline(tmp_path_factory) -> tuple[list[dict], Path]:
    folder = tmp_path_factory.mktemp("report")
    gz = folder / "nvidia-bug-report.log.gz"
    with open(REPORT, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    bundle = folder / "b.duckdb"
    return ingest_timeline(bundle, gz), bundle


def test_sniffed_as_a_bug_report():
    kind, module = registry.sniff(REPORT.name, REPORT.read_text()[:65536])
    assert (kind, module.NAME) == ("nvidia_bug_report", "bugreport")


def test_prologue_gives_host_time_and_facts(timeline):
    events, bundle = timeline
    (report,) = [e for e in events if e["kind"] == "nvidia_bug_report"]
    assert report["ts"].startswith("2024-07-08T08:14:02") and report["attrs"]["version"] == "33987342"
    assert {e["host"] for e in events} == {"gpu-node-07"}, "the host is what uname in the report says"
    with Bundle.open(bundle) as b:
        facts = dict(b.con.execute("SELECT key, value FROM host_inventory WHERE host = 'gpu-node-07'").fetchall())
    assert facts["kernel"] == "5.15.0-112-generic" and facts["versions.driver"] == "535.154.05"


def test_nvidia_smi_section_events_point_at_report_lines(timeline):
    events, _ = timeline
    (err,) = [e for e in events if e["kind"] == "nvidia_smi_error"]
    assert err["gpu"] == "0000:09:00.0" and err["attrs"]["reason"] == "Unknown Error"
    assert err["line"] == line_of("Unable to determine the device handle")
    assert err["ts"].startswith("2024-07-08T08:14:02"), "a clockless output takes the report's date"
    (throttle,) = [e for e in events if e["kind"] == "gpu_throttle"]
    assert throttle["gpu"] == "0000:23:00.0" and throttle["attrs"]["reasons"] == ["sw_power_cap"]
    assert LINES[throttle["line"] - 1].split(":")[0].strip() == "SW Power Cap"


def test_unit_query_and_unread_sections_add_no_rows(timeline):
    _, bundle = timeline
    with Bundle.open(bundle) as b:
        samples = b.con.execute("SELECT gpu, line FROM gpu_sample").fetchall()
        inventory = b.con.execute("SELECT gpu, uuid, name FROM gpu_inventory ORDER BY gpu").fetchall()
        skipped = b.con.execute("SELECT skipped FROM artifact").fetchall()[0][0]
    assert samples == [("0000:23:00.0", line_of("GPU 00000000:23:00.0"))]
    assert ("0000:09:00.0", "GPU-26fba6b2-9e52-006e-68db-4ce18382a5ea", None) in inventory
    assert ("0000:23:00.0", "GPU-8f4d1755-9c8a-3a19-b71e-c190b3801dec", "NVIDIA GeForce RTX 4090") in inventory
    assert skipped == 0


def test_kernel_sections_go_to_the_kernel_parser(timeline):
    events, _ = timeline
    xid_line = line_of("NVRM: Xid (PCI:0000:09:00): 79")
    if bugreport._kernel() is None:
        assert any(e["kind"] == "nvrm" and e["line"] == xid_line for e in events)
    else:
        (xid,) = [e for e in events if e["kind"] == "xid"]
        assert xid["attrs"]["xid"] == 79 and xid["gpu"] == "0000:09:00.0" and xid["line"] == xid_line
        assert any(e["kind"] == "gpu_fell_off_bus" and e["gpu"] == "0000:09:00.0" for e in events)


def test_without_a_kernel_parser_nvrm_lines_stay_as_text_events(monkeypatch):
    monkeypatch.setattr(bugreport, "_kernel", lambda: None)
    rows = list(bugreport.parse("nvidia_bug_report", io.BytesIO(REPORT.read_bytes()), ParseContext()))
    nvrm = [r for r in rows if isinstance(r, Event) and r.kind == "nvrm"]
    assert [r.line for r in nvrm] == [i for i in range(line_of("dmesg:"), line_of("*** /proc/driver/nvidia/./version"))
                                      if "NVRM" in LINES[i - 1]]
    assert all(r.host == "gpu-node-07" for r in nvrm)


def test_proc_information_alone_gives_inventory():
    text = ("____________________________________________\n\n"
            "*** /proc/driver/nvidia/gpus/0000:3b:00.0/information\n*** ls: -r--r--r-- 1 root root 0 x\n"
            "Model: \t\t Tesla K80\nGPU UUID: \t GPU-be0a1aaf-c92d-ce5e-6d53-1f064e6842f6\n"
            "Video BIOS: \t 80.21.25.00.01\nBus Location: \t 0000:3b:00.0\nDevice Minor: \t 0\n")
    rows = list(bugreport.parse("nvidia_bug_report", io.BytesIO(text.encode()), ParseContext(host="h")))
    (inv,) = [r for r in rows if isinstance(r, GpuInventory)]
    assert (inv.gpu, inv.name, inv.vbios, inv.extra["minor_number"]) == ("0000:3b:00.0", "Tesla K80",
                                                                         "80.21.25.00.01", 0)
    assert not [r for r in rows if isinstance(r, HostFact)]


@pytest.mark.parametrize("data", [b"\xff\xfe" * 5000, b"\x00" * 4096, b"_" * 44 + b"\n\ndmesg:\n" + b"\xff" * 100,
                                  b"_" * 44 + b"\n\n/usr/bin/nvidia-smi --query\n" + b"y" * (10 << 20) + b"\n",
                                  b"_" * 44 + b"\n" * 50000],
                         ids=["bad_utf8", "nul", "junk_dmesg", "10mb_line", "many_separators"])
def test_parse_survives_junk(data):
    rows = list(bugreport.parse("nvidia_bug_report", io.BytesIO(data), ParseContext(host="h")))
    assert all(isinstance(r, (Skipped, Event, HostFact, GpuInventory)) or hasattr(r, "gpu") for r in rows)
