"""Bytes that do not decode cost nothing but themselves: every parser reads them as U+FFFD (the one
spelling, ``bytes.decode("utf-8", "replace")``, wherever a parser decodes) and keeps the line, with its
event.

Before the fix the kernel parser skipped a line with one invalid byte as "not UTF-8 text" (an Xid 79
line ending in ``\\xff`` was gone from the timeline), its and the NCCL parser's RE2 prefilters (UTF-8
mode) did not match across an invalid byte although they matched across U+FFFD, an invalid byte in an
NCCL channel line's transport raised UnicodeDecodeError (the rest of the file unparsed), and an escaped
lone surrogate in any JSON evidence (``"\\ud800"``) made a string no row can be stored with: the ingest
failed with an internal error."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import k8s, nccl, nvidia_smi, prometheus
from collectors.base import Event, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import CORPUS
from tests.reliability.test_one_bad_item import corpus_events, corpus_matrix, event_list
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle

REFERENCE = datetime(2026, 12, 1, tzinfo=timezone.utc)
INVALID = [b"\xff", b"\xfe\xfe", b"\xc3\x28", b"\x80", b"\x80\x81\x82", b"\xe2\x82", b"\xed\xa0\x80",
           b"\xc0\xaf", b"\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xe0\x80"]
"""Lone continuation bytes, bytes never valid, cut sequences, an encoded surrogate, overlong forms, past U+10FFFF."""


def parse(module: Any, kind: str, data: bytes) -> list:
    ctx = ParseContext(host="h", reference_time=REFERENCE, mtime=REFERENCE, boot_time=REFERENCE)
    return list(module.parse(kind, io.BytesIO(data), ctx))


def _corpus_by_family() -> dict[str, list[tuple[str, str, bytes]]]:
    """(name, kind, bytes) of every corpus file by the collector that claims it, plus the structured
    forms the corpus has no file of, built from its samples (tests/reliability/test_one_bad_item.py)."""
    found: dict[str, list[tuple[str, str, bytes]]] = {}
    for row in (CORPUS / "INDEX.tsv").read_text().splitlines()[1:]:
        rel = row.split("\t")[0]
        data = (CORPUS / rel).read_bytes()
        sniffed = registry.sniff(rel, data[:64 << 10].decode("utf-8", "replace"))
        if sniffed is not None:
            found.setdefault(sniffed[1].NAME, []).append((rel, sniffed[0], data))
    found.setdefault("k8s", []).append(("events.json", "k8s_events_json", event_list(corpus_events()).encode()))
    found.setdefault("prometheus", []).append(("query_range.json", "prom_api_json",
                                               json.dumps(corpus_matrix(), indent=1).encode()))
    return found


FAMILIES = _corpus_by_family()


def test_every_parser_family_of_the_corpus_is_covered():
    assert {"kernel", "nccl", "slurm", "k8s", "nvidia_smi", "prometheus", "infiniband", "ethtool",
            "storage", "metrics_csv"} <= set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_invalid_bytes_read_as_the_replacement_character(family, data):
    """Invalid bytes anywhere in any line of a real sample give exactly the rows that the same line with
    U+FFFD in their place gives: no line, event or row lost to them, no parser error."""
    name, kind, text = data.draw(st.sampled_from(FAMILIES[family]), label="file")
    module = registry.collector_for_kind(kind)
    lines = text.split(b"\n")
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    at = data.draw(st.integers(0, len(lines[index])), label="position")
    bad = data.draw(st.sampled_from(INVALID), label="bytes")
    damaged = lines[index][:at] + bad + lines[index][at:]
    with_bytes = parse(module, kind, b"\n".join([*lines[:index], damaged, *lines[index + 1:]]))
    replaced = damaged.decode("utf-8", "replace").encode()
    with_replacement = parse(module, kind, b"\n".join([*lines[:index], replaced, *lines[index + 1:]]))
    assert [repr(r) for r in with_bytes] == [repr(r) for r in with_replacement], (name, index + 1, at, bad)
    assert not [r for r in with_bytes if isinstance(r, Skipped) and "error" in r.reason], (name, index + 1)


def _event_lines(family: str) -> list[tuple[str, str, bytes, int]]:
    """(name, kind, bytes, line) of every corpus line a log parser makes an event of."""
    out = []
    for name, kind, text in FAMILIES[family]:
        rows = parse(registry.collector_for_kind(kind), kind, text)
        out += [(name, kind, text, n) for n in sorted({r.line for r in rows if isinstance(r, Event) and r.line})]
    return out


@pytest.mark.parametrize("family", ["kernel", "slurm"])
def test_an_invalid_byte_at_the_end_of_an_event_line_keeps_its_event(family):
    """Where the event is a message (kernel and Slurm daemon logs), a stray byte after it (a crash
    mid-write, a lossy pipe) changes nothing but the text: every event kind of every event line of the
    corpus is still there. (Where a line ends in a value, a value with U+FFFD after it is another value:
    the property test above covers those.)"""
    checked = 0
    for name, kind, text, n in _event_lines(family):
        module = registry.collector_for_kind(kind)
        lines = text.split(b"\n")
        before = {r.kind for r in parse(module, kind, text) if isinstance(r, Event) and r.line == n}
        lines[n - 1] = lines[n - 1].rstrip(b"\r") + b"\xff"
        after = {r.kind for r in parse(module, kind, b"\n".join(lines)) if isinstance(r, Event) and r.line == n}
        assert before <= after, (name, n, before - after)
        checked += 1
    assert checked >= 10


def test_xid_79_line_ending_in_an_invalid_byte_is_on_the_timeline(tmp_path: Path):
    """The probe's case, through the real ingest: the Xid 79 of nvidia-docker#1553 with ``\\xff`` after it."""
    lines = (CORPUS / "kernel" / "nvidia-docker_1553_xid79_pid0_crashdump_dmesg.log").read_bytes().split(b"\n")
    n = next(i for i, line in enumerate(lines, start=1) if b"NVRM: Xid" in line and b": 79," in line)
    lines[n - 1] += b"\xff"
    log = tmp_path / "node03" / "dmesg.txt"
    log.parent.mkdir()
    log.write_bytes(b"\n".join(lines))
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        (result,) = ingest_paths(bundle, [str(log)])
        found = bundle.con.execute("SELECT kind, message, line, attrs FROM event WHERE line = ? ORDER BY kind",
                                   [n]).fetchall()
        stored = bundle.artifact_lines(bundle.artifacts()[0]["sha256"], n)
    assert result.skipped == 0
    xid = next(row for row in found if row[0] == "xid")
    assert json.loads(xid[3])["xid"] == 79
    assert xid[1].endswith("GPU has fallen off the bus.\ufffd"), "the line's text, the byte as U+FFFD"
    assert stored == [lines[n - 1].decode("utf-8", "replace")]
    assert {row[0] for row in found} >= {"xid", "gpu_fell_off_bus"}


