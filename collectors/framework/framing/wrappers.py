"""One physical line's frame (:func:`peel`): the wrapper rules, outermost kinds first, and the ``Framed`` line they
fill in (time, host, rank, stream, level, program). The kinds of wrapper are listed in the package's docstring."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from collectors.base import MONTHS, from_monotonic, infer_year
from collectors.framework.framing.times import ISO, iso_time, parse_iso
from collectors.framework.json_items import no_lone_surrogates
from collectors.framework.lazy_re import lazy_regex

LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")
_LEVEL_WORDS = r"TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|CRITICAL|CRIT|FATAL|PANIC"


@dataclass(slots=True)
class Framed:
    """One logical line: its message body and what its wrappers said about it."""

    line: int
    message: str
    ts: datetime | None = None
    ts_approx: bool = False
    ts_raw: str | None = None
    ts_origin: str = "none"
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    task: int | None = None
    """The launcher's task number (``srun -l``'s ``3: ``, mpirun's ``[1,3]``): the line's ``rank`` only when
    no torchrun ``[rankN]:``/``[defaultN]:`` says otherwise; over torchrun it numbers the node's agent."""
    stream: str | None = None
    level: str | None = None
    program: str | None = None
    pid: int | None = None
    mono: float | None = None
    delta: float | None = None
    """``dmesg -H`` seconds after the last absolute stamp; :func:`frame_lines` adds them up."""
    end_line: int | None = None
    """Last physical line of a record joined from CRI partial lines (None: the record is one line)."""
    wrappers: tuple[str, ...] = field(default_factory=tuple)
    offsets: tuple[int, ...] = field(default_factory=tuple)
    """where each wrapper began in ``text``"""
    text: str = ""
    """the text the wrappers were peeled from (a docker line's decoded ``log`` string)"""
    partial: bool = False


_FENCE = lazy_regex(r"\s{0,3}(?:```|~~~)[\w+-]*\s*$")
_QUOTE = lazy_regex(r"\s{0,3}> ?")
_INDENT = lazy_regex(r"[ \t]+(?=\[\s*[+\d]|\[[A-Z][a-z]{2}|\d{4}-\d\d-\d\d[T ]\d|[A-Z][a-z]{2} [ \d]\d \d\d:)")
"""An indented line that starts with a time is a pasted log (a Markdown list or code block), not a
kernel continuation line (those carry no time of their own)."""
_CRI = lazy_regex(rf"(?P<iso>{ISO}) (?P<stream>stdout|stderr) (?P<tag>[FP])(?: |$)")
_RFC5424 = lazy_regex(rf"<(?P<pri>\d{{1,3}})>1 (?P<iso>{ISO}) (?P<host>\S+) (?P<app>\S+) (?P<procid>\S+) \S+ "
                      r"(?:-|(?:\[(?:[^\]\\]|\\.)*\])+) ?")
_PRIO = lazy_regex(r"<(?P<pri>\d{1,3})>")
_DECODE = lazy_regex(r"(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
                     r"(?P<lvl>emerg|alert|crit|err|warn|notice|info|debug)\s*: ?")
_MPI = lazy_regex(r"\[(?P<job>\d+),(?P<rank>\d+)\]<(?P<stream>stdout|stderr|stddiag)>: ?")
_TORCHRUN = lazy_regex(r"\[(?P<role>[A-Za-z_][A-Za-z_-]*?)(?P<rank>\d+)\]: ?")
_SRUN = lazy_regex(r"\s{0,4}(?P<rank>\d{1,5}): (?=\S)")
_NCCL = lazy_regex(r"(?P<host>[\w.-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?=NCCL |[^\s]+:\d+ NCCL )")
_HOST = lazy_regex(r"(?P<host>[a-z][a-z0-9-]*\d[a-z0-9-]*(?:\.[a-z0-9-]+)*): (?=.)")
_DEVICE_NAMES = lazy_regex(r"(?:eth|en[opsx]|ib|bond|docker|veth|nvme|sd[a-z]|mlx|virbr|br|wl|lo|tun|tap|dm-|md|"
                           r"loop|nvidia|usb|cpu|card|hid|input|sr|vd|xvd|nbd|rbd|hv|mmc|ata|scsi|host|port|nv)\d")
