"""Checkpoint and data write failures in training logs (``checkpoint_log``): :func:`write_failure` is public so
that the NCCL / training-log collector flags the same lines in the logs it owns."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO

from collectors.base import Event, ParseContext, Row
from collectors.framework.lazy_re import lazy_regex

CONTEXT_LINES = 40
CONTEXT_CHARS = 2048
"""Lines kept to decide whether a write error happened inside a checkpoint save, each cut short."""

_WRITE_FAIL = lazy_regex(
    r"PytorchStreamWriter failed writing|write\(\): fd \d+ failed with|unexpected pos \d+ vs \d+"
    r"|No space left on device|\[Errno (?:5|28|122|30|116)\]|Input/output error|Disk quota exceeded"
    r"|Read-only file system|Stale file handle|Transport endpoint is not connected")
_CKPT_CONTEXT = lazy_regex(r"torch\.save|save_checkpoint|serialization\.py|inline_container|checkpoint|ckpt"
                           r"|\.safetensors|\.pt\b|\.pth\b|state_dict|save_pretrained|dcp\.save|save_model",
                           re.IGNORECASE)


_ERRNO = [
    (re.compile(r"No space left on device|\[Errno 28\]|ENOSPC", re.IGNORECASE), "ENOSPC"),
    (re.compile(r"Input/output error|\[Errno 5\]|\bEIO\b"), "EIO"),
    (re.compile(r"Disk quota exceeded|\[Errno 122\]|EDQUOT"), "EDQUOT"),
    (re.compile(r"Read-only file system|\[Errno 30\]|EROFS"), "EROFS"),
    (re.compile(r"Stale file handle|\[Errno 116\]|ESTALE"), "ESTALE"),
    (re.compile(r"Transport endpoint is not connected|\[Errno 107\]|ENOTCONN"), "ENOTCONN"),
]
_STREAM_WRITER = lazy_regex(r"PytorchStreamWriter failed writing file (\S+?):? (.*)$")
_FD_WRITE = lazy_regex(r"write\(\): fd (\d+) failed with (.*)$")
_UNEXPECTED_POS = lazy_regex(r"unexpected pos \d+ vs \d+")
_LOG_TS = lazy_regex(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?\s*(Z|[+-]\d\d:?\d\d)?")


def write_failure(line: str) -> dict[str, Any] | None:
    """The storage write error a log line reports, if any: {error, errno, file, checkpoint_api}.

    ``checkpoint_api`` is True when the line itself is from torch's checkpoint writer; callers
    that see a ``torch.save``/``save_checkpoint`` frame nearby treat other errors as checkpoint
    failures too."""
    if not _WRITE_FAIL.search(line):
        return None
    errno = next((name for pattern, name in _ERRNO if pattern.search(line)), None)
    error = line.strip()
    if m := re.search(r"(?:RuntimeError|OSError|IOError|PermissionError|Exception):\s*(.*)$", error):
        error = m.group(1)
    error = re.sub(r"^\[enforce fail at [^\]]+\]\s*\.?\s*", "", error)
    result: dict[str, Any] = {"error": error[:500], "errno": errno, "file": None, "checkpoint_api": False}
    if m := _STREAM_WRITER.search(line):
        result.update(file=m.group(1), checkpoint_api=True)
    elif _FD_WRITE.search(line) or _UNEXPECTED_POS.search(line):
        result["checkpoint_api"] = True
    if m := re.search(r"\[enforce fail at ([^\]]+)\]", line):
        result["source"] = m.group(1)
    return result


def parse_log(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    recent: deque[str] = deque(maxlen=CONTEXT_LINES)
    last_stamp: re.Match[str] | None = None
    learned = False
    for n, line in ctx.lines(stream):
        own = _LOG_TS.search(line, 0, 64)
        if own:
            last_stamp = own
            if not learned and (first := _log_time(own)) is not None:
                ctx.learn_reference_time(ctx.host, first)
                learned = True
        recent.append(line[:CONTEXT_CHARS])
        if not _WRITE_FAIL.search(line):
            continue
        failure = write_failure(line)
        if failure is None:
            continue
        in_checkpoint = failure["checkpoint_api"] or any(_CKPT_CONTEXT.search(r) for r in recent)
        kind = "checkpoint_write_failed" if in_checkpoint else "storage_error"
        ts = _log_time(last_stamp) if last_stamp else None
        attrs = {k: v for k, v in failure.items() if k != "checkpoint_api"}
        errno = f" ({failure['errno']})" if failure["errno"] else ""
        yield Event(kind=kind, message=f"{'checkpoint write failed' if in_checkpoint else 'storage error'}{errno}: "
                    f"{failure['error']}"[:400], ts=ts, ts_origin=("iso" if own else "neighbour") if ts else "none",
                    ts_approx=bool(ts and not own), ts_raw=last_stamp.group(0) if ts and last_stamp else None,
                    severity="error", attrs=attrs, line=n)


def _log_time(m: re.Match[str]) -> datetime | None:
    try:
        when = datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}")
    except ValueError:
        return None
    if m.group(3):
        when = when.replace(microsecond=int(m.group(3).ljust(6, "0")))
    zone = m.group(4)
    if zone and zone != "Z":
        digits = zone.replace(":", "")
        sign = 1 if digits[0] == "+" else -1
        when -= sign * timedelta(hours=int(digits[1:3]), minutes=int(digits[3:5]))
    return when.replace(tzinfo=timezone.utc)


def names_write_failure(text: str) -> bool:
    """Whether ``text`` holds a write failure's words (the sniffer's test of a head)."""
    return _WRITE_FAIL.search(text) is not None


def mentions_checkpoint(text: str) -> bool:
    """Whether ``text`` mentions a checkpoint save (torch.save, a .pt file, save_pretrained, ...)."""
    return _CKPT_CONTEXT.search(text) is not None
