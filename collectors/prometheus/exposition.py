"""The text exposition format (Prometheus text and OpenMetrics): a /metrics page, pasted or scraped live,
one SeriesPoint per sample. A page without per-sample timestamps takes the UTC stamp in its file name
(``pod-20261129T221500Z.prom``), else the header line of a live scrape, else the file's mtime or the
capture time, marked in the labels (``ts_origin``) because it is approximate."""

from __future__ import annotations

import math
import re
import urllib.parse
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import BinaryIO

from collectors.base import ParseContext, Row, SeriesPoint, Skipped
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.lazy_re import lazy_regex

_NAME = lazy_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = lazy_regex(r"[a-zA-Z_][a-zA-Z0-9_]*")
_STAMP = lazy_regex(r"(\d{8}T\d{6}(?:[.,]\d{1,9})?Z)")
_SCRAPE_MARK = lazy_regex(r"^# gpuwb-scrape url=(?P<url>\S+) time=(?P<time>\S+)\s*$")
_LOOPBACK = lazy_regex(r"^(?:127\.\d+\.\d+\.\d+|localhost|::1|0\.0\.0\.0)$", re.I)


def parse_sample(line: str) -> tuple[str, dict[str, str], float, float | None]:
    """One exposition sample line -> (name, labels, value, timestamp in Unix seconds or None).

    Raises ValueError with a short reason for anything that is not a complete sample."""
    n = len(line)
    pos = _skip_ws(line, 0)
    name = None
    m = _NAME.match(line, pos)
    if m:
        name, pos = m.group(), m.end()
    labels: dict[str, str] = {}
    if pos < n and line[pos] == "{":
        name, pos = _parse_labels(line, pos + 1, name, labels)
    if not name:
        raise ValueError("no metric name")
    if pos < n and line[pos] not in " \t":
        raise ValueError("bad character after the metric name")
    rest = line[pos:].split()
    if "#" in rest:  # OpenMetrics exemplar: `value [ts] # {trace_id="..."} 1.0`
        rest = rest[: rest.index("#")]
    if not rest:
        raise ValueError("sample without a value")
    if len(rest) > 2:
        raise ValueError("trailing text after the sample")
    value = _number(rest[0])
    stamp = _timestamp(rest[1]) if len(rest) == 2 else None
    return name, labels, value, stamp


def _skip_ws(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def _parse_labels(line: str, pos: int, name: str | None, labels: dict[str, str]) -> tuple[str | None, int]:
    n = len(line)
    while True:
        pos = _skip_ws(line, pos)
        if pos >= n:
            raise ValueError("unclosed label set (truncated line?)")
        if line[pos] == "}":
            return name, pos + 1
        if line[pos] == '"':
            key, pos = _quoted(line, pos)
            pos = _skip_ws(line, pos)
            if pos < n and line[pos] != "=":  # Prometheus 3 UTF-8 name inside the braces
                if name:
                    raise ValueError("two metric names")
                name = key
                pos = _after_label(line, pos)
                continue
        else:
            m = _LABEL_NAME.match(line, pos)
            if not m:
                raise ValueError("bad label name")
            key, pos = m.group(), m.end()
        pos = _skip_ws(line, pos)
        if pos >= n or line[pos] != "=":
            raise ValueError("label without '='")
        pos = _skip_ws(line, pos + 1)
        if pos >= n or line[pos] != '"':
            raise ValueError("label value not quoted")
        labels[key], pos = _quoted(line, pos)
        pos = _after_label(line, pos)


def _after_label(line: str, pos: int) -> int:
    pos = _skip_ws(line, pos)
    if pos < len(line) and line[pos] == ",":
        return pos + 1
    if pos < len(line) and line[pos] == "}":
        return pos
    raise ValueError("unclosed label set (truncated line?)")


_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}


def _quoted(line: str, pos: int) -> tuple[str, int]:
    """A double-quoted string starting at ``pos`` with Prometheus escapes (\\\\, \\", \\n)."""
    out: list[str] = []
    i = pos + 1
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == "\\" and i + 1 < n:
            nxt = line[i + 1]
            out.append(_ESCAPES.get(nxt, "\\" + nxt))
            i += 2
            continue
        if ch == '"':
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise ValueError("unterminated label value (truncated line?)")


def _number(token: str) -> float:
    if "_" in token or token.lower().startswith("0x"):
        raise ValueError(f"not a number: {token[:40]}")
    try:
        return float(token)
    except ValueError:
        raise ValueError(f"not a number: {token[:40]}") from None


def _timestamp(token: str) -> float:
    """Prometheus text writes integer milliseconds; OpenMetrics writes (fractional) seconds."""
    value = _number(token)
    if not math.isfinite(value):
        raise ValueError("timestamp is not finite")
    if "." not in token and "e" not in token.lower() and abs(value) >= 1e11:
        return value / 1000.0
    return value


def scrape_stamp(source_name: str) -> tuple[datetime | None, str | None]:
    """(UTC time, instance) from a scrape file named like ``pod-20261129T221500Z.prom``."""
    base = source_name.replace("\\", "/").rsplit("/", 1)[-1]
    m = _STAMP.search(base)
    if not m:
        return None, None
    stamp = m.group(1).replace(",", ".").rstrip("Z")
    whole, _, frac = stamp.partition(".")
    try:
        when = datetime.strptime(whole, "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None, None
    if frac:
        when = when.replace(microsecond=int(frac[:6].ljust(6, "0")))
    instance = base[: m.start()].rstrip("-_.@ ") or None
    return when, instance


def _scrape_mark(line: str) -> tuple[datetime, str] | None:
    """(time, instance) of the header line a live scrape starts with."""
    m = _SCRAPE_MARK.match(line)
    if not m:
        return None
    try:
        when = datetime.fromisoformat(m.group("time").replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None
    return when, urllib.parse.urlsplit(m.group("url")).netloc or m.group("url")


def host_of(instance: str | None) -> str | None:
    """The host part of a Prometheus instance (``10.0.0.5:8000`` -> ``10.0.0.5``); None for loopback,
    where the host is whoever captured it."""
    if not instance:
        return None
    text = instance.strip()
    if text.startswith("["):
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    if not text or _LOOPBACK.match(text):
        return None
    return text


def utc(seconds: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def parse_text(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    stamped, file_instance = scrape_stamp(ctx.source_name)
    scrape_time = stamped or ctx.mtime or ctx.captured_at
    origin = None if stamped else ("mtime" if ctx.mtime else "captured")
    for n, line in ctx.lines(stream):
        text = line.strip()
        if text.startswith("# gpuwb-scrape ") and (mark := _scrape_mark(text)):
            scrape_time, file_instance, origin = mark[0], mark[1], None
            continue
        if not text or text.startswith("#"):
            continue
        try:
            name, labels, value, stamp = parse_sample(text)
        except ValueError as exc:
            yield Skipped(n, f"not a metrics sample: {exc}")
            continue
        if not math.isfinite(value):
            yield Skipped(n, "non-finite value (NaN/Inf)")
            continue
        when = utc(stamp) if stamp is not None else scrape_time
        if when is None:
            yield Skipped(n, "no time for this sample (no timestamp, no stamp in the file name, no mtime)")
            continue
        host = host_of(labels.get("instance")) or ctx.host or host_of(file_instance)
        if file_instance and "instance" not in labels:
            labels["instance"] = file_instance
        stored = vocabulary.tag(name, labels)
        if stamp is None and origin:
            stored["ts_origin"] = origin
        yield SeriesPoint(ts=when, name=name, value=value, host=host, labels=stored)
