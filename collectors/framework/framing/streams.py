"""Whole streams of lines (:func:`frame_lines`): CRI / docker partial lines joined, rsyslog's ``#012`` split, ``dmesg
-H`` deltas added to their base, and undated lines dated from their dated neighbours."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from datetime import datetime, timedelta

from collectors.framework.framing.wrappers import Framed, peel

_ESCAPE_NL = "#012"

MAX_UNDATED_HEAD = 1000
"""Undated lines held back waiting for the first dated one; past this they go out without a time."""


def frame_lines(lines: Iterable[tuple[int, str]] | Iterable[str], *, reference: datetime | None = None,
                boot: datetime | None = None) -> Iterator[Framed]:
    """Every line framed, in order: CRI/docker partial lines joined, ``#012`` split, ``dmesg -H``
    deltas added to their base, and undated lines dated from the nearest dated one (approximate).

    ``lines`` are text lines or (line number, text) pairs."""
    state = _Dating(reference, boot)
    partial: Framed | None = None
    for n, item in enumerate(lines, start=1):
        lineno, text = item if isinstance(item, tuple) else (n, item)
        rec = peel(text, lineno, reference=state.reference, boot=boot)
        if partial is not None:
            if _continues(partial, rec):
                rec = replace(partial, message=partial.message + rec.message, partial=rec.partial,
                              end_line=rec.end_line or rec.line)
            else:
                partial.partial = False
                yield from state.push(partial)
            partial = None
        if rec.partial:
            partial = rec
            continue
        yield from state.push(rec)
    if partial is not None:
        partial.partial = False
        yield from state.push(partial)
    yield from state.flush()


def _continues(head: Framed, tail: Framed) -> bool:
    """A CRI ``P`` (or docker unterminated) line goes on in the next line of the same stream."""
    return tail.stream == head.stream and bool({"cri", "docker_json"} & set(tail.wrappers))


class _Dating:
    """Times that need neighbours: ``dmesg -H`` deltas and undated lines, in one pass."""

    def __init__(self, reference: datetime | None, boot: datetime | None) -> None:
        self.reference = reference
        self.boot = boot
        self.pending: list[Framed] = []
        self.last: Framed | None = None
        self.base: datetime | None = None
        self.offset = 0.0

    def push(self, rec: Framed) -> Iterator[Framed]:
        for piece in _split_escaped(rec, self.reference, self.boot):
            if piece.ts_origin == "dmesg_human":
                self.base, self.offset = piece.ts, 0.0
            elif piece.delta is not None and self.base is not None:
                self.offset += piece.delta
                piece.ts = self.base + timedelta(seconds=self.offset)
                piece.ts_origin, piece.ts_approx = "dmesg_human", True
            if piece.ts is None:
                if self.last is not None:
                    _from_neighbour(piece, self.last)
                    yield piece
                elif len(self.pending) < MAX_UNDATED_HEAD:
                    self.pending.append(piece)
                else:
                    yield from self.flush()
                    yield piece
                continue
            if self.reference is None and not piece.ts_approx:
                self.reference = piece.ts
            self.last = piece
            for held in self.pending:
                _from_neighbour(held, piece)
            yield from self.flush()
            yield piece

    def flush(self) -> Iterator[Framed]:
        held, self.pending = self.pending, []
        yield from held


def _split_escaped(rec: Framed, reference: datetime | None, boot: datetime | None) -> list[Framed]:
    """rsyslog writes a multi-line message as one line with ``#012`` for each newline: split it back."""
    if _ESCAPE_NL not in rec.message:
        return [rec]
    parts = rec.message.replace("#011", "\t").split(_ESCAPE_NL)
    out = [replace(rec, message=parts[0], wrappers=(*rec.wrappers, "escaped_newlines"))]
    for part in parts[1:]:
        inner = peel(part, rec.line, reference=reference, boot=boot)
        if inner.ts is None:
            inner.ts, inner.ts_raw, inner.ts_origin, inner.ts_approx = rec.ts, rec.ts_raw, rec.ts_origin, rec.ts_approx
        for name in ("host", "rank", "stream", "program", "pid"):
            if getattr(inner, name) is None:
                setattr(inner, name, getattr(rec, name))
        inner.wrappers = (*rec.wrappers, "escaped_newlines", *inner.wrappers)
        out.append(inner)
    return out


def _from_neighbour(rec: Framed, dated: Framed) -> None:
    rec.ts, rec.ts_origin, rec.ts_approx = dated.ts, "neighbour", True
