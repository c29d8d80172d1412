"""Kernel-log collector: every kernel-log file of the corpus through the user's path (gpuwb ingest,
then gpuwb timeline --json), checked against what its INDEX.tsv labels say; then clocks, block
boundaries, sniffing, junk input and live capture.

The label checks are generic (one checker per label key), so an unseen file of the same kinds with
the same kinds of labels is checked the same way."""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import kernel
from collectors.base import Artifact, Event, GpuInventory, HostFact, ParseContext, Skipped, normalize_pci
from collectors.kernel import blocks, log_capture
from tests.conftest import CORPUS, corpus_index, ingest_timeline, run_cli

KERNEL_STYLES = {"dmesg_monotonic", "dmesg_ctime", "dmesg_decode_iso", "journalctl_short_iso", "syslog",
                 "syslog_no_host", "none"}
INDEX = corpus_index()
KERNEL_FILES = sorted(path for path, row in INDEX.items()
                      if path.startswith("kernel/") or (path.startswith("network_storage/")
                                                        and row["parsed_labels"].get("ts_style") in KERNEL_STYLES))

EVENT_NAMES = {"fallen_off_bus": "gpu_fell_off_bus", "nfs_server_not_responding": "nfs_not_responding",
               "nfs_server_ok": "nfs_ok", "hung_task": "hung_task", "oom_kill": "oom_kill",
               "gsp_heartbeat_timeout": "gsp_heartbeat_timeout", "rdma_link_down": "link_down"}


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _pci_prefix(label: str) -> str:
    """Labels write Xid-style ids (``0000:9b:00``); events carry ``0000:9b:00.0``."""
    return normalize_pci(label) if label.count(":") == 2 and "." not in label else label


def _ts(event: dict) -> datetime | None:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")) if event["ts"] else None


def _label_time(value: str) -> tuple[str, object]:
    """A label time as the kind of comparison it needs: raw seconds, an exact instant, or a
    year-less syslog time (month, day, clock)."""
    if re.fullmatch(r"\d+\.\d+", value):
        return "raw", value
    if m := re.fullmatch(r"(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:,(\d+))?([+-]\d\d:?\d\d)", value):
        tz = m.group(4) if ":" in m.group(4) else f"{m.group(4)[:3]}:{m.group(4)[3:]}"
        frac = f".{m.group(3)}" if m.group(3) else ""
        return "instant", datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}{frac}{tz}")
    if re.fullmatch(r"[A-Z][a-z]{2} [A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d \d{4}", value):
        return "instant", datetime.strptime(" ".join(value.split()), "%a %b %d %H:%M:%S %Y").replace(
            tzinfo=timezone.utc)
    if re.fullmatch(r"[A-Z][a-z]{2} +\d+ \d\d:\d\d:\d\d", value):
        return "syslog", datetime.strptime(" ".join(value.split()), "%b %d %H:%M:%S")
    raise AssertionError(f"label time not understood: {value}")


def _same_time(event: dict, value: str) -> bool:
    how, want = _label_time(value)
    if how == "raw":
        return event["ts_raw"] == want
    ts = _ts(event)
    if ts is None:
        return False
    if how == "instant":
        return ts == want
    return (ts.month, ts.day, ts.strftime("%H:%M:%S")) == (want.month, want.day, want.strftime("%H:%M:%S"))


def _attr_values(events: list[dict], key: str, kinds: tuple[str, ...] = ()) -> list:
    return [e["attrs"].get(key) for e in events if (not kinds or e["kind"] in kinds) and key in e["attrs"]]


def _of(events: list[dict], kind: str, **attrs: object) -> list[dict]:
    return [e for e in events if e["kind"] == kind and all(e["attrs"].get(k) == v for k, v in attrs.items())]


def _check_xid(events, value, text):
    xids = set(_attr_values(events, "xid", ("xid",)))
    if value == "none":
        assert not xids
    else:
        assert {int(v) for v in _split(value)} <= xids


def _check_pci(events, value, text):
    seen = {e["gpu"] for e in events} | set(_attr_values(events, "pci")) | set(_attr_values(events, "device"))
    for pci in _split(value):
        assert any(s and s.startswith(_pci_prefix(pci)) for s in seen), (pci, seen)


def _check_uuid(events, value, text):
    assert value in _attr_values(events, "uuid"), value


def _check_pids(events, value, text):
    pids = set(_attr_values(events, "pid"))
    for pid in _split(value):
        if pid.startswith("<"):
            assert None in pids or any(e["attrs"].get("pid") is None for e in events if e["kind"] == "xid")
        else:
            assert int(pid) in pids, (pid, pids)


def _check_process(events, value, text):
    assert value in _attr_values(events, "process"), value


