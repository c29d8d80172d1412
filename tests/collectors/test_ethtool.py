"""NIC collector: ethtool -S/-i/plain, ip -s -s link, old and new ifconfig, in their real layouts."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import ethtool
from collectors.base import Event, HostFact, ParseContext, SeriesPoint, Skipped
from tests.conftest import ingest_timeline

MTIME = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)

# iproute2 6.x ``ip -s -s link`` (the second -s adds the error breakdown lines).
IP_LINK = """1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    RX:  bytes packets errors dropped  missed   mcast
          3393      33      0       0       0       0
    TX:  bytes packets errors dropped carrier collsns
          3393      33      0       0       0       0
2: ifb0: <BROADCAST,NOARP> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 32
    link/ether 6a:b6:6d:8a:42:ba brd ff:ff:ff:ff:ff:ff
    RX:  bytes packets errors dropped  missed   mcast
             0       0      0       0       0       0
    TX:  bytes packets errors dropped carrier collsns
             0       0      0       0       0       0
3: ens1f1np1: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN mode DEFAULT group default qlen 1000
    link/ether b8:ce:f6:00:00:01 brd ff:ff:ff:ff:ff:ff
    RX:  bytes packets errors dropped  missed   mcast
     123456789   98765      3      12       0       0
    RX errors:  length    crc   frame    fifo overrun
                     0      3       0       0       0
    TX:  bytes packets errors dropped carrier collsns
     987654321   87654      0       0       0       0
    TX errors: aborted   fifo  window heartbt transns
                     0      0       0       0       2
"""

ETHTOOL_PLAIN = """Settings for ens2f0:
\tSupported ports: [ FIBRE ]
\tSupported link modes:   100000baseCR4/Full
\tSpeed: Unknown!
\tDuplex: Unknown! (255)
\tAuto-negotiation: on
\tPort: Direct Attach Copper
\tLink detected: no
"""

MLX5_STATS = """NIC statistics:
     rx_packets: 1922123
     rx_bytes: 2195783498
     tx_packets: 1822222
     rx_out_of_buffer: 8812
     rx_discards_phy: 120
     rx_crc_errors_phy: 0
     rx_pause_ctrl_phy: 55
     rx_xdp_drop: 9
     tx_queue_stopped: 3
     link_down_events_phy: 4
"""

IFCONFIG_NEW = """eth0: flags=4163<UP,BROADCAST,RUNNING,MULTICAST>  mtu 1500
        inet 10.0.0.5  netmask 255.255.255.0  broadcast 10.0.0.255
        ether 02:42:ac:11:00:02  txqueuelen 0  (Ethernet)
        RX packets 1234  bytes 567890 (567.8 KB)
        RX errors 0  dropped 42  overruns 0  frame 0
        TX packets 4321  bytes 98765 (98.7 KB)
        TX errors 0  dropped 0 overruns 0  carrier 0  collisions 0

eth1: flags=4099<UP,BROADCAST,MULTICAST>  mtu 1500
        ether 02:42:ac:11:00:03  txqueuelen 1000  (Ethernet)
        RX packets 0  bytes 0 (0.0 B)
        RX errors 0  dropped 0  overruns 0  frame 0