_HOST_NEXT = lazy_regex(r"[\[\d<{(]|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) |NVRM|NCCL|kernel:|nvidia|"
                        r"CUDA|RuntimeError|torch")
"""What may follow a pdsh/clush ``host: `` label whose host has no ``-`` or ``.``: a frame or a known
message (so a kernel line such as ``e1000e: eth0 NIC Link is Up`` keeps its device name)."""
_VLLM_PROC = lazy_regex(r"\((?P<proc>[\w.-]+) pid=(?P<pid>\d+)\) ")
_RAW = lazy_regex(r"\[\s*(?P<mono>\d{1,10}\.\d{1,9})\] ?")
_DELTA = lazy_regex(r"\[\s*\+(?P<delta>\d{1,10}\.\d{1,9})\] ?")
_CTIME = lazy_regex(r"\[(?:[A-Z][a-z]{2}\s+)?(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)"
                    r"\s+(?P<year>\d{4})\] ?")
_FABRIC_MANAGER = lazy_regex(r"\[(?P<mon>[A-Z][a-z]{2}) (?P<day>\d\d) (?P<year>\d{4}) (?P<clock>\d\d:\d\d:\d\d)\] ?")
_HUMAN = lazy_regex(r"\[(?P<mon>[A-Z][a-z]{2}) ?(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d(?::\d\d)?)\] ?")
_SYSLOG = lazy_regex(r"(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<clock>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))?"
                     r"(?: (?P<year>\d{4}))? ")
_PYLOG = lazy_regex(rf"(?P<iso>{ISO}) - (?P<name>\S+) - (?P<lvl>[A-Z]+) - ")
_BRACKET_ISO = lazy_regex(rf"\[(?P<iso>{ISO})(?P<tag> [^\]]{{1,40}})?\]:? ?")
_PLAIN_ISO = lazy_regex(rf"(?P<iso>{ISO})(?: |$)")
_SEL = lazy_regex(r"\s{0,4}(?P<record>[0-9a-fA-F]{1,4}) \| (?P<mon>\d\d)/(?P<day>\d\d)/(?P<year>\d{2}|\d{4}) \| "
                  r"(?P<clock>\d\d:\d\d:\d\d)(?: [A-Z]{2,5})? \| ")
"""``ipmitool sel list``/``elist``: record id, date and time columns (the BMC's clock, taken as UTC)."""
_GO_LOG = lazy_regex(r"(?P<date>\d{4}/\d\d/\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))? ")
"""Go's log package (``2023/10/19 03:11:54 Loading NVML``: the device plugin, ollama, gpud)."""
_LOGFMT = lazy_regex(rf"time=\"?(?P<iso>{ISO})\"? level=(?P<lvl>\w+)(?: source=\S+)?(?: msg=\"?)?")
"""logfmt as Go's slog and logrus print it (``time=2025-03-06T09:55:01.123Z level=ERROR source=x.go:12 msg=``)."""
_GLOG = lazy_regex(r"(?P<lvl>[IWEF])(?P<mon>\d\d)(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))?"
                   r"\s+(?P<pid>\d+) (?P<file>[^\]\s]+:\d+)\] ?")
_VLLM = lazy_regex(rf"(?P<lvl>{_LEVEL_WORDS}) (?P<mon>\d\d)-(?P<day>\d\d) (?P<clock>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
                   r" (?:\[?(?P<file>[\w./-]+:\d+)\]? )?")