def _order(event: dict, value: str) -> int:
    """-1, 0, 1: the event's time before, at, after the label's time."""
    how, want = _label_time(value)
    if how == "raw":
        got, ref = float(event["ts_raw"]), float(want)
    else:
        ts = _ts(event)
        got = ts if how == "instant" else (ts.month, ts.day, ts.strftime("%H:%M:%S"))
        ref = want if how == "instant" else (want.month, want.day, want.strftime("%H:%M:%S"))
    return (got > ref) - (got < ref)


def _check_bound(last: bool):
    """first_ts/last_ts name the log's first/last time: no event lies outside them, and an event on
    the line that carries that time has exactly it."""
    def check(events, value, text):
        dated = [e for e in events if e["ts"] or e["ts_raw"]]
        assert dated
        edge = max(dated, key=lambda e: e["line"]) if last else min(dated, key=lambda e: e["line"])
        assert _order(edge, value) == 0 or _order(edge, value) == (-1 if last else 1), (value, edge)
        lines = [n for n, line in enumerate(text.splitlines(), start=1) if value in line]
        on_line = [e for e in dated if lines and e["line"] == (lines[-1] if last else lines[0])]
        assert all(_same_time(e, value) for e in on_line), value
    return check


def _check_some_time(events, value, text):
    assert any(_same_time(e, value) for e in events), value


def _check_count(events, value, text):
    assert Counter(e["kind"] for e in events).most_common(1)[0][1] == int(value)


def _check_events(events, value, text):
    kinds = {e["kind"] for e in events}
    for name in _split(value):
        if name in EVENT_NAMES:
            assert EVENT_NAMES[name] in kinds, (name, kinds)


def _check_attr(key: str, kinds: tuple[str, ...] = (), cast: Callable[[str], object] = str):
    def check(events, value, text):
        values = _attr_values(events, key, kinds)
        for want in _split(value) if cast is not str else [value]:
            assert cast(want) in values, (key, want, values)
    return check


def _check_xid_field(xid: int, key: str, cast: Callable[[str], object] = str):
    def check(events, value, text):
        values = [e["attrs"].get(key) for e in _of(events, "xid", xid=xid)]
        assert cast(value) in values, (xid, key, value, values)
    return check


def _check_hung(events, value, text):
    proc, pid = value.rsplit(":", 1)
    assert _of(events, "hung_task", process=proc, pid=int(pid))


def _check_kind_time(kind: str):
    def check(events, value, text):
        assert any(_same_time(e, value) for e in events if e["kind"] == kind), (kind, value)
    return check


def _check_first_error(events, value, text):
    errors = [e for e in events if e["severity"] in ("error", "critical")]
    assert errors and _same_time(min(errors, key=lambda e: e["line"]), value)


def _check_host(events, value, text):
    assert value in {e["host"] for e in events}


def _check_func(events, value, text):
    assert value in _attr_values(events, "func")


def _check_recovery(events, value, text):
    assert value in _attr_values(events, "recovery_action", ("xid",))


def _check_channel(events, value, text):
    assert any(int(c, 16) == int(value, 16) for c in _attr_values(events, "channel", ("xid",)))


def _check_nids(events, value, text):
    assert value in _attr_values(events, "nid"), value


def _check_device_names(events, value, text):
    names = set(_attr_values(events, "device")) | set(_attr_values(events, "port"))
    for name in _split(value):
        assert name in names, (name, names)


def _check_any_device(events, value, text):
    names = set(_attr_values(events, "device", ("link_down", "link_up")))
    assert names & set(_split(value)), (value, names)


def _check_message(events, value, text):
    assert any(value in e["message"] for e in events), value


def _check_aer_severity(events, value, text):
    assert value.lower() in {s.split("_")[0] for s in _attr_values(events, "severity", ("pcie_aer",))}


def _check_pcie_link(events, value, text):
    speed, width = value.rsplit(" ", 1)
    assert _of(events, "pcie_bandwidth", speed=speed, width=width) or _of(events, "pcie_link_degraded")


