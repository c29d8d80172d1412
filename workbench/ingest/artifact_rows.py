"""One artifact's rows as the bundle stores them: its format parser's, with the run's defaults filled in,
then the known messages of the signature catalog that the parser did not already write.

The same function runs in the ingest process and in the parse worker (workbench/ingest/parse_worker.py), so a
file parsed on the second core gives the rows it would have given here, in the same order. All it needs
travels in a picklable ``ParseRequest`` plus the run's ``HostClocks``.
"""

from __future__ import annotations

import contextlib
import importlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import ModuleType
from typing import BinaryIO

from collectors.base import Event, HostFact, ParseContext, Row, Skipped
from collectors.framework import registry, unrecognised
from collectors.framework.signatures import STRUCTURED_KINDS
from collectors.framework.signatures import catalog as signature_catalog

UNWRAP_BATCH_LINES = 10_000


@dataclass
class HostClocks:
    """Clocks learned from earlier files of a run: boot time and a dated reference per host. A parser
    may add to them while it reads (later lines of the same file may need them)."""

    boot_times: dict[str, datetime] = field(default_factory=dict)
    uptimes: dict[str, float] = field(default_factory=dict)
    reference_times: dict[str, datetime] = field(default_factory=dict)

    def learn(self, fact: HostFact) -> None:
        """/proc/uptime plus ``date`` give a boot time too."""
        host = fact.host or ""
        with contextlib.suppress(ValueError):
            if fact.key == "uptime_s":
                self.uptimes[host] = float(fact.value)
            elif fact.key in ("boot_time", "date"):
                when = datetime.fromisoformat(fact.value)
                when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
                target = self.boot_times if fact.key == "boot_time" else self.reference_times
                target.setdefault(host, when)
        if host not in self.boot_times and host in self.uptimes and host in self.reference_times:
            self.boot_times[host] = self.reference_times[host] - timedelta(seconds=self.uptimes[host])


@dataclass
class ParseRequest:
    """What to parse one artifact as: the parser module by name (None: the catalog alone) and the
    defaults its rows take."""

    module: str | None
    kind: str
    host: str | None
    source_name: str
    default_boot: datetime | None = None
    reference_time: datetime | None = None
    mtime: datetime | None = None
    captured_at: datetime | None = None
    unwrap: bool = False
    """its lines are a known format inside wrappers no parser reads: parse them unwrapped"""


@dataclass
class ParseSummary:
    """What the parse said besides its rows."""

    lines: int = 0
    error: str = ""


def artifact_rows(request: ParseRequest, stream_factory: Callable[[], BinaryIO], clocks: HostClocks,
                  summary: ParseSummary, module: ModuleType | None = None) -> Iterator[Row]:
    """The parser's rows, then the catalog's events; ``clocks`` learns the host facts as they come.
    ``module`` is the parser when the caller has it (else it is imported by the request's name).
    Never raises for bad content: a parser or catalog error ends its part with a counted skip."""
    host = request.host
    ctx = ParseContext(host=host, boot_time=clocks.boot_times.get(host or "", request.default_boot),
                       reference_time=request.reference_time, mtime=request.mtime,
                       source_name=request.source_name, boot_times=clocks.boot_times,
                       reference_times=clocks.reference_times, captured_at=request.captured_at)
    parsed: dict[int, set[str]] = {}
    source_name = "signatures"
    if request.module is not None:
        module = module or importlib.import_module(request.module)
        source_name = module.NAME
        for row in _parser_rows(module, request, ctx, stream_factory, clocks, summary):
            if isinstance(row, Event) and row.line is not None:
                parsed.setdefault(row.line, set()).add(row.kind)
            yield row
        summary.lines = ctx.lines_read
    if request.kind in STRUCTURED_KINDS:
        return  # structured data has no lines to recognise
    if not (not (request.unwrap and request.module is not None)
            and getattr(registry.collector_for_kind(request.kind), "SIGNATURES_INLINE", False)):
        for row in _recognised(stream_factory, ctx, parsed, host, source_name):  # an inline parser ran it
            if isinstance(row, Event) and row.line is not None:
                parsed.setdefault(row.line, set()).add(row.kind)
            yield row
    yield from _unrecognised(stream_factory, ctx, parsed, host, source_name)


