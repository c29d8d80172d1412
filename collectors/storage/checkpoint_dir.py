"""The checkpoint directory: ``--checkpoint-dir``'s ``find -printf`` form or an ``ls -l --time-style=full-iso``
listing: the newest checkpoint, its age, and partial or temporary files left by a save that did not end."""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

from collectors.base import MONTHS, Event, HostFact, ParseContext, Row, Skipped, infer_year
from collectors.framework.framing import parse_iso
from collectors.framework.lazy_re import lazy_regex

MAX_LISTING = 200_000
MAX_PARTIAL_EVENTS = 50

_LISTING_HEAD = lazy_regex(r"^#\s*checkpoint listing of (.+) at (\S+)\s*$")
_FIND_LINE = lazy_regex(r"^(\d+(?:\.\d+)?) (\d+) (?:([fdlpsbc]) )?(.+)$")
_LS_FULL = lazy_regex(r"^([-dlpsbc])[rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(\d+)\s+"
                      r"(\d{4}-\d\d-\d\d) (\d\d:\d\d(?::\d\d(?:\.\d+)?)?)(?: ([+-]\d{4}))?\s+(.+)$")
_LS_SHORT = lazy_regex(r"^([-dlpsbc])[rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(\d+)\s+"
                       r"([A-Z][a-z]{2})\s+(\d{1,2})\s+(\d{4}|\d\d:\d\d)\s+(.+)$")
_LS_DIR = lazy_regex(r"^(.+):\s*$")
_CKPT_NAME = lazy_regex(r"checkpoint|ckpt|global_step|iter_\d|step[_-]?\d|epoch[_-]?\d|model_states|optim_states"
                        r"|\.(?:pt|pth|ckpt|safetensors|distcp|bin|pkl|h5|npz|msgpack)$", re.IGNORECASE)
_TEMP_NAME = lazy_regex(r"(?:\.tmp|\.temp|\.partial|\.incomplete|\.part|\.inprogress|~)$|^\.?tmp|\.tmp[._-]"
                        r"|\.__temp|_tmp\b", re.IGNORECASE)
"""Temporary names of a file or of the directory a save writes into (HF Trainer's tmp-checkpoint-N,
torch.save's partial files, rsync's dot files are not matched: they do not end a checkpoint)."""


def parse_listing(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    listed_at, listed_origin = ctx.snapshot_time()
    if listed_origin == "mtime":
        # A handed-over listing's mtime is when it was copied as often as when ls ran: no age from it.
        listed_at = None
    directory: str | None = None
    entries: list[tuple[str, int, datetime, int]] = []
    ls_dir = ""
    for n, line in ctx.lines(stream):
        if m := _LISTING_HEAD.match(line):
            directory = m.group(1)
            if when := parse_iso(m.group(2)):
                listed_at, listed_origin = when, "iso"
            continue
        if not line.strip() or line.startswith(("#", "total ")):
            continue
        if len(entries) >= MAX_LISTING:
            yield Skipped(n, f"listing longer than {MAX_LISTING} entries")
            continue
        entry = _listing_entry(line, ls_dir, ctx)
        if entry is None:
            if m := _LS_DIR.match(line):
                ls_dir = m.group(1).rstrip("/") + "/"
                continue
            yield Skipped(n, "not a checkpoint listing line")
            continue
        kind, path, size, mtime = entry
        if kind == "f":
            entries.append((path, size, mtime, n))
    yield from _checkpoint_events(entries, directory, listed_at, listed_origin)


def _listing_entry(line: str, ls_dir: str, ctx: ParseContext) -> tuple[str, str, int, datetime] | None:
    if m := _FIND_LINE.match(line):
        try:
            mtime = datetime.fromtimestamp(float(m.group(1)), tz=timezone.utc)
        except (OverflowError, ValueError, OSError):
            return None
        return m.group(3) or "f", m.group(4), int(m.group(2)), mtime
    if m := _LS_FULL.match(line):
        kind, size, day, clock, zone, name = m.groups()
        try:
            when = datetime.fromisoformat(f"{day}T{clock[:15]}" if "." in clock else f"{day}T{clock}")
        except ValueError:
            return None
        if zone:
            sign = 1 if zone[0] == "+" else -1
            when -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[3:]))
        return ("f" if kind == "-" else kind), ls_dir + name.split(" -> ")[0], int(size), when.replace(
            tzinfo=timezone.utc)
    if m := _LS_SHORT.match(line):
        kind, size, mon, day, year_or_time, name = m.groups()
        month = MONTHS.get(mon.lower())
        if month is None:
            return None
        try:
            if ":" in year_or_time:
                year, _ = infer_year(month, int(day), ctx.reference_for(ctx.host) or ctx.snapshot_time()[0])
                when = datetime(year, month, int(day), int(year_or_time[:2]), int(year_or_time[3:]))
            else:
                when = datetime(int(year_or_time), month, int(day))
        except ValueError:
            return None
        return ("f" if kind == "-" else kind), ls_dir + name.split(" -> ")[0], int(size), when.replace(
            tzinfo=timezone.utc)
    return None


