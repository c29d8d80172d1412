"""Whose failure a line is evidence of: a host's own report, or its peers' reports about it.

When one host's InfiniBand port flaps, its own kernel says ``mlx5_core … Link down``; every host that
talks to it says ``NET/IB : Got completion from peer 10.1.2.14<40312> with status=12``. Both lines are
fabric errors, but only the first is about the host that wrote it: the second names the peer it lost.
A responder reads it as evidence about the peer, and so does the engine here: a cause line on host A
that names exactly one other known host P (by IPv4 ``10.1.2.3<port>`` or ``10.1.2.3:port``, IPv6
``[fe80::1]:port`` or a GID ``fe80::a088:c203:f1:e20e``, ``host:port`` or ``host.domain``) counts on P,
at PEER_DISCOUNT of its strength (the reporter only knows the peer stopped answering, not why), and
no longer on A. So P's own ``Link down`` outranks A's completion errors, and P is still named when
its own log is lost, because everyone else blames it. A line that blames a peer's address nobody in
the bundle owns (no NCCL init lines, no hosts file) stays on its writer at the same discount: the
host whose own kernel logged the link going down still outranks it.

Addresses resolve to hosts through what the bundle says about them (PeerResolver.of): NCCL's init and
bootstrap lines (topology ``extra.oob``/``net_devices`` and the reader's ``net.addr.*`` host facts),
each host's ``ip addr``, a hosts file, Slurm's NodeAddr (all read by
workbench/ingest/derivations/fabric_peers.address_map, the one reading of that evidence), the GIDs
NCCL prints as a reporter's own ``localGid``, and the host names the bundle knows. An address two
hosts claim (a container bridge) resolves to nobody; a line naming two peers stays where it is.
"""

from __future__ import annotations

import ipaddress
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from collectors.addresses import usable
from workbench.ingest.derivations.fabric_peers import KIND as SUMMARY_KIND
from workbench.ingest.derivations.fabric_peers import address_map, normalize_ip

PEER_DISCOUNT = 0.6
"""The share of its strength a line keeps when it is counted on the peer it names: the reporter saw the
peer stop answering, which its own link, its host or the switch between them could explain."""
PEER_RELATION = 0.9
"""How plausibly a failure on P explains a symptom on a host that reported errors against P: they were
talking to each other when it broke (a host of the same job, not told so, gets less)."""
SUMMED_UP = 0.1
"""What a peer's report keeps beside the derivation's summary of all reports against the same host
(fabric_peer_errors): the same evidence, counted once, as the nccl_net check counts the reports it blames."""

_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w]|\.\d)")
"""A dotted quad, bare or followed by NCCL's ``<port>`` or ``:port`` (not part of a longer dotted number)."""
_IPV6 = re.compile(r"(?<![\w:.])\[?((?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4})(?:%[\w.\-]+)?\]?")
"""An IPv6 address or GID (``fe80::a088:c203:f1:e20e``, ``[fd00::5]:29500``, ``fe80::1%ib0``); checked by
ipaddress, so PCI ids and clock times fall out."""
_NAME = re.compile(r"(?<![\w.\-/@])([A-Za-z][\w\-]*(?:\.[A-Za-z0-9][\w\-]*)*)(?::(\d{1,5})(?![\d:]))?")
"""A host name with a port (``node14:29500``) or a domain (``node14.cluster.local``); a bare short name
is a word, not a mention, and ``host:pid:tid`` (NCCL's header) is not a port."""

_PEER_ADDRESS = re.compile(r"\b(?:peer|remote)\b[^\d\[]{0,12}\[?"
                           r"(?P<ip>\d{1,3}(?:\.\d{1,3}){3}|[0-9A-Fa-f:]*:[0-9A-Fa-f:]+)\]?(?:<\d+>|:\d+)")
"""An address with a port that the line calls the peer's or the remote's."""


def _gid(text: str) -> str | None:
    """An IPv6 address or GID in one comparable form; None when it is not one."""
    try:
        address = ipaddress.IPv6Address(text.strip("[]"))
    except ValueError:
        return None
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


