"""A kernel-log line's time prefix, and the UTC time it stands for.

Prefixes: dmesg raw seconds (``[  123.456789]``), dmesg -T ctime (``[Mon Oct 16 09:50:06 2017]``), dmesg
--time-format iso and -x (``kern  :err   : 2025-...,859532+00:00``), journalctl short-iso / short-iso-precise /
short-precise, syslog with or without the host field, /dev/kmsg and pstore (``<6>[ ...]``), and bare messages
with no time at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from collectors.base import MONTHS, ParseContext, from_monotonic, infer_year, to_utc
from collectors.framework.lazy_re import lazy_regex

_DECODE = lazy_regex(r"(?P<fac>kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
                     r"(?P<lvl>emerg|alert|crit|err|warn|notice|info|debug)\s*: ?")
_PRIO = lazy_regex(r"<(\d{1,3})>")
_DEVKMSG = lazy_regex(r"(\d{1,3}),(\d+),(\d+),[^;]*;")
_RAW = lazy_regex(r"\[\s*(\d{1,10}\.\d{1,9})\]\s?")
_CTIME = lazy_regex(r"\[(?:[A-Z][a-z]{2}\s+)?(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)"
                    r"\s+(?P<year>\d{4})\]\s?")
_ISO = lazy_regex(r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<clock>\d\d:\d\d:\d\d)(?:(?P<sep>[.,])(?P<frac>\d{1,9}))?"
                  r"(?P<tz>Z|[+-]\d\d:?\d\d)?\s+")
_SYSLOG = lazy_regex(r"(?P<mon>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d\d:\d\d:\d\d)"
                     r"(?:\.(?P<frac>\d{1,9}))?\s+")
_IDENT = lazy_regex(r"(?:(?P<host>[^\s\[\]]*[^\s:\[\]])\s+)?(?P<ident>[\w./@-]+)(?:\[(?P<pid>\d+)\])?:\s?")
_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")

STAMPED = ("mono", "ctime", "iso", "journal", "syslog")
"""Prefix styles that carry a time; dmesg-style ones (mono, ctime, iso) print continuation lines indented."""


@dataclass
class Prefix:
    """What a line's prefix says, before any clock is applied."""

    style: str = "none"
    raw: str | None = None
    mono: float | None = None
    when: datetime | None = None
    month: int = 0
    day: int = 0
    clock: str = ""
    host: str | None = None
    ident: str | None = None
    level: str | None = None


def split_prefix(text: str) -> tuple[Prefix, str]:
    """The prefix of one kernel-log line and the message after it."""
    pre = Prefix()
    if m := _DECODE.match(text):
        pre.level = m.group("lvl")
        text = text[m.end():]
    if text.startswith("<") and (m := _PRIO.match(text)):
        pre.level = _LEVELS[int(m.group(1)) & 7]
        text = text[m.end():]
    elif text[:1].isdigit() and (m := _DEVKMSG.match(text)):
        pre.level = _LEVELS[int(m.group(1)) & 7]
        pre.style, pre.mono, pre.raw = "mono", int(m.group(3)) / 1e6, f"{int(m.group(3)) / 1e6:.6f}"
        return pre, text[m.end():]
    first = text[:1]
    if first == "[":
        if m := _RAW.match(text):
            pre.style, pre.raw, pre.mono = "mono", m.group(1), float(m.group(1))
            return pre, text[m.end():]
        if (m := _CTIME.match(text)) and m.group("mon").lower() in MONTHS:
            when = _ctime(m.group("year"), m.group("mon"), m.group("day"), m.group("clock"))
            if when is None:
                return pre, text
            pre.style, pre.raw, pre.when = "ctime", text[1:m.end()].rstrip().rstrip("]"), when
            return pre, text[m.end():]
        return pre, text
    if first.isdigit():
        m = _ISO.match(text)
        if not m:
            return pre, text
        when = _iso_time(m)
        if when is None:
            return pre, text
        rest = text[m.end():]
        if m.group("sep") == ",":
            if "T" not in text[:11] or not m.group("tz"):
                return pre, text  # Python logging's "2023-07-01 16:41:05,669", not a kernel line
            pre.raw, pre.when, pre.style = text[:m.end()].strip(), when, "iso"
            return pre, rest  # dmesg --time-format iso: the message follows directly
        pre.raw, pre.when = text[:m.end()].strip(), when
        pre.style = "journal"
        return pre, _ident(pre, rest)
    if first.isupper() and (m := _SYSLOG.match(text)) and m.group("mon").lower() in MONTHS:
        pre.style, pre.raw = "syslog", text[:m.end()].strip()
        pre.month, pre.day = MONTHS[m.group("mon").lower()], int(m.group("day"))
        pre.clock = m.group("clock") + (f".{m.group('frac')}" if m.group("frac") else "")
        return pre, _ident(pre, text[m.end():])
    if text.startswith("kernel: "):
        pre.ident = "kernel"
        return pre, _strip_inner_stamp(pre, text[8:])
    return pre, text