def _checkpoint_events(entries: list[tuple[str, int, datetime, int]], directory: str | None,
                       listed_at: datetime | None, listed_origin: str) -> Iterator[Row]:
    ckpts = [e for e in entries if _CKPT_NAME.search(_relative(e[0], directory))]
    if not ckpts:
        return
    groups: dict[tuple[str, str], list[int]] = {}
    for path, size, _, _ in ckpts:
        groups.setdefault(_shape(path), []).append(size)
    partial: list[tuple[str, int, datetime, int, str]] = []
    good: list[tuple[str, int, datetime, int]] = []
    for path, size, mtime, n in ckpts:
        sizes = groups[_shape(path)]
        median = statistics.median(sizes)
        if size == 0:
            partial.append((path, size, mtime, n, "zero bytes"))
        elif _is_temporary(path):
            partial.append((path, size, mtime, n, "temporary file"))
        elif len(sizes) >= 3 and size < 0.5 * median:
            partial.append((path, size, mtime, n, f"smaller than its siblings (median {int(median)} bytes)"))
        else:
            good.append((path, size, mtime, n))
    last_good = max(good, key=lambda e: e[2]) if good else None
    if last_good is not None:
        path, size, mtime, n = last_good
        age = (listed_at - mtime).total_seconds() if listed_at else None
        yield Event(kind="checkpoint_last_good", ts=mtime, ts_origin="mtime", severity="info", line=n,
                    message=f"newest complete checkpoint file {path} ({size} bytes)"
                    + (f", {_age(age)} old at listing time" if age is not None else ""),
                    attrs={"path": path, "size": size, "age_s": age, "directory": directory})
    for path, size, mtime, n, reason in sorted(partial, key=lambda e: e[2], reverse=True)[:MAX_PARTIAL_EVENTS]:
        newer = last_good is None or mtime > last_good[2]
        yield Event(kind="checkpoint_partial", ts=mtime, ts_origin="mtime", severity="warning" if newer else "info",
                    line=n, message=f"checkpoint file {path}: {reason} ({size} bytes)",
                    attrs={"path": path, "size": size, "reason": reason, "newer_than_last_good": newer,
                           "directory": directory})
    if len(partial) > MAX_PARTIAL_EVENTS:
        yield Skipped(None, f"{len(partial) - MAX_PARTIAL_EVENTS} more partial checkpoint files not listed")
    yield HostFact(f"checkpoint.{directory or 'listing'}.files", str(len(ckpts)))


def _relative(path: str, directory: str | None) -> str:
    """The part of ``path`` below the listed directory: the directory's own name says nothing."""
    if directory and path.startswith(directory.rstrip("/") + "/"):
        return path[len(directory.rstrip("/")) + 1:]
    return path


def _is_temporary(path: str) -> bool:
    parts = path.rstrip("/").rsplit("/", 2)
    return any(_TEMP_NAME.search(part) for part in parts[-2:])


def _shape(path: str) -> tuple[str, str]:
    """A checkpoint file's family: its name with digits blanked, and its suffix."""
    name = path.rsplit("/", 1)[-1]
    return re.sub(r"\d+", "#", name), os.path.splitext(name)[1]


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
