"""Storage in the kernel log: NFS servers, Lustre and LNet, IBM Storage Scale (GPFS), block devices (NVMe,
md RAID, I/O errors) and local file systems."""

from __future__ import annotations

import re
from collections.abc import Iterator

from collectors.base import Row
from collectors.framework.kernel_lines.record import ERROR_WORDS, LineFamily, Record
from collectors.framework.lazy_re import lazy_regex

_NVME = lazy_regex(r"nvme (?P<dev>nvme\d+): (?P<what>I/O (?:tag )?\d+ .*?timeout, (?:aborting|reset controller)|"
                   r"Disabling device after reset failure|controller is down; will reset|"
                   r"Device not ready; aborting (?:reset|initialisation)|Removing after probe failure|"
                   r"frozen state error detected, reset controller|Abort status: 0x\w+)")
"""NVMe controller failures; ``I/O ... timeout, completion polled`` is none (the command completed, its interrupt
was late)."""
_NVME_CMD = lazy_regex(r"(?P<dev>nvme\d+n\d+): (?P<what>[\w /]+?\(0x[0-9a-fA-F]+\) @ LBA \d+, \d+ blocks?, "
                       r"(?P<status>[^(\n]+?) \(sct (?P<sct>0x[0-9a-fA-F]+) / sc (?P<sc>0x[0-9a-fA-F]+)\))")
"""A failed NVMe command as linux 5.19+ logs it (``nvme0n1: I/O Cmd(0x2) @ LBA 1336320, 32 blocks, I/O Error
(sct 0x3 / sc 0x71)``)."""
_NVME_PATH = lazy_regex(r"block (?P<dev>nvme\w+): no available path - failing I/O")
_MD_FAIL = lazy_regex(r"md/(?P<level>raid\d*|linear|multipath):?(?P<dev>md\w*): Disk failure on (?P<disk>[\w-]+)"
                      r"(?:,| detected)")
_BEYOND = lazy_regex(r"attempt to access beyond end of device")
_FS_ERR = lazy_regex(r"(?P<fs>EXT[234]-fs|XFS|BTRFS|JBD2|F2FS-fs|NILFS|reiserfs)(?P<sev> error| critical| warning)?"
                     r"(?: \(device (?P<dev>[\w.-]+)\)| \((?P<dev2>[\w.-]+)\))?:?\s*(?P<what>.*)")
_FS_BAD = lazy_regex(r"Remounting filesystem read-only|I/O error while writing superblock|metadata I/O error|"
                     r"Corruption (?:of in-memory data|detected)|[Ss]hutting down filesystem|Log I/O Error|"
                     r"error \(device|Detected aborted journal|log I/O error|unable to read|bad extent|"
                     r"checksum|journal commit I/O error|previous I/O error to superblock|failed to|"
                     r"corrupt|errors=remount-ro.*?triggered|IO errors|has been shut down")
_GPFS = lazy_regex(r"(?P<tag>mmfs|mmfsd|GPFS)(?:\[\d+\])?: (?P<text>.*)")
_NFS_MISC = lazy_regex(r"(?:nfs4_reclaim_open_state: Lock reclaim failed|NFS: state manager: [^\n]*failed|"
                       r"nfs: RPC call returned error \d+|NFS: nfs4_discover_server_trunking unhandled error -?\d+|"
                       r"NFS: [^\n]*?(?:error|failed)[^\n]*)")
_NFS = lazy_regex(r"(?P<svc>nfs|NFS|lockd): server (?P<server>\S+) (?P<state>not responding|OK)(?:, (?P<how>[\w ]+))?")
_LUSTRE = lazy_regex(r"(?P<tag>LustreError|Lustre|LNetError|LNet): (?:\d+:\d+:\((?P<src>\S*?)\)\s)?(?P<text>.*)")
_SUPPRESSED = lazy_regex(r"Skipped (\d+) previous similar messages?")
_NID = lazy_regex(r"\b(\d{1,3}(?:\.\d{1,3}){3}@\w+)")
_LUSTRE_RC = lazy_regex(r"rc = (-?\d+)")
_LUSTRE_TARGET = lazy_regex(r"\b([\w-]+-(?:MDT|OST|MGS|MGT)[0-9a-fA-F]*)")
_LNET_TX = lazy_regex(r"Timed out tx for (?P<nid>\S+): (?P<secs>\d+) seconds")
_IO_ERROR = lazy_regex(r"(?:I/O error,? (?:on )?dev(?:ice)? |Buffer I/O error on dev(?:ice)? )(?P<dev>[\w-]+)")
_ERRORISH = lazy_regex(ERROR_WORDS, re.IGNORECASE)
STORAGE_WORDS = ("I/O error", "nvme", "md/", "-fs", "XFS", "BTRFS", "JBD2", "Remounting filesystem",
                  "beyond end of device", "superblock")
"""Literals one of which every block-device or file-system message of _storage holds."""