CHECKS: dict[str, Callable] = {
    "xid": _check_xid, "sxid": _check_attr("sxid", ("sxid",), int), "pci": _check_pci, "gpu_pci": _check_pci,
    "nvswitch_pci": _check_pci, "aer_port": _check_pci, "gpu_uuid": _check_uuid, "pid": _check_pids,
    "pids": _check_pids, "killed_pid": _check_pids, "name": _check_process, "comm": _check_process,
    "killed_comm": _check_process, "first_ts": _check_bound(False), "last_ts": _check_bound(True),
    "ts": _check_some_time, "event1_ts": _check_some_time, "event2_ts": _check_some_time, "count": _check_count,
    "event": _check_events,
    "caused_by_xid": _check_attr("caused_by_xid", ("xid",), int), "channel": _check_channel,
    "recovery_action": _check_recovery, "nvlink_links": _check_attr("nvlink_link", ("xid",), int),
    "nvlink_link": _check_attr("nvlink_link", ("xid",), int),
    "registers": lambda ev, v, text: _split(v) in _attr_values(ev, "registers", ("xid",)),
    "xid149_unit": _check_xid_field(149, "nvlink_unit"), "xid149_severity": _check_xid_field(149, "nvlink_severity"),
    "xid149_link": _check_xid_field(149, "nvlink_link", int), "xid145_unit": _check_xid_field(145, "nvlink_unit"),
    "xid145_severity": _check_xid_field(145, "nvlink_severity"),
    "xid145_link": _check_xid_field(145, "nvlink_link", int), "xid94_unit": _check_xid_field(94, "unit"),
    "xid95_unit": _check_xid_field(95, "unit"),
    "xid95_rst": _check_xid_field(95, "reset_required", lambda v: v == "Yes"),
    "d_rst": _check_attr("drain_reset_required", ("xid",), lambda v: v == "Yes"),
    "mig_gpu_instance": _check_attr("gpu_instance", ("xid",)), "nfs_server": _check_attr("server"),
    "hung_task": _check_hung, "hung_secs": _check_attr("seconds", ("hung_task",), int),
    "hung_ts": _check_kind_time("hung_task"), "ok_ts": _check_kind_time("nfs_ok"),
    "constraint": _check_attr("constraint", ("oom_kill",)), "global_oom": _check_attr(
        "global_oom", ("oom_kill",), lambda v: v == "true"),
    "anon_rss_kB": _check_attr("anon_rss_kb", ("oom_kill",), int),
    "total_vm_kB": _check_attr("total_vm_kb", ("oom_kill",), int), "uid": _check_attr("uid", ("oom_kill",), int),
    "second_invoker": _check_attr("process", ("oom_invoked",)),
    "heartbeat_diff_ms": _check_attr("diff_ms", ("gsp_heartbeat_timeout",), int),
    "heartbeat_timeout_ms": _check_attr("timeout_ms", ("gsp_heartbeat_timeout",), int),
    "gsp_timeout_s": _check_attr("gsp_timeout_s", ("xid",), int), "gsp_function": _check_attr("gsp_function", ("xid",)),
    "module": lambda ev, v, text: v in _attr_values(ev, "module") + _attr_values(ev, "driver"),
    "func": _check_func, "first_error_ts": _check_first_error, "host": _check_host,
    "lib": _check_attr("lib", ("segfault",)), "segfault_addr": _check_attr("address", ("segfault",)),
    "ip": _check_attr("ip", ("segfault",)), "error": _check_attr("error", ("segfault",)),
    "nvswitch": _check_attr("nvswitch", ("sxid",)), "pci_id": _check_attr("pci_id", ("gpu_fell_off_bus",)),
    "crash_dump": lambda ev, v, text: any(e["attrs"].get("crash_dump") for e in ev),
    "aer_severity": _check_aer_severity, "mgs_nid": _check_nids, "mdt_nid": _check_nids,
    "lnet_timeout_s": _check_attr("seconds", ("lnet_error",), int), "lustre_rc": _check_attr("rc", (), int),
    "fsname": lambda ev, v, text: v in _attr_values(ev, "fsname") or v == "lustre",
    "port_module_event": _check_attr("status", ("port_module_event",)),
    "module_id": _check_attr("module", ("port_module_event",), int),
    "pcie_bw": lambda ev, v, text: float(v.split()[0]) in _attr_values(ev, "gbps"), "pcie_link": _check_pcie_link,
    "rdma_dev": _check_device_names, "ifaces": _check_device_names, "bond": _check_any_device, "msg": _check_message,
}


@pytest.mark.parametrize("path", KERNEL_FILES)
def test_corpus_file_matches_its_labels(path, tmp_path):
    events = [e for e in ingest_timeline(tmp_path / "b.duckdb", CORPUS / path) if e["source"] == "kernel"]
    labels = INDEX[path]["parsed_labels"]
    text = (CORPUS / path).read_text(errors="replace")
    assert events, path
    checked = 0
    for key, value in labels.items():
        if key in CHECKS:
            CHECKS[key](events, value, text)
            checked += 1
    assert checked >= 2, f"{path}: no label of it is checked"
    for event in events:
        assert event["layer"] in ("business", "scheduling", "gpu", "network_storage", "hardware")
        assert event["artifact"] and event["line"] >= 1


def test_corpus_driver_versions_reach_host_inventory(tmp_path):
    """A driver version in the text (``loading NVIDIA UNIX ... Kernel Module 570.158.01``) is a host fact."""
    from workbench.store.bundle import Bundle

    path = next(p for p in KERNEL_FILES if "loading NVIDIA" in (CORPUS / p).read_text())
    events = ingest_timeline(tmp_path / "b.duckdb", CORPUS / path)
    version = INDEX[path]["parsed_labels"]["driver"]
    assert version in _attr_values(events, "version", ("driver_loaded",))
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        facts = bundle.con.execute("SELECT value FROM host_inventory WHERE key = 'versions.driver'").fetchall()
    assert (version,) in facts


