"""Raw evidence as numbered lines, read a chunk at a time: the Evidence screen's reader.

An artifact may be a multi-GB kernel log. It is stored as compressed chunks
(:data:`workbench.store.chunks.CHUNK_BYTES`), so the reader keeps only a small index — how many lines
start before each chunk — and expands just the chunks a window of lines needs. Line numbers are
1-based, the same numbers the ``event.line`` column and ``gpuwb timeline`` print.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.store.bundle import Bundle, BundleError
from workbench.store.shared_bundle import SharedBundle


@dataclass(frozen=True)
class Provenance:
    """Where an artifact came from and what proves it is unchanged."""

    id: int
    sha256: str
    kind: str
    source: str
    host: str | None
    collector: str | None
    captured_at: datetime | None
    size: int
    lines: int | None
    events: int | None
    aliases: tuple[dict[str, Any], ...]


def provenance(bundle: Bundle, sha256: str) -> Provenance:
    rows = bundle.con.execute(
        "SELECT id, sha256, kind, source, host, collector, captured_at, size, lines, events FROM artifact "
        "WHERE sha256 = ?", [sha256]).fetchall()
    if not rows:
        raise BundleError(f"no artifact {sha256[:12]} in this bundle")
    cur = bundle.con.execute("SELECT host, source, kind, collector, captured_at FROM artifact_alias WHERE sha256 = ? "
                             "ORDER BY host, source", [sha256])
    names = [d[0] for d in cur.description]
    aliases = tuple(dict(zip(names, r)) for r in cur.fetchall())
    return Provenance(*rows[0], aliases=aliases)


class ArtifactText:
    """Lines of one artifact, expanded on demand; keeps at most a few chunks in memory."""

    CACHE = 3

    def __init__(self, store: SharedBundle, sha256: str) -> None:
        self.store = store
        with store.read() as bundle:
            self.meta = provenance(bundle, sha256)
            self.chunks = bundle.artifact_chunk_count(self.meta.id)
        self._starts: list[int] = [1]  # _starts[i]: number of the first line that begins in chunk i
        self._tail_partial: list[bool] = []  # chunk i ends inside a line
        self._cache: dict[int, bytes] = {}

    # -- the index ---------------------------------------------------------------------------
    def _chunk(self, bundle: Bundle, seq: int) -> bytes:
        data = self._cache.get(seq)
        if data is None:
            data = bundle.artifact_chunk(self.meta.id, seq)
            if len(self._cache) >= self.CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[seq] = data
        return data

    def _index_through(self, bundle: Bundle, seq: int) -> None:
        while len(self._starts) <= seq + 1 and len(self._tail_partial) < self.chunks:
            i = len(self._tail_partial)
            data = self._chunk(bundle, i)
            partial = bool(data) and not data.endswith(b"\n")
            self._tail_partial.append(partial)
            self._starts.append(self._starts[i] + data.count(b"\n"))

    def _chunk_of(self, bundle: Bundle, line: int) -> int | None:
        """The chunk in which ``line`` begins."""
        seq = 0
        while True:
            self._index_through(bundle, seq)
            if seq >= self.chunks:
                return None
            if self._starts[seq + 1] > line or (seq == self.chunks - 1 and self._tail_partial[seq]
                                                and self._starts[seq + 1] == line):
                return seq
            seq += 1

    @property
    def total_lines(self) -> int | None:
        """Known once every chunk was indexed (``lines`` from ingest says it earlier)."""
        if self.meta.lines is not None:
            return int(self.meta.lines)
        if len(self._tail_partial) == self.chunks:
            return self._starts[-1] - 1 + (1 if self._tail_partial and self._tail_partial[-1] else 0)
        return None

    # -- reading -----------------------------------------------------------------------------
    def lines(self, start: int, count: int) -> list[tuple[int, str]]:
        """Up to ``count`` (number, text) pairs from line ``start``."""
        start = max(1, start)
        out: list[tuple[int, str]] = []
        with self.store.read() as bundle:
            seq = self._chunk_of(bundle, start)
            if seq is None:
                return out
            carry = b""
            lineno = self._starts[seq]
            if seq > 0 and self._tail_partial[seq - 1]:  # line ``lineno`` began in the previous chunk
                carry = self._chunk(bundle, seq - 1).rsplit(b"\n", 1)[-1]
            while seq < self.chunks and len(out) < count:
                parts = (carry + self._chunk(bundle, seq)).split(b"\n")
                carry = parts.pop()
                for part in parts:
                    if lineno >= start:
                        out.append((lineno, part.decode("utf-8", "replace")))
                        if len(out) >= count:
                            return out
                    lineno += 1
                seq += 1
                self._index_through(bundle, seq)
            if carry and lineno >= start and len(out) < count:
                out.append((lineno, carry.decode("utf-8", "replace")))
        return out

    def find(self, text: str, *, after: int, backwards: bool = False, limit_lines: int = 2_000_000) -> int | None:
        """The next (or previous) line number containing ``text`` (case-insensitive)."""
        needle = text.lower()
        if not needle:
            return None
        step = 2000
        if backwards:
            line = after - 1
            while line >= 1 and after - line <= limit_lines:
                lo = max(1, line - step + 1)
                for number, body in reversed(self.lines(lo, line - lo + 1)):
                    if needle in body.lower():
                        return number
                line = lo - 1
            return None
        line = after + 1
        while line - after <= limit_lines:
            block = self.lines(line, step)
            if not block:
                return None
            for number, body in block:
                if needle in body.lower():
                    return number
            line = block[-1][0] + 1
        return None
