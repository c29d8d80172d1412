"""Networking in the kernel log: NIC and IPoIB link changes, bonds, InfiniBand ports, mlx5 port-module
(cable) events, transmit timeouts, NIC device health, and RDMA errors."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collectors.base import Row
from collectors.framework.kernel_lines.record import ERROR_WORDS, PCI, LineFamily, Record
from collectors.framework.kernel_lines.record import pci_of as _pci
from collectors.framework.lazy_re import lazy_regex

_MLX_LINK = lazy_regex(rf"(?P<drv>[\w-]+) (?P<pci>{PCI}) (?P<ifc>[\w.@-]+): Link (?P<st>up|down)\b")
_NIC_LINK = lazy_regex(rf"(?:(?P<drv>[\w-]+) (?P<pci>{PCI}) )?(?P<ifc>[\w.@-]+):? NIC Link is (?P<st>Up|Down)\b"
                       r"(?P<rest>.*)")
_ADDRCONF = lazy_regex(r"ADDRCONF\(NETDEV_\w+\): (?P<ifc>[\w.@-]+): link (?P<st>is not ready|becomes ready)")
_BOND = lazy_regex(r"(?P<bond>bond[\w.-]*): (?:\(slave (?P<slave>[\w.@-]+)\): )?link status definitely (?P<st>down|up)"
                   r"(?: for interface (?P<ifc>[\w.@-]+))?")
_BOND_RELEASE = lazy_regex(r"(?P<bond>bond[\w.-]*)(?: \(unregistering\))?: Releasing (?P<role>backup|active) interface "
                           r"(?P<ifc>[\w.@-]+)")
_BOND_NONE = lazy_regex(r"(?P<bond>bond[\w.-]*): now running without any active interface")
_IB_PORT = lazy_regex(r"infiniband (?P<dev>[\w.-]+): set (?P<st>active|down)")
_MODULE = lazy_regex(rf"(?:(?P<drv>[\w-]+) (?P<pci>{PCI}): )?(?:\w+:\d+:\(pid \d+\): )?Port module event"
                     r"(?:\[(?P<level>\w+)\])?(?::|\s+-)\s*(?:module (?P<module>\d+)[,:]\s*)?"
                     r"(?P<status>[^,\n]+)(?:, (?P<detail>.*))?")
"""mlx5's module events, with or without the device prefix (``mlx5_port_module_event:1131:(pid 0): Port module
event[error]: module 0, Cable error, High Temperature``)."""
_WATCHDOG = lazy_regex(rf"(?:NETDEV WATCHDOG: (?P<ifc>[\w.@-]+) \((?P<drv>[^)]+)\):|"
                       rf"(?P<drv2>[\w-]+) (?P<pci>{PCI}) (?P<ifc2>[\w.@-]+): NETDEV WATCHDOG:(?: CPU: \d+:)?) "
                       r"transmit (?:queue (?P<queue>\d+) )?timed out")
"""Both orders: linux 6.8 (and 6.6.47, 6.1.107) moved the driver and device before ``NETDEV WATCHDOG``; old
kernels print no queue number."""
_PORT_LINK = lazy_regex(rf"(?P<drv>[\w-]+) (?P<pci>{PCI}) (?P<ifc>[\w.@-]+): Port: (?P<port>\d+) Link "
                        r"(?P<st>DOWN|UP|ACTIVE|INIT)\b")
"""mlx5 IPoIB ports (``mlx5_core 0000:3b:00.0 ib0: Port: 1 Link DOWN``)."""
_NIC_HEALTH = lazy_regex(
    r"(?P<what>health_try_recover|print_health_info|Health issue observed|health compromised|health poll failed|"
    r"unrecoverable hardware error|Will cause a leak of a command resource|insufficient power on the PCIe slot|"
    r"ACCESS_REG\b.*?failed|TX timeout detected|RX timeout on channel|"
    r"cmd_work_handler.*?timeout|wait_func.*?timeout|firmware version mismatch|FW pages|"
    r"Detected insufficient power|PCI power is not sufficient|Timeout (?:reading|waiting) [^,]*|"
    r"Wait for completion \(polling\) timeout|didn't send any completion for admin cmd|Admin queue is closed|"
    r"Failed to (?:process|submit) command|Reset indication didn't turn (?:on|off)|Device isn't ready)", re.IGNORECASE)
"""The mlx5 driver's device-health messages (firmware health poller, command interface, slot power): the
NIC itself is failing or misconfigured, not one RDMA operation."""
_NIC_WHO = lazy_regex(rf"\b(?:(?P<drv>mlx5_core|mlx5_ib|mlx4_core|bnxt_en|ice|efa|ena|mlx5_\w+)(?: (?P<pci>{PCI}))?|"
                      r"infiniband (?P<ibdev>(?:rdmap|efa_)\w+))\b")
"""The NIC a device-health message is about: the driver's own prefix, or the RDMA device an AWS EFA adapter
registered (``infiniband rdmap16s27:``)."""
_RDMA_ERR = lazy_regex(rf"(?P<who>(?:mlx5_\w+|rdma_\w+|infiniband [\w-]+|ib_\w+)(?: (?P<pci>{PCI}))?):? (?P<rest>.*)")
_ERRORISH = lazy_regex(ERROR_WORDS, re.IGNORECASE)

CONTAINER_INTERFACES = ("veth", "cni", "docker", "flannel", "cali", "lxc")
"""Name prefixes of interfaces that are container plumbing: their link changes make no events."""


class NetworkLines(LineFamily):
    """NIC, bond, InfiniBand and RDMA lines."""

    def _network(self, rec: Record) -> Iterator[Row]:
        """Each pattern is tried only when a literal it cannot match without is in the line: most
        lines that reach here (mlx5 firmware tracer, interfaces becoming ready) match none of them."""
        msg = rec.message
        if ": Link " in msg and (m := _MLX_LINK.search(msg)):
            up = m.group("st") == "up"
            yield from self._link(rec, up, device=m.group("ifc"), port=m.group("ifc"),
                                  pci=_pci(m.group("pci")), driver=m.group("drv"))
        elif "NIC Link is " in msg and (m := _NIC_LINK.search(msg)):
            up = m.group("st") == "Up"
            speed = re.search(r"(\d+ [GM]bps)", m.group("rest") or "")
            yield from self._link(rec, up, device=m.group("ifc"), port=m.group("ifc"), driver=m.group("drv"),
                                  pci=_pci(m.group("pci")), speed=speed.group(1) if speed else None)
        elif "ADDRCONF(NETDEV_" in msg and (m := _ADDRCONF.search(msg)):
            yield from self._link(rec, m.group("st") == "becomes ready", device=m.group("ifc"), port=m.group("ifc"))
        elif "link status definitely " in msg and (m := _BOND.search(msg)):
            port = m.group("slave") or m.group("ifc")
            yield from self._link(rec, m.group("st") == "up", device=m.group("bond"), port=port)
        elif ": Releasing " in msg and (m := _BOND_RELEASE.search(msg)):
            yield from self._link(rec, False, device=m.group("bond"), port=m.group("ifc"), reason="released",
                                  role=m.group("role"))
        elif "without any active interface" in msg and (m := _BOND_NONE.search(msg)):
            yield from self._link(rec, False, device=m.group("bond"), port=None, reason="no active interface")
        elif "infiniband " in msg and (m := _IB_PORT.search(msg)):
            yield from self._link(rec, m.group("st") == "active", device=m.group("dev"), port=m.group("dev"))
        elif "Port module event" in msg and (m := _MODULE.search(msg)):
            status = m.group("status").strip()
            bad = not re.match(r"Cable plugged", status)
            module = m.group("module")
            yield self._event(rec, "port_module_event", "network_storage", "warning" if bad else "info",
                              device=_pci(m.group("pci")), driver=m.group("drv"),
                              module=int(module) if module else None, status=status, detail=m.group("detail"),
                              high_temperature=True if re.search("high temperature", msg, re.I) else None)
        elif "NETDEV WATCHDOG: " in msg and (m := _WATCHDOG.search(msg)):
            queue = m.group("queue")
            yield self._event(rec, "nic_tx_timeout", "network_storage", "error",
                              device=m.group("ifc") or m.group("ifc2"),
                              driver=m.group("drv") or m.group("drv2"), pci=_pci(m.group("pci")),
                              queue=int(queue) if queue else None)
        elif "Port: " in msg and (m := _PORT_LINK.search(msg)):
            yield from self._link(rec, m.group("st") in ("UP", "ACTIVE"), device=m.group("ifc"), port=m.group("port"),
                                  pci=_pci(m.group("pci")), driver=m.group("drv"))
        elif (m := _NIC_HEALTH.search(msg)) and (who := _NIC_WHO.search(msg)):
            yield self._event(rec, "nic_device_error", "network_storage", "error", driver=who.group("drv") or "efa",
                              pci=_pci(who.group("pci")), device=who.group("ibdev"), what=m.group("what"))
        elif _ERRORISH.search(msg) and (m := _RDMA_ERR.search(msg)) and _ERRORISH.search(m.group("rest")):
            who = m.group("who")
            device = who.split()[-1] if who.startswith("infiniband") else who.split()[0]
            yield self._event(rec, "rdma_error", "network_storage", "error", device=device,
                              pci=_pci(m.group("pci")))

    def _link(self, rec: Record, up: bool, **attrs: Any) -> Iterator[Row]:
        """A link event, except for container plumbing (veth pairs, CNI and Docker bridges): a Kubernetes
        node makes thousands a day as pods come and go, and nobody diagnoses them."""
        if (attrs.get("device") or "").startswith(CONTAINER_INTERFACES):
            return
        yield self._event(rec, "link_up" if up else "link_down", "network_storage", "info" if up else "warning",
                          **attrs)