_IDENT = lazy_regex(r"(?:(?P<host>[\w.-]+) )?(?P<prog>[\w./@-]+)(?:\[(?P<pid>\d+)\])?:(?: |$)")
_LEVEL = lazy_regex(rf"(?:\[(?P<l1>{_LEVEL_WORDS})\]|(?P<l2>{_LEVEL_WORDS})\b:?)\s+", re.IGNORECASE)
_HF_LEVEL = lazy_regex(rf"\[(?P<lvl>{_LEVEL_WORDS})\|[^\]\s]+\]\s+")
"""transformers' ``[INFO|trainer.py:1812] 2025-03-06 09:55:01,123 >> ``: the level and file, then the time."""


def peel(text: str, line: int = 0, *, reference: datetime | None = None, boot: datetime | None = None) -> Framed:
    """The frame of one physical line, without looking at its neighbours.

    ``reference`` dates year-less stamps (syslog, glog, vLLM, ``dmesg -H``); ``boot`` turns dmesg
    seconds into UTC. Never raises; a line nothing matches comes back whole as its own body."""
    out = Framed(line=line, message=text, text=text)
    wrappers: list[str] = []
    offsets: list[int] = []
    pos = 0
    timed = False
    for _ in range(12):
        step = _peel_once(text, pos, out, wrappers, timed, reference, boot)
        offsets.extend([pos] * (len(wrappers) - len(offsets)))
        if step is None:
            break
        pos, timed = step
    if wrappers and wrappers[0] == "docker_json":
        return out
    if out.rank is None and out.local_rank is None:
        out.rank = out.task
    out.message = text[pos:]
    out.wrappers = tuple(wrappers)
    out.offsets = tuple(offsets)
    return out


def _peel_once(text: str, pos: int, out: Framed, wrappers: list[str], timed: bool,
               reference: datetime | None, boot: datetime | None) -> tuple[int, bool] | None:
    """One wrapper off the front of ``text[pos:]``: (new position, whether it was a time), or None."""
    first = text[pos:pos + 1]
    if not first:
        return None
    if pos == 0 and first == "{" and text.startswith('{"log":'):
        return _docker(text, out, wrappers, reference, boot)
    if pos == 0 and " | " in text[:24] and (m := _SEL.match(text)):
        return _sel(m, out, wrappers)
    if first in " `~" and _FENCE.match(text, pos):
        wrappers.append("fence")
        return len(text), False
    if pos == 0 and first in " \t" and (m := _INDENT.match(text)):
        wrappers.append("indent")
        return m.end(), timed
    if timed and text.startswith(">> ", pos):
        wrappers.append("separator")  # transformers' ``2025-03-06 09:55:01,123 >> ``
        return pos + 3, timed
    if first in " >" and all(w in ("quote", "indent") for w in wrappers) and (m := _QUOTE.match(text, pos)) \
            and ">" in m.group(0):
        wrappers.append("quote")
        return m.end(), timed
    if first.isdigit():
        return _digit_led(text, pos, out, wrappers, timed, reference)
    if first == "[":
        return _bracket_led(text, pos, out, wrappers, reference, boot)
    if first == "<":
        if m := _RFC5424.match(text, pos):
            _set_time(out, m, "iso", wrappers, "rfc5424")
            out.level = out.level or LEVELS[int(m.group("pri")) & 7]
            out.host = out.host or _nil(m.group("host"))
            out.program = out.program or _nil(m.group("app"))
            out.pid = out.pid or _int(m.group("procid"))
            return m.end(), True
        if m := _PRIO.match(text, pos):
            out.level = out.level or LEVELS[int(m.group("pri")) & 7]
            wrappers.append("priority")
            return m.end(), timed
        return None
    if first == "(" and (m := _VLLM_PROC.match(text, pos)):
        out.program = out.program or m.group("proc")
        out.pid = out.pid or int(m.group("pid"))
        wrappers.append("vllm_process")
        return m.end(), timed
    if first.isupper():
        return _upper_led(text, pos, out, wrappers, timed, reference)
    if first.islower():
        return _lower_led(text, pos, out, wrappers, timed)
    return None


