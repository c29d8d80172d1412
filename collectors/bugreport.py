"""nvidia-bug-report.log(.gz): the one file NVIDIA support asks for, split back into its parts.

``nvidia-bug-report.sh`` writes a prologue (script version, ``date``, ``uname -a``) and then one
section per file or command, each opened by a line of underscores and named by its first line
(``*** /proc/driver/nvidia/version``, ``dmesg:``, ``/usr/bin/nvidia-smi --query``, ...). The
sections that carry evidence are handed to the parsers that know them: the nvidia-smi section to
``collectors.nvidia_smi`` line by line (events keep their line in the report), kernel-log sections
to ``collectors.kernel`` when that module is present (else their NVRM lines are kept as plain
``nvrm`` events), and the driver's /proc files become host facts and inventory. Sections nobody
reads (lspci dumps, X logs, base64 debug dumps) stay in the raw artifact only. ``.gz`` reports are
decompressed by ingest before they get here.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from datetime import datetime
from types import ModuleType
from typing import Any, BinaryIO

from collectors.base import Event, GpuInventory, HostFact, ParseContext, Row, Skipped, normalize_pci
from collectors.framework.lazy_re import lazy_regex
from collectors.host import parse_date_output
from collectors.nvidia_smi import TextParser

NAME = "bugreport"
LAYER = "gpu"
KINDS = ("nvidia_bug_report",)
PRIORITY = 5
"""After host facts, before the kernel parser of other files: the report's ``date`` line dates the
incident for year-less syslog lines handed over next to it."""

SEPARATOR = lazy_regex(r"^_{20,}\s*$")
_SMI = lazy_regex(r"(?:^|/)nvidia-smi\s+(?:--query|-q)\b")
_SMI_UNIT = lazy_regex(r"(?:^|/)nvidia-smi\s+--query\s+--unit\b")
_KERNEL_TITLES = lazy_regex(r"^(?:dmesg:|Scanning kernel log files for NVIDIA kernel messages:"
                            r"|journalctl\b.*(?:-k|--dmesg|_TRANSPORT=kernel)"
                            r"|\*\*\* /var/log/(?:kern\.log|messages|syslog|dmesg|kernel\.log)(?:\.\d+)?$)")
_PROC_VERSION = lazy_regex(r"NVRM version:.*?Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)")
_PROC_INFO = lazy_regex(r"^\*\*\* /proc/driver/nvidia/(?:\./)?gpus/([0-9a-fA-F:.]+)/information$")
_INFO_LINE = lazy_regex(r"^([A-Za-z][\w .]*?):\s*(.*?)\s*$")
SPOOL_MEMORY = 16 << 20


def sniff(name: str, head: str) -> dict[str, int]:
    if "nvidia-bug-report.sh" in head and ("Start of NVIDIA bug report log file" in head or "____" in head):
        return {"nvidia_bug_report": 98}
    return {}


def _kernel() -> ModuleType | None:
    """The kernel-log collector, when installed: the report's dmesg and journal sections are its input."""
    try:
        from collectors import kernel
    except ImportError:
        return None
    return kernel if hasattr(kernel, "parse") else None


