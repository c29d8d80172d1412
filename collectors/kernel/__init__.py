"""Kernel log: NVRM Xid/SXid, fallen-off-the-bus, PCIe AER, MCE, OOM kills, hung tasks, link and NFS
state, Lustre/LNet, from a live host or from handed-over dmesg/journal/syslog files.

Live, the journal is asked first (``journalctl -k``, this boot and the two before: after a reboot the
evidence is in the previous boot), else ``dmesg``, else /var/log/kern.log, messages or syslog; pstore
dumps of a crashed boot are kept too. A syslog file next to a journal or dmesg that only covers this
boot is kept as ``syslog_before_boot``: only its lines from before the boot become events, so nothing
is counted twice.

Parsing is built for multi-GB logs: the bytes are scanned in 4 MiB blocks by a prefilter (one RE2
pass for the keywords' short windows, or numpy compares for a few rare anchor bytes then an 8-byte window
check around each anchor), so only lines that can be events reach the per-line regexes of
collectors/framework/kernel_lines/. The RE2 pass also narrows the keywords a busy Kubernetes node prints on
most lines (NARROWED), so a chatty log costs about what a quiet one does. A block's newlines are counted
by one numpy compare, in stretches that end at the candidate lines, which are located by offset: no line
that cannot be an event is ever split out, decoded or indexed. A regular file is scanned through a map of
it, not copied into blocks. Nothing holds more than a block in memory (the map's pages behind the block
are dropped as the parse goes).

The package, one module per step:

    log_capture.py  live capture: journalctl -k (this boot and two before), dmesg, the syslog files, pstore
    sniffing.py     which kernel-log style a file is written in (the artifact's kind)
    blocks.py       the bytes as blocks that end at a line boundary, read or mapped
    prefilter.py    the candidate lines of a block (RE2 windows, or numpy anchor-byte compares)
    log_parser.py   candidate lines -> records -> rows (collectors/framework/kernel_lines/) and signatures
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import ParseContext, Row
from collectors.kernel.log_capture import capture
from collectors.kernel.log_parser import LogParser
from collectors.kernel.sniffing import sniff

NAME = "kernel"
LAYER = "hardware"
KINDS = ("dmesg", "dmesg_ctime", "dmesg_iso", "journal", "syslog", "kmsg", "pstore", "syslog_before_boot")
TIMEOUT = 35.0
"""Its commands one after the other at their limits (journalctl -k in two formats 8 s + 8 s, the list of boots 4 s,
two earlier boots 5 s + 5 s) and the spool margin: the whole sequence fits, not only what the clamp leaves."""
PRIORITY = 10
"""After host facts (boot times), before the collectors whose year-less lines take dates from ours."""
SIGNATURES_INLINE = True
"""The signature catalog (collectors/catalog/signatures/) runs on this parser's own candidate lines instead of a
second pass over the file: a multi-GB quiet log is read once."""


def xid_info(code: int) -> dict[str, Any]:
    """The catalog entry of an Xid as plain data, for other collectors (NVML's Xid events)."""
    from collectors.framework.xid_catalog import lookup

    info = lookup(code)
    return {"name": info.name, "meaning": info.meaning, "layer": info.layer, "severity": info.severity,
            "action": info.action, "follower": info.follower, "causes": list(info.causes)}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    yield from LogParser(kind, ctx).run(stream)


__all__ = ["KINDS", "LAYER", "NAME", "PRIORITY", "SIGNATURES_INLINE", "TIMEOUT", "capture", "parse", "sniff",
           "xid_info"]