@dataclass
class PeerResolver:
    """Address or name -> the host it belongs to, for the hosts this bundle knows."""

    addresses: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection, hosts: Iterable[str],
           job_hosts: Iterable[str] = ()) -> PeerResolver:
        """The resolver of a bundle whose known hosts are ``hosts`` (Place.machines), the job's ``job_hosts``."""
        resolver = cls.from_hosts(hosts)
        resolver.addresses.update(address_map(con))
        resolver.add_addresses(_local_gids(con))
        resolver.add_addresses(_by_elimination(con, resolver, set(job_hosts)))
        return resolver

    @classmethod
    def from_hosts(cls, hosts: Iterable[str], addresses: dict[str, str] | None = None) -> PeerResolver:
        """Names (full and short, case-insensitive) of ``hosts``; a short name two hosts share is nobody's."""
        names: dict[str, set[str]] = defaultdict(set)
        for host in hosts:
            if host and host.split(".", 1)[0].lower() != "localhost":  # every machine's own name for itself
                names[host.lower()].add(host)
                names[host.split(".", 1)[0].lower()].add(host)
        resolver = cls(names={k: next(iter(v)) for k, v in names.items() if len(v) == 1})
        if addresses:
            resolver.add_addresses(addresses.items())
        return resolver

    def add_addresses(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Add address -> host pairs; an address already owned by another host becomes nobody's."""
        for text, host in pairs:
            key = normalize_ip(text) or _gid(text)
            if key is None:
                continue
            if self.addresses.get(key, host) != host:
                self.addresses[key] = ""
            else:
                self.addresses[key] = host
        self.addresses = {k: v for k, v in self.addresses.items() if v}

    def host_of(self, token: str) -> str | None:
        """The host an address (``10.1.2.3<0>``, ``[fe80::1]:5``, a GID) or name (``node7.dc``,
        ``node7:29500``) belongs to, else None."""
        token = token.strip()
        key = normalize_ip(token) or _gid(token.split("<", 1)[0].split("%", 1)[0])
        if key is not None:
            return self.addresses.get(key)
        name = token.rsplit(":", 1)[0] if re.search(r":\d+$", token) else token
        name = name.lower()
        return self.names.get(name) or self.names.get(name.split(".", 1)[0])

    def mentions(self, text: str) -> Iterator[str]:
        """The hosts a line names by address, GID, ``host:port`` or ``host.domain``, in order."""
        for m in _IPV4.finditer(text):
            if (host := self.addresses.get(normalize_ip(m.group(1)) or "")) is not None:
                yield host
        for m in _IPV6.finditer(text):
            if m.group(1).count(":") >= 2 and (key := _gid(m.group(1))) and (host := self.addresses.get(key)):
                yield host
        for m in _NAME.finditer(text):
            name, port = m.group(1), m.group(2)
            if port is None and "." not in name:
                continue
            key = name.lower()
            host = self.names.get(key) or (self.names.get(key.split(".", 1)[0]) if "." in key else None)
            if host is not None:
                yield host

    def unknown_peer(self, text: str | None, own: str | None) -> str | None:
        """The address of a peer a line calls one (``from peer 10.1.2.3<4031>``, ``remote peer
        [fd00::5]:29500``) that no host of the bundle owns, nor ``own``; None when it names none. Without
        NCCL's init lines or a hosts file nobody can say whose it is, but it is not the writer's."""
        if not text or ("peer" not in text and "remote" not in text):
            return None
        for m in _PEER_ADDRESS.finditer(text):
            key = normalize_ip(m.group("ip"))
            if key is not None and usable(key) is not None and self.addresses.get(key) is None:
                return key
        return None

    def peer_named(self, text: str | None, own: str | None) -> str | None:
        """The one other host a line written on ``own`` names; None when it names none, or several."""
        if not text or not own or not (self.addresses or self.names):
            return None
        own_key = own.lower()
        peers = {h for h in self.mentions(text) if h.lower() != own_key}
        return next(iter(peers)) if len(peers) == 1 else None


def _by_elimination(con: duckdb.DuckDBPyConnection, resolver: PeerResolver,
                    job_hosts: set[str]) -> list[tuple[str, str]]:
    """Addresses no evidence owns, named as the peer in NCCL network errors: a peer is a host of the
    job other than the reporter, so when every host of the job but one reported against the address,
    it is that one's (a two-node job's reporter can only mean the other node). Only when each such
    address leaves a different host, and that host owns no known address yet."""
    if len(job_hosts) < 2:
        return []
    try:
        rows = con.execute("SELECT DISTINCT host, attrs->>'peer_ip' FROM event WHERE kind = 'nccl_net_error' "
                           "AND host IS NOT NULL AND (attrs->>'peer_ip') IS NOT NULL").fetchall()
    except duckdb.Error:
        return []
    reporters_of: dict[str, set[str]] = defaultdict(set)
    for host, ip in rows:
        key = normalize_ip(ip)
        if key is not None and usable(key) is not None and key not in resolver.addresses:
            reporters_of[key].add(host)
    owners = set(resolver.addresses.values())
    left = {ip: job_hosts - who for ip, who in reporters_of.items() if who <= job_hosts}
    found = [(ip, next(iter(rest))) for ip, rest in left.items() if len(rest) == 1 and not rest & owners]
    hosts = [host for _, host in found]
    return [(ip, host) for ip, host in found if hosts.count(host) == 1]


def _local_gids(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """The GIDs NCCL printed as a reporter's own (``localGid``): that GID is the reporting host's port."""
    try:
        rows = con.execute("SELECT DISTINCT host, attrs->>'local_gid' FROM event WHERE kind = 'nccl_net_error' "
                           "AND host IS NOT NULL AND (attrs->>'local_gid') IS NOT NULL").fetchall()
    except duckdb.Error:
        return []
    return [(gid, host) for host, gid in rows if gid]


def attribute(row: dict[str, Any], resolver: PeerResolver | None) -> dict[str, Any]:
    """The row as evidence about its place: unchanged when it is about the host that wrote it, else a copy
    placed on the peer it names (``host``), which says who wrote it (``reported_by``, ``reporter_rank``),
    with its strength discounted (the original kept as ``reported_strength``). Its time ``at`` stays on
    the reporter's clock, where it was written. A line that calls an address nobody in the bundle owns
    its peer's stays on its writer, discounted all the same (``about_peer``: that address): it is no
    strong claim on the writer, whose own evidence, if any, is elsewhere."""
    if resolver is None or row.get("reported_by") or row.get("about_peer"):
        return row
    peer = resolver.peer_named(row.get("text"), row.get("host"))
    if peer is None:
        unknown = resolver.unknown_peer(row.get("text"), row.get("host"))
        if unknown is None:
            return row
        return {**row, "about_peer": unknown, "reported_strength": row["strength"],
                "strength": row["strength"] * PEER_DISCOUNT}
    return {**row, "host": peer, "gpu": None, "rank": None, "reported_by": row["host"],
            "reporter_rank": row.get("rank"), "reported_strength": row["strength"],
            "strength": row["strength"] * PEER_DISCOUNT}


def count_once(rows: list[dict[str, Any]]) -> None:
    """The reports against a host, beside the summary of them on that host (``fabric_peer_errors``, which
    several reporters agreeing wrote), are that summary's parts: they keep SUMMED_UP of strength, so the
    summary (which says who reported what) is the evidence and the first sign, not one reporter's line."""
    if not any(r["kind"] == SUMMARY_KIND for r in rows):
        return
    for r in rows:
        if r.get("reported_by") and r["strength"] > SUMMED_UP:
            r["strength"] = SUMMED_UP


def reporters(rows: Iterable[dict[str, Any]]) -> set[str]:
    """The hosts whose lines about a peer are among ``rows``."""
    return {r["reported_by"] for r in rows if r.get("reported_by")}