def test_xid_events_carry_catalog_meaning_and_layer(tmp_path):
    events = ingest_timeline(tmp_path / "b.duckdb", CORPUS / "kernel")
    xids = {e["attrs"]["xid"]: e for e in events if e["kind"] == "xid"}
    assert xids[79]["layer"] == "hardware" and xids[79]["severity"] == "critical"
    assert xids[31]["layer"] == "gpu" and xids[74]["layer"] == "hardware"
    assert xids[45]["attrs"]["follower"] is True and xids[154]["attrs"]["follower"] is True
    assert xids[79]["attrs"]["action"] == "RESTART_BM" and "fallen off the bus" in xids[79]["attrs"]["name"]
    assert "gpu_fell_off_bus" in xids[79]["attrs"]["causes"]
    assert {e["kind"] for e in events} >= {"gpu_fell_off_bus", "pcie_aer", "oom_kill", "hung_task", "sxid", "nvrm",
                                           "nfs_not_responding", "nfs_ok", "link_down", "link_up"}


def test_nvlink5_fields_are_decoded():
    rows = _parse(b"NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 "
                  b"0x00000001 0x00000000 0x00100000 0x00000004)\n", "kmsg")
    (event,) = [r for r in rows if isinstance(r, Event)]
    assert event.gpu == "0018:01:00.0" and event.severity == "warning"
    assert event.attrs["nvlink_subcode"] == (0x0409A0C2 >> 20) & 0x3F
    assert event.attrs["intrinfo"] == "0x0409a0c2" and event.attrs["error_status"] == "0x00000008"
    assert len(event.attrs["registers"]) == 6 and event.attrs["cross_containment"] == "XC0"


def test_uuid_learned_from_gpu_at_line_becomes_inventory_and_xid_attr():
    rows = _parse(b"[ 10.000001] NVRM: GPU at PCI:0000:19:00: GPU-aaaa-bbbb\n"
                  b"[ 10.000002] NVRM: GPU Board Serial Number: 1650000000001\n"
                  b"[ 11.000000] NVRM: Xid (PCI:0000:19:00): 48, pid=7, name=python, An uncorrectable double bit "
                  b"error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 0.\n", "dmesg")
    (inv,) = [r for r in rows if isinstance(r, GpuInventory)]
    assert (inv.gpu, inv.uuid, inv.serial) == ("0000:19:00.0", "GPU-aaaa-bbbb", "1650000000001")
    (xid,) = [r for r in rows if isinstance(r, Event) and r.kind == "xid"]
    assert xid.attrs["uuid"] == "GPU-aaaa-bbbb" and xid.attrs["causes"] == ["ecc_uncorrectable"]


def test_other_programs_lines_in_a_syslog_are_not_kernel_events():
    rows = _parse(b"Mar 29 15:38:59 node1 kernel: nfs: server fs1 not responding, still trying\n"
                  b"Mar 29 15:39:00 node1 myapp[12]: nfs: server fs1 not responding, still trying\n", "syslog")
    events = [r for r in rows if isinstance(r, Event)]
    assert [(e.kind, e.host, e.line) for e in events] == [("nfs_not_responding", "node1", 1)]


