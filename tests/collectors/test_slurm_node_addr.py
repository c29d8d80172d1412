"""``scontrol show node``'s NodeAddr as the node's address fact: a peer's NCCL error names the address,
the workbench needs the node (workbench/analysis/localisation.py)."""

from __future__ import annotations

from collectors.base import HostFact
from tests.collectors.test_slurm import parse

NODES = """\
NodeName=dgx14 Arch=x86_64 CPUAlloc=64 CPUTot=128 NodeAddr=10.10.7.14 NodeHostName=dgx14 State=MIXED Partitions=gpu
NodeName=dgx15 Arch=x86_64 CPUAlloc=64 CPUTot=128 NodeAddr=dgx15 NodeHostName=dgx15 State=MIXED Partitions=gpu
NodeName=dgx[16-17] NodeAddr=10.10.7.16,10.10.7.17 State=IDLE Partitions=gpu
NodeName=dgx[18-19] NodeAddr=10.10.7.18 State=IDLE Partitions=gpu
NodeName=dgx20 NodeAddr=127.0.0.1 State=IDLE Partitions=gpu
"""


def test_node_addr_is_the_nodes_address_fact() -> None:
    facts = {(r.host, r.key) for r in parse("scontrol_node", NODES) if isinstance(r, HostFact)
             and r.key.startswith("net.addr.")}
    # a name (dgx15) is no address; a list that does not pair one to one and loopback say nothing
    assert facts == {("dgx14", "net.addr.10.10.7.14"), ("dgx16", "net.addr.10.10.7.16"),
                     ("dgx17", "net.addr.10.10.7.17")}