def _digit_led(text: str, pos: int, out: Framed, wrappers: list[str], timed: bool,
               reference: datetime | None) -> tuple[int, bool] | None:
    if m := _CRI.match(text, pos):
        _set_time(out, m, "iso", wrappers, "cri")
        out.stream = out.stream or m.group("stream")
        out.partial = m.group("tag") == "P"
        return m.end(), True
    if m := _PYLOG.match(text, pos):
        _set_time(out, m, "iso", wrappers, "python_logging")
        out.level = out.level or _level(m.group("lvl"))
        out.program = out.program or m.group("name")
        return m.end(), True
    if m := _GO_LOG.match(text, pos):
        if (when := _go_time(m)) is not None:
            _set(out, when, m.group(0).strip(), "iso", False)
            wrappers.append("go_log")
            return m.end(), True
    if m := _PLAIN_ISO.match(text, pos):
        _set_time(out, m, "iso", wrappers, "iso")
        end = m.end()
        if m.group("sep") == "," and m.group("tz") and "T" in m.group(0):
            return end, True  # dmesg --time-format iso: the message follows directly
        ident = _IDENT.match(text, end)
        if ident and ident.group("host") and not _LEVEL.fullmatch(ident.group("host") + " "):
            _set_ident(out, ident)
            wrappers.append("syslog_ident")
            return ident.end(), True
        return end, True
    if m := _NCCL.match(text, pos):
        out.host = out.host or m.group("host")
        out.pid = out.pid or int(m.group("pid"))
        wrappers.append("nccl")
        return m.end(), timed
    if not timed and (m := _SRUN.match(text, pos)):
        out.task = out.task if out.task is not None else int(m.group("rank"))
        wrappers.append("srun_label")
        return m.end(), timed
    return None


def _bracket_led(text: str, pos: int, out: Framed, wrappers: list[str], reference: datetime | None,
                 boot: datetime | None) -> tuple[int, bool] | None:
    if m := _RAW.match(text, pos):
        mono = float(m.group("mono"))
        out.mono = out.mono if out.mono is not None else mono
        if out.ts is None:
            ts = from_monotonic(mono, boot)
            out.ts, out.ts_raw, out.ts_origin, out.ts_approx = ts, m.group("mono"), "kernel_monotonic", ts is None
        wrappers.append("dmesg")
        return m.end(), True
    if m := _DELTA.match(text, pos):
        out.delta = float(m.group("delta"))
        out.ts_raw = out.ts_raw or m.group(0).strip()
        wrappers.append("dmesg_delta")
        return m.end(), True
    if m := _BRACKET_ISO.match(text, pos):
        _set_time(out, m, "iso", wrappers, "iso")
        return m.end(), True
    if (m := _CTIME.match(text, pos)) and m.group("mon").lower() in MONTHS:
        when = _civil(int(m.group("year")), m.group("mon"), m.group("day"), m.group("clock"))
        if when is None:
            return None
        _set(out, when, m.group(0).strip(" []"), "dmesg_ctime", True)
        wrappers.append("dmesg_ctime")
        return m.end(), True
    if (m := _FABRIC_MANAGER.match(text, pos)) and m.group("mon").lower() in MONTHS:
        when = _civil(int(m.group("year")), m.group("mon"), m.group("day"), m.group("clock"))
        if when is None:
            return None
        _set(out, when, m.group(0).strip(" []"), "iso", False)
        wrappers.append("fabric_manager")
        return m.end(), True
    if (m := _HUMAN.match(text, pos)) and m.group("mon").lower() in MONTHS:
        month = MONTHS[m.group("mon").lower()]
        year, _ = infer_year(month, int(m.group("day")), reference)
        clock = m.group("clock") if m.group("clock").count(":") == 2 else m.group("clock") + ":00"
        when = _civil(year, m.group("mon"), m.group("day"), clock)
        if when is None:
            return None
        _set(out, when, m.group(0).strip(" []"), "dmesg_human", True)
        wrappers.append("dmesg_human")
        return m.end(), True
    if m := _MPI.match(text, pos):
        out.task = int(m.group("rank"))  # mpirun's inside srun's: the process's own rank in its job
        out.stream = out.stream or m.group("stream")
        wrappers.append("mpirun")
        return m.end(), False
    if m := _TORCHRUN.match(text, pos):
        value = int(m.group("rank"))
        if m.group("role") == "rank":
            out.rank = out.rank if out.rank is not None else value
        else:
            out.local_rank = out.local_rank if out.local_rank is not None else value
        wrappers.append("torchrun")
        return m.end(), False
    if m := _LEVEL.match(text, pos):
        out.level = out.level or _level(m.group("l1") or m.group("l2"))
        wrappers.append("level")
        return m.end(), False
    if m := _HF_LEVEL.match(text, pos):
        out.level = out.level or _level(m.group("lvl"))
        wrappers.append("level")
        return m.end(), False
    return None


