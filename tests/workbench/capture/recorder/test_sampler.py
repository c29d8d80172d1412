"""The NVML sampler child: readings of replayed real GPUs, a hanging NVML cut off without hanging the
recorder, and no NVML noted once instead of an error loop."""

from __future__ import annotations

import time

from tests.nvml_replay import FakeNvml, recording
from workbench.capture.recorder.sampler import NvmlSampler
from workbench.capture.recorder.triggers import nvml_trigger


def run_for(sampler: NvmlSampler, seconds: float) -> tuple[list, list[str]]:
    docs, notes = [], []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            d, n = sampler.poll()
            docs += d
            notes += n
            time.sleep(0.05)
    finally:
        sampler.close()
    return docs, notes


def test_replayed_8_gpus_give_one_reading_per_interval() -> None:
    rec = recording("replay_8xa100_nvlink.json")
    docs, notes = run_for(NvmlSampler(0.3, timeout_s=5, loader=lambda: FakeNvml(rec), host="gpu-node"), 1.6)
    assert notes == ["nvml sampling"]
    assert 3 <= len(docs) <= 7
    assert all(len(d["devices"]) == 8 and len(d["samples"]) == 1 and len(d["samples"][0]["gpus"]) == 8
               for d in docs)
    hits = [nvml_trigger(e, 0.0) for d in docs for e in d["events"]]
    assert [(h.reason, h.source) for h in hits if h] == [("xid 119", "nvml")], "the recording's one Xid event"


def test_a_hanging_nvml_is_cut_off_and_noted_once() -> None:
    rec = recording("replay_8xa100_nvlink.json")
    sampler = NvmlSampler(0.2, timeout_s=0.5, loader=lambda: FakeNvml(rec, hang_on="nvmlDeviceGetHandleByIndex"))
    began = time.monotonic()
    docs, notes = run_for(sampler, 2.0)
    assert time.monotonic() - began < 4, "the recorder's poll never waits on NVML"
    assert docs == [] and len(notes) == 1 and notes[0].startswith("nvml timeout: no NVML answer")
    assert sampler.state == "timeout"


def test_no_nvml_is_noted_once_not_retried() -> None:
    sampler = NvmlSampler(0.1, timeout_s=1, loader=_Missing)
    docs, notes = run_for(sampler, 1.0)
    assert docs == [] and notes == ["nvml unavailable: NVML library not found"]
    assert sampler.state == "unavailable" and sampler.poll() == ([], [])


class _Missing:
    """pynvml on a node without the NVIDIA driver: nvmlInit fails with LibraryNotFound."""

    def nvmlInit(self) -> None:
        import pynvml

        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
