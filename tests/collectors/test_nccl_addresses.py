"""NCCL's init lines tell which host owns which address (collectors/nccl/addresses.py), even when no
communicator reached Init COMPLETE."""

# ruff: noqa: E501  (real lines are kept whole)

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors import nccl
from collectors.base import HostFact, ParseContext
from collectors.nccl.addresses import interface_addresses

HUNG_IN_INIT = """\
gpu21:20434:20434 [0] NCCL INFO Bootstrap : Using ibp12s0:10.13.133.12<0>
gpu21:20434:20434 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ibp12s0:10.13.133.12<0>
gpu20:20420:20420 [0] NCCL INFO NET/Socket : Using [0]bond0:10.13.133.11<0> [1]docker0:172.17.0.1<0> [2]ib0:fd00::a088:c203:f1:e20e<0> [3]ib1:fe80::1%ib1<0>
gpu20:20420:20420 [0] NCCL INFO Bootstrap : Using bond0:10.13.133.11<0>
"""
"""A two-host job that hung before Init COMPLETE: no topology row, only the bootstrap lines (forms of
https://github.com/NVIDIA/nccl/issues/278)."""


def _facts(text: str) -> list[HostFact]:
    ctx = ParseContext(host=None, source_name="slurm-4242.out", mtime=datetime(2026, 5, 26, tzinfo=timezone.utc),
                       reference_time=datetime(2026, 5, 26, tzinfo=timezone.utc))
    return [row for row in nccl.parse("nccl_log", io.BytesIO(text.encode()), ctx)
            if isinstance(row, HostFact) and row.key.startswith("net.addr.")]


def test_bootstrap_and_net_lines_tell_each_hosts_addresses_once() -> None:
    facts = {(f.host, f.key, f.value) for f in _facts(HUNG_IN_INIT)}
    assert facts == {("gpu21", "net.addr.10.13.133.12", "ibp12s0"), ("gpu20", "net.addr.10.13.133.11", "bond0"),
                     ("gpu20", "net.addr.fd00::a088:c203:f1:e20e", "ib0")}  # link-local fe80:: is every host's
    assert len(_facts(HUNG_IN_INIT)) == 3  # the Bootstrap line repeats an address already told


def test_bridges_loopback_and_device_lists_are_no_ones_address() -> None:
    assert list(interface_addresses("[0]docker0:172.17.0.1<0> [1]lo:127.0.0.1<0> [2]br-1a2b:172.19.0.1<0>")) == []
    assert list(interface_addresses("[0]mlx5_0:1/IB [1]mlx5_1:1/IB")) == []
    assert list(interface_addresses("ens3:[fd00::5]<0>")) == []  # not NCCL's form
    assert list(interface_addresses("; OOB eth0:10.0.0.5<0>")) == [("eth0", "10.0.0.5")]