class StorageLines(LineFamily):
    """NFS, Lustre/LNet, GPFS, block-device and file-system lines."""

    def _nfs(self, rec: Record) -> Iterator[Row]:
        m = _NFS.search(rec.message)
        if not m:
            if om := _NFS_MISC.search(rec.message):
                yield self._event(rec, "nfs_error", "network_storage", "error", what=om.group(0).strip())
            return
        down = m.group("state") == "not responding"
        yield self._event(rec, "nfs_not_responding" if down else "nfs_ok", "network_storage",
                          "error" if down else "info", server=m.group("server"), service=m.group("svc").lower(),
                          state=(m.group("how") or "").strip() or None)

    def _lustre(self, rec: Record) -> Iterator[Row]:
        m = _LUSTRE.search(rec.message)
        if not m:
            return
        tag, text = m.group("tag"), m.group("text")
        if sm := _SUPPRESSED.search(text):  # the client hid N more errors of the same call site
            kind = "lnet_error" if tag.startswith("LNet") else "lustre_error"
            yield self._event(rec, kind, "network_storage", "warning", where=m.group("src"),
                              suppressed=int(sm.group(1)))
            return
        nid = _NID.search(text)
        rc = _LUSTRE_RC.search(text)
        target = _LUSTRE_TARGET.search(text)
        common = {"nid": nid.group(1) if nid else None, "rc": int(rc.group(1)) if rc else None,
                  "target": target.group(1) if target else None,
                  "fsname": target.group(1).split("-")[0] if target else None, "where": m.group("src")}
        if tag.startswith("LNet"):
            tx = _LNET_TX.search(text)
            if tx or tag == "LNetError":
                yield self._event(rec, "lnet_error", "network_storage", "error",
                                  seconds=int(tx.group("secs")) if tx else None,
                                  **{**common, "nid": tx.group("nid") if tx else common["nid"]})
            return
        if tag == "LustreError" or re.search(r"network error|failed|timed out|evict|was lost|error", text, re.I):
            yield self._event(rec, "lustre_error", "network_storage", "error", **common)
        elif re.search(r"Connection restored|recovery complete", text, re.I):
            yield self._event(rec, "lustre_recovered", "network_storage", "info", **common)

    def _storage(self, rec: Record) -> Iterator[Row]:
        """Block devices (the block layer, NVMe, md RAID), then file systems: a device error first, since a
        file system names the device it failed on (``EXT4-fs (dm-0): I/O error while writing superblock``)."""
        msg = rec.message
        if "nvme" in msg and (m := _NVME.search(msg)):
            what = m.group("what").strip()
            level = "critical" if what.startswith(("Disabling", "Removing", "Device not ready")) else "error"
            yield self._event(rec, "io_error", "network_storage", level, device=m.group("dev"), subsystem="nvme",
                              what=what)
        elif " @ LBA " in msg and (m := _NVME_CMD.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "error", device=m.group("dev"), subsystem="nvme",
                              what=m.group("what"))
        elif "no available path" in msg and (m := _NVME_PATH.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "critical", device=m.group("dev"),
                              subsystem="nvme", what="no available path")
        elif "Disk failure" in msg and (m := _MD_FAIL.search(msg)):
            yield self._event(rec, "io_error", "network_storage", "critical", device=m.group("disk"),
                              subsystem="md", array=m.group("dev"), raid_level=m.group("level"),
                              what="disk failure")
        elif (fm := _FS_ERR.search(msg)) and (fm.group("sev") in (" error", " critical")
                                              or _FS_BAD.search(fm.group("what") or "")):
            dev = fm.group("dev") or fm.group("dev2")
            what = fm.group("what").strip()
            level = "critical" if "read-only" in what or "hutting down" in what else "error"
            yield self._event(rec, "filesystem_error", "network_storage", level, filesystem=fm.group("fs"),
                              device=dev, what=what[:200])
        elif m := _IO_ERROR.search(msg):
            yield self._event(rec, "io_error", "network_storage", "error", device=m.group("dev"), subsystem="block")
        elif _BEYOND.search(msg):
            yield self._event(rec, "io_error", "network_storage", "error", subsystem="block",
                              what="access beyond end of device")
        elif "Remounting filesystem read-only" in msg or "I/O error while writing superblock" in msg:
            yield self._event(rec, "filesystem_error", "network_storage", "critical", what=msg.strip()[:200])

    def _gpfs(self, rec: Record) -> Iterator[Row]:
        """IBM Storage Scale (GPFS) daemon lines in the kernel log: ``[E]`` errors, expels, lost quorum."""
        m = _GPFS.search(rec.message)
        if m and (m.group("text").startswith(("[E]", "[X]")) or _ERRORISH.search(m.group("text"))
                  or re.search(r"expel|quorum|unmount", m.group("text"), re.I)):
            yield self._event(rec, "gpfs_error", "network_storage", "error", text=m.group("text").strip()[:200])