def test_nccl_channel_line_with_an_invalid_byte_costs_no_later_line():
    text = (CORPUS / "nccl" / "nccl_562_ibv_create_qp_failed_slurm_pyxis_a100.log").read_bytes()
    channel = b"hai-a100-3:376586:377442 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/IPC\xff\n"
    rows = parse(nccl, "nccl_log", channel + text)
    clean = parse(nccl, "nccl_log", text)
    assert [(r.kind, r.line - 1) for r in rows if isinstance(r, Event)] == \
        [(r.kind, r.line) for r in clean if isinstance(r, Event)]


@pytest.mark.parametrize("after", [b"NCCL INFO prox", b"NCCL INFO proxy.cc", b"NCCL INFO"])
def test_nccl_prefilter_reads_an_invalid_byte_as_it_reads_the_replacement_character(after):
    """The RE2 prefilter (UTF-8 mode) matched an error chain's ``file:line -> N`` with U+FFFD in the file
    name, not with the byte itself: the chain's line was lost."""
    text = (CORPUS / "nccl" / "nccl-tests_252_ib_error4_connection_closed_by_localrank.log").read_bytes()
    assert after in text
    for bad in INVALID:
        damaged = text.replace(after, after + bad, 1)
        want = parse(nccl, "nccl_log", damaged.decode("utf-8", "replace").encode())
        assert [repr(r) for r in parse(nccl, "nccl_log", damaged)] == [repr(r) for r in want], bad


@pytest.mark.parametrize(("module", "kind", "document"), [
    (k8s, "k8s_events_json", lambda: event_list(corpus_events())),
    (prometheus, "prom_api_json", lambda: json.dumps(corpus_matrix())),
], ids=["k8s_events_json", "prom_api_json"])
def test_escaped_lone_surrogate_in_json_is_read_as_the_replacement_character(tmp_path, module, kind, document):
    """JSON may spell what no UTF-8 can hold: ``"\\ud800"``. It is read as U+FFFD, as an invalid byte is,
    and the document lands (before, the row writer raised and the whole ingest failed)."""
    text = document()
    key = '"message": "' if kind == "k8s_events_json" else '"le": "'
    damaged = text.replace(key, key + "\\ud800", 1).replace(key, key + "\\udfff\\ud83d\\ude00", 1)
    rows = parse(module, kind, damaged.encode())
    want = parse(module, kind, text.replace(key, key + "\ufffd", 1).replace(key, key + "\ufffd\U0001f600", 1)
                 .encode("utf-8"))
    assert [repr(r) for r in rows] == [repr(r) for r in want]
    path = tmp_path / "evidence.json"
    path.write_text(damaged)
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        (result,) = ingest_paths(bundle, [str(path)])
    assert result.status == "new" and result.kind == kind and result.skipped == 0


def test_xml_with_an_invalid_byte_in_a_value_keeps_the_gpu():
    text = (CORPUS / "nvml" / "rtx4070_laptop_575_nvidia-smi-q-x_partial.xml").read_bytes()
    damaged = text.replace(b"<product_brand>GeForce", b"<product_brand>GeForce\xff", 1)
    assert damaged != text
    rows = parse(nvidia_smi, "nvidia_smi_xml", damaged)
    want = parse(nvidia_smi, "nvidia_smi_xml", damaged.decode("utf-8", "replace").encode())
    assert [repr(r) for r in rows] == [repr(r) for r in want]
    assert not [r for r in rows if isinstance(r, Skipped) and "XML" in r.reason]
