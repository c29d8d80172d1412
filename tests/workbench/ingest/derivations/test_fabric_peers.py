"""NCCL network errors attributed to the host they point at: peer addresses mapped to hosts through
the ranks' NCCL init lines, through ``gpuwb ingest`` + ``timeline --json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import ingest_timeline
from workbench.ingest.derivations.fabric_peers import normalize_ip

HOSTS = ("node01", "node02", "node03", "node04")


def _rank_log(rank: int, host: str, ip: str, peers: list[str], status: int = 12, iface: str = "ibp12s0") -> str:
    pid, dev = 5100 + rank, rank % 2
    lines = [f"{host}:{pid}:{pid} [{dev}] NCCL INFO Bootstrap : Using {iface}:{ip}<0>",
             f"{host}:{pid}:{pid + 40} [{dev}] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB "
             f"{iface}:{ip}<0>",
             f"{host}:{pid}:{pid + 40} [{dev}] NCCL INFO ncclCommInitRank comm 0x55d7{rank:03x}0 rank {rank} nranks 8 "
             f"cudaDev {dev} nvmlDev {dev} busId {('18000', '2a000')[dev]} commId 0x5ae77eb5ea4ec1ee - Init COMPLETE"]
    for n, peer in enumerate(peers):
        lines.append(f"[2025-03-04 09:12:{5 + n:02d}] {host}:{pid}:{pid + 77} [{dev}] transport/net_ib.cc:1696 "
                     f"NCCL WARN NET/IB : Got completion from peer {peer}<{40100 + rank}> with status={status} "
                     f"opcode=0 len=0 vendor err 129 (Send) localGid fe80::a088:c203:f1:{rank:04x} "
                     f"remoteGids fe80::a088:c203:f1:e20e hca mlx5_0")
        lines.append(f"{host}:{pid}:{pid + 77} [{dev}] NCCL INFO transport/net.cc:1298 -> 6")
    return "\n".join(lines) + "\n"


def _job(folder: Path, reports: dict[int, list[str]], ips: dict[str, str] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ips = ips or {h: f"10.10.3.{11 + i}" for i, h in enumerate(HOSTS)}
    for rank in range(8):
        host = HOSTS[rank // 2]
        (folder / f"rank{rank}.log").write_text(_rank_log(rank, host, ips[host], reports.get(rank, [])))


def _of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


@pytest.mark.parametrize("text,want", [
    ("10.10.3.14<40312>", "10.10.3.14"), ("10.10.3.14", "10.10.3.14"), ("::ffff:10.1.2.3", "10.1.2.3"),
    ("fe80::a088:c203:f1:e20e%ib0<5000>", "fe80::a088:c203:f1:e20e"), ("[fe80::1]", "fe80::1"),
    ("node04", None), ("", None), (None, None), ("10.10.3.400", None)])
def test_normalize_ip(text, want):
    assert normalize_ip(text) == want


def test_errors_from_several_hosts_name_the_common_peer(tmp_path):
    # node04 (10.10.3.14) lost its link: ranks on three other hosts report against it; node04's own ranks
    # report against their ring neighbours, one reporter each
    _job(tmp_path / "logs", {0: ["10.10.3.14"], 2: ["10.10.3.14", "10.10.3.14"], 5: ["10.10.3.14"],
                             6: ["10.10.3.13"], 7: ["10.10.3.11"]})
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs")
    assert len(_of(events, "nccl_net_error")) == 6
    (peer,) = _of(events, "fabric_peer_errors")
    assert peer["host"] == "node04" and peer["layer"] == "network_storage" and peer["ts_origin"] == "derived"
    attrs = peer["attrs"]
    assert attrs["peer_ip"] == "10.10.3.14" and attrs["peer_host"] == "node04"
    assert attrs["reporters"] == ["node01", "node02", "node03"] and attrs["errors"] == 4
    assert attrs["statuses"] == {"12": 4} and attrs["reporter_ranks"] == [0, 2, 5]
    assert attrs["peer_reports"] == ["node01", "node03"]
    assert [r["rank"] for r in attrs["reporter_events"]] == [0, 2, 5, 2], "earliest first"
    assert all(r["artifact"] and r["line"] for r in attrs["reporter_events"])
    assert "node04" in peer["message"] and "10.10.3.14" in peer["message"]


def test_one_reporter_or_a_shared_address_names_no_one(tmp_path):
    _job(tmp_path / "one", {0: ["10.10.3.14", "10.10.3.14"], 1: ["10.10.3.14"]})
    assert _of(ingest_timeline(tmp_path / "one.duckdb", tmp_path / "one"), "fabric_peer_errors") == []
    # every host's bootstrap interface is docker0 with the same address: it says nothing about the peer
    shared = {h: "172.17.0.1" for h in HOSTS}
    _job(tmp_path / "docker", {0: ["172.17.0.1"], 2: ["172.17.0.1"], 4: ["172.17.0.1"]}, ips=shared)
    events = ingest_timeline(tmp_path / "docker.duckdb", tmp_path / "docker")
    assert len(_of(events, "nccl_net_error")) == 3 and _of(events, "fabric_peer_errors") == []


def _warn_only_job(folder: Path, reports: dict[int, list[str]]) -> None:
    """The same job with NCCL_DEBUG=WARN: no init line names an address, only the WARN lines remain."""
    _job(folder, reports)
    for path in folder.glob("rank*.log"):
        path.write_text("".join(line for line in path.read_text().splitlines(keepends=True) if "NCCL INFO" not in line))


def test_without_init_lines_the_peers_own_ip_addr_names_it(tmp_path):
    _warn_only_job(tmp_path / "ev" / "logs", {0: ["10.10.3.14"], 2: ["10.10.3.14"], 4: ["10.10.3.14"]})
    (tmp_path / "ev" / "node04").mkdir()
    (tmp_path / "ev" / "node04" / "ip-addr.txt").write_text(
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "4: ibp12s0    inet 10.10.3.14/24 brd 10.10.3.255 scope global ibp12s0\\       valid_lft forever "
        "preferred_lft forever\n")
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "ev")
    (peer,) = _of(events, "fabric_peer_errors")
    assert peer["host"] == "node04" and sorted(peer["attrs"]["reporters"]) == ["node01", "node02", "node03"]


def test_without_init_lines_a_hosts_file_names_the_peer(tmp_path):
    _warn_only_job(tmp_path / "ev" / "logs", {0: ["10.10.3.14"], 2: ["10.10.3.14"]})
    (tmp_path / "ev" / "node01").mkdir()
    (tmp_path / "ev" / "node01" / "hosts").write_text(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost\n10.10.3.14\tnode04-ib.cluster node04-ib\n")
    (peer,) = _of(ingest_timeline(tmp_path / "b.duckdb", tmp_path / "ev"), "fabric_peer_errors")
    assert peer["host"] == "node04-ib", "a host no other evidence names keeps the hosts file's name"


def test_without_init_lines_or_addresses_no_peer_is_named(tmp_path):
    _warn_only_job(tmp_path / "logs", {0: ["10.10.3.14"], 2: ["10.10.3.14"], 4: ["10.10.3.14"]})
    assert _of(ingest_timeline(tmp_path / "b.duckdb", tmp_path / "logs"), "fabric_peer_errors") == []
