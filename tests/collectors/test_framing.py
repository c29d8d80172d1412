"""The framing grammar: every wrapper of the issue peeled to the same body, times read, nothing lost."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.framework.framing.streams import frame_lines
from collectors.framework.framing.times import format_iso, parse_iso
from collectors.framework.framing.unframe import unframed_lines
from collectors.framework.framing.wrappers import peel

BODY = "NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus."
REF = datetime(2025, 3, 10, tzinfo=timezone.utc)

# (line, expected ts in ISO or None, host, rank, stream, a wrapper that must be named)
WRAPPED = [
    (f"2025-01-02T03:04:05.123456789Z stderr F {BODY}", "2025-01-02T03:04:05.123456", None, None, "stderr", "cri"),
    (json.dumps({"log": BODY + "\n", "stream": "stdout", "time": "2025-01-02T03:04:05.5Z"}),
     "2025-01-02T03:04:05.500000", None, None, "stdout", "docker_json"),
    (f"2025-01-02T03:04:05.123Z {BODY}", "2025-01-02T03:04:05.123000", None, None, None, "iso"),
    (f"Mar  6 09:55:01 node07 kernel: [ 1936.510073] {BODY}", "2025-03-06T09:55:01", "node07", None, None, "syslog"),
    (f"Mar 06 09:55:01.123456 node07 kernel: {BODY}", "2025-03-06T09:55:01.123456", "node07", None, None,
     "syslog"),
    (f"<4>1 2025-03-06T09:55:01.003Z node07 kernel - - - {BODY}", "2025-03-06T09:55:01.003000", "node07", None, None,
     "rfc5424"),
    (f"2025-03-06T09:55:01+0000 node07 kernel: {BODY}", "2025-03-06T09:55:01", "node07", None, None, "syslog_ident"),
    (f"2025-03-06T09:55:01.123456+01:00 node07 kernel: {BODY}", "2025-03-06T08:55:01.123456", "node07", None, None,
     "iso"),
    (f"2025-03-06T09:55:01,859532+00:00 {BODY}", "2025-03-06T09:55:01.859532", None, None, None, "iso"),
    (f"kern  :err   : 2025-03-06T09:55:01,859532+00:00 {BODY}", "2025-03-06T09:55:01.859532", None, None, None,
     "dmesg_decode"),
    (f"[Sun Feb 23 16:24:18 2025] {BODY}", "2025-02-23T16:24:18", None, None, None, "dmesg_ctime"),
    (f"[May19 19:57] {BODY}", "2024-05-19T19:57:00", None, None, None, "dmesg_human"),
    (f"[  123.456789] {BODY}", None, None, None, None, "dmesg"),
    (f"node07: [  123.456789] {BODY}", None, "node07", None, None, "host_label"),
    (f"gpu-a100-3: {BODY}", None, "gpu-a100-3", None, None, "host_label"),
    (f"3: {BODY}", None, None, 3, None, "srun_label"),
    (f"[rank3]: {BODY}", None, None, 3, None, "torchrun"),
    (f"[1,3]<stderr>: {BODY}", None, None, 3, "stderr", "mpirun"),
    (f"> {BODY}", None, None, None, None, "quote"),
    (f"    [Sun Feb 23 16:24:18 2025] {BODY}", "2025-02-23T16:24:18", None, None, None, "indent"),
    (f"> > 2025-01-02 03:04:05 {BODY}", "2025-01-02T03:04:05", None, None, None, "quote"),
    (f"I0306 09:55:01.123456  1234 file.cc:12] {BODY}", "2025-03-06T09:55:01.123456", None, None, None, "glog"),
    (f"2025-03-06 09:55:01,123 - vllm.engine - ERROR - {BODY}", "2025-03-06T09:55:01.123000", None, None, None,
     "python_logging"),
    (f"[2025-03-06 09:55:01,123] [INFO] {BODY}", "2025-03-06T09:55:01.123000", None, None, None, "level"),
    (f"(EngineCore_DP0 pid=1234) ERROR 03-06 09:55:01 [core.py:12] {BODY}", "2025-03-06T09:55:01", None, None, None,
     "vllm"),
    (f"[2025-03-06 09:55:01 TP0] {BODY}", "2025-03-06T09:55:01", None, None, None, "iso"),
    (f"[INFO|trainer.py:1812] 2025-03-06 09:55:01,123 >> {BODY}", "2025-03-06T09:55:01.123000", None, None, None,
     "level"),
    (f"[Jul 23 2024 07:53:55] [ERROR] {BODY}", "2024-07-23T07:53:55", None, None, None, "fabric_manager"),
    (f"2023/10/19 03:11:54 {BODY}", "2023-10-19T03:11:54", None, None, None, "go_log"),
    (f"  3a | 12/14/22 | 23:09:44 CET | {BODY}", "2022-12-14T23:09:44", None, None, None, "ipmi_sel"),
    (f'time=2025-03-06T09:55:01.123Z level=ERROR source=server.go:12 msg="{BODY}', "2025-03-06T09:55:01.123000", None,
     None, None, "logfmt"),
    (f"2025-01-02T03:04:05Z stdout F [default1]:[rank9]: {BODY}", "2025-01-02T03:04:05", None, 9, "stdout", "torchrun"),
]


@pytest.mark.parametrize(("line", "ts", "host", "rank", "stream", "wrapper"), WRAPPED,
                         ids=[w[-1] + str(i) for i, w in enumerate(WRAPPED)])
def test_every_wrapper_leaves_the_same_body(line, ts, host, rank, stream, wrapper):
    framed = peel(line, 7, reference=REF)
    assert framed.message == BODY
    assert (framed.ts.replace(tzinfo=None).isoformat() if framed.ts else None) == ts
    assert (framed.host, framed.rank, framed.stream) == (host, rank, stream)
    assert wrapper in framed.wrappers
    assert framed.line == 7


def test_nccl_header_names_host_and_pid_and_keeps_the_nccl_word():
    framed = peel("[1,3]<stderr>:node07:1234:5678 [3] NCCL WARN Call to ibv_reg_mr failed")
    assert (framed.message, framed.host, framed.pid, framed.rank) == (
        "NCCL WARN Call to ibv_reg_mr failed", "node07", 1234, 3)


def test_kernel_device_names_are_not_taken_for_pdsh_hosts():
    for line in ("eth0: Link is Down", "e1000e: eth0 NIC Link is Up", "nvme0n1: I/O error", "python3: can't open"):
        framed = peel(line)
        assert framed.host is None and framed.message == line


def test_level_word_after_a_time_is_not_a_syslog_host():
    framed = peel("2025-03-06T09:55:01Z ERROR text_generation_launcher: Shard 0 failed")
    assert framed.host is None and framed.level == "err"
    assert framed.message == "text_generation_launcher: Shard 0 failed"


def test_year_less_stamps_take_the_reference_year_and_say_when_they_guess():
    assert peel("Dec 31 23:59:59 h kernel: x", reference=REF).ts.year == 2024
    assert not peel("Mar  6 09:55:01 h kernel: x", reference=REF).ts_approx
    assert peel("Mar  6 09:55:01 h kernel: x").ts_approx


def test_dmesg_seconds_need_a_boot_time():
    boot = datetime(2025, 3, 6, 9, 0, tzinfo=timezone.utc)
    framed = peel("[   60.500000] x", boot=boot)
    assert framed.ts == datetime(2025, 3, 6, 9, 1, 0, 500000, tzinfo=timezone.utc) and framed.mono == 60.5


def test_cri_partial_lines_are_joined():
    lines = ["2025-01-02T03:04:05Z stderr P torch.OutOfMemoryError: CUDA out ",
             "2025-01-02T03:04:05Z stdout F unrelated",
             "2025-01-02T03:04:06Z stderr F of memory."]
    out = list(frame_lines(lines))
    assert [(f.line, f.message) for f in out] == [(1, "torch.OutOfMemoryError: CUDA out "), (2, "unrelated"),
                                                  (3, "of memory.")]
    joined = list(frame_lines([lines[0], lines[2]]))
    assert [(f.line, f.end_line, f.message) for f in joined] == [(1, 2, "torch.OutOfMemoryError: CUDA out of memory.")]


def test_docker_lines_without_newline_are_joined():
    lines = [json.dumps({"log": "RuntimeError: CUDA error: ", "stream": "stderr", "time": "2025-01-02T03:04:05Z"}),
             json.dumps({"log": "out of memory\n", "stream": "stderr", "time": "2025-01-02T03:04:05Z"})]
    assert [f.message for f in frame_lines(lines)] == ["RuntimeError: CUDA error: out of memory"]


def test_rsyslog_escaped_newlines_are_split_and_keep_the_outer_frame():
    line = "Mar  6 09:55:01 node07 kernel: BUG: unable to handle#012Call Trace:#012#011dump_stack+0x1"
    out = list(frame_lines([line], reference=REF))
    assert [f.message for f in out] == ["BUG: unable to handle", "Call Trace:", "\tdump_stack+0x1"]
    assert {(f.line, f.host, f.ts.isoformat()) for f in out} == {(1, "node07", "2025-03-06T09:55:01+00:00")}


def test_dmesg_human_deltas_accumulate_from_the_last_absolute_stamp():
    out = list(frame_lines(["[May19 19:57] a", "[  +1.500000] b", "[  +0.500000] c", "[May19 20:01] d"],
                           reference=REF))
    assert [f.ts.strftime("%H:%M:%S.%f") for f in out] == ["19:57:00.000000", "19:57:01.500000", "19:57:02.000000",
                                                           "20:01:00.000000"]
    assert all(f.ts_approx for f in out)


def test_undated_lines_take_a_neighbours_time_marked_approximate():
    out = list(frame_lines(["Memory cgroup out of memory: Killed process 1 (python)",
                            "2025-01-02T03:04:05Z first dated", "NCCL WARN bare", "2025-01-02T03:04:09Z later"]))
    assert [(f.ts.second, f.ts_approx, f.ts_origin) for f in out] == [
        (5, True, "neighbour"), (5, False, "iso"), (5, True, "neighbour"), (9, False, "iso")]


def test_nothing_dated_stays_undated():
    out = list(frame_lines(["NCCL WARN a", "plain"]))
    assert [(f.ts, f.message) for f in out] == [(None, "NCCL WARN a"), (None, "plain")]


def test_parse_iso_reads_every_spelling():
    for text in ("2025-03-06T09:55:01Z", "2025-03-06 09:55:01", "2025-03-06_09:55:01", "2025-03-06T09:55:01,123",
                 "2025-03-06T10:55:01.123456789+01:00", "2025-03-06T10:55:01+0100"):
        assert parse_iso(text).replace(microsecond=0) == datetime(2025, 3, 6, 9, 55, 1, tzinfo=timezone.utc)
    assert parse_iso("2025-13-06T09:55:01Z") is None and parse_iso("yesterday") is None


FRAGMENTS = ["2025-01-02T03:04:05.123Z ", "2025-01-02T03:04:05Z stderr F ", "2025-01-02T03:04:05Z stdout P ",
             "Mar  6 09:55:01 node07 kernel: ", "[  12.5] ", "[May19 19:57] ", "[  +0.1] ", "> ", "```", "3: ",
             "[rank1]: ", "[1,2]<stdout>: ", "node07: ", "h:1:2 [0] ", "I0306 09:55:01.1 1 f.cc:1] ", "#012",
             '{"log":"x\\n","stream":"stderr"}', '{"log":', "<6>", "kern  :err   : ", "[2025-01-02 03:04:05] "]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)), max_size=5).map("".join),
                max_size=20))
def test_fuzz_never_raises_never_loses_a_line(lines):
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    out = list(frame_lines(lines, reference=REF))
    covered = set()
    for f in out:
        covered.update(range(f.line, (f.end_line or f.line) + 1))
    assert covered == set(range(1, len(lines) + 1))
    for f in out:
        joined_or_decoded = f.end_line or "docker_json" in f.wrappers or "escaped_newlines" in f.wrappers
        if not joined_or_decoded:
            assert lines[f.line - 1].endswith(f.message)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_peel_body_is_a_suffix(text):
    framed = peel(text)
    if "docker_json" not in framed.wrappers:
        assert text.endswith(framed.message)


def test_unframed_lines_take_off_only_what_no_parser_reads():
    lines = ["```", "[May19 19:57] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: 0000:00:03.0",
             "[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
             "2025-01-02T03:04:05.5Z stderr F NVRM: Xid (PCI:0000:19:00): 79, pid=0",
             "2025-01-02T03:04:05Z stdout F [rank1]: NCCL WARN x", "> Mar  6 09:55:01 node07 kernel: NVRM: q",
             "Mar  6 09:55:01 node07 kernel: [ 1936.510073] NVRM: Xid", "plain", "```"]
    out = list(unframed_lines(lines, reference=REF))
    assert out == ["", "[Sun May 19 19:57:00 2024] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: "
                       "0000:00:03.0",
                   "[Sun May 19 19:57:00 2024] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)",
                   "2025-01-02T03:04:05,500000+00:00 NVRM: Xid (PCI:0000:19:00): 79, pid=0",
                   "2025-01-02T03:04:05.000000Z [rank1]: NCCL WARN x", "Mar  6 09:55:01 node07 kernel: NVRM: q",
                   lines[6], "plain", ""]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=30)), max_size=5).map("".join),
                max_size=20))
def test_fuzz_unframed_lines_keep_the_line_count(lines):
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    assert len(list(unframed_lines(lines, reference=REF))) == len(lines)


def test_format_iso_is_what_parse_iso_reads_back() -> None:
    # The collectors' one writer and one reader of a time (a scrape's time= mark, a sample header).
    when = datetime(2026, 11, 28, 10, 0, 1, 250000, tzinfo=timezone.utc)
    assert format_iso(when) == "2026-11-28T10:00:01.250000Z"
    assert format_iso(when.replace(tzinfo=None)) == "2026-11-28T10:00:01.250000Z"  # naive is UTC
    assert parse_iso(format_iso(when)) == when
    assert parse_iso("2026-11-28T10:00:01+00:00") == when.replace(microsecond=0)
    assert parse_iso("not a time") is None
