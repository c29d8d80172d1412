"""Whose failure a line is evidence of: a host's own report, or its peers' reports about it.

When one host's InfiniBand port flaps, its own kernel says ``mlx5_core … Link down``; every host that
talks to it says ``NET/IB : Got completion from peer 10.1.2.14<40312> with status=12``. Both lines are
fabric errors, but only the first is about the host that wrote it: the second names the peer it lost.
A responder reads it as evidence about the peer, and so does the engine here: a cause line on host A
that names exactly one other known host P (by IPv4 ``10.1.2.3<port>`` or ``10.1.2.3:port``, IPv6
``[fe80::1]:port`` or a GID ``fe80::a088:c203:f1:e20e``, ``host:port`` or ``host.domain``) counts on P,
at PEER_DISCOUNT of its strength (the reporter only knows the peer stopped answering, not why), and
no longer on A. So P's own ``Link down`` outranks A's completion errors, and P is still named when
its own log is lost, because everyone else blames it.

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
    def of(cls, con: duckdb.DuckDBPyConnection, hosts: Iterable[str]) -> PeerResolver:
        """The resolver of a bundle whose known hosts are ``hosts`` (Place.machines)."""
        resolver = cls.from_hosts(hosts)
        resolver.addresses.update(address_map(con))
        resolver.add_addresses(_local_gids(con))
        return resolver

    @classmethod
    def from_hosts(cls, hosts: Iterable[str], addresses: dict[str, str] | None = None) -> PeerResolver:
        """Names (full and short, case-insensitive) of ``hosts``; a short name two hosts share is nobody's."""
        names: dict[str, set[str]] = defaultdict(set)
        for host in hosts:
            if host:
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

    def peer_named(self, text: str | None, own: str | None) -> str | None:
        """The one other host a line written on ``own`` names; None when it names none, or several."""
        if not text or not own or not (self.addresses or self.names):
            return None
        own_key = own.lower()
        peers = {h for h in self.mentions(text) if h.lower() != own_key}
        return next(iter(peers)) if len(peers) == 1 else None


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
    the reporter's clock, where it was written."""
    if resolver is None or row.get("reported_by"):
        return row
    peer = resolver.peer_named(row.get("text"), row.get("host"))
    if peer is None:
        return row
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

