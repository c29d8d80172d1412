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