def test_many_more_formats_of_the_same_events():
    data = (b"Jan 17 17:11:21.123456 gpu01 kernel: mlx5_core 0000:3b:00.0 ibp59s0: Link down\n"
            b"2025-01-17T17:11:22.500000+0000 gpu01 kernel: e1000e: eth0 NIC Link is Up 1000 Mbps Full Duplex\n"
            b"<3>[  55.100000] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
            b"type=Transaction Layer, id=0018(Requester ID)\n"
            b"kern  :err   : [  56.000000] Memory cgroup out of memory: Killed process 4242 (python3) "
            b"total-vm:1000kB, anon-rss:800kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4kB oom_score_adj:0\n"
            b"[  57.000000] mce: [Hardware Error]: CPU 3: Machine Check: 0 Bank 7: be00000000800400\n"
            b"[  58.000000] EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0\n"
            b"[  59.000000] watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [python:1234]\n"
            b"[  60.000000] bond0: (slave ens1f0): link status definitely down, disabling slave\n"
            b"[  61.000000] nvidia-nvswitch3: SXid (PCI:0000:08:00.0): 20034, Fatal, Link 30 LTSSM Fault Up\n"
            b"[  62.000000] mlx5_core 0000:3b:00.0: 31.504 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe "
            b"x4 link at 0000:00:01.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)\n"
            b"[  63.000000] NVRM: GPU at 0000:01:00.0 has fallen off the bus.\n"
            b"[  64.000000] Kernel panic - not syncing: Fatal exception\n")
    events = [r for r in _parse(data, "dmesg") if isinstance(r, Event)]
    got = {(e.kind, e.line) for e in events}
    assert got == {("link_down", 1), ("link_up", 2), ("pcie_aer", 3), ("oom_kill", 4), ("mce", 5), ("mce", 6),
                   ("soft_lockup", 7), ("link_down", 8), ("sxid", 9), ("pcie_link_degraded", 10),
                   ("gpu_fell_off_bus", 11), ("kernel_panic", 12)}
    by_line = {e.line: e for e in events}
    assert by_line[1].host == "gpu01" and by_line[1].attrs["device"] == "ibp59s0" and by_line[1].ts.year == 2026
    assert by_line[2].ts == datetime(2025, 1, 17, 17, 11, 22, 500000, tzinfo=timezone.utc)
    assert by_line[3].attrs["severity"] == "uncorrected_fatal" and by_line[3].attrs["device"] == "0000:00:03.0"
    assert by_line[4].attrs["constraint"] == "CONSTRAINT_MEMCG" and by_line[4].attrs["pid"] == 4242
    assert by_line[6].severity == "critical" and by_line[9].attrs["fatal"] is True
    assert by_line[10].attrs["capable_width"] == "x16" and by_line[11].gpu == "0000:01:00.0"


def test_december_syslog_read_with_a_january_reference_is_last_year(tmp_path):
    node = tmp_path / "evidence" / "node07"
    node.mkdir(parents=True)
    (node / "date.txt").write_text("Wed Jan 15 10:00:00 UTC 2025\n")
    (node / "kern.log").write_text("Dec 31 23:59:58 node07 kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=0, "
                                   "GPU has fallen off the bus.\n")
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    xid = next(e for e in events if e["kind"] == "xid")
    assert xid["ts"] == "2024-12-31T23:59:58.000000Z" and xid["ts_origin"] == "syslog_noyear"
    assert xid["host"] == "node07" and xid["ts_raw"] == "Dec 31 23:59:58"


def test_dmesg_seconds_with_uptime_of_the_same_host_folder_are_exact_utc(tmp_path):
    node = tmp_path / "evidence" / "node07"
    node.mkdir(parents=True)
    (node / "uptime.txt").write_text("2025-03-01 08:00:00\n")
    (node / "dmesg.txt").write_text("[ 3600.250000] NVRM: Xid (PCI:0000:19:00): 13, pid=99, name=python, "
                                    "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address\n")
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    xid = next(e for e in events if e["kind"] == "xid")
    assert xid["ts"] == "2025-03-01T09:00:00.250000Z" and xid["ts_approx"] is False
    assert xid["ts_origin"] == "kernel_monotonic" and xid["host"] == "node07"
    assert xid["attrs"]["exception"] == "Out Of Range Address"


def test_dmesg_seconds_without_boot_time_stay_relative_and_approximate():
    (event,) = [r for r in _parse(b"[ 1843.308145] nfs: server x OK\n", "dmesg") if isinstance(r, Event)]
    assert (event.ts, event.ts_approx, event.ts_origin, event.ts_raw) == (None, True, "kernel_monotonic",
                                                                          "1843.308145")


def test_boot_time_argument_converts_dmesg(tmp_path):
    code, _, err = run_cli("ingest", tmp_path / "b.duckdb",
                           CORPUS / "kernel/zfs_3850_nfs_not_responding_hung_task_dmesg.log",
                           "--boot-time", "2020-01-01T00:00:00Z")
    assert code == 0, err
    code, out, _ = run_cli("timeline", tmp_path / "b.duckdb", "--json", "--kind", "nfs_not_responding")
    assert '"ts": "2020-01-01T01:41:06.656127Z"' in out


def test_line_without_time_takes_its_neighbours_time_approximately():
    rows = _parse(b"oom-kill:constraint=CONSTRAINT_NONE,task=python,pid=1,uid=0\n"
                  b"NVRM: GPU at PCI:0000:01:00: GPU-x\n"
                  b"NVRM: Xid (PCI:0000:01:00): 13, pid=5, name=a, fault\n"
                  b"[  100.000000] nfs: server x OK\n", "dmesg")
    xid = next(r for r in rows if isinstance(r, Event) and r.kind == "xid")
    assert (xid.ts_origin, xid.ts_approx) == ("neighbour", True)


