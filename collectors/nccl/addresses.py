"""The addresses NCCL says a host uses, as host facts: who owns the address a peer's error names.

NCCL prints each process's interfaces in its init lines: ``Bootstrap : Using eth0:10.1.2.3<0>``,
``NET/Socket : Using [0]bond0:10.1.2.3<0> [1]ib0:10.2.0.3<0>``, ``NET/IB : Using [0]mlx5_0:1/IB
[1]mlx5_1:1/IB ; OOB ibp12s0:10.1.2.3<0>``. A failed completion on another host names that address
(``Got completion from peer 10.1.2.3<40312>``). The topology row keeps them only once a communicator
reaches ``Init COMPLETE``; a job that hangs in init, or a log cut short, leaves the lines but no row, so
each address is told here as a fact of the host that printed it, ``net.addr.<ip>`` = interface (the key
collectors/addresses.py writes for ``ip addr``), which workbench/ingest/derivations/fabric_peers.py and
workbench/analysis/localisation.py read. Container bridges (docker0, veth, virbr, br-, cali) are left
out: every Docker host has the same 172.17.0.1, which is nobody's peer address.
"""

from __future__ import annotations

from collections.abc import Iterator

from collectors.addresses import usable
from collectors.base import HostFact
from collectors.framework.lazy_re import lazy_regex

INTERFACE_ADDRESS = lazy_regex(r"(?:^|[\]\s;])(?P<ifname>[\w.\-]+):(?P<ip>[0-9A-Fa-f:.]+?)(?:%[\w.\-]+)?<\d+>")
"""``ifname:address<port>`` as NCCL prints an interface (``ibp12s0:10.10.3.14<0>``, ``ib0:fe80::1%ib0<0>``)."""
_BRIDGE = lazy_regex(r"^(?:docker|veth|virbr|br-|cali|lo$)")
MAX_TOLD = 4096


def interface_addresses(text: str) -> Iterator[tuple[str, str]]:
    """(interface, address) of each interface NCCL lists in ``text``, bridges and loopback left out."""
    for m in INTERFACE_ADDRESS.finditer(" " + text):
        address = usable(m.group("ip"))
        if address is not None and not _BRIDGE.match(m.group("ifname")):
            yield m.group("ifname"), address


def address_facts(host: str | None, text: str, told: set[tuple[str, str]]) -> Iterator[HostFact]:
    """The ``net.addr.<ip>`` facts of one init line of ``host``, each (host, address) once per file."""
    if not host:
        return
    for ifname, address in interface_addresses(text):
        if (host, address) not in told and len(told) < MAX_TOLD:
            told.add((host, address))
            yield HostFact(f"net.addr.{address}", ifname, host=host)
