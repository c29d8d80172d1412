"""NCCL's init lines as topology: ``comm 0x… rank 3 nranks 16 cudaDev 3 busId 19000 … Init COMPLETE``, the NCCL
version, ``Channel 00/0 : 3[3] -> 4[4] via P2P/IPC`` transports, the NET/IB devices and bootstrap
interface, mapping rank <-> host <-> cudaDev <-> PCI bus id."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collectors.base import HostFact, Row, Topology, normalize_pci
from collectors.framework.lazy_re import lazy_regex
from collectors.nccl.addresses import address_facts
from collectors.nccl.state import MAX_PROCS, Comm, Proc, ReaderState

_INIT = lazy_regex(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)")
_INIT_FIELDS = {name: re.compile(rf"\b{name} (?P<v>[0-9a-fA-Fx]+)") for name in
                ("cudaDev", "nvmlDev", "busId", "commId", "nNodes", "localRanks", "localRank")}
_INIT_STATE = lazy_regex(r"Init (?P<state>START|COMPLETE)")
_VERSION = lazy_regex(r"NCCL version (?P<v>[\w.+\-]+)")
_CHANNEL = lazy_regex(r"Channel (?P<ch>\d+(?:/\d+)?) : (?P<src>\d+)\[(?P<sdev>[\da-fA-F]+)\] -> (?P<dst>\d+)"
                      r"\[(?P<ddev>[\da-fA-F]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
_CHANNEL_LINE = lazy_regex(rb"(?P<host>[\w.\-]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO Channel (?P<ch>\d+(?:/\d+)?) : "
                           rb"(?P<src>\d+)\[[\da-fA-F]+\] -> (?P<dst>\d+)\[[\da-fA-F]+\]"
                           rb"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S+)")
"""A bare channel-connect line (no prefix, so no time to learn from it): read without decoding."""
_NET_USING = lazy_regex(r"NET/(?P<net>IB|Socket)\s*: Using (?P<devs>.*?)(?:\s*;\s*OOB (?P<oob>\S+))?\s*$")
_BOOTSTRAP = lazy_regex(r"Bootstrap\s*: Using (?P<oob>\S+)")
_NETWORK = lazy_regex(r"Using network (?P<net>\S+)")


def nccl_bus_id(text: str) -> str | None:
    """NCCL prints busId as a 64-bit int in hex: ``19000`` is 0000:19:00.0 (domain<<20 | bus<<12 |
    device<<4 | function)."""
    try:
        value = int(text, 16)
    except ValueError:
        return None
    return normalize_pci(f"{value >> 20:04x}:{(value >> 12) & 0xff:02x}:{(value >> 4) & 0xff:02x}.{value & 0xf:x}")

_MAX_COMMS = 200_000
_MAX_CHANNELS = 32


class InitLines(ReaderState):
    """Reads the init lines of each process into its communicators, and their topology rows."""

    def _proc(self, host: str, pid: int) -> Proc | None:
        proc = self.procs.get((host, pid))
        if proc is None and len(self.procs) < MAX_PROCS:
            proc = self.procs[(host, pid)] = Proc(host, pid, version=self.file_version)
        return proc

    def _known_host(self, host: str) -> str:
        """A host glued to the end of a cut line (``Chanhost07``) is the known host it ends with."""
        if host in self.hosts or not self.hosts:
            return host
        for known in self.hosts:
            if host.endswith(known):
                return known
        return host

    def _info(self, lineno: int, proc: Proc, tid: int, host: str, msg: str) -> Iterator[Row]:
        """An NCCL INFO line of a known process: an init, version, channel or network line."""
        # Each pattern is tried only when its literal is in the message (a substring test, not a search).
        if "comm 0x" in msg and (c := _INIT.search(msg)):
            yield from self._init(lineno, proc, tid, c, msg)
        elif "NCCL version " in msg and (c := _VERSION.search(msg)):
            proc.version = c.group("v")
            yield from self._tell_version(host, proc.version)
        elif "Channel " in msg and (c := _CHANNEL.search(msg)):
            self._add_channel(proc, c.group("ch"), c.group("src"), c.group("dst"), c.group("via"), c.group("dir"))
        elif "NET/" in msg and (c := _NET_USING.search(msg)):
            proc.net, proc.net_devices = c.group("net"), c.group("devs").strip()[:300]
            proc.oob = c.group("oob") or proc.oob
            yield from address_facts(host, msg, self.addresses_told)
        elif "Bootstrap" in msg and (c := _BOOTSTRAP.search(msg)):
            proc.oob = c.group("oob")
            yield from address_facts(host, msg, self.addresses_told)
        elif "Using network " in msg and (c := _NETWORK.search(msg)):
            proc.net = c.group("net")

    def _bare_channel(self, raw: bytes) -> bool:
        """Whether ``raw`` is a bare channel-connect line (then read here without decoding it)."""
        m = _CHANNEL_LINE.match(raw)
        if m is None:
            return False
        self._channel(m)
        return True

    def _channel(self, m: re.Match[bytes]) -> None:
        host = m.group("host").decode("utf-8", "replace")
        proc = self._proc(host, int(m.group("pid")))
        if proc is not None:
            if len(self.hosts) < 4096:
                self.hosts.add(host)
            ch, src, dst, via, direction = m.group("ch", "src", "dst", "via", "dir")
            self._add_channel(proc, ch.decode(), src.decode(), dst.decode(), via.decode("utf-8", "replace"),
                              direction.decode() if direction else None)

    @staticmethod
    def _add_channel(proc: Proc, ch: str, src: str, dst: str, via: str, direction: str | None) -> None:
        proc.transports[via] += 1
        if len(proc.channels) < _MAX_CHANNELS:
            proc.channels.append({"channel": ch, "from": int(src), "to": int(dst), "via": via,
                                  **({"dir": direction} if direction else {})})

    def _init(self, lineno: int, proc: Proc, tid: int, c: re.Match[str], msg: str) -> Iterator[Row]:
        comm_ptr = c.group("comm")
        rank, nranks = int(c.group("rank")), int(c.group("nranks"))
        comm = proc.comms.get(comm_ptr)
        if comm is None:
            if self.comms_total >= _MAX_COMMS:
                return
            self.comms_total += 1
            comm = proc.comms[comm_ptr] = Comm(rank, nranks, lineno)
        for name, pattern in _INIT_FIELDS.items():
            if name in msg and (f := pattern.search(msg)):
                comm.fields[name] = f.group("v")
        gpu = nccl_bus_id(comm.fields["busId"]) if "busId" in comm.fields else None
        if gpu and "cudaDev" in comm.fields and comm.fields["cudaDev"].isdigit():
            proc.devs[int(comm.fields["cudaDev"])] = gpu
        if nranks > proc.nranks:
            proc.rank, proc.nranks = rank, nranks
        home = self.rank_home.get(rank)
        if (home is None or nranks > home[0]) and len(self.rank_home) < MAX_PROCS:
            self.rank_home[rank] = (nranks, proc.host, gpu)
        state = _INIT_STATE.search(msg)
        if state and state.group("state") == "COMPLETE" and comm.state != "COMPLETE":
            comm.state = "COMPLETE"
            yield self._topology(proc, comm_ptr, comm, tid)
        elif state and comm.state == "INIT":
            comm.state = state.group("state")

    def _topology(self, proc: Proc, comm_ptr: str, comm: Comm, tid: int | None = None) -> Topology:
        f = comm.fields
        gpu = nccl_bus_id(f["busId"]) if "busId" in f else None
        extra: dict[str, Any] = {"comm": comm_ptr, "init": comm.state}
        for name, key in (("nvmlDev", "nvml_dev"), ("localRank", "local_rank"), ("localRanks", "local_ranks"),
                          ("nNodes", "nnodes")):
            if name in f and f[name].isdigit():
                extra[key] = int(f[name])
        if proc.transports:
            extra["transports"] = dict(proc.transports)
            extra["channels"] = list(proc.channels)
            proc.transports.clear()
            proc.channels.clear()
        for name in ("net", "net_devices", "oob"):
            if getattr(proc, name):
                extra[name] = getattr(proc, name)
        if tid is not None:
            extra["tid"] = tid
        cuda_dev = int(f["cudaDev"]) if f.get("cudaDev", "").isdigit() else None
        return Topology(rank=comm.rank, host=proc.host, nranks=comm.nranks, comm_id=f.get("commId") or comm_ptr,
                        pid=proc.pid, cuda_dev=cuda_dev, gpu=gpu, nccl_version=proc.version or self.file_version,
                        extra=extra, line=comm.line)

    def _tell_version(self, host: str | None, version: str) -> Iterator[Row]:
        if (host, version) not in self.versions_told and len(self.versions_told) < 1024:
            self.versions_told.add((host, version))
            yield HostFact("versions.nccl", version, host=host)