def test_syslog_before_boot_keeps_only_lines_from_earlier_boots():
    ctx = ParseContext(host="n1", boot_time=datetime(2025, 5, 1, 12, 0, tzinfo=timezone.utc),
                       reference_time=datetime(2025, 5, 1, tzinfo=timezone.utc))
    data = (b"May  1 11:00:00 n1 kernel: NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.\n"
            b"May  1 12:30:00 n1 kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=5, name=a, fault\n")
    events = [r for r in kernel.parse("syslog_before_boot", io.BytesIO(data), ctx) if isinstance(r, Event)]
    assert {e.attrs.get("xid") for e in events if e.kind == "xid"} == {79}


# -- blocks, junk, sniffing ------------------------------------------------------------------------
def _parse(data: bytes, kind: str, ctx: ParseContext | None = None) -> list:
    ctx = ctx or ParseContext(host="h", mtime=datetime(2026, 11, 29, tzinfo=timezone.utc))
    return list(kernel.parse(kind, io.BytesIO(data), ctx))


def _signature(rows: list) -> list:
    return [(type(r).__name__, getattr(r, "kind", None), getattr(r, "line", None), getattr(r, "message", None),
             getattr(r, "reason", None)) for r in rows]


CORPUS_BYTES = b"".join((CORPUS / p).read_bytes().rstrip(b"\n") + b"\n" for p in KERNEL_FILES)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(block=st.integers(min_value=16, max_value=4096))
def test_block_size_never_changes_the_rows(block, monkeypatch):
    """Records split across blocks (multi-line 'fallen off the bus', continuation lines) parse the same."""
    whole = _parse(CORPUS_BYTES, "dmesg")
    monkeypatch.setattr(blocks, "BLOCK_BYTES", block)
    assert _signature(_parse(CORPUS_BYTES, "dmesg")) == _signature(whole)


def test_line_numbers_and_counts_match_the_file():
    ctx = ParseContext(host="h")
    rows = _parse(CORPUS_BYTES, "dmesg", ctx)
    lines = CORPUS_BYTES.split(b"\n")
    assert ctx.lines_read == CORPUS_BYTES.count(b"\n")
    for event in (r for r in rows if isinstance(r, Event)):
        assert event.message.split(" ")[0] in lines[event.line - 1].decode(), event


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000))
def test_random_bytes_never_raise(data):
    for kind in ("dmesg", "syslog", "kmsg"):
        _parse(data, kind)


@settings(max_examples=30, deadline=None)
@given(lines=st.lists(st.sampled_from([
    b"[  1.000000] NVRM: Xid (PCI:0000:01:00): 79, pid=0, GPU has fallen off the bus.",
    b"\xff\xfe NVRM: Xid (PCI:0000:19:00): \xc3\x28 79", b"\x00\x00NVRM\x00", b"   NVRM: continuation",
    b"Mar 29 15:38:59 kernel: NVRM: Xid (PCI:0000:01:0", b"[Mon Oct 16 09:50:06 2017] LNet: x", b"",
    b"kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {",
]), max_size=40))
def test_junk_lines_are_counted_as_skipped(lines):
    """Only binary lines (NUL bytes) are skipped; invalid UTF-8 is replaced and the line read
    (tests/reliability/test_undecodable_bytes.py)."""
    data = b"".join(line + b"\n" for line in lines)
    ctx = ParseContext(host="h")
    rows = _parse(data, "dmesg", ctx)
    bad = sum(1 for line in lines if b"\x00" in line)
    assert sum(1 for r in rows if isinstance(r, Skipped)) == bad
    assert ctx.lines_read == len(lines)
    xids = sum(1 for line in lines if line.startswith(b"[  1.000000] NVRM: Xid"))
    assert sum(1 for r in rows if isinstance(r, Event) and r.kind == "xid") == xids


def test_ten_megabyte_line_is_skipped_and_the_rest_parsed():
    ctx = ParseContext(host="h")
    data = b"[ 1.000000] nfs: server a OK\n" + b"x" * (10 << 20) + b"\n[ 2.000000] nfs: server b OK\n"
    rows = _parse(data, "dmesg", ctx)
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["line longer than 1 MiB"]
    assert [(r.attrs["server"], r.line) for r in rows if isinstance(r, Event)] == [("a", 1), ("b", 3)]
    assert ctx.lines_read == 3


def test_ten_megabyte_line_full_of_keywords_at_the_end():
    rows = _parse(b"NVRM " * (2 << 20), "kmsg")
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["line longer than 1 MiB"]


@pytest.mark.parametrize(("text", "kind"), [
    ("[  123.456789] usb 1-1: new high-speed USB device\n[  124.000001] NVRM: loading\n", "dmesg"),
    ("[Mon Oct 16 09:50:06 2017] LNet: x\n", "dmesg_ctime"),
    ("kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid\n", "dmesg_iso"),
    ("2025-01-17T17:11:21+0000 host kernel: IPv6: ADDRCONF(NETDEV_CHANGE): c: link becomes ready\n", "journal"),
    ("Mar 29 15:38:59 kernel: NVRM: Xid (PCI:0000:01:00): 120, GSP\n", "syslog"),
    ("NVRM: Xid (PCI:0000:01:00): 62, 323f0f30\nNVRM: GPU0 halted\n", "kmsg"),
])
def test_sniff_recognises_kernel_formats(text, kind):
    scores = kernel.sniff("evidence.log", text)
    assert list(scores) == [kind] and scores[kind] >= 75


