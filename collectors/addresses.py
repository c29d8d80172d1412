"""Which host owns which address: ``ip addr`` / ``ip -o addr`` of a host, and a copy of ``/etc/hosts``.

NCCL reports a failed InfiniBand completion against the peer's address (``Got completion from peer
10.10.7.14<40312> with status=12``). NCCL's own init lines name each rank's address, but only with
NCCL_DEBUG=INFO; without them, these are the files a responder has to tell whose address it is: the
interface list of every host that still answers, and the cluster's hosts file for the ones that do not
(a hung node cannot be asked). workbench/ingest/derivations/fabric_peers.py reads the facts written here:

- ``net.addr.<ip>`` = interface, on the host the ``ip addr`` output came from
  (``2: ens3    inet 10.1.2.3/24 brd … scope global ens3``, or the multi-line form under
  ``2: ens3: <BROADCAST,…>``; loopback and link-local addresses are left out);
- ``hosts_file.<ip>`` = the names of the entry (``10.10.7.14  node14-ib node14``), on the host the file
  was taken from.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, HostFact, ParseContext, Row, Skipped
from collectors.framework.lazy_re import lazy_regex

NAME = "addresses"
LAYER = "network_storage"
KINDS = ("ip_addr", "hosts_file")
TIMEOUT = 10.0
MAX_ENTRIES = 100_000

_IP_LINK_HEAD = lazy_regex(r"^\d+:\s+(?P<ifname>[^:@\s]+)(?:@\S+)?:\s+<")
_IP_ONE_LINE = lazy_regex(r"^\d+:\s+(?P<ifname>[^:@\s]+)\s+inet6?\s+(?P<addr>[0-9A-Fa-f:.]+)/\d+")
_IP_INET = lazy_regex(r"^\s+inet6?\s+(?P<addr>[0-9A-Fa-f:.]+)/\d+.*?(?:\s(?P<label>[\w.:@\-]+))?\s*$")
_HOSTS_LINE = lazy_regex(r"^\s*(?P<addr>[0-9A-Fa-f:.]+(?:%\S+)?)\s+(?P<names>[^#]+?)\s*(?:#.*)?$")
_SNIFF_IP = lazy_regex(r"^\d+:\s+(?:lo|[\w.\-]+)(?::\s+<[A-Z_,\-]*>|\s+inet6?\s+[0-9a-f.:]+/\d+)", re.M)
_SNIFF_HOSTS = lazy_regex(r"^127\.0\.0\.1\s+localhost\b|^::1\s+\S*localhost", re.M)


def usable(text: str) -> str | None:
    """The address in one comparable form, None for loopback, link-local, unspecified or non-addresses."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast:
        return None
    return str(address)


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """``ip -o addr`` and /etc/hosts: cheap, and the only way to name a peer when NCCL_DEBUG was unset."""
    if ctx.which("ip"):
        yield ctx.run(["ip", "-o", "addr"], kind="ip_addr", timeout=5)
    else:
        ctx.missing("ip", "unavailable: iproute2 not installed")
    hosts = ctx.read_file("/etc/hosts", kind="hosts_file", max_bytes=4 << 20)
    if hosts is not None:
        yield hosts


def sniff(name: str, head: str) -> dict[str, int]:
    if _SNIFF_IP.search(head) and ("inet " in head or "inet6 " in head):
        return {"ip_addr": 80}
    if _SNIFF_HOSTS.search(head):
        return {"hosts_file": 80}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    told = 0
    ifname: str | None = None
    for n, line in ctx.lines(stream):
        if told >= MAX_ENTRIES:
            yield Skipped(n, "more addresses than a host file holds")
            return
        if kind == "hosts_file":
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = _HOSTS_LINE.match(line)
            address = usable(m.group("addr")) if m else None
            if m is None:
                yield Skipped(n, "not a hosts-file entry")
            elif address is not None:
                told += 1
                yield HostFact(f"hosts_file.{address}", " ".join(m.group("names").split()[:16]))
            continue
        if m := _IP_ONE_LINE.match(line):
            ifname = m.group("ifname")
            address = usable(m.group("addr"))
        elif m := _IP_LINK_HEAD.match(line):
            ifname = m.group("ifname")
            continue
        elif (m := _IP_INET.match(line)) and ifname is not None:
            address = usable(m.group("addr"))
        else:
            continue
        if address is not None:
            told += 1
            yield HostFact(f"net.addr.{address}", ifname)
