"""The host that NCCL's network errors point at, found through the peers' addresses.

A failed InfiniBand/RoCE work completion is reported by the rank that notices it, against the peer it
was talking to: ``NET/IB : Got completion from peer 10.10.3.14<40312> with status=12``. When one host's
link fails, every host that talks to it reports errors against its address, and the host itself may
report nothing (it is down, or its log is lost): the reporters are the symptom, the common peer is the
suspect. NCCL prints each rank's out-of-band (bootstrap) address in its init lines (``NET/IB : Using
[0]mlx5_0:1/IB ; OOB ibp12s0:10.10.3.14<0>``, ``Bootstrap : Using ibp12s0:10.10.3.14<0>``; socket
transports list theirs in ``NET/Socket : Using [0]eth0:10.0.0.5<0>``), and the peer address in a
completion error is that address; the topology table keeps them (extra.oob, extra.net_devices).

Writes ``fabric_peer_errors`` (layer network_storage) on the peer host when at least MIN_REPORTERS
other hosts reported network errors against it: attrs peer_ip, peer_host, reporters (hosts), errors,
statuses ({status: count}), reporter_ranks, reporter_events ({id, host, rank, artifact, line}, earliest
first) and peer_reports (hosts the peer itself reported errors against: a link failing on one side is
seen from both). An address that maps to more than one host (a container's default bridge address) is
not used.
"""

from __future__ import annotations

import ipaddress
import json
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import duckdb

from collectors.base import Event
from collectors.nccl.addresses import INTERFACE_ADDRESS

NAME = "fabric_peers"
KIND = "fabric_peer_errors"
"""The kind of the event written on the peer (workbench/analysis/localisation.py knows it sums up the reports)."""
MIN_REPORTERS = 2
"""One host reporting against one peer cannot tell which end failed; two or more agreeing can."""
MAX_LISTED = 256


def normalize_ip(text: str | None) -> str | None:
    """An address as NCCL prints it (``10.1.2.3<40312>``, ``fe80::1%ib0``, ``::ffff:10.1.2.3``) in
    one comparable form; None when it is not an address."""
    if not text:
        return None
    bare = str(text).split("<", 1)[0].split("%", 1)[0].strip("[] ")
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address)


def address_map(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """IP -> host from every rank's NCCL init lines, the hosts' own ``ip addr`` output, and a hosts file
    (collectors/addresses.py); addresses claimed by two hosts are dropped."""
    seen: dict[str, set[str]] = defaultdict(set)
    for host, oob, devices in con.execute(
            "SELECT DISTINCT host, extra->>'oob', extra->>'net_devices' FROM topology WHERE host IS NOT NULL "
            "AND (extra->>'oob' IS NOT NULL OR extra->>'net_devices' IS NOT NULL)").fetchall():
        for text in (oob, devices):
            for m in INTERFACE_ADDRESS.finditer(" " + (text or "")):
                if ip := normalize_ip(m.group("ip")):
                    seen[ip].add(host)
    for host, key in con.execute("SELECT DISTINCT host, key FROM host_inventory WHERE host IS NOT NULL "
                                 "AND key LIKE 'net.addr.%'").fetchall():
        if ip := normalize_ip(key.removeprefix("net.addr.")):
            seen[ip].add(host)
    entries = con.execute("SELECT DISTINCT key, value FROM host_inventory WHERE key LIKE 'hosts_file.%'").fetchall()
    if entries:
        known = {h for (h,) in con.execute(
            "SELECT host FROM topology WHERE host IS NOT NULL UNION SELECT host FROM event WHERE host IS NOT NULL "
            "UNION SELECT host FROM host_inventory WHERE host IS NOT NULL").fetchall()}
        for key, names in entries:
            ip = normalize_ip(key.removeprefix("hosts_file."))
            if ip and ip not in seen and (host := _known_name(names.split(), known)):
                seen[ip].add(host)
    return {ip: next(iter(hosts)) for ip, hosts in seen.items() if len(hosts) == 1}


def _known_name(names: list[str], known: set[str]) -> str | None:
    """The name a hosts-file entry gives the host the bundle knows it by (``node14`` of ``node14-ib
    node14``, ``node14.cluster``), else the entry's own short name."""
    for name in names:
        if name in known or name.split(".", 1)[0] in known:
            return name if name in known else name.split(".", 1)[0]
    for name in names:
        for sep in ("-", "_"):
            if (stem := name.split(".", 1)[0].rsplit(sep, 1)[0]) in known:
                return stem
    return names[0].split(".", 1)[0] if names else None


def derive(con: duckdb.DuckDBPyConnection) -> Iterator[Event]:
    hosts_of = address_map(con)
    if not hosts_of:
        return
    against: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rows = con.execute(
        "SELECT id, ts, host, rank, CAST(attrs AS VARCHAR), artifact, line FROM event "
        "WHERE kind = 'nccl_net_error' AND host IS NOT NULL AND coalesce(ts_origin, '') <> 'derived' "
        "AND coalesce(attrs->>'peer_ip', attrs->>'peer') IS NOT NULL ORDER BY ts NULLS LAST, id").fetchall()
    for eid, ts, host, rank, attrs_text, artifact, line in rows:
        attrs = json.loads(attrs_text or "{}")
        ip = normalize_ip(attrs.get("peer_ip") or attrs.get("peer"))
        peer = hosts_of.get(ip or "")
        if peer is None or peer == host:
            continue
        against[peer].append({"id": eid, "ts": ts, "host": host, "rank": rank, "artifact": artifact, "line": line,
                              "ip": ip, "status": attrs.get("status")})
    for peer, reports in against.items():
        reporters = sorted({r["host"] for r in reports})
        if len(reporters) < MIN_REPORTERS:
            continue
        peer_reports = sorted(target for target, seen in against.items() if any(r["host"] == peer for r in seen))
        yield _event(peer, reports, reporters, peer_reports)


def _event(peer: str, reports: list[dict[str, Any]], reporters: list[str], peer_reports: list[str]) -> Event:
    statuses = Counter(str(r["status"]) for r in reports if r["status"] is not None)
    times = [r["ts"] for r in reports if r["ts"] is not None]
    first: datetime | None = min(times) if times else None
    ips = sorted({r["ip"] for r in reports})
    named = ", ".join(f"status {s} x{n}" for s, n in sorted(statuses.items())) or "errors"
    listed = [{k: r[k] for k in ("id", "host", "rank", "artifact", "line")} for r in reports[:MAX_LISTED]]
    return Event(
        kind=KIND, ts=first, ts_approx=True, host=peer, layer="network_storage", severity="error",
        message=(f"{len(reporters)} hosts ({', '.join(reporters[:8])}{'…' if len(reporters) > 8 else ''}) report "
                 f"{len(reports)} NCCL network errors ({named}) against {', '.join(ips)}, the address of {peer}"),
        attrs={"peer_ip": ips[0] if len(ips) == 1 else ips, "peer_host": peer, "reporters": reporters[:MAX_LISTED],
               "errors": len(reports), "statuses": dict(statuses),
               "reporter_ranks": sorted({r["rank"] for r in reports if r["rank"] is not None})[:MAX_LISTED],
               "reporter_events": listed, "peer_reports": peer_reports[:MAX_LISTED]})