@pytest.mark.parametrize("text", [
    "gpu01:1234:1234 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n" * 5,
    "2023-07-01 16:41:05,669 - INFO: training step 5\n" * 5,
    "[    10.423] (II) NVIDIA(0): Error recovery was successful.\n" * 5,
    "Mar 29 15:38:59 host slurmd[123]: launch task 5.0\n" * 20 + "Mar 29 15:39:00 host kernel: x\n",
    "JobID|State|ExitCode\n1|FAILED|1:0\n",
])
def test_sniff_stays_low_for_other_logs(text):
    assert max(kernel.sniff("x.log", text).values(), default=0) <= 40


# -- live capture ----------------------------------------------------------------------------------
class FakeContext:
    """Replays recorded command output; records what the collector said it could not get."""

    def __init__(self, tmp: Path, outputs: dict[tuple[str, ...], tuple[bytes, int, str]], tools: set[str]):
        self.tmp, self.outputs, self.tools = tmp, outputs, tools
        self.host, self.since, self.options = "node", datetime(2025, 1, 1, tzinfo=timezone.utc), {}
        self.missed: list[tuple[str, str]] = []
        self.calls: list[list[str]] = []

    def run(self, argv, *, kind, timeout=None, max_bytes=None):
        self.calls.append(argv)
        key = next((k for k in self.outputs if list(k) == argv[:len(k)] and all(a in argv for a in k)), None)
        data, code, err = self.outputs.get(key, (b"", 1, f"{argv[0]}: failed"))
        path = self.tmp / f"out{len(self.calls)}"
        path.write_bytes(data)
        return Artifact(source=" ".join(argv), kind=kind, path=str(path), info={"exit_code": code, "stderr": err})

    def read_file(self, path, *, kind, max_bytes=None, tail=False):
        return None

    def which(self, name):
        return name if name in self.tools else None

    def missing(self, what, reason):
        self.missed.append((what, reason))


def test_capture_prefers_the_journal_and_its_previous_boots(tmp_path, monkeypatch):
    monkeypatch.setattr(log_capture, "PSTORE_DIRS", ())
    line = b"2025-01-01T00:00:01.000000+0000 node kernel: nfs: server a OK\n"
    ctx = FakeContext(tmp_path, {
        ("journalctl", "-k", "-b", "-1"): (line, 0, ""), ("journalctl", "-k", "-b", "-2"): (line, 0, ""),
        ("journalctl", "-k"): (line, 0, ""),
        ("journalctl", "--list-boots"): (b"-2 abc Mon\n-1 def Tue\n 0 ghi Wed\n", 0, ""),
    }, {"journalctl", "dmesg"})
    arts = list(kernel.capture(ctx))
    assert [a.kind for a in arts] == ["journal"] * 3
    assert any("--since=@1735689600" in a.source for a in arts)
    assert {"-1", "-2"} <= {c[c.index("-b") + 1] for c in ctx.calls if "-b" in c}
    assert not any(c[0] == "dmesg" for c in ctx.calls)


def test_capture_falls_back_to_dmesg_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(log_capture, "PSTORE_DIRS", ())
    ctx = FakeContext(tmp_path, {
        ("journalctl", "-k"): (b"-- No entries --\n", 0, ""),
        ("dmesg", "--time-format"): (b"2025-01-01T00:00:01,000000+00:00 Linux version 6.1\n", 0, ""),
    }, {"journalctl", "dmesg"})
    arts = list(kernel.capture(ctx))
    assert arts[0].kind == "dmesg_iso"
    assert ctx.missed[0][0] == "journalctl -k" and ctx.missed[0][1].startswith("unavailable")


def test_capture_reports_denied_dmesg(tmp_path, monkeypatch):
    monkeypatch.setattr(log_capture, "PSTORE_DIRS", ())
    ctx = FakeContext(tmp_path, {("dmesg",): (b"", 1, "dmesg: read kernel buffer failed: Operation not permitted")},
                      {"dmesg"})
    list(kernel.capture(ctx))
    reasons = dict(ctx.missed)
    assert reasons["dmesg"].startswith("denied") and reasons["journalctl -k"].startswith("unavailable")