def _upper_led(text: str, pos: int, out: Framed, wrappers: list[str], timed: bool,
               reference: datetime | None) -> tuple[int, bool] | None:
    if (m := _SYSLOG.match(text, pos)) and m.group("mon").lower() in MONTHS:
        month, day = MONTHS[m.group("mon").lower()], int(m.group("day"))
        year, approx = (int(m.group("year")), False) if m.group("year") else infer_year(month, day, reference)
        when = _civil(year, m.group("mon"), m.group("day"), m.group("clock"))
        if when is None:
            return None
        if m.group("frac"):
            when += timedelta(microseconds=int(m.group("frac")[:6].ljust(6, "0")))
        _set(out, when, m.group(0).strip(), "syslog_noyear", approx)
        wrappers.append("syslog")
        end = m.end()
        if ident := _IDENT.match(text, end):
            _set_ident(out, ident)
            wrappers.append("syslog_ident")
            end = ident.end()
        return end, True
    if (m := _GLOG.match(text, pos)) and 1 <= int(m.group("mon")) <= 12:
        return _month_day(text, m, out, wrappers, reference, "glog")
    if (m := _VLLM.match(text, pos)) and 1 <= int(m.group("mon")) <= 12:
        return _month_day(text, m, out, wrappers, reference, "vllm")
    if timed and (m := _LEVEL.match(text, pos)):
        out.level = out.level or _level(m.group("l1") or m.group("l2"))
        wrappers.append("level")
        return m.end(), False
    return None


def _lower_led(text: str, pos: int, out: Framed, wrappers: list[str], timed: bool) -> tuple[int, bool] | None:
    if text.startswith("time=", pos) and (m := _LOGFMT.match(text, pos)):
        _set_time(out, m, "iso", wrappers, "logfmt")
        out.level = out.level or _level(m.group("lvl"))
        return m.end(), True
    if m := _DECODE.match(text, pos):
        out.level = out.level or m.group("lvl")
        wrappers.append("dmesg_decode")
        return m.end(), timed
    if m := _NCCL.match(text, pos):
        out.host = out.host or m.group("host")
        out.pid = out.pid or int(m.group("pid"))
        wrappers.append("nccl")
        return m.end(), timed
    if text.startswith("kernel: ", pos):
        out.program = out.program or "kernel"
        wrappers.append("syslog_ident")
        return pos + 8, timed
    if not timed and (m := _HOST.match(text, pos)) and not _DEVICE_NAMES.match(m.group("host")) and (
            "-" in m.group("host") or "." in m.group("host") or _HOST_NEXT.match(text, m.end())
            or text[m.end():m.end() + 1].isspace()):  # pdsh in front of an indented continuation line
        out.host = out.host or m.group("host")
        wrappers.append("host_label")
        return m.end(), False
    return None


