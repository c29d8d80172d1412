"""Verifying a bundle: every table read in full, every artifact re-hashed, every seal's digest and its link to
the one before, and the bundle now against its last seal, each problem one line that names what changed."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from workbench.store.chunks import unpack
from workbench.store.errors import BundleError, first_line, storage_failure
from workbench.store.seal import Sealing, SealState, artifact_label, chained_digest, digest_of, item_line

VERIFY_SMALL_BYTES = 4 << 20
"""verify reads artifacts up to this size together with others (see VERIFY_GROUP_BYTES)."""
VERIFY_GROUP_BYTES = 64 << 20
"""verify reads the chunks of small artifacts this many bytes at a time, one query for many instead of
two per artifact: a 1,000-node merge holds thousands of small files."""


class Verifying(Sealing):
    """The verify part of :class:`workbench.store.bundle.Bundle`."""

    def _group_bytes(self, group: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], Iterator[bytes]]]:
        if len(group) == 1 and (group[0]["size"] or 0) > VERIFY_SMALL_BYTES:
            yield group[0], self.artifact_bytes(group[0]["id"])
        else:
            yield from self._small_artifacts_with_bytes(group)

    def _small_artifacts_with_bytes(self, arts: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any],
                                                                                     Iterator[bytes]]]:
        if not arts:
            return
        stored: dict[int, list[tuple[bytes, str | None, int]]] = {}
        for aid, data, codec, raw_size in self.con.execute(
                "SELECT artifact_id, data, codec, raw_size FROM artifact_chunk "
                "WHERE artifact_id IN (SELECT unnest(?::BIGINT[])) ORDER BY artifact_id, seq",
                [[a["id"] for a in arts]]).fetchall():
            stored.setdefault(aid, []).append((data, codec, raw_size))
        for art in arts:
            yield art, (unpack(data, codec, raw_size) for data, codec, raw_size in stored.get(art["id"], []))

    def verify(self) -> list[str]:
        """Re-hash every artifact, check every seal and the root digest. Returns one line per problem; empty
        when intact (an interrupted ingest's unsealed artifacts are no problem: see :meth:`verification`)."""
        return self.verification().problems

    def verification(self) -> Verification:
        """Everything verify checks: every table read in full (a damaged block is named, not hit later by
        another command), every artifact re-hashed, every seal's digest and its link to the one before
        (evidence is append-only: what one seal covered, the next covers unchanged), and the bundle now
        against its last seal. Artifacts an ingest stored after the last seal, while its "ingest open"
        marker is still there, are an interrupted ingest's, told apart from tampering."""
        result = Verification()
        scan = _StorageScan(self.con)
        scan.start()
        try:
            arts = self.artifacts()
            result.artifacts = len(arts)
            self._rehash(arts, result)
            seals = self.seals()
            result.seal = seals[-1] if seals else None
            result.altered += _chain_problems(seals, {a["sha256"]: a for a in arts})
            self._last_seal_problems(result, arts)
        except duckdb.Error as exc:
            if storage_failure(exc) is None:
                raise
            result.damaged.append(f"storage damaged: {first_line(exc)}")
        finally:
            result.damaged[:0] = scan.join()
        return result

    def _rehash(self, arts: list[dict[str, Any]], result: Verification) -> None:
        """Each artifact's bytes against its sha256 and size, many small ones per query; when a query hits a
        damaged block, its artifacts are read again one by one to name those whose bytes cannot be read."""
        for group in _verify_groups(arts):
            done = 0
            try:
                for art, blocks in self._group_bytes(group):
                    _rehashed(art, blocks, result)
                    done += 1
            except duckdb.Error as exc:
                if storage_failure(exc) is None:
                    raise
                for art in group[done:]:
                    try:
                        _rehashed(art, self.artifact_bytes(art["id"]), result)
                    except duckdb.Error as one:
                        if storage_failure(one) is None:
                            raise
                        result.damaged.append(f"storage damaged: the bytes of artifact {artifact_label(art)} cannot be "
                                              f"read ({first_line(one)})")

    def _last_seal_problems(self, result: Verification, arts: list[dict[str, Any]]) -> None:
        state = self.seal_state()
        if state.marker is not None and state.unsealed:
            result.interrupted = _interrupted_line(state)
        seal = state.seal
        if seal is None:
            result.never_sealed = True
            return
        lines = self.changes_since_seal(state, arts)
        if lines or state.changed == ["*"]:
            result.altered += lines
            now = self.root_digest(seal["digest_version"])
            result.altered.append(f"root digest mismatch: sealed {seal['root_digest']}, now {now} "
                                  "(artifacts or incident metadata changed after sealing)")


@dataclass
class Verification:
    """What verify found. ``problems`` fail it; an interrupted ingest's unsealed artifacts (``interrupted``,
    one line) do not, since nothing sealed was touched."""

    damaged: list[str] = field(default_factory=list)
    altered: list[str] = field(default_factory=list)
    interrupted: str | None = None
    never_sealed: bool = False
    seal: dict[str, Any] | None = None
    artifacts: int = 0

    @property
    def problems(self) -> list[str]:
        return self.damaged + self.altered + (["bundle was never sealed"] if self.never_sealed else [])


class _StorageScan(threading.Thread):
    """Reads every column of every table (the artifact bytes excepted: the re-hash reads those) on its own
    cursor, while verify re-hashes: DuckDB checks each block's checksum as it loads it, so a damaged block is
    found and its table named, at little cost in time (both run at once)."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        super().__init__(name="gpuwb-verify-scan", daemon=True)
        self.database = con.execute("SELECT current_database()").fetchall()[0][0]
        self.cursor = con.cursor()
        self.problems: list[str] = []

    def run(self) -> None:
        try:
            self.cursor.execute(f"USE {_quoted(self.database)}")  # a writable bundle is attached, not the default
            columns: dict[str, list[str]] = {}
            for table, column in self.cursor.execute(
                    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'main' "
                    "AND table_catalog = current_database() ORDER BY table_name, ordinal_position").fetchall():
                if (table, column) != ("artifact_chunk", "data"):
                    columns.setdefault(table, []).append(column)
            for table, names in columns.items():
                try:  # count(column) loads each of its blocks: a checksum that fails raises here
                    self.cursor.execute(f"SELECT count(*), {', '.join(f'count({_quoted(c)})' for c in names)} "
                                        f"FROM {_quoted(table)}").fetchall()
                except duckdb.Error as exc:
                    if storage_failure(exc) is None:
                        raise
                    self.problems.append(f"storage damaged: table {table} cannot be read in full ({first_line(exc)})")
        except duckdb.Error as exc:
            if storage_failure(exc) is None:
                raise
            self.problems.append(f"storage damaged: {first_line(exc)}")
        finally:
            self.cursor.close()

    def join(self, timeout: float | None = None) -> list[str]:  # type: ignore[override]
        super().join(timeout)
        return self.problems


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _verify_groups(arts: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Runs of small artifacts up to VERIFY_GROUP_BYTES, read in one query; a big one alone, chunk by chunk."""
    group: list[dict[str, Any]] = []
    size = 0
    for art in arts:
        if (art["size"] or 0) > VERIFY_SMALL_BYTES:
            if group:
                yield group
                group, size = [], 0
            yield [art]
            continue
        group.append(art)
        size += art["size"] or 0
        if size >= VERIFY_GROUP_BYTES:
            yield group
            group, size = [], 0
    if group:
        yield group


def _rehashed(art: dict[str, Any], blocks: Iterator[bytes], result: Verification) -> None:
    digest = hashlib.sha256()
    size = 0
    try:
        for block in blocks:
            digest.update(block)
            size += len(block)
    except (OSError, ValueError, BundleError) as exc:
        result.altered.append(f"artifact altered: {artifact_label(art)}: stored chunk no longer expands ({exc})")
        return
    if digest.hexdigest() != art["sha256"] or size != art["size"]:
        result.altered.append(f"artifact altered: {artifact_label(art)}: now sha256 {digest.hexdigest()}, {size} bytes")


def _chain_problems(seals: list[dict[str, Any]], arts: dict[str, dict[str, Any]]) -> list[str]:
    """Each seal's own digest, and each link: what seal k covered, seal k+1 must cover unchanged (only additions
    are legitimate: evidence is append-only, a merge's ``merged_from`` grows by new entries). Links into or out of
    a version-2 seal compare the artifacts only, whose items kept their form; version-1 seals kept no items."""
    lines: list[str] = []
    before: dict[str, Any] | None = None
    for seal in seals:
        items = seal["items"]
        version = seal["digest_version"] or 1
        label = f"seal {seal['seq']} (sealed at {seal['sealed_at']})"
        if version >= 3:
            expected = before["root_digest"] if before else None
            if seal["previous"] != expected:
                lines.append(f"seal chain broken: {label} does not follow "
                             + (f"seal {before['seq']}" if before else "from nothing")
                             + " (a seal was removed, added or rewritten)")
            if items is None or chained_digest(items, seal["previous"]) != seal["root_digest"]:
                lines.append(f"seal altered: {label}: its items no longer hash to its root digest")
        elif version == 2 and (items is None or digest_of(items) != seal["root_digest"]):
            lines.append(f"seal altered: {label}: its items no longer hash to its root digest")
        if before is not None and before["items"] is not None and items is not None:
            whole = (before["digest_version"] or 1) >= 3 and version >= 3
            when = f"between seal {before['seq']} and seal {seal['seq']}, which absorbed the change"
            for key, digest in sorted(before["items"].items()):
                if not whole and not key.startswith("artifact:"):
                    continue
                if key not in items:
                    lines.append(item_line(key, "removed", arts, when))
                elif items[key] != digest:
                    lines.append(item_line(key, "changed", arts, when))
        before = seal
    return lines


def _interrupted_line(state: SealState) -> str:
    marker = state.marker or {}
    count = state.unsealed_artifacts()
    others = len(state.unsealed) - count
    where = "after the last seal" if state.seal else "before the bundle was first sealed"
    return (f"ingest interrupted: {count} artifact{'s' if count != 1 else ''}"
            + (f" and {others} other provenance row{'s' if others != 1 else ''}" if others else "")
            + f" stored {where} by an ingest that did not finish (pid {marker.get('pid', '?')}"
            + (f" on {marker['host']}" if marker.get("host") else "")
            + f", started at {marker.get('started_at', '?')}); not sealed yet: the next `gpuwb ingest` seals them")
