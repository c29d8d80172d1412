"""The signature catalog: every real sample recognised by its own signature, in any wrapper, once."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.framework import vocabulary
from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import CATALOG, SignatureError, catalog, load_signatures
from tests.conftest import ingest_timeline
from workbench.analysis.causes import load_causes

SIGNATURES = load_signatures()
SAMPLES = [(sig, sample) for sig in SIGNATURES for sample in sig.samples]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("sig", "sample"), SAMPLES, ids=[f"{s.id}-{i}" for i, (s, _) in enumerate(SAMPLES)])
def test_every_sample_is_recognised_by_its_own_signature(sig, sample):
    found = catalog().match(peel(sample.line).message)
    assert found is not None, f"{sig.id}: sample not recognised: {sample.line!r}"
    assert found[0].id == sig.id
    attrs = found[1]
    assert attrs["signature"] == sig.id
    assert vocabulary.problems(sig.kind, sig.layer if sig.kind != "xid" else "gpu", attrs) == []


@pytest.mark.parametrize(("sig", "sample"), SAMPLES, ids=[f"{s.id}-{i}" for i, (s, _) in enumerate(SAMPLES)])
def test_every_sample_holds_an_anchor_and_names_its_source(sig, sample):
    assert any(anchor in sample.line for anchor in sig.anchors), "the prefilter would never show this line"
    source = sample.source
    assert source.startswith("https://") or (ROOT / source).is_file(), source
    if not source.startswith("https://"):
        assert sample.line.strip() in (ROOT / source).read_text(encoding="utf-8"), "sample is not in its source file"


def test_every_kind_and_cause_is_declared():
    causes = set(load_causes())
    for sig in SIGNATURES:
        assert sig.kind in vocabulary.event_kinds(), sig.id
        if sig.kind != "xid":
            assert sig.layer in vocabulary.event_kinds()[sig.kind].layers, sig.id
        assert sig.cause is None or sig.cause in causes, sig.id


def _catalog_with(tmp_path: Path, **changes) -> Path:
    doc = yaml.safe_load((CATALOG / "cuda.yaml").read_text(encoding="utf-8"))
    doc["signatures"][0].update(changes)
    path = tmp_path / "cuda.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize(("change", "message"), [
    ({"samples": [{"line": "CUDA_ERROR_ECC_UNCORRECTABLE", "source": "https://example.org/1"}]}, "at least 2"),
    ({"samples": [{"line": "a"}, {"line": "b"}]}, "'source'"),
    ({"severity": "fatal"}, "severity"),
    ({"layer": "network"}, "layer"),
    ({"types": {"nope": "int"}}, "types"),
    ({"regex": "(?P<x>"}, "does not compile"),
    ({"anchors": []}, "anchors"),
    ({"colour": "red"}, "unknown field"),
])
def test_loader_refuses_a_bad_signature_naming_it(tmp_path, change, message):
    with pytest.raises(SignatureError, match="cuda_ecc_uncorrectable") as err:
        load_signatures(_catalog_with(tmp_path, **change))
    assert message in str(err.value)


def test_oom_numbers_become_attrs_in_mib():
    line = ("2025-01-02T03:04:05.1Z stderr F [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.50 GiB is free. Including non-PyTorch "
            "memory, this process has 4.00 GiB memory in use. Of the allocated memory 2.50 GiB is allocated by "
            "PyTorch, and 512.00 MiB is reserved by PyTorch but unallocated.")
    events = list(catalog().scan(io.BytesIO(line.encode() + b"\n")))
    assert len(events) == 1
    attrs = events[0].attrs
    assert (attrs["tried_alloc_mib"], attrs["total_capacity_mib"], attrs["free_mib"], attrs["allocated_by_pytorch_mib"],
            attrs["reserved_unallocated_mib"], attrs["gpu_index"]) == (2048.0, 81049.6, 1536.0, 2560.0, 512.0, 0)
    assert events[0].rank == 3 and events[0].ts == datetime(2025, 1, 2, 3, 4, 5, 100000, tzinfo=timezone.utc)
    assert attrs["causes"] == ["gpu_oom"] and attrs["exception"] == "torch.OutOfMemoryError"


def test_an_xid_in_any_wrapper_reads_like_the_kernels():
    line = (b'{"log":"NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus.\\n","stream":"stdout",'
            b'"time":"2025-01-02T03:04:05Z"}\n')
    (event,) = catalog().scan(io.BytesIO(line))
    assert (event.kind, event.gpu, event.attrs["xid"], event.attrs["name"]) == (
        "xid", "0000:19:00.0", 79, "GPU has fallen off the bus")
    assert "gpu_fell_off_bus" in event.attrs["causes"] and event.layer in ("gpu", "hardware")


def test_severity_follows_the_line_where_the_catalog_says_so():
    ce = "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"
    severities = [e.severity for e in catalog().scan(io.BytesIO(f"{ce}\n{ce.replace(' CE ', ' UE ')}\n".encode()))]
    assert severities == ["warning", "critical"]


def test_a_line_the_parser_wrote_is_not_written_again():
    data = b"noise\nMemory cgroup out of memory: Killed process 42 (python)\nNCCL WARN Call to ibv_create_qp failed\n"
    assert [(e.kind, e.line) for e in catalog().scan(io.BytesIO(data))] == [("oom_kill", 2), ("nccl_warn", 3)]
    kept = catalog().scan(io.BytesIO(data), parsed={2: {"oom_kill"}, 3: {"nccl_net_error"}})
    assert list(kept) == []
    other_kind = catalog().scan(io.BytesIO(data), parsed={2: {"k8s_event"}})
    assert [e.line for e in other_kind] == [2, 3]


def test_undated_lines_take_a_dated_neighbours_time_approximately():
    data = (b"[May19 19:57] usb 1-1: new device\n[  +2.500000] something\n"
            b"[  +0.500000] Memory cgroup out of memory: Killed process 7 (python)\n")
    (event,) = catalog().scan(io.BytesIO(data), reference=datetime(2025, 6, 1, tzinfo=timezone.utc))
    assert event.ts == datetime(2025, 5, 19, 19, 57, 3, tzinfo=timezone.utc) and event.ts_approx
    (bare,) = catalog().scan(io.BytesIO(b"RuntimeError: CUDA error: uncorrectable ECC error encountered\n"))
    assert bare.ts is None and bare.severity == "critical"


def test_lines_split_across_blocks_are_found_with_their_numbers(monkeypatch):
    from collectors.framework import signatures as _signatures

    monkeypatch.setattr(_signatures, "BLOCK_BYTES", 64)
    data = b"".join(f"filler line {i:04d} with some words\n".encode() for i in range(20))
    data += b"Failed to initialize NVML: Driver/library version mismatch\n" + data
    (event,) = catalog().scan(io.BytesIO(data))
    assert event.line == 21 and event.kind == "nvidia_smi_error"


def test_ingest_recognises_known_lines_in_files_no_sniffer_takes(tmp_path):
    pasted = tmp_path / "evidence" / "comment.txt"
    pasted.parent.mkdir()
    pasted.write_text("It crashed again overnight, here is what I got:\n\n"
                      "> RuntimeError: DataLoader worker (pid 3855) is killed by signal: Killed.\n"
                      "and in the fabric manager log:\n"
                      "nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't "
                      "match with driver version 530.41.03. Please update with matching NVIDIA driver package.\n")
    events = ingest_timeline(tmp_path / "b.duckdb", pasted.parent)
    kinds = {e["kind"]: e for e in events}
    assert kinds["dataloader_killed"]["attrs"]["pid"] == 3855
    assert kinds["fabric_manager_error"]["attrs"]["driver_version"] == "530.41.03"
    assert kinds["fabric_manager_error"]["attrs"]["causes"] == ["fabric_manager_down"]


def test_ingest_writes_a_kernel_logs_xid_once(tmp_path):
    log = tmp_path / "node01" / "dmesg.txt"
    log.parent.mkdir()
    log.write_text("[    0.000000] Linux version 5.15.0-91-generic (buildd@lcy02)\n"
                   "[ 1936.510073] NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus.\n"
                   "[ 1937.000000] Memory cgroup out of memory: Killed process 42 (python)\n")
    events = ingest_timeline(tmp_path / "b.duckdb", log)
    xids = [e for e in events if e["kind"] == "xid"]
    kills = [e for e in events if e["kind"] == "oom_kill"]
    assert len(xids) == 1 and xids[0]["source"] == "kernel" and "signature" not in xids[0]["attrs"]
    assert len(kills) == 1
    assert json.dumps(events)


def test_a_log_pasted_in_wrappers_is_parsed_as_what_its_lines_are(tmp_path):
    paste = tmp_path / "evidence" / "dmesg.txt"
    paste.parent.mkdir()
    paste.write_text("1. dmesg on the node:\n\n   ```text\n"
                     "    [Sun Jan 11 09:52:01 2026] NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off "
                     "the bus.\n"
                     "    [Sun Jan 11 09:52:02 2026] NVRM: GPU 0000:19:00.0: GPU has fallen off the bus.\n"
                     "   ```\n")
    events = ingest_timeline(tmp_path / "b.duckdb", paste.parent)
    kernel = [e for e in events if e["source"] == "kernel"]
    assert {e["kind"] for e in kernel} >= {"xid"}
    assert all(e["ts"] and e["ts"].startswith("2026-01-11T09:52:0") for e in kernel)
    assert [e["kind"] for e in events].count("xid") == 1


def test_a_clean_kernel_log_is_not_respelled(tmp_path):
    from collectors.framework import registry

    head = "Mar  6 09:55:01 node07 kernel: [ 1936.510073] NVRM: Xid (PCI:0000:19:00): 79, pid=0\n" * 5
    assert registry.sniff_unwrapped("kern.log", head) is None
    assert registry.sniff_unwrapped("kern.log", head.replace("Mar", "> Mar"))[1] == "syslog"


def test_a_system_log_names_other_programs_known_messages_in_one_pass(tmp_path):
    log = tmp_path / "node02" / "syslog"
    log.parent.mkdir()
    log.write_text("Mar  6 09:55:01 node02 kernel: [  10.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  "
                   "530.41.03  Thu Mar 16 19:48:20 UTC 2023\n"
                   "Mar  6 09:55:03 node02 nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version "
                   "530.30.02 don't match with driver version 530.41.03. Please update with matching NVIDIA driver "
                   "package.\n"
                   "Mar  6 09:55:04 node02 kernel: [  13.000000] Memory cgroup out of memory: Killed process 7 "
                   "(python)\n")
    events = ingest_timeline(tmp_path / "b.duckdb", log)
    fm = [e for e in events if e["kind"] == "fabric_manager_error"]
    assert len(fm) == 1 and fm[0]["host"] == "node02" and "T09:55:03" in fm[0]["ts"]
    assert fm[0]["source"] == "kernel" and fm[0]["attrs"]["driver_interface_version"] == "530.30.02"
    assert [e["kind"] for e in events].count("oom_kill") == 1


def test_a_list_printed_one_item_a_line_is_read_with_its_header():
    data = (b"```\nINFO NET/Socket : Using\n[0]bond0:192.168.1.161<0>\n[1]br-05ab815fa14e:172.19.0.1<0>\n"
            b"[2]veth9026f58:fe80::1c91:92ff:fe6f:efe4%veth9026f58<0> \n```\nIs that intended?\n")
    (event,) = catalog().scan(io.BytesIO(data))
    assert event.kind == "nccl_net_interfaces" and event.line == 2
    assert event.attrs["interfaces"] == ["bond0", "br-05ab815fa14e", "veth9026f58"]


ANCHOR_TEXT = sorted({anchor for sig in SIGNATURES for anchor in sig.anchors} | {s.line for _, s in SAMPLES[:20]})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(ANCHOR_TEXT), st.text(max_size=40), st.binary(max_size=40).map(
    lambda b: b.decode("latin-1"))), max_size=30))
def test_fuzz_scan_never_raises_and_points_at_real_lines(parts):
    data = "\n".join(parts).encode("utf-8", "surrogateescape")
    lines = data.count(b"\n") + 1
    for event in catalog().scan(io.BytesIO(data)):
        assert 1 <= event.line <= lines
        assert event.kind in vocabulary.event_kinds()


def test_no_anchor_hides_inside_another_signatures_anchor():
    owners = {}
    for sig in SIGNATURES:
        for anchor in sig.anchors:
            owners.setdefault(anchor, set()).add(sig.id)
    for outer, outer_ids in owners.items():
        for inner, inner_ids in owners.items():
            if inner != outer and inner in outer:
                assert inner_ids <= outer_ids, f"{inner!r} inside {outer!r} would hide {inner_ids - outer_ids}"


WRAPPERS = {
    "cri": lambda i, line: f"2025-01-02T03:04:{i % 60:02d}.123456789Z stderr F {line}",
    "kubectl": lambda i, line: f"2025-01-02T03:04:{i % 60:02d}.123456Z {line}",
    "pdsh": lambda i, line: f"gpu-node-7: {line}",
    "quote": lambda i, line: f"> {line}",
}


def _top_cause(folder: Path, tmp: Path, wrap) -> str | None:
    from tests.conftest import run_cli

    evidence = tmp / "evidence"
    evidence.mkdir(parents=True)
    for src in folder.iterdir():
        if src.is_file() and src.name != "case.yaml":
            lines = src.read_text(encoding="utf-8", errors="replace").splitlines()
            (evidence / src.name).write_text("".join(f"{wrap(i, line)}\n" for i, line in enumerate(lines)))
    assert run_cli("ingest", tmp / "b.duckdb", evidence)[0] == 0
    code, out, _ = run_cli("analyze", tmp / "b.duckdb", "--json")
    hypotheses = json.loads(out)["hypotheses"] if code == 0 else []
    return hypotheses[0]["cause"] if hypotheses else None


@pytest.mark.parametrize("case", ["deepfacelab-linux-89", "genesis-quadrants-589", "nccl-902"])
def test_a_wrapper_does_not_change_the_diagnosis(tmp_path, case):
    folder = ROOT / "tests" / "real_incidents" / case
    plain = _top_cause(folder, tmp_path / "plain", lambda i, line: line)
    assert plain is not None
    for name, wrap in WRAPPERS.items():
        assert _top_cause(folder, tmp_path / name, wrap) == plain, name


def test_a_signature_names_only_a_code_table_that_exists(tmp_path):
    with pytest.raises(SignatureError, match="cuda_ecc_uncorrectable") as err:
        load_signatures(_catalog_with(tmp_path, table="nope"))
    assert "no collectors/catalog/nope.yaml" in str(err.value)


def test_a_table_signature_writes_only_codes_its_table_knows():
    known = catalog().match("RuntimeError: CUDA error: misaligned address")
    assert known is not None and (known[1]["name"], known[1]["code"]) == ("cudaErrorMisalignedAddress", 716)
    assert catalog().match("RuntimeError: CUDA error: the flux capacitor is out of sync") is None