def _docker(text: str, out: Framed, wrappers: list[str], reference: datetime | None,
            boot: datetime | None) -> tuple[int, bool] | None:
    """docker json-file: the ``log`` string is the line (its newline dropped), framed again inside."""
    try:
        doc = json.loads(no_lone_surrogates(text))
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("log"), str):
        return None
    inner = peel(doc["log"].rstrip("\r\n"), out.line, reference=reference, boot=boot)
    stamp = parse_iso(str(doc.get("time", "")))
    if stamp is not None:
        inner.ts, inner.ts_raw, inner.ts_origin, inner.ts_approx = stamp, str(doc["time"]), "iso", False
    stream = doc.get("stream")
    inner.stream = stream if isinstance(stream, str) else inner.stream
    inner.partial = not doc["log"].endswith("\n")
    for name in Framed.__slots__:
        setattr(out, name, getattr(inner, name))
    out.wrappers = ("docker_json", *inner.wrappers)
    out.offsets = (0, *inner.offsets)
    wrappers.append("docker_json")
    return None


def _month_day(text: str, m: re.Match[str], out: Framed, wrappers: list[str], reference: datetime | None,
               name: str) -> tuple[int, bool] | None:
    """glog and vLLM print month and day without a year: the year comes from dated evidence."""
    month, day = int(m.group("mon")), int(m.group("day"))
    year, approx = infer_year(month, day, reference)
    try:
        when = datetime(year, month, day, *map(int, m.group("clock").split(":")), tzinfo=timezone.utc)
    except ValueError:
        return None
    if m.group("frac"):
        when += timedelta(microseconds=int(m.group("frac")[:6].ljust(6, "0")))
    _set(out, when, m.group(0).strip(), "syslog_noyear", approx)
    out.level = out.level or _level(m.group("lvl"))
    if name == "glog":
        out.pid = out.pid or int(m.group("pid"))
    wrappers.append(name)
    return m.end(), True


def _set_time(out: Framed, m: re.Match[str], origin: str, wrappers: list[str], name: str) -> None:
    when = iso_time(m)
    if when is not None:
        _set(out, when, m.group("iso"), origin, False)
    wrappers.append(name)


def _set(out: Framed, when: datetime, raw: str, origin: str, approx: bool) -> None:
    """The outermost time wins, unless it was approximate and an inner one is exact."""
    if out.ts is None or (out.ts_approx and not approx):
        out.ts, out.ts_raw, out.ts_origin, out.ts_approx = when, raw, origin, approx


def _set_ident(out: Framed, m: re.Match[str]) -> None:
    out.host = out.host or m.group("host")
    out.program = out.program or m.group("prog")
    if m.group("pid"):
        out.pid = out.pid or int(m.group("pid"))


def _sel(m: re.Match[str], out: Framed, wrappers: list[str]) -> tuple[int, bool] | None:
    year = int(m.group("year"))
    try:
        when = datetime(year + 2000 if year < 100 else year, int(m.group("mon")), int(m.group("day")),
                        *map(int, m.group("clock").split(":")), tzinfo=timezone.utc)
    except ValueError:
        return None
    _set(out, when, m.group(0).strip(" |"), "iso", False)
    wrappers.append("ipmi_sel")
    return m.end(), True


def _go_time(m: re.Match[str]) -> datetime | None:
    try:
        when = datetime.strptime(f"{m.group('date')} {m.group('clock')}", "%Y/%m/%d %H:%M:%S")
    except ValueError:
        return None
    frac = m.group("frac")
    return when.replace(tzinfo=timezone.utc, microsecond=int(frac[:6].ljust(6, "0")) if frac else 0)


def _civil(year: int, mon: str, day: str, clock: str) -> datetime | None:
    try:
        return datetime(year, MONTHS[mon.lower()], int(day), *map(int, clock.split(":")), tzinfo=timezone.utc)
    except (ValueError, KeyError):
        return None


def _level(word: str) -> str:
    word = word.lower()
    return {"warning": "warn", "error": "err", "critical": "crit", "fatal": "crit", "panic": "emerg",
            "trace": "debug", "w": "warn", "e": "err", "i": "info", "f": "crit"}.get(word, word)


def _nil(value: str) -> str | None:
    return None if value == "-" else value


def _int(value: str) -> int | None:
    return int(value) if value.isdigit() else None
