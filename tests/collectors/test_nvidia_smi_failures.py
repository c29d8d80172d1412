"""nvidia-smi's ways of saying a GPU is failing, from the real outputs of
tests/collectors/fixtures/nvidia_smi/SOURCES.md: ``ERR!`` fields in the default table (r4xx and r5xx
layouts, pasted as excerpts without the table's head) and the one-line failures. Each is an
``nvidia_smi_error`` event naming the GPU, beside whatever the table still read."""

from __future__ import annotations

import io

import pytest

from collectors import nvidia_smi
from collectors.base import Event, GpuInventory, GpuSample, ParseContext
from collectors.framework import registry
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "collectors" / "fixtures" / "nvidia_smi"


def _rows(name: str) -> list:
    path = FIXTURES / name
    found = registry.sniff(path.name, path.read_text())
    assert found is not None and found[1] is nvidia_smi, name
    return list(nvidia_smi.parse(found[0], io.BytesIO(path.read_bytes()), ParseContext(host="h")))


def _errors(rows: list) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == "nvidia_smi_error"]


@pytest.mark.parametrize("name,gpu,fields", [
    ("table_470_err_a100_excerpt.txt", "0000:d6:00.0", ["fan", "temp", "pstate", "util", "ecc"]),
    ("table_err_power_v100_azure_excerpt.txt", "8ed0:00:00.0", ["power"]),
    ("table_5xx_err_fan_rtx4000_excerpt.txt", "0000:cc:00.0", ["fan"]),
])
def test_err_fields_of_a_table_excerpt_name_the_gpu(name: str, gpu: str, fields: list[str]) -> None:
    rows = _rows(name)
    (event,) = _errors(rows)
    assert event.gpu == gpu and event.attrs["fields"] == fields and event.severity == "error"
    assert event.line == next(r.line for r in rows if isinstance(r, GpuSample) and r.gpu == gpu)


def test_the_healthy_gpu_beside_the_failing_one_has_no_error() -> None:
    rows = _rows("table_5xx_err_fan_rtx4000_excerpt.txt")
    samples = {r.gpu: r for r in rows if isinstance(r, GpuSample)}
    assert set(samples) == {"0000:c9:00.0", "0000:cc:00.0"}
    assert samples["0000:cc:00.0"].temp_c == 68 and samples["0000:cc:00.0"].util_gpu == 93
    assert [e.gpu for e in _errors(rows)] == ["0000:cc:00.0"]


def test_what_an_err_gpu_still_reads_is_kept() -> None:
    rows = _rows("table_470_err_a100_excerpt.txt")
    (sample,) = [r for r in rows if isinstance(r, GpuSample)]
    assert (sample.temp_c, sample.util_gpu, sample.power_w, sample.mem_total_mib) == (None, None, 1, 80994)
    (inv,) = [r for r in rows if isinstance(r, GpuInventory)]
    assert (inv.index, inv.name, inv.driver) == (7, "NVIDIA A100 80G...", None)


def test_an_r418_table_with_every_field_err() -> None:
    """The r410-r440 layout with its head; the GPU row as those drivers print a GPU they lost."""
    text = """Tue Mar  5 10:00:00 2019
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 418.67       Driver Version: 418.67       CUDA Version: 10.1     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|===============================+======================+======================|
|   0  Tesla V100-SXM2...  On   | 00000000:3B:00.0 Off |                 ERR! |
| ERR!  ERR!  ERR!    ERR! / ERR! |      0MiB / 16130MiB |    ERR!      Default |
+-------------------------------+----------------------+----------------------+
|   1  Tesla V100-SXM2...  On   | 00000000:5E:00.0 Off |                    0 |
| N/A   35C    P0    42W / 300W |      0MiB / 16130MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
"""
    rows = list(nvidia_smi.parse("nvidia_smi_table", io.BytesIO(text.encode()), ParseContext(host="h")))
    (event,) = _errors(rows)
    assert event.gpu == "0000:3b:00.0"
    assert event.attrs["fields"] == ["fan", "temp", "pstate", "power", "cap", "util", "ecc"]
    assert event.ts_raw == "Tue Mar  5 10:00:00 2019"
    assert {i.driver for i in rows if isinstance(i, GpuInventory)} == {"418.67"}


