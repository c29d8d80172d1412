"""nccl-tests output: the bus bandwidth of each run (the number acceptance signs off on), its integrity
columns, and who ran it; on the layout of nccl-tests 2.x (tests/data/baseline/accepted/node07) and the
launcher-prefixed, several-runs-in-one-file way responders paste it."""

from __future__ import annotations

import io

from collectors import nccl_tests
from collectors.base import Event, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import ROOT

RUN = (ROOT / "tests" / "data" / "baseline" / "accepted" / "node07" / "all_reduce_perf.txt").read_text()


def parse(text: str, host: str | None = None) -> list:
    return list(nccl_tests.parse("nccl_tests", io.BytesIO(text.encode()), ParseContext(host=host)))


def test_one_run_is_one_event_with_its_bus_bandwidth() -> None:
    assert registry.sniff("all_reduce_perf.txt", RUN) == ("nccl_tests", nccl_tests)
    (event,) = parse(RUN)
    assert isinstance(event, Event) and event.kind == "nccl_test_result" and event.severity == "info"
    assert event.host == "node07" and event.line == 20
    assert event.attrs == {"test": "all_reduce_perf", "avg_busbw_gbps": 337.591, "peak_busbw_gbps": 348.9,
                           "peak_size_bytes": 8589934592, "sizes": 7, "wrong": 0, "out_of_bounds_ok": True,
                           "nranks": 2, "hosts": ["node07"], "gpus": ["NVIDIA H100 80GB HBM3"],
                           "nccl_library": "21903"}
    assert event.message == "all_reduce_perf: avg bus bandwidth 337.591 GB/s, peak 348.9 GB/s over 2 ranks"


def test_wrong_values_make_an_error_and_the_file_host_wins() -> None:
    bad = RUN.replace("348.66      0    24620", "348.66      3    24620").replace("values : 0 OK", "values : 3 FAILED")
    (event,) = parse(bad, host="node09")
    assert (event.severity, event.host, event.attrs["wrong"], event.attrs["out_of_bounds_ok"]) == (
        "error", "node09", 3, False)
    assert event.message.endswith("; 3 wrong values; out-of-bounds values")


def test_launcher_prefixes_and_two_runs_in_one_paste() -> None:
    second = RUN.replace("all_reduce_perf", "all_gather_perf").replace("337.591", "301.2")
    text = "\n".join(f"[1,0]<stdout>:{line}" for line in (RUN + second).splitlines()) + "\nsome shell prompt $\n"
    rows = parse(text)
    events = [r for r in rows if isinstance(r, Event)]
    assert [(e.attrs["test"], e.attrs["avg_busbw_gbps"]) for e in events] == [("all_reduce_perf", 337.591),
                                                                           ("all_gather_perf", 301.2)]
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["not nccl-tests output"]


def test_a_run_cut_before_its_summary_says_nothing() -> None:
    cut = RUN.split("# Out of bounds")[0]
    assert [r for r in parse(cut) if isinstance(r, Event)] == []
    assert nccl_tests.sniff("x.txt", "hello\nworld\n") == {}


FAILED_RUN = """# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid    123 on gpu-node-1 device  0 [0x18] NVIDIA H100 80GB HBM3
gpu-node-1: Test NCCL failure common.cu:958 '{error} / {last}'
 .. gpu-node-1 pid 123: Test failure common.cu:891
 .. gpu-node-1 pid 123: Test failure all_reduce.cu:90
"""


def _failure(error: str, last: str) -> Event:
    rows = parse(FAILED_RUN.format(error=error, last=last))
    (event,) = [r for r in rows if isinstance(r, Event)]
    return event


def test_a_failed_run_is_the_error_nccl_returned_with_its_call_chain() -> None:
    event = _failure("internal error - please report this issue to the NCCL developers", "")
    assert (event.kind, event.host, event.line, event.severity) == ("nccl_error", "gpu-node-1", 5, "error")
    assert event.attrs["nccl_error"] == "ncclInternalError"
    assert event.attrs["chain"] == ["common.cu:891", "all_reduce.cu:90"] and event.attrs["pid"] == 123


def test_a_failed_runs_last_error_means_what_ncclss_warn_means() -> None:
    shm = _failure("unhandled system error (run with NCCL_DEBUG=INFO for details)",
                   "Error while creating shared memory segment /dev/shm/nccl-KWfVyt (size 5967872)")
    assert (shm.kind, shm.attrs["causes"]) == ("nccl_shm_error", ["shm_exhausted"])
    calloc = _failure("unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                      "Failed to CUDA calloc 1048576 bytes")
    assert (calloc.kind, calloc.attrs["causes"]) == ("nccl_alloc_failed", ["gpu_oom"])
    remote = _failure("remote process exited or there was a network error",
                      "NET/IB : Got completion from peer 10.0.35.1<49189> with status=12 opcode=0 len=0 "
                      "vendor err 129")
    assert remote.kind == "nccl_net_error" and remote.attrs["nccl_error"] == "ncclRemoteError"


def test_a_cuda_failure_of_the_test_itself_is_a_cuda_error() -> None:
    rows = parse("gpu-node-1: Test CUDA failure common.cu:732 'out of memory'\n"
                 " .. gpu-node-1 pid 9: Test failure common.cu:1\n")
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert (event.kind, event.attrs["oom"], event.attrs["chain"]) == ("cuda_error", True, ["common.cu:1"])


def test_a_failure_chain_without_its_failure_line_is_a_counted_skip() -> None:
    rows = parse(" .. gpu-node-1 pid 123: Test failure common.cu:891\n")
    assert [type(r) for r in rows] == [Skipped]
