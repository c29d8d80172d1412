"""A host's own report outranks its peers' reports about it; peers named by address resolve to hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import Event, HostFact, Topology
from tests.workbench.analysis.test_analysis import at, make_bundle, run, timeouts
from workbench.analysis.hypotheses import LOW_SCORE
from workbench.analysis.localisation import PEER_DISCOUNT, PeerResolver, attribute
from workbench.store.bundle import Bundle

HOSTS = ("node07", "node08")
ADDRESSES = {"10.10.3.7": "node07", "10.10.3.8": "node08", "fe80::a088:c203:f1:e20e": "node08",
             "fd00::8": "node08"}


@pytest.fixture
def resolver() -> PeerResolver:
    return PeerResolver.from_hosts((*HOSTS, "gpu-a.dc1"), ADDRESSES)


@pytest.mark.parametrize("text", [
    "NET/IB : Got completion from peer 10.10.3.8<40312> with status=12",
    "socketStartConnect: Connect to 10.10.3.8:29500 failed : Connection refused",
    "Connection closed by peer [fd00::8]:43210",
    "remoteGids fe80::a088:c203:f1:e20e hca mlx5_0",
    "TCPStore client failed to connect to node08:29500",
    "lost contact with node08.cluster.local",
    "peer ::ffff:10.10.3.8 reset the connection",
])
def test_each_form_of_a_peer_resolves_to_its_host(resolver: PeerResolver, text: str) -> None:
    assert resolver.peer_named(text, "node07") == "node08"


@pytest.mark.parametrize("text", [
    # NCCL's own header names the writer (host:pid:tid), not a peer
    "node07:20434:20611 [2] NCCL WARN NET/IB : Got completion from peer 10.10.3.7<40102> with status=12",
    "mlx5_core 0000:0c:00.0 ibp12s0: Link down",  # a PCI id is not an address
    "node08 is a bare word, not a mention",
    "Got completion from peer 10.10.3.99<40102>",  # an address nobody in the bundle owns
    "errors from 10.10.3.8<1> and from node08:29500 and 10.10.3.7<3>",  # one peer only, the writer's own too
])
def test_lines_naming_no_other_known_host_stay_where_they_are(resolver: PeerResolver, text: str) -> None:
    expected = "node08" if "node08:29500" in text else None
    assert resolver.peer_named(text, "node07") == expected


def test_a_line_naming_two_peers_or_an_address_two_hosts_claim_names_nobody() -> None:
    resolver = PeerResolver.from_hosts(("a1", "a2", "a3"), {"10.0.0.2": "a2", "10.0.0.3": "a3"})
    assert resolver.peer_named("peers 10.0.0.2<1> and 10.0.0.3<2> failed", "a1") is None
    resolver.add_addresses([("172.17.0.1", "a1"), ("172.17.0.1", "a2")])  # every Docker host's bridge
    assert resolver.host_of("172.17.0.1") is None
    assert resolver.peer_named("Connect to 172.17.0.1<4000> failed", "a3") is None
    assert resolver.host_of("10.0.0.2<0>") == "a2"


def test_a_short_name_two_domains_share_is_nobodys() -> None:
    resolver = PeerResolver.from_hosts(("n1.east", "n1.west", "n2"))
    assert resolver.host_of("n1") is None
    assert resolver.host_of("n1.east:22") == "n1.east"
    assert resolver.host_of("N2.cluster") == "n2"
    assert PeerResolver.from_hosts(("localhost", "n2")).peer_named("connect to localhost:29500", "n2") is None


def test_attribute_moves_a_peer_report_to_the_peer_at_a_discount(resolver: PeerResolver) -> None:
    row = {"host": "node07", "rank": 3, "gpu": "0000:19:00.0", "strength": 0.5,
           "text": "NET/IB : Got completion from peer 10.10.3.8<40312> with status=12"}
    moved = attribute(row, resolver)
    assert moved["host"] == "node08" and moved["reported_by"] == "node07" and moved["reporter_rank"] == 3
    assert moved["rank"] is None and moved["gpu"] is None
    assert moved["strength"] == pytest.approx(0.5 * PEER_DISCOUNT)
    assert row["host"] == "node07" and row["strength"] == 0.5  # the check's own row is left as it was
    assert attribute(moved, resolver) is moved  # counted on the peer once
    own = {"host": "node08", "rank": 2, "gpu": None, "strength": 0.75, "text": "mlx5_core ibp12s0: Link down"}
    assert attribute(own, resolver) is own


def _fabric_incident(own_kernel_log: bool) -> list:
    """node08's IB port flaps; node07's ranks report completion errors against node08's address; every
    rank times out ten minutes later."""
    rows: list = [Topology(rank=r, host=HOSTS[r // 2], nranks=4, comm_id="c1", cuda_dev=r % 2,
                           gpu=f"0000:{0x19 + r % 2:02x}:00.0", job="4242",
                           extra={"oob": f"ibp12s0:10.10.3.{7 + r // 2}<0>", "net": "IB"}) for r in range(4)]
    if own_kernel_log:
        for n, state in enumerate(("down", "up", "down")):
            rows.append(Event(kind=f"link_{state}", ts=at(2 * n), host="node08", layer="network_storage",
                              message=f"mlx5_core 0000:0c:00.0 ibp12s0: Link {state}", line=10 + n,
                              attrs={"device": "ibp12s0", "driver": "mlx5_core"}))
    for n, rank in enumerate((0, 1)):
        rows.append(Event(kind="nccl_net_error", ts=at(4 + n), host="node07", rank=rank, layer="network_storage",
                          line=300 + n,
                          message=f"node07:2043{rank}:20611 [{rank}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got "
                                  f"completion from peer 10.10.3.8<4010{rank}> with status=12 opcode=0",
                          attrs={"status": 12, "peer": f"10.10.3.8<4010{rank}>", "peer_ip": "10.10.3.8"}))
    return rows + timeouts({r: HOSTS[r // 2] for r in range(4)}, 601)


@pytest.mark.parametrize("own_kernel_log", [True, False])
def test_the_host_the_reports_name_is_the_culprit_not_the_reporter(tmp_path: Path, own_kernel_log: bool) -> None:
    """One reporter is not enough for the fabric_peers derivation; the line itself still names the peer.
    With the peer's own Link down the peer wins on its own evidence; without its kernel log it still
    wins on the reports against it, and the reporter is no hypothesis."""
    doc = run(make_bundle(tmp_path / "b.duckdb", _fabric_incident(own_kernel_log)))
    top = doc["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("network_fabric_errors", "node08")
    assert top["score"] >= LOW_SCORE and top["ranks"] == [2, 3]
    assert not [h for h in doc["hypotheses"] if h["host"] == "node07" and h["score"] >= LOW_SCORE]
    reported = [e for e in top["evidence"] if e.get("reported_by")]
    assert reported and all(e["reported_by"] == "node07" and e["host"] == "node08" for e in reported)
    assert "nccl_timeout" in top["symptoms"]


def test_own_link_down_outranks_the_neighbours_reports_alone(tmp_path: Path) -> None:
    with_own = run(make_bundle(tmp_path / "a.duckdb", _fabric_incident(True)))["hypotheses"][0]
    without = run(make_bundle(tmp_path / "b.duckdb", _fabric_incident(False)))["hypotheses"][0]
    assert with_own["host"] == without["host"] == "node08"
    assert with_own["score"] > without["score"]


def test_the_resolver_reads_the_bundles_addresses(tmp_path: Path) -> None:
    rows = [*_fabric_incident(False), HostFact("hosts_file.10.10.9.9", "node09-ib node09", host="node07"),
            Event(kind="link_up", ts=at(0), host="node09", layer="network_storage", message="x", line=1)]
    path = make_bundle(tmp_path / "b.duckdb", rows)
    with Bundle.open(path) as bundle:
        resolver = PeerResolver.of(bundle.con, HOSTS + ("node09",))
    assert resolver.host_of("10.10.3.8<0>") == "node08" and resolver.host_of("10.10.3.7") == "node07"
    assert resolver.host_of("10.10.9.9") == "node09"


def test_a_peer_address_nobody_owns_is_no_strong_claim_on_the_writer(resolver: PeerResolver) -> None:
    row = {"host": "node07", "rank": 1, "gpu": None, "strength": 0.5,
           "text": "NET/IB : Got completion from peer 10.99.0.4<40101> with status=12"}
    kept = attribute(row, resolver)
    assert kept["host"] == "node07" and kept["about_peer"] == "10.99.0.4"
    assert kept["strength"] == pytest.approx(0.5 * PEER_DISCOUNT)
    bridge = {**row, "text": "socketStartConnect: Connect to 172.17.0.1<45123> failed : Software caused "
                             "connection abort"}
    assert attribute(bridge, resolver) is bridge  # dialling its own bridge is the writer's own fault


def test_without_any_address_map_the_own_link_down_still_wins(tmp_path: Path) -> None:
    """No NCCL init lines (no topology addresses): the reports cannot be resolved to node08, yet node08's
    own Link down outranks node07's reports against an unknown peer."""
    rows = [r for r in _fabric_incident(True) if not isinstance(r, Topology)]
    top = run(make_bundle(tmp_path / "b.duckdb", rows))["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("network_fabric_errors", "node08")


def _job_nodes() -> Event:
    return Event(kind="job_state", message="job 4242 FAILED", ts=at(602), host="node07", job="4242",
                 layer="scheduling", attrs={"job": "4242", "state": "FAILED", "nodes": list(HOSTS)}, line=1)


def test_a_peer_address_left_to_one_job_host_is_that_hosts(tmp_path: Path) -> None:
    """No address evidence and no kernel log of node08: node07 reports against 10.10.3.8, and the job ran
    on node07 and node08, so the peer can only be node08."""
    rows = [r for r in _fabric_incident(False) if not isinstance(r, Topology)] + [_job_nodes()]
    path = make_bundle(tmp_path / "b.duckdb", rows)
    with Bundle.open(path) as bundle:
        assert PeerResolver.of(bundle.con, HOSTS, HOSTS).host_of("10.10.3.8") == "node08"
        assert PeerResolver.of(bundle.con, HOSTS, ("node07",)).host_of("10.10.3.8") is None
        assert PeerResolver.of(bundle.con, HOSTS, (*HOSTS, "node09")).host_of("10.10.3.8") is None
    top = run(path)["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("network_fabric_errors", "node08")