def test_live_capture_on_this_host(tmp_path):
    """The real collector in the real capture path: it finishes and its artifacts parse."""
    from workbench.capture.live import capture
    from workbench.store.bundle import Bundle

    out, outcomes, complete = capture(tmp_path / "c.duckdb", only=["kernel"],
                                      since=datetime.now(timezone.utc) - timedelta(days=3650))
    (outcome,) = outcomes
    assert complete and outcome.status in ("ok", "partial", "unavailable", "denied")
    assert outcome.duration_s < kernel.TIMEOUT
    with Bundle.open(out) as bundle:
        arts = [a for a in bundle.artifacts() if a["collector"] == "kernel"]
        if outcome.status in ("ok", "partial"):
            assert arts and all(a["kind"] in kernel.KINDS for a in arts)
            assert sum(a["lines"] or 0 for a in arts) > 0
        else:
            assert outcome.reason


def test_xid_info_for_other_collectors():
    info = kernel.xid_info(79)
    assert info["layer"] == "hardware" and info["follower"] is False and "gpu_fell_off_bus" in info["causes"]
    assert kernel.xid_info(9999)["name"] == "Xid 9999"


def test_host_fact_for_kernel_version():
    rows = _parse(b"[    0.000000] Linux version 6.8.0-101-generic (buildd@lcy02) (gcc 13)\n", "dmesg")
    assert HostFact("kernel", "6.8.0-101-generic", host=None) in rows
    assert [r.kind for r in rows if isinstance(r, Event)] == ["boot"]


AER_REPORTS = (
    b"[  100.000000] pcieport 0000:00:01.1: AER: Uncorrected (Non-Fatal) error received: 0000:00:01.1\n"
    b"[  100.000001] pcieport 0000:00:01.1: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    b"(Requester ID)\n"
    b"[  100.000002] pcieport 0000:00:01.1:   device [8086:2030] error status/mask=00004000/00000000\n"
    b"[  100.000003] pcieport 0000:00:01.1:    [14] CmplTO                 (First)\n"
    b"[  101.000000] pcieport 0000:5c:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:5d:00.0\n"
    b"[  101.000001] nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    b"(Requester ID)\n"
    b"[  101.000002] nvidia 0000:5d:00.0:   device [10de:2330] error status/mask=00005000/00000000\n"
    b"[  101.000003] nvidia 0000:5d:00.0:    [12] Timeout\n"
    b"[  101.000004] nvidia 0000:5d:00.0:    [14] CmplTO                 (First)\n"
    b"[  102.000000] NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.\n")


def test_an_aer_report_is_one_event_filed_on_the_gpu_whose_driver_printed_it():
    events = [r for r in _parse(AER_REPORTS, "dmesg") if isinstance(r, Event)]
    aer = {e.line: e for e in events if e.kind == "pcie_aer"}
    assert sorted(aer) == [2, 6] and {e.line for e in events} == {2, 6, 10}
    port, gpu = aer[2], aer[6]
    assert port.gpu is None and port.attrs["device"] == "0000:00:01.1" and port.attrs["bits"] == ["CmplTO"]
    assert gpu.gpu == "0000:5d:00.0" and gpu.severity == "error"
    assert (gpu.attrs["pci_id"], gpu.attrs["error_status"], gpu.attrs["error_mask"], gpu.attrs["bits"]) == (
        "10de:2330", "00005000", "00000000", ["Timeout", "CmplTO"])


def test_aer_detail_lines_of_newer_kernels_say_aer_and_are_folded_the_same():
    data = (b"[ 9.0] pcieport 0000:00:01.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
            b"(Receiver ID)\n"
            b"[ 9.1] pcieport 0000:00:01.0: AER:   device [8086:1901] error status/mask=00000001/00002000\n"
            b"[ 9.2] pcieport 0000:00:01.0: AER:    [ 0] RxErr                  (First)\n"
            b"[ 9.3] pcieport 0000:00:1c.0: AER:    [ 6] BadTLP\n")
    (aer,) = [r for r in _parse(data, "dmesg") if isinstance(r, Event)]
    assert (aer.line, aer.gpu, aer.attrs["pci_id"], aer.attrs["error_status"], aer.attrs["bits"]) == (
        1, None, "8086:1901", "00000001", ["RxErr"])


def test_an_aer_report_without_the_nvidia_driver_is_on_a_gpu_only_when_an_xid_names_its_address():
    header = (b"[  5.000000] vfio-pci %s: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
              b"(Receiver ID)\n")
    xid = b"[  6.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
    on_gpu, elsewhere = header % b"0000:3b:00.0", header % b"0000:86:00.0"
    for data, gpu in ((on_gpu + xid, "0000:3b:00.0"), (xid + on_gpu, "0000:3b:00.0"), (elsewhere + xid, None)):
        (aer,) = [r for r in _parse(data, "dmesg") if isinstance(r, Event) and r.kind == "pcie_aer"]
        assert aer.gpu == gpu and aer.severity == "warning" and "bits" not in aer.attrs