def _parser_rows(module: ModuleType, request: ParseRequest, ctx: ParseContext, stream_factory: Callable[[], BinaryIO],
                 clocks: HostClocks, summary: ParseSummary) -> Iterator[Row]:
    """Rows with the run's defaults (host, source, layer); host facts are learned as they come."""
    host = request.host
    source_name = module.NAME
    layer = getattr(module, "LAYER", None)
    parse_stream = (lambda: _unwrapped(stream_factory, ctx.reference_for(host))) if request.unwrap else stream_factory
    try:
        with parse_stream() as stream:
            for row in module.parse(request.kind, stream, ctx):
                if isinstance(row, Event):
                    row.source = row.source or source_name
                    row.layer = row.layer or layer
                    row.host = row.host or host
                elif isinstance(row, HostFact):
                    row.host = row.host or host
                    clocks.learn(row)
                elif not isinstance(row, Skipped) and hasattr(row, "host"):
                    row.host = row.host or host
                yield row
    except Exception as exc:  # a parser bug must not lose the bundle: count it, keep the raw bytes
        yield Skipped(ctx.lines_read or None, f"parser error: {type(exc).__name__}: {exc}"[:200])
        summary.error = f"{type(exc).__name__}: {exc}"[:200]


def _recognised(stream_factory: Callable[[], BinaryIO], ctx: ParseContext, parsed: dict[int, set[str]],
                host: str | None, source_name: str) -> Iterator[Row]:
    """Known messages of collectors/catalog/signatures/ on every line, whatever the wrapper: a line the
    parser already wrote the same kind for is not written again."""
    try:
        with stream_factory() as stream:
            head = stream.read(8192)
            if not head or b"\x00" in head:
                return  # empty, or binary (a core file, an image): no lines of text to recognise
            stream.seek(0)
            for event in signature_catalog().scan(stream, reference=ctx.reference_for(host),
                                                  boot=ctx.boot_time_for(host), parsed=parsed):
                event.source = event.source or source_name
                event.host = event.host or host
                yield event
    except Exception as exc:  # a catalog bug must not lose the bundle: count it, keep the raw bytes
        yield Skipped(None, f"signature error: {type(exc).__name__}: {exc}"[:200])


def _unrecognised(stream_factory: Callable[[], BinaryIO], ctx: ParseContext, parsed: dict[int, set[str]],
                  host: str | None, source_name: str) -> Iterator[Row]:
    """Error-shaped lines that neither the parser nor the catalog wrote anything for, as
    ``unrecognised_error`` events (collectors/framework/unrecognised.py): nothing unheard-of is silent."""
    try:
        with stream_factory() as stream:
            head = stream.read(8192)
            if not head or b"\x00" in head:
                return
            stream.seek(0)
            for event in unrecognised.scan(stream, known=parsed, collector=source_name,
                                           reference=ctx.reference_for(host), boot=ctx.boot_time_for(host)):
                event.source = event.source or source_name
                event.host = event.host or host
                yield event
    except Exception as exc:  # a scan bug must not lose the bundle: count it, keep the raw bytes
        yield Skipped(None, f"unrecognised-line scan error: {type(exc).__name__}: {exc}"[:200])


def _unwrapped(stream_factory: Callable[[], BinaryIO], reference: datetime | None) -> BinaryIO:
    """The artifact's lines with their wrappers peeled, one line out per line in (so line numbers still
    point into the stored bytes), spooled to disk past 64 MiB."""
    from collectors.base import iter_lines
    from collectors.framework.framing.unframe import unframed_lines

    out = tempfile.SpooledTemporaryFile(max_size=64 << 20)
    with stream_factory() as stream:
        batch: list[str] = []
        for raw in iter_lines(stream):
            batch.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
            if len(batch) >= UNWRAP_BATCH_LINES:
                out.write("".join(f"{line}\n" for line in unframed_lines(batch, reference=reference)).encode())
                batch = []
        out.write("".join(f"{line}\n" for line in unframed_lines(batch, reference=reference)).encode())
    out.seek(0)
    return out