def test_device_handle_failure_names_the_gpu() -> None:
    (event,) = _errors(_rows("device_handle_unknown_error.txt"))
    assert event.gpu == "0000:0b:00.0"
    assert (event.attrs["error"], event.attrs["reason"]) == ("Unable to determine the device handle", "Unknown Error")


def test_persistence_err_does_not_read_as_disabled() -> None:
    text = ("|   2  Tesla V100-SXM2...  ERR! | 00000000:86:00.0 ERR! |                 ERR! |\n"
            "| N/A   ERR!  ERR!   ERR! / ERR! |  ERR! / 16130MiB |    ERR!      Default |\n")
    rows = list(nvidia_smi.parse("nvidia_smi_table", io.BytesIO(text.encode()), ParseContext(host="h")))
    (inv,) = [r for r in rows if isinstance(r, GpuInventory)]
    assert inv.persistence is None
    (event,) = _errors(rows)
    assert event.attrs["fields"][:1] == ["persistence"] and "display" in event.attrs["fields"]


def test_a_lost_gpu_line_inside_the_table_keeps_the_table_open() -> None:
    """The GPUs the driver still reads, then a line for the one it lost, then the process table."""
    text = """+-----------------------------------------------------------------------------+
| NVIDIA-SMI 440.33.01    Driver Version: 440.33.01    CUDA Version: 10.2     |
|-------------------------------+----------------------+----------------------+
|   0  Tesla V100-SXM2...  On   | 00000000:86:00.0 Off |                    0 |
| N/A   40C    P0    55W / 300W |      0MiB / 32480MiB |      0%      Default |
+-------------------------------+----------------------+----------------------+
Unable to determine the device handle for GPU 0000:89:00.0: Unknown Error

+-----------------------------------------------------------------------------+
| Processes:                                                       GPU Memory |
|  GPU       PID   Type   Process name                             Usage      |
|=============================================================================|
|    0     41214      C   python                                     1200MiB |
+-----------------------------------------------------------------------------+
"""
    rows = list(nvidia_smi.parse("nvidia_smi_table", io.BytesIO(text.encode()), ParseContext(host="h")))
    assert not [r for r in rows if type(r).__name__ == "Skipped"]
    (event,) = _errors(rows)
    assert event.gpu == "0000:89:00.0" and event.line == 7
    (sample,) = [r for r in rows if isinstance(r, GpuSample)]
    assert [p["pid"] for p in sample.extra["processes"]] == [41214]


def test_q_fields_that_read_unknown_error_name_the_gpu() -> None:
    rows = _rows("q_535_unknown_error_a10g_head.txt")
    (event,) = _errors(rows)
    assert event.gpu == "0000:00:16.0" and event.attrs["fields"] == ["product_brand"]
    assert event.attrs["reason"] == "Unknown Error" and event.line == 10
    assert event.ts_raw == "Tue Apr 30 21:16:21 2024"
    (inv,) = [r for r in rows if isinstance(r, GpuInventory)]
    assert (inv.name, inv.driver) == ("NVIDIA A10G", "535.161.08")


def test_xml_field_that_reads_gpu_is_lost_names_the_gpu() -> None:
    text = ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>535.1</driver_version>\n'
            '<gpu id="00000000:19:00.0">\n<product_name>NVIDIA H100</product_name>\n'
            '<temperature>\n<gpu_temp>[GPU is lost]</gpu_temp>\n</temperature>\n</gpu>\n</nvidia_smi_log>\n')
    rows = list(nvidia_smi.parse("nvidia_smi_xml", io.BytesIO(text.encode()), ParseContext(host="h")))
    (event,) = _errors(rows)
    assert (event.gpu, event.attrs["fields"], event.attrs["reason"]) == ("0000:19:00.0", ["gpu_temp"], "GPU is lost")
