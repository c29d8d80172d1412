"""Every file of corpus/network_storage through the user's path (``gpuwb ingest`` then ``gpuwb
timeline --json``, plus the bundle's tables), checked against its INDEX.tsv labels.

The checks are driven by the label keys, not by file names: a new file with the same kinds of
labels is checked the same way, and a label key nobody checks fails the test so that it gets a
decision instead of being silently ignored.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from collectors.ethtool import counter_class
from collectors.infiniband import canonical_counter
from tests.conftest import CORPUS, corpus_files, corpus_index, ingest_timeline

MY_SOURCES = {"infiniband", "ethtool", "storage", "pci", "ipmi", "changes"}

KERNEL_LOG_FILES = {"network_storage/jade_14_lustre_lnet_client_errors_dmesg_ctime.log"}
"""dmesg-style files (Lustre/LNet client errors): parsed by the kernel collector, whose tests assert
their labels; here only that the network/storage collectors add nothing wrong to them."""

TOOL_KINDS = {"ibstatus": {"ibstatus"}, "ibstat": {"ibstat"}, "rdma": {"rdma_link"}, "perfquery": {"perfquery"},
              "ethtool": {"ethtool"}, "ifconfig": {"ethtool", "ifconfig"}, "ip": {"ip_link", "ethtool"},
              "iostat": {"iostat"}, "df": {"df"}, "nfsstat": {"nfsstat"}, "lspci": {"lspci_vv"}}
DESCRIPTIVE = {"system", "cause", "truncated", "kernel", "torch", "api", "capmask", "capmask2"}
"""Labels that describe the source rather than something a parser can read from the file."""

IB_COUNTER_LABELS = {"symbol_errors": "symbol_error", "link_downed": "link_downed",
                     "port_rcv_errors": "port_rcv_errors", "port_xmit_discards": "port_xmit_discards",
                     "port_xmit_wait": "port_xmit_wait"}

FILES = list(corpus_files("network_storage"))


def _strip_code(value: str) -> str:
    return re.sub(r"^\s*\d+\s*:\s*", "", value).strip()


class Evidence:
    """One ingested file: its timeline events and its rows in the bundle tables."""

    def __init__(self, bundle: Path, events: list[dict]) -> None:
        self.events = events
        con = duckdb.connect(str(bundle), read_only=True)
        try:
            self.kinds = {k for (k,) in con.execute("SELECT kind FROM artifact").fetchall()}
            self.series = [(name, value, labels) for name, value, labels in
                           con.execute("SELECT name, value, labels::VARCHAR FROM series").fetchall()]
            self.facts = dict(con.execute("SELECT key, value FROM host_inventory").fetchall())
        finally:
            con.close()

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["kind"] == kind]

    def series_values(self, name: str, **labels: str) -> list[float]:
        import json

        out = []
        for sname, value, raw in self.series:
            parsed = json.loads(raw or "{}")
            if sname == name and all(parsed.get(k) == v for k, v in labels.items()):
                out.append(value)
        return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_file_labels(path: Path, tmp_path: Path) -> None:
    rel = f"network_storage/{path.name}"
    row = corpus_index()[rel]
    labels = row["parsed_labels"]
    bundle = tmp_path / "b.duckdb"
    events = ingest_timeline(bundle, path)
    ev = Evidence(bundle, events)
    if rel in KERNEL_LOG_FILES:
        mine = [e for e in events if e["source"] in MY_SOURCES]
        assert mine == [], "network/storage collectors must leave kernel log lines to the kernel collector"
        return
    checked = set(DESCRIPTIVE)
    _check_tool(ev, labels, checked)
    _check_ports(ev, labels, checked)
    _check_ib_counters(ev, labels, checked)
    _check_nic(ev, labels, checked)
    _check_iostat(ev, labels, checked)
    _check_checkpoint(ev, labels, checked)
    unchecked = set(labels) - checked
    assert not unchecked, f"labels nobody checks: {sorted(unchecked)}"


def _check_tool(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    if "tool" not in labels:
        return
    checked.add("tool")
    allowed: set[str] = set()
    for tool in labels["tool"].split(","):
        allowed |= TOOL_KINDS[tool.split()[0]]
    assert ev.kinds <= allowed and ev.kinds, f"sniffed as {ev.kinds}, expected one of {allowed}"


def _check_ports(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    downs = ev.of("link_down")
    if "devices" in labels:
        checked.update({"devices", "state", "phys_state", "link_layer", "base_lid"})
        assert {e["attrs"]["device"] for e in downs} == set(labels["devices"].split(","))
        for e in downs:
            assert e["attrs"]["state"] == _strip_code(labels["state"])
            assert e["attrs"]["phys_state"] == _strip_code(labels["phys_state"])
            assert e["layer"] == "network_storage" and e["severity"] == "error"
        assert {e["attrs"]["link_layer"] for e in downs} == set(labels["link_layer"].split(","))
        assert labels["base_lid"] in {e["attrs"]["lid"] for e in downs}
    if "states" in labels:
        checked.update({"device", "states", "lid", "sm_lid"})
        device, _, port = labels["device"].partition("/")
        flaps = ev.of("link_flap")
        assert len(flaps) == 1
        attrs = flaps[0]["attrs"]
        assert (attrs["device"], attrs["port"]) == (device, int(port))
        assert attrs["states"] == labels["states"].split(",")
        assert attrs["transitions"] == len(labels["states"].split(",")) - 1
        first_down = next(i for i, s in enumerate(attrs["states"]) if not s.startswith("ACTIVE"))
        assert downs and downs[0]["attrs"]["state"] == attrs["states"][first_down].split("/")[0]
        assert downs[0]["attrs"]["lid"] == labels["lid"] and downs[0]["attrs"]["sm_lid"] == labels["sm_lid"]
        if attrs["states"][-1].startswith("ACTIVE"):
            assert ev.of("link_up"), "a port that ends ACTIVE after being down is reported back up"


def _check_ib_counters(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    present = [k for k in IB_COUNTER_LABELS if k in labels]
    if not present:
        return
    checked.update(present)
    device = None
    if "lid" in labels and "states" not in labels:
        checked.update({"lid", "port"})
        device = f"lid {labels['lid']}"
    for key in present:
        counter = canonical_counter(IB_COUNTER_LABELS[key])
        filters = {"device": device, "port": labels["port"]} if device else {}
        values = ev.series_values(f"ib.{counter}", **filters)
        assert values == [float(labels[key])], f"{key}: {values}"
    nonzero = {IB_COUNTER_LABELS[k] for k in present if int(labels[k]) > 0 and k != "port_xmit_wait"}
    reported = set().union(*(e["attrs"]["counters"] for e in ev.of("ib_counter_errors"))) if ev.of(
        "ib_counter_errors") else set()
    assert reported == nonzero


def _check_nic(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    tools = labels.get("tool", "")
    if "ethtool" not in tools and "ifconfig" not in tools:
        return
    for key in ("driver", "driver_version", "fw", "bus"):
        if key in labels:
            checked.add(key)
            fact = {"fw": "firmware"}.get(key, key)
            values = {v for k, v in ev.facts.items() if k.startswith("nic.") and k.endswith(f".{fact}")}
            assert labels[key] in values, f"{key}: {values}"
    iface = labels.get("iface")
    if iface:
        checked.add("iface")
        assert all(e["attrs"]["device"] == iface for e in ev.of("nic_drops"))
    if "mtu" in labels:
        checked.add("mtu")
        assert ev.facts.get(f"nic.{iface}.mtu") == labels["mtu"]
    drops: dict[str, int] = {}
    for e in ev.of("nic_drops"):
        drops.update(e["attrs"]["counters"])
    for key, value in labels.items():
        if not re.fullmatch(r"(rx|tx)_\w+", key):
            continue
        checked.add(key)
        assert float(value) in ev.series_values(f"nic.{key}"), key
        if counter_class(key) == "error" and int(value) > 0:
            assert drops.get(key) == int(value), f"{key} missing from nic_drops {drops}"
        else:
            assert key not in drops
    if any(counter_class(k) == "error" and int(v) > 0 for k, v in labels.items() if re.fullmatch(r"(rx|tx)_\w+", k)):
        assert all(e["severity"] == "warning" and e["layer"] == "network_storage" for e in ev.of("nic_drops"))


def _check_iostat(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    if not labels.get("tool", "").startswith("iostat"):
        return
    checked.add("device")
    device = labels["device"]
    for key, value in labels.items():
        if m := re.fullmatch(r"sample(\d+)_(\w+)", key):
            checked.add(key)
            assert ev.series_values(f"iostat.{m.group(2)}", device=device, report=m.group(1)) == [float(value)]
    if "r_await_ms" in labels:
        checked.add("r_await_ms")
        values = ev.series_values("iostat.r_await", device=device)
        assert values and all(v == float(labels["r_await_ms"]) for v in values)
    if "util_pct" in labels:
        checked.add("util_pct")
        values = ev.series_values("iostat.util_pct", device=device)
        assert values and all(v == float(labels["util_pct"]) for v in values)
        if float(labels.get("r_await_ms", "1e9")) < 20:
            assert not ev.of("disk_await_high"), "%util 100 with sub-millisecond await is not a stall"


def _check_checkpoint(ev: Evidence, labels: dict[str, str], checked: set[str]) -> None:
    if labels.get("event") != "checkpoint_write_failed":
        return
    checked.update({"event", "error", "errno", "file", "ts"})
    failures = ev.of("checkpoint_write_failed")
    assert len(failures) == 1
    attrs = failures[0]["attrs"]
    assert attrs["error"] == labels["error"]
    assert attrs["errno"] == labels.get("errno")
    assert failures[0]["layer"] == "network_storage" and failures[0]["severity"] == "error"
    if "file" in labels:
        assert labels["file"] in (attrs.get("source"), attrs.get("file"))
    if "ts" in labels:
        expected = datetime.strptime(labels["ts"], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
        assert datetime.fromisoformat(failures[0]["ts"].replace("Z", "+00:00")) == expected
        assert failures[0]["ts_approx"] is True, "the time comes from the log's previous dated line"


def test_every_corpus_file_is_indexed() -> None:
    index = corpus_index()
    assert FILES and all(f"network_storage/{p.name}" in index for p in FILES)
    assert CORPUS.is_dir()
