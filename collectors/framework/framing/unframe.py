"""Lines with the wrappers no format parser reads taken off (:func:`unframed_lines`), for a file no sniffer took:
one line out per line in, a time only a removed wrapper gave respelled in front."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timezone

from collectors.framework.framing.streams import frame_lines
from collectors.framework.framing.wrappers import Framed
from collectors.framework.lazy_re import lazy_regex

FOREIGN = frozenset({"quote", "fence", "indent", "cri", "docker_json", "host_label", "dmesg_human", "dmesg_delta",
                     "escaped_newlines"})
"""Wrappers no format parser reads; the others (syslog, dmesg stamps, ISO, launcher ranks, glog, ...) the
parsers read themselves."""
_KERNEL_MESSAGE = lazy_regex(r"\s*(?:NVRM:|nvidia-nvswitch|pcieport |mce: |EDAC |\[Hardware Error\]|Out of memory|"
                             r"Memory cgroup out of memory|oom-kill:|\S+ invoked oom-killer|INFO: task |Call Trace:|"
                             r"NETDEV WATCHDOG|mlx5_core |LustreError:|LNet:|BUG: |Kernel panic)")
"""A kernel message in someone else's wrapper (dmesg through kubectl --timestamps or a container's log):
its time goes back in dmesg's own ISO spelling so the kernel parser takes the lines as what they are."""
_TIMED = frozenset({"syslog", "iso", "rfc5424", "dmesg", "dmesg_ctime", "glog", "vllm", "python_logging",
                    "fabric_manager", "go_log", "logfmt"})


def unframed_lines(lines: Iterable[str], *, reference: datetime | None = None) -> Iterator[str]:
    """One line out per line in, with the wrappers no format parser reads (quotes, fences, CRI, docker,
    launcher labels, ``dmesg -H``) taken off and what parsers do read kept verbatim. A time only a
    taken-off wrapper gave goes in front in a spelling the parsers share (RFC 3339 as ``kubectl logs
    --timestamps`` prints it when exact, ``dmesg -T`` ctime when approximate), so a file no sniffer
    accepted can be parsed as what its lines are. Lines joined into the record above come out empty;
    ``#012`` becomes a space."""
    numbered = list(enumerate(lines, start=1))
    out: dict[int, str] = {}
    for rec in frame_lines(numbered, reference=reference):
        out.setdefault(rec.line, _respelled(rec, numbered[rec.line - 1][1]))
        for joined in range(rec.line + 1, (rec.end_line or rec.line) + 1):
            out[joined] = ""
    for n, line in numbered:
        yield out.get(n, line)


def _respelled(rec: Framed, line: str) -> str:
    if not FOREIGN.intersection(rec.wrappers):
        if rec.wrappers == ("iso",) and rec.ts is not None and "," not in (rec.ts_raw or ",") \
                and _KERNEL_MESSAGE.match(rec.message):  # kubectl logs --timestamps of a dmesg
            return f"{rec.ts.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S,%f}+00:00 {rec.message}"
        return line
    if "fence" in rec.wrappers:
        return ""
    if "escaped_newlines" in rec.wrappers:
        return line.replace("#012", " ").replace("#011", " ")
    native = next((i for i, w in enumerate(rec.wrappers) if w not in FOREIGN), None)
    if native is not None and rec.end_line is None:
        rest = rec.text[rec.offsets[native]:]
        if _TIMED.intersection(rec.wrappers[native:]):
            return rest
    else:
        rest = rec.message
    if rec.ts is not None and rec.ts_origin != "neighbour":
        when = rec.ts.astimezone(timezone.utc)
        if rec.ts_approx:
            return f"[{when:%a %b %d %H:%M:%S %Y}] {rest}"
        if _KERNEL_MESSAGE.match(rest):
            return f"{when:%Y-%m-%dT%H:%M:%S,%f}+00:00 {rest}"
        return f"{when:%Y-%m-%dT%H:%M:%S.%f}Z {rest}"
    if rec.mono is not None:
        return f"[{rec.mono:12.6f}] {rest}"
    return rest
