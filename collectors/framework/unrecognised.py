"""Lines that look like errors but that no parser and no catalog entry knows: nothing unheard-of is silent.

A responder's worst case is the message nobody has catalogued: the workbench said nothing, so the
responder believed there was nothing. Every text artifact is therefore scanned a second time for the
shape of an error (a level word, a traceback's last line, a non-zero exit, a crash notice); a line of
that shape that the format parser and the signature catalog left alone becomes an ``unrecognised_error``
event with the program that wrote it and a layer from that program (collectors/catalog/programs.yaml).
The engine ranks them as low hypotheses at their layer; ``gpuwb catalog unknown BUNDLE`` prints them
grouped, ready to become catalog entries.

Repeats are one event: lines of one host with the same template (digits, hex and addresses masked) in
one artifact count into the first one's ``count``, and at most MAX_TEMPLATES templates are kept per artifact, so a
log that prints the same error a million times costs one row.

Cost: one RE2 alternation over the raw bytes, as the catalog's prefilter; only hit lines are decoded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

from collectors.base import LAYERS, Event
from collectors.framework.framing.wrappers import peel
from collectors.framework.lazy_re import lazy_regex

BLOCK_BYTES = 4 << 20
MAX_LINE = 4 << 10
MAX_TEMPLATES = 200
"""Distinct unrecognised messages kept per artifact; the rest are counted in the last one's ``dropped``."""

_SHAPES = (
    rb"\b(?:ERROR|FATAL|CRITICAL|PANIC|EMERG)\b",
    rb"\blevel=(?:error|fatal|crit|critical|panic)\b",
    rb"\"(?:level|severity)\": ?\"(?:error|ERROR|fatal|FATAL|critical|CRITICAL)\"",
    rb"\[(?:error|fatal|critical|ERR|ERRO)\]",
    rb"(?:^|\n|[\]:] )[EF]\d{4} \d\d:\d\d:\d\d",
    rb"\b[A-Z][A-Za-z0-9_]*(?:Error|Exception): \S",
    rb"\b(?:error|fatal|failure): \S",
    rb"\bfatal error\b",
    rb"Segmentation fault|core dumped|terminate called after throwing|Aborted \(core",
    rb"\bexit(?:ed with)? (?:code|status):? ?-?[1-9]",
    rb"\bexitcode: ?-?[1-9]|returned non-zero exit status",
)
_QUIET_LEVELS = {"info", "debug", "notice", "trace"}
_MASK = lazy_regex(r"0x[0-9a-fA-F]+|\b[0-9a-fA-F]{8,}\b|\d+")


@cache
def _prefilter() -> Any:
    import re2  # deferred: a C++ DFA that only ingest needs

    options = re2.Options()
    options.max_mem = 16 << 20
    return re2.compile(b"|".join(b"(?:" + s + b")" for s in _SHAPES), options)


@cache
def layer_tables() -> tuple[dict[str, str], dict[str, str]]:
    """(program name -> layer, collector name -> layer) from collectors/catalog/programs.yaml."""
    from collectors import catalog
    from collectors.catalog.parsed import parsed_yaml

    doc = parsed_yaml([Path(next(iter(catalog.__path__))) / "programs.yaml"], lambda docs: None)[0]
    programs = {str(name).lower(): layer for layer, names in doc["layers"].items() for name in names}
    collectors = {str(name): str(layer) for name, layer in (doc.get("collectors") or {}).items()}
    bad = {layer for layer in [*programs.values(), *collectors.values()] if layer not in LAYERS}
    if bad:
        raise ValueError(f"programs.yaml: {sorted(bad)} are not layers")
    return programs, collectors


def template(message: str) -> str:
    """The message with numbers, hex and ids masked: what repeats of one error share."""
    return _MASK.sub("#", message)[:300]


def scan(stream: BinaryIO, *, known: Iterable[int], collector: str | None, reference: datetime | None = None,
         boot: datetime | None = None) -> Iterator[Event]:
    """``unrecognised_error`` events for the error-shaped lines of ``stream`` whose numbers are not in
    ``known`` (lines a parser or the catalog wrote an event for). ``collector`` read the file: its layer
    (programs.yaml) places a line that names no program the table knows."""
    skip = set(known)
    layer = layer_tables()[1].get(collector or "", "business")
    firsts: dict[str, Event] = {}
    first_line, carry = 1, b""
    while True:
        chunk = stream.read(BLOCK_BYTES)
        data = carry + chunk
        if not data:
            break
        cut = data.rfind(b"\n") + 1 if chunk else len(data)
        block, carry = (data[:cut], data[cut:]) if cut else (data, b"")
        _block(block, first_line, skip, layer, reference, boot, firsts)
        first_line += block.count(b"\n")
        if not chunk:
            break
    yield from firsts.values()


def _block(block: bytes, first_line: int, skip: set[int], layer: str, reference: datetime | None,
           boot: datetime | None, firsts: dict[str, Event]) -> None:
    counted_to, line_no, last_start = 0, first_line, -1
    for hit in _prefilter().finditer(block):
        at = hit.start() + (block[hit.start():hit.start() + 1] == b"\n")  # the glog shape may match the newline
        start = block.rfind(b"\n", 0, at) + 1
        if start == last_start:
            continue
        last_start = start
        line_no += block.count(b"\n", counted_to, start)
        counted_to = start
        if line_no in skip:
            continue
        end = block.find(b"\n", start)
        raw = block[start:min(len(block) if end < 0 else end, start + MAX_LINE)]
        framed = peel(raw.decode("utf-8", "replace").rstrip("\r"), line_no, reference=reference, boot=boot)
        if (framed.level or "").lower() in _QUIET_LEVELS or not framed.message.strip():
            continue
        key = template(framed.message)
        seen = firsts.get(f"{framed.host}\0{key}")
        if seen is not None:
            seen.attrs["count"] += 1
            continue
        if len(firsts) >= MAX_TEMPLATES:
            last = next(reversed(firsts.values()))
            last.attrs["dropped"] = last.attrs.get("dropped", 0) + 1
            continue
        program = (framed.program or "").lower() or None
        # a program the table does not know is an application's; only a line naming none is the file's
        where = layer_tables()[0].get(program, "business") if program else layer
        attrs: dict[str, Any] = {"count": 1, "template": key}
        if program:
            attrs["program"] = program
        firsts[f"{framed.host}\0{key}"] = Event(
            kind="unrecognised_error", message=framed.message.strip()[:2000], ts=framed.ts,
            ts_origin=framed.ts_origin, ts_approx=framed.ts_approx, ts_raw=framed.ts_raw, host=framed.host,
            layer=where, severity="warning", rank=framed.rank, attrs=attrs, line=line_no)
