"""Whose address is it: ``ip addr`` of a host and a hosts file (collectors/addresses.py), and the peer
host fabric_peers names through them when NCCL's init lines are missing."""

from __future__ import annotations

import io

from collectors import addresses
from collectors.base import HostFact, ParseContext
from workbench.ingest.derivations.fabric_peers import _known_name

IP_ADDR = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN group default qlen 1000
    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
    inet 127.0.0.1/8 scope host lo
       valid_lft forever preferred_lft forever
    inet6 ::1/128 scope host noprefixroute
       valid_lft forever preferred_lft forever
2: ens3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1460 qdisc mq state UP group default qlen 1000
    link/ether xx:xx:xx:xx:xx:xx brd ff:ff:ff:ff:ff:ff
    altname enp0s3
    inet 10.128.0.7/32 metric 100 scope global dynamic ens3
       valid_lft 68465sec preferred_lft 68465sec
    inet6 fe80::4001:aff:fe80:7/64 scope link
       valid_lft forever preferred_lft forever
"""
"""``ip addr show`` as https://github.com/prometheus/node_exporter/issues/3392 quotes it (the masked
``nn.nn.nn.nn`` address given a value)."""


def _facts(kind: str, text: str) -> dict[str, str]:
    rows = addresses.parse(kind, io.BytesIO(text.encode()), ParseContext(host="node12"))
    return {row.key: row.value for row in rows if isinstance(row, HostFact)}


def test_ip_addr_keeps_the_hosts_own_routable_addresses() -> None:
    assert addresses.sniff("ip-addr.txt", IP_ADDR) == {"ip_addr": 80}
    assert _facts("ip_addr", IP_ADDR) == {"net.addr.10.128.0.7": "ens3"}


def test_ip_o_addr_one_line_form() -> None:
    text = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
            "4: ibp12s0    inet 10.10.7.12/24 brd 10.10.7.255 scope global ibp12s0\\       valid_lft forever "
            "preferred_lft forever\n")
    assert addresses.sniff("ip-o-addr.txt", text) == {"ip_addr": 80}
    assert _facts("ip_addr", text) == {"net.addr.10.10.7.12": "ibp12s0"}


def test_hosts_file_entries() -> None:
    text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n# IPoIB\n10.10.7.14  node14-ib node14  # hung\n"
    assert addresses.sniff("hosts", text) == {"hosts_file": 80}
    assert _facts("hosts_file", text) == {"hosts_file.10.10.7.14": "node14-ib node14"}


def test_a_hosts_entry_is_named_as_the_bundle_knows_the_host() -> None:
    known = {"node11", "node14"}
    assert _known_name(["node14-ib"], known) == "node14"
    assert _known_name(["node14.cluster", "n14"], known) == "node14"
    assert _known_name(["gpu-99-ib"], known) == "gpu-99-ib", "a host the bundle never names keeps its own name"
    assert _known_name(["storage01.cluster"], known) == "storage01"


def test_capture_takes_ip_o_addr_and_the_hosts_file() -> None:
    calls: list[tuple[str, object]] = []
    missing: list[str] = []

    class Ctx:
        host, since, options = "h", None, {}

        def __init__(self, has_ip: bool) -> None:
            self.has_ip = has_ip

        def which(self, name):
            return "/usr/sbin/ip" if self.has_ip else None

        def missing(self, what, reason):
            missing.append(what)

        def run(self, argv, *, kind, timeout=None, max_bytes=None):
            calls.append(("run", argv))
            return kind

        def read_file(self, path, *, kind, max_bytes=None, tail=False):
            calls.append(("read", path))
            return kind

    assert list(addresses.capture(Ctx(True))) == ["ip_addr", "hosts_file"]
    assert calls == [("run", ["ip", "-o", "addr"]), ("read", "/etc/hosts")] and missing == []
    assert list(addresses.capture(Ctx(False))) == ["hosts_file"] and missing == ["ip"]
