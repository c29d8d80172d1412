"""``nvidia-smi nvlink -e`` as it really prints: a blank line after each link's counters
(tests/collectors/fixtures/nvidia_smi/SOURCES.md). Every line is read, every counter kept, and a non-zero
count is an ``nvlink_error`` event; before, the first blank line ended the block and the links after it
were skipped lines, their counts lost without an event."""

from __future__ import annotations

import io
from datetime import datetime

from collectors import nvidia_smi
from collectors.base import Event, GpuSample, ParseContext, SeriesPoint, Skipped
from collectors.framework import registry
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "collectors" / "fixtures" / "nvidia_smi" / "nvlink_e_h100_blank_after_each_link.txt"
REAL = FIXTURE.read_text()


def _parse(text: str) -> list:
    return list(nvidia_smi.parse("nvidia_smi_nvlink", io.BytesIO(text.encode()), ParseContext(host="h")))


def test_the_real_output_is_sniffed_past_its_prompt_line() -> None:
    assert registry.sniff(FIXTURE.name, REAL) == ("nvidia_smi_nvlink", nvidia_smi)


def test_every_link_after_a_blank_line_is_read() -> None:
    rows = _parse(REAL)
    assert [r.line for r in rows if isinstance(r, Skipped)] == [1], "only the shell prompt is not nvidia-smi's"
    (sample,) = [r for r in rows if isinstance(r, GpuSample)]
    assert sample.gpu == "GPU-abcdefab-cdef-abdc-abcd-abababababab"
    assert sample.extra["nvlink_counters"] == {link: {"replay": 0, "recovery": 0, "crc": 0}
                                               for link in ("0", "1", "17")}
    assert sample.nvlink_errors == 0 and not [r for r in rows if isinstance(r, Event)]


def test_a_recovery_count_after_a_blank_line_is_an_event() -> None:
    """The real layout with one count changed: Recovery Errors of link 1, after the first blank line."""
    text = REAL.replace("Link 1: Recovery Errors: 0", "Link 1: Recovery Errors: 3")
    rows = _parse(text)
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert event.kind == "nvlink_error" and event.attrs["total"] == 3
    assert event.attrs["links"] == {"1": {"recovery": 3}}
    (sample,) = [r for r in rows if isinstance(r, GpuSample)]
    assert sample.extra["nvlink_counters"]["1"] == {"replay": 0, "recovery": 3, "crc": 0}


def test_crc_flit_and_data_counters_of_older_drivers_are_kept_apart() -> None:
    text = ("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-aaaa)\n\t Link 0: Replay Errors: 0\n"
            "\t Link 0: Recovery Errors: 0\n\t Link 0: CRC Flit Errors: 5\n"
            "\t Link 0: CRC Data Errors: 1\n\n\t Link 1: Replay Errors: 12\n")
    rows = _parse(text)
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert event.attrs["links"] == {"0": {"crc_flit": 5, "crc_data": 1}, "1": {"replay": 12}}


def test_status_then_counters_pasted_with_blank_lines_between() -> None:
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbb)\n\t Link 0: 26.562 GB/s\n\t Link 1: 26.562 GB/s\n\n"
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaa)\n\t Link 0: Replay Errors: 0\n\n"
            "\t Link 1: Recovery Errors: 1\n")
    rows = _parse(text)
    kinds = sorted(r.kind for r in rows if isinstance(r, Event))
    assert kinds == ["nvlink_down", "nvlink_error"]
    assert not [r for r in rows if isinstance(r, Skipped)]


def test_the_counters_are_series_under_dcgm_exporter_names() -> None:
    """Each kind summed over the links (collectors/nvml/counters.py); nvidia-smi's ``CRC`` is the flit CRC.
    The output has no clock: the points take the file's time, as the sample does."""
    text = REAL
    for before, after in (("Link 1: Recovery Errors: 0", "Link 1: Recovery Errors: 3"),
                          ("Link 17: Recovery Errors: 0", "Link 17: Recovery Errors: 2"),
                          ("Link 0: CRC Errors: 0", "Link 0: CRC Errors: 6")):
        text = text.replace(before, after)
    rows = list(nvidia_smi.parse("nvidia_smi_nvlink", io.BytesIO(text.encode()),
                                 ParseContext(host="h", mtime=datetime(2024, 1, 1))))
    points = {p.name: p for p in rows if isinstance(p, SeriesPoint)}
    assert {n: p.value for n, p in points.items()} == {
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 5.0, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 6.0,
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 0.0, "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 0.0}
    assert {p.labels["gpu"] for p in points.values()} == {"GPU-abcdefab-cdef-abdc-abcd-abababababab"}