"""


def _rows(kind: str, text: str, source: str = "") -> list:
    ctx = ParseContext(host="node01", mtime=MTIME, source_name=source)
    return list(ethtool.parse(kind, io.BytesIO(text.encode()), ctx))


def _events(rows: list, kind: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == kind]


def test_ip_link_no_carrier_is_link_down_and_errors_are_drops() -> None:
    rows = _rows("ip_link", IP_LINK)
    assert not [r for r in rows if isinstance(r, Skipped)]
    downs = _events(rows, "link_down")
    assert [e.attrs["device"] for e in downs] == ["ens1f1np1"], "ifb0 is administratively down, not a fault"
    assert downs[0].attrs["state"] == "NO-CARRIER" and downs[0].layer is None
    drops = _events(rows, "nic_drops")
    assert [e.attrs["device"] for e in drops] == ["ens1f1np1"]
    assert drops[0].attrs["counters"] == {"rx_errors": 3, "rx_dropped": 12, "rx_crc": 3}
    facts = {r.key: r.value for r in rows if isinstance(r, HostFact)}
    assert facts["nic.ens1f1np1.mtu"] == "9000"


def test_plain_ethtool_link_not_detected() -> None:
    assert ethtool.sniff("x", ETHTOOL_PLAIN) == {"ethtool": 90}
    downs = _events(_rows("ethtool", ETHTOOL_PLAIN), "link_down")
    assert downs[0].attrs == {"device": "ens2f0", "port": None, "state": "link not detected"}


def test_mlx5_counters_take_the_interface_from_the_command_line() -> None:
    rows = _rows("ethtool", MLX5_STATS, source="ethtool -S ens1f0np0")
    drops = _events(rows, "nic_drops")
    assert drops[0].attrs["device"] == "ens1f0np0"
    assert drops[0].attrs["counters"] == {"rx_out_of_buffer": 8812, "rx_discards_phy": 120,
                                          "link_down_events_phy": 4}
    classes = {p.name: p.labels["class"] for p in rows if isinstance(p, SeriesPoint)}
    assert classes["nic.rx_pause_ctrl_phy"] == "congestion"
    assert classes["nic.rx_xdp_drop"] == "traffic" and classes["nic.tx_queue_stopped"] == "traffic"


def test_new_ifconfig_layout() -> None:
    rows = _rows("ifconfig", IFCONFIG_NEW)
    drops = _events(rows, "nic_drops")
    assert [(e.attrs["device"], e.attrs["counters"]) for e in drops] == [("eth0", {"rx_dropped": 42})]
    downs = _events(rows, "link_down")
    assert [e.attrs["device"] for e in downs] == ["eth1"], "UP without RUNNING has no carrier"
    values = {(p.labels["device"], p.name): p.value for p in rows if isinstance(p, SeriesPoint)}
    assert values[("eth0", "nic.rx_bytes")] == 567890 and values[("eth0", "nic.tx_collisions")] == 0


@pytest.mark.parametrize(("name", "cls"), [
    ("rx_missed_errors", "error"), ("rx_no_buffer_count", "error"), ("tx_carrier_errors", "error"),
    ("rx_out_of_buffer", "error"), ("rx_discards_phy", "error"), ("rx_packets", "traffic"),
    ("rx_csum_none", "traffic"), ("tx_deferred_ok", "traffic"), ("rx_xdp_drop", "traffic"),
    ("tx_pause_ctrl_phy", "congestion"), ("rx_prio3_buf_discard", "error"), ("rx_bytes", "traffic")])
def test_counter_class(name: str, cls: str) -> None:
    assert ethtool.counter_class(name) == cls


def test_two_captures_of_rising_drops_give_counter_rising(tmp_path: Path) -> None:
    """Two ethtool -S files of one host, five minutes apart: the derivation reports the rise."""
    import os

    node = tmp_path / "evidence" / "gpu07"
    node.mkdir(parents=True)
    first, second = node / "ethtool-S-1.txt", node / "ethtool-S-2.txt"
    first.write_text(MLX5_STATS)
    second.write_text(MLX5_STATS.replace("rx_out_of_buffer: 8812", "rx_out_of_buffer: 9900"))
    os.utime(first, (1_764_324_000, 1_764_324_000))
    os.utime(second, (1_764_324_300, 1_764_324_300))
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    rising = [e for e in events if e["kind"] == "counter_rising"]
    assert len(rising) == 1
    assert rising[0]["host"] == "gpu07" and rising[0]["attrs"]["counters"] == {"rx_out_of_buffer": 1088.0}
    assert rising[0]["attrs"]["seconds"] == 300.0 and rising[0]["layer"] == "network_storage"
    con = duckdb.connect(str(tmp_path / "b.duckdb"), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM series WHERE name = 'nic.rx_out_of_buffer'").fetchall()[0][0] == 2
    finally:
        con.close()


def test_capture_runs_ethtool_per_physical_interface(tmp_path: Path, monkeypatch) -> None:
    for name, physical in (("eth0", True), ("veth1", False)):
        (tmp_path / name).mkdir()
        if physical:
            (tmp_path / name / "device").mkdir()
    assert ethtool.physical_interfaces(str(tmp_path)) == ["eth0"]
    monkeypatch.setattr(ethtool, "physical_interfaces", lambda root="/sys/class/net": ["eth0"])
    calls: list[list[str]] = []

    class Ctx:
        host, since, options = "h", None, {}

        def which(self, name):
            return "/usr/sbin/" + name

        def missing(self, what, reason):
            raise AssertionError(what)

        def run(self, argv, *, kind, timeout=None, max_bytes=None):
            calls.append(argv)
            return kind

    assert list(ethtool.capture(Ctx())) == ["ip_link", "ethtool", "ethtool"]
    assert calls == [["ip", "-s", "-s", "link"], ["ethtool", "-i", "eth0"], ["ethtool", "-S", "eth0"]]


REAL_LINES = (IP_LINK + ETHTOOL_PLAIN + MLX5_STATS + IFCONFIG_NEW).splitlines()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40),
       st.sampled_from(ethtool.KINDS))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str], kind: str) -> None:
    rows = _rows(kind, "\n".join(lines).encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)
