"""One kernel-log record -> timeline rows: the line's time prefix, then what the message says.

The block scanner in collectors/kernel/ hands over only the records that can be events; this package
knows the formats: the time prefix (prefix.py), then one module per family of kernel messages — the NVIDIA
driver (nvidia.py), PCIe (pcie.py), machine checks (machine_check.py), memory and the file table
(memory.py), stalls and crashes (crashes.py), storage (storage.py), networking (network.py) — each a reader
mixed into :class:`Classifier`, whose ``handle`` sends a record to the one family whose literals it holds.

The event kinds it writes (xid, sxid, gpu_fell_off_bus, nvrm, pcie_aer, mce, oom_kill, link_down, nfs_not_responding,
lustre_error, ...) and their attrs are declared in collectors/catalog/events.yaml.
"""

from __future__ import annotations

from collections.abc import Iterator

from collectors.base import Row
from collectors.framework.kernel_lines.crashes import CrashLines
from collectors.framework.kernel_lines.machine_check import MachineCheckLines
from collectors.framework.kernel_lines.memory import MemoryLines
from collectors.framework.kernel_lines.network import CONTAINER_INTERFACES, NetworkLines
from collectors.framework.kernel_lines.nvidia import NV_BARE, NvidiaLines
from collectors.framework.kernel_lines.pcie import PcieLines
from collectors.framework.kernel_lines.prefix import STAMPED, Prefix, Stamp, exact, resolve, split_prefix
from collectors.framework.kernel_lines.record import ERROR_WORDS, Record
from collectors.framework.kernel_lines.storage import STORAGE_WORDS, StorageLines

__all__ = ["CONTAINER_INTERFACES", "ERROR_WORDS", "NV_BARE", "STAMPED", "Classifier", "Prefix", "Record", "Stamp",
           "exact", "resolve", "split_prefix"]
"""What collectors/kernel/ imports from here (the names it used when this was one module)."""


class Classifier(NvidiaLines, PcieLines, MachineCheckLines, MemoryLines, CrashLines, StorageLines, NetworkLines):
    """Turns records into rows, remembering what a log says across lines: which PCI id is which GPU
    UUID, the oom-kill summary that precedes its kill line, a multi-line "fallen off the bus"."""

    def __init__(self) -> None:
        self.uuid_by_pci = {}
        self.pending_gpu = None
        self.fob_head = None
        self.fob_seen = {}
        self.oom_info = {}
        self.oom_invoker = None
        self.aer_source = {}
        self.xid_gpus = set()
        self.ghes = {}
        self.last_xid = None
        self.kernel_seen = False
        self.last_oops = -10
        self.oom_summary = None

    def finish(self) -> Iterator[Row]:
        """At the end of the log: every row still held back."""
        yield from self.flush()
        yield from self._unkilled()

    def handle(self, rec: Record) -> Iterator[Row]:
        """The rows of one record: it goes to the first family, in this order, whose literals it holds."""
        msg = rec.message
        if self.pending_gpu is not None and "Board Serial" not in msg:
            yield from self.flush()
        if "NVRM" in msg:
            yield from self._nvrm(rec)
        elif "SXid" in msg:
            yield from self._sxid(rec)
        elif "[Hardware Error]" in msg:
            yield from self._hardware_error(rec)
        elif "AER" in msg or "PCIe Bus Error" in msg or "DPC:" in msg or "pciehp" in msg or "PCIe bandwidth" in msg:
            yield from self._pcie(rec)
        elif "EDAC" in msg or "temperature above threshold" in msg:
            yield from self._mce(rec)
        elif "oom" in msg or "Killed process" in msg or "Kill process" in msg:
            yield from self._oom(rec)
        elif ("INFO: " in msg or "BUG" in msg or "LOCKUP" in msg or "Kernel panic" in msg or "blocked for more" in msg
              or "Oops: " in msg):
            yield from self._stall(rec)
        elif ": server " in msg or "NFS" in msg or "nfs4_" in msg:
            yield from self._nfs(rec)
        elif "Lustre" in msg or "LNet" in msg:
            yield from self._lustre(rec)
        elif "segfault" in msg or "general protection" in msg or "traps:" in msg:
            yield from self._segfault(rec)
        elif "nvidia" in msg:
            yield from self._nvidia_module(rec)
        elif any(t in msg for t in NV_BARE):
            yield from self._nvidia_bare(rec)
        elif "Linux version" in msg:
            yield from self._boot(rec)
        elif any(t in msg for t in STORAGE_WORDS):
            yield from self._storage(rec)
        elif "mmfs" in msg or "GPFS" in msg:
            yield from self._gpfs(rec)
        elif "VFS: file-max" in msg:
            yield from self._file_table(rec)
        else:
            yield from self._network(rec)