@lru_cache(maxsize=4096)
def _ctime(year: str, mon: str, day: str, clock: str) -> datetime | None:
    """A dmesg -T time as UTC, built once per distinct second (a busy log repeats each second) from the
    numbers themselves: strptime costs more than the rest of the line's prefix and depends on the locale."""
    try:
        return datetime(int(year), MONTHS[mon.lower()], int(day), int(clock[:2]), int(clock[3:5]), int(clock[6:]),
                        tzinfo=timezone.utc)
    except (KeyError, ValueError):
        return None


def _ident(pre: Prefix, rest: str) -> str:
    m = _IDENT.match(rest)
    if not m:
        return rest
    pre.host, pre.ident = m.group("host"), m.group("ident")
    return _strip_inner_stamp(pre, rest[m.end():])


def _strip_inner_stamp(pre: Prefix, rest: str) -> str:
    """``kernel: [ 1936.510073] NVRM: ...``: the syslog time wins, the monotonic one is kept as a note."""
    if pre.ident == "kernel" and rest.startswith("[") and (m := _RAW.match(rest)):
        pre.mono = float(m.group(1))
        return rest[m.end():]
    return rest


def _iso_time(m: re.Match[str]) -> datetime | None:
    frac = (m.group("frac") or "")[:6].ljust(6, "0")
    tz = m.group("tz") or "Z"
    if tz != "Z" and ":" not in tz:
        tz = f"{tz[:3]}:{tz[3:]}"
    try:
        when = datetime.fromisoformat(f"{m.group('date')}T{m.group('clock')}.{frac}{'+00:00' if tz == 'Z' else tz}")
    except ValueError:
        return None
    return when.astimezone(timezone.utc)


@dataclass
class Stamp:
    """A record's resolved time."""

    ts: datetime | None = None
    origin: str = "none"
    approx: bool = False
    raw: str | None = None


def resolve(pre: Prefix, ctx: ParseContext, use_boot: bool = True) -> Stamp:
    """UTC for a prefix: ISO and journal are exact; dmesg seconds need the host's boot time; ctime is
    local time that dmesg -T derived from the boot time (approximate); syslog has no year."""
    if pre.style in ("iso", "journal"):
        return Stamp(pre.when, "iso", False, pre.raw)
    if pre.style == "ctime":
        return Stamp(pre.when, "dmesg_ctime", True, pre.raw)
    if pre.style == "mono":
        boot = ctx.boot_time_for(pre.host) if use_boot else None
        ts = from_monotonic(pre.mono or 0.0, boot)
        return Stamp(ts, "kernel_monotonic", ts is None, pre.raw)
    if pre.style == "syslog":
        year, approx = infer_year(pre.month, pre.day, ctx.reference_for(pre.host))
        ts = _syslog_time(year, pre.month, pre.day, pre.clock)
        if ts is None:
            return Stamp(None, "syslog_noyear", True, pre.raw)
        return Stamp(ts, "syslog_noyear", approx, pre.raw)
    return Stamp()


@lru_cache(maxsize=4096)
def _syslog_time(year: int, month: int, day: int, clock: str) -> datetime | None:
    """A syslog time as UTC, built once per distinct clock (a busy log repeats each second)."""
    hms, _, frac = clock.partition(".")
    try:
        ts = datetime(year, month, day, *map(int, hms.split(":")), tzinfo=timezone.utc)
    except ValueError:
        return None
    return ts + timedelta(microseconds=int(frac[:6].ljust(6, "0"))) if frac else ts


def exact(stamp: Stamp) -> datetime | None:
    """A time good enough to date other evidence of the same host (never an inferred one)."""
    if stamp.ts is None or stamp.approx:
        return None
    return to_utc(stamp.ts)