class Section:
    """One section being read: its title, first line and whatever its reader keeps."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.title: str | None = None
        self.title_line: int | None = None
        self.reader: str = "none"
        self.lines: list[tuple[int, str]] = []
        self.spool: Any = None
        self.spooled_first: int | None = None
        self.smi: TextParser | None = None


class BugReport:
    """Streams the report section by section; only kernel sections are spooled (to disk when big)."""

    def __init__(self, ctx: ParseContext) -> None:
        self.ctx = ctx
        self.host: str | None = ctx.host
        self.kernel = _kernel()
        self.meta: dict[str, Any] = {"sections": 0, "parsed": []}
        self.prologue: list[tuple[int, str]] = []
        self.section: Section | None = None
        self.date: datetime | None = None

    def feed(self, n: int, line: str) -> Iterator[Row]:
        if SEPARATOR.match(line):
            yield from self.close()
            self.section = Section(n)
            self.meta["sections"] += 1
            return
        sec = self.section
        if sec is None:
            self.prologue.append((n, line))
            return
        if sec.title is None:
            if not line.strip():
                return
            sec.title, sec.title_line = line.strip(), n
            sec.reader = self._reader(sec.title)
            if sec.reader == "prologue":
                self.prologue.append((n, line))
            elif sec.reader == "smi":
                sec.smi = TextParser(self.ctx, host=self.host,
                                     snapshot=(self.date, "report_date") if self.date else None)
            if sec.reader != "none":
                self.meta["parsed"].append(sec.title[:80])
            return
        if sec.reader == "prologue":
            self.prologue.append((n, line))
        elif sec.reader == "smi" and sec.smi is not None:
            if _SMI_UNIT.search(line):
                yield from sec.smi.close()
                sec.smi = None
                return
            yield from sec.smi.feed(n, line)
        elif sec.reader in ("proc_version", "proc_info"):
            sec.lines.append((n, line[:4096]))
        elif sec.reader == "kernel":
            self._spool(sec, n, line)

    def _reader(self, title: str) -> str:
        if title.startswith("Start of NVIDIA bug report log file"):
            return "prologue"
        if _SMI.search(title) and not _SMI_UNIT.search(title):
            return "smi"
        if _KERNEL_TITLES.match(title):
            return "kernel"
        if re.match(r"^\*\*\* /proc/driver/nvidia/(?:\./)?version$", title):
            return "proc_version"
        if _PROC_INFO.match(title):
            return "proc_info"
        return "none"

    def _spool(self, sec: Section, n: int, line: str) -> None:
        if sec.spool is None:
            sec.spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY)
            sec.spooled_first = n
        sec.spool.write(line.encode("utf-8", "replace") + b"\n")

    def close(self) -> Iterator[Row]:
        """Finish the open section (or the prologue before the first one)."""
        if self.prologue and (self.section is None or self.section.reader != "prologue"):
            yield from self._prologue()
        sec, self.section = self.section, None
        if sec is None:
            return
        if sec.reader == "prologue":
            yield from self._prologue()
        elif sec.reader == "smi" and sec.smi is not None:
            yield from sec.smi.close()
        elif sec.reader == "proc_version":
            for _, line in sec.lines:
                if m := _PROC_VERSION.search(line):
                    yield HostFact("versions.driver", m.group(1), host=self.host)
        elif sec.reader == "proc_info":
            yield from self._gpu_information(sec)
        elif sec.reader == "kernel" and sec.spool is not None:
            yield from self._kernel_section(sec)

    def _prologue(self) -> Iterator[Row]:
        lines, self.prologue = self.prologue, []
        fields: dict[str, str] = {}
        first = lines[0][0] if lines else None
        for _, line in lines:
            key, sep, rest = line.partition(":")
            if sep and key.strip() in ("nvidia-bug-report.sh Version", "Date", "uname", "command line flags"):
                fields[key.strip()] = rest.strip()
        if not fields:
            return
        uname = fields.get("uname", "").split()
        if len(uname) >= 3 and uname[0] == "Linux":
            self.host = uname[1]
            yield HostFact("hostname", uname[1], host=self.host)
            yield HostFact("kernel", uname[2], host=self.host)
        when = parse_date_output(fields["Date"]) if fields.get("Date") else None
        if when is not None:
            self.date = when
            yield HostFact("date", when.isoformat(), host=self.host)
            self.ctx.learn_reference_time(self.host, when)
        zone = re.search(r"\s([A-Z]{2,5}|[+-]\d{2,4})\s+\d{4}\s*$", fields.get("Date", ""))
        approx = zone is None or zone.group(1) not in ("UTC", "GMT") and zone.group(1)[0] not in "+-"
        yield Event(kind="nvidia_bug_report", ts=when, ts_origin="date_output" if when else "none", ts_approx=approx,
                    ts_raw=fields.get("Date"),
                    host=self.host, layer="gpu", severity="info", line=first,
                    message=f"nvidia-bug-report.sh {fields.get('nvidia-bug-report.sh Version', '?')} "
                            f"run at {fields.get('Date', 'unknown time')}",
                    attrs={"version": fields.get("nvidia-bug-report.sh Version"), "date": fields.get("Date"),
                           "uname": fields.get("uname"), "flags": fields.get("command line flags") or None})

    def _gpu_information(self, sec: Section) -> Iterator[Row]:
        """/proc/driver/nvidia/gpus/<bus>/information: the driver's own view of each GPU, present
        even when NVML can no longer reach it."""
        m = _PROC_INFO.match(sec.title or "")
        info = {}
        for _, line in sec.lines:
            if im := _INFO_LINE.match(line):
                info[im.group(1).strip()] = im.group(2).strip()
        bus = normalize_pci(info.get("Bus Location") or (m.group(1) if m else None))
        if not bus or not info:
            return
        minor = info.get("Device Minor", "")
        yield GpuInventory(gpu=bus, host=self.host, uuid=info.get("GPU UUID"), name=info.get("Model"),
                           vbios=info.get("Video BIOS"),
                           extra={"source": "nvidia-bug-report /proc information",
                                  "minor_number": int(minor) if minor.isdigit() else None,
                                  "bus_type": info.get("Bus Type"), "gpu_firmware": info.get("GPU Firmware"),
                                  "excluded": info.get("GPU Excluded") or info.get("Blacklisted")})

    def _kernel_section(self, sec: Section) -> Iterator[Row]:
        offset = (sec.spooled_first or 1) - 1
        spool = sec.spool
        spool.seek(0)
        if self.kernel is None:
            yield from self._nvrm_lines(spool, offset)
            spool.close()
            return
        head = spool.read(64 << 10).decode("utf-8", "replace")
        spool.seek(0)
        kinds = getattr(self.kernel, "sniff", lambda name, text: {})(sec.title or "", head) or {}
        kind = max(kinds, key=kinds.get) if kinds else self.kernel.KINDS[0]
        sub = ParseContext(host=self.host, boot_time=self.ctx.boot_time_for(self.host),
                           reference_time=self.date or self.ctx.reference_time, mtime=self.ctx.mtime,
                           source_name=f"{self.ctx.source_name}!{sec.title}", boot_times=self.ctx.boot_times,
                           reference_times=self.ctx.reference_times, captured_at=self.ctx.captured_at)
        try:
            for row in self.kernel.parse(kind, spool, sub):
                if getattr(row, "line", None) is not None:
                    row.line += offset
                if isinstance(row, (Event, HostFact)) and row.host is None:
                    row.host = self.host
                yield row
        except Exception as exc:  # the kernel parser's bug must not cost the rest of the report
            yield Skipped(sec.title_line, f"kernel section parser error: {type(exc).__name__}: {exc}"[:200])
        finally:
            spool.close()

    def _nvrm_lines(self, spool: Any, offset: int) -> Iterator[Row]:
        for i, raw in enumerate(spool, start=1):
            text = raw.decode("utf-8", "replace").rstrip("\n")
            if "NVRM" in text:
                yield Event(kind="nvrm", message=text.strip()[:2000], host=self.host, layer="gpu", severity="warning",
                            attrs={"text": text.strip()[:2000]}, line=offset + i)


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    report = BugReport(ctx)
    for n, line in ctx.lines(stream):
        yield from report.feed(n, line)
    yield from report.close()
