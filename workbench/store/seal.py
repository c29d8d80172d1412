"""Sealing a bundle: one digest per item of provenance (each artifact, alias row, capture's coverage rows,
metadata key, merged bundle), a root digest over them chained to the seal before, and the bundle now against
its last seal, which a writer checks before it adds anything (:meth:`Sealing.take_over`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.store.artifacts import OPEN_MARKER, ArtifactStore
from workbench.store.errors import BundleError
from workbench.store.row_columns import now_utc

if TYPE_CHECKING:
    from workbench.store.bundle import Bundle

DIGEST_VERSION = 3
"""How ``seal`` computes the root digest. 1: each artifact's sha256, size, collector, kind, host and source,
the aliases without captured_at, three metadata keys. 2: also captured_at and info, whole alias rows, the
capture log and the capture metadata, with one digest per item kept in the seal row. 3: items per alias row,
per capture's coverage rows of a collector, per metadata key and per merged bundle, and the digest of the
seal before: a chain that a later seal cannot rewrite without the link showing."""

SEALED_META = ("incident_id", "title", "created_at", "captured_on", "capture_started", "since", "complete",
               "merged_from")
"""Metadata keys that say where the evidence came from; ``schema_version`` changes with every migration."""


class Sealing(ArtifactStore):
    """The seal half of :class:`workbench.store.bundle.Bundle`, which also gives it ``meta()``, ``transaction()``
    and the ``_checked`` flag."""

    _checked: bool

    def root_digest(self, version: int | None = None) -> str:
        """sha256 over the incident metadata and every artifact's hash, size and provenance, computed the
        way digest ``version`` does (default: the way the last seal was, or the current way). From version 3
        on it covers the seal before too, as the last seal did: an unchanged bundle's digest is its last seal's."""
        self._flush_pending()
        seal = self.last_seal()
        if version is None:
            version = seal["digest_version"] if seal else DIGEST_VERSION
        if version == 1:
            return self._root_digest_v1()
        items = self.provenance_items(version)
        if version == 2:
            return digest_of(items)
        return chained_digest(items, seal["previous"] if seal else None)

    def _root_digest_v1(self) -> str:
        """The first seal's digest: artifacts without captured_at and info, aliases without captured_at,
        no capture log. Kept so that bundles sealed with it still verify as intact."""
        meta = {k: v for k, v in self.meta().items() if k in ("incident_id", "title", "created_at")}
        rows = self.con.execute(
            "SELECT sha256, size, collector, kind, host, source FROM artifact ORDER BY sha256").fetchall()
        aliases = self.con.execute(
            "SELECT sha256, collector, kind, host, source FROM artifact_alias "
            "ORDER BY sha256, host NULLS FIRST, source").fetchall()
        doc = {"meta": meta, "artifacts": [list(r) for r in rows]}
        if aliases:
            doc["aliases"] = [list(r) for r in aliases]
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()

    def provenance_items(self, version: int = DIGEST_VERSION) -> dict[str, str]:
        """One digest per sealed item, keyed so that a change can be named: ``artifact:SHA`` (hash, size,
        collector, kind, host, source, captured_at, info), ``alias:SHA@HOST`` (that host's alias row),
        ``capture_log:COLLECTOR@HOST@STARTED`` (one capture's coverage rows of that collector), ``meta:KEY``
        (each provenance key) and ``merged_from:N`` (each bundle a merge took in). Version 3 keys each row that
        a later run may add on its own, so that an append-only bundle keeps every item of one seal unchanged in
        the next; version 2 grouped a sha256's aliases, a collector's coverage rows and the metadata."""
        self._flush_pending()
        items: dict[str, str] = {}
        for row in self.con.execute("SELECT sha256, size, collector, kind, host, source, captured_at, info "
                                    "FROM artifact").fetchall():
            items[f"artifact:{row[0]}"] = digest_of(list(row))
        grouped: dict[str, list[str]] = {}
        for row in self.con.execute("SELECT sha256, collector, kind, host, source, captured_at, info "
                                    "FROM artifact_alias").fetchall():
            key = f"alias:{row[0]}" if version <= 2 else f"alias:{row[0]}@{row[3] or '-'}"
            grouped.setdefault(key, []).append(_canonical(list(row)))
        for row in self.con.execute("SELECT collector, host, status, reason, started_at, duration_s, artifacts, "
                                    "detail FROM capture_log").fetchall():
            key = f"capture_log:{row[0]}@{row[1] or '-'}" + ("" if version <= 2 else f"@{row[4] or '-'}")
            grouped.setdefault(key, []).append(_canonical(list(row)))
        items.update({key: digest_of(sorted(rows)) for key, rows in grouped.items()})
        meta = {k: v for k, v in self.meta().items() if k in SEALED_META}
        if version <= 2:
            items["meta"] = digest_of(meta)
        else:
            items.update(_meta_items(meta))
        return items

    def seal(self, *, complete: bool = True, note: dict[str, Any] | None = None) -> str:
        """Append a seal over the bundle as it is now, chained to the seal before, and clear the "ingest open"
        marker (the run that wrote it is sealed). ``note`` says why a seal was made (see schema version 3)."""
        self._flush_pending()
        items = self.provenance_items()
        last = self.last_seal()
        previous = last["root_digest"] if last else None
        digest = chained_digest(items, previous)
        count = self.con.execute("SELECT count(*) FROM artifact").fetchall()[0][0]
        self.con.execute(
            "INSERT INTO seal (seq, sealed_at, root_digest, artifacts, complete, digest_version, items, previous, "
            "note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(last["seq"] if last else 0) + 1, now_utc(), digest, count, complete, DIGEST_VERSION,
             json.dumps(items, sort_keys=True), previous, json.dumps(note, default=str) if note else None])
        self.con.execute("DELETE FROM meta WHERE key = ?", [OPEN_MARKER])  # after the seal: a kill between leaves
        return digest  # a marker with nothing unsealed, which verify and the next ingest ignore

    def last_seal(self) -> dict[str, Any] | None:
        rows = self.con.execute(f"SELECT {', '.join(_SEAL_COLUMNS)} FROM seal ORDER BY seq DESC LIMIT 1").fetchall()
        return dict(zip(_SEAL_COLUMNS, rows[0])) if rows else None

    def seals(self) -> list[dict[str, Any]]:
        """Every seal, oldest first, with its items (a dict; None for version 1, which kept none)."""
        cur = self.con.execute(f"SELECT {', '.join(_SEAL_COLUMNS)}, items FROM seal ORDER BY seq")
        out = []
        for row in cur.fetchall():
            seal = dict(zip((*_SEAL_COLUMNS, "items"), row))
            seal["items"] = _loaded_items(seal["items"])
            out.append(seal)
        return out

    def seal_state(self) -> SealState:
        """How the bundle now compares with its last seal, cheaply (no bytes re-read): what an ingest checks
        before it adds anything, so that its seal never absorbs a change made after the last one."""
        self._flush_pending()
        seal = self.last_seal()
        marker = self.open_marker()
        state = SealState(seal=seal, marker=marker)
        if seal is None:  # nothing sealed to compare with; what is there is an interrupted ingest's if marked
            if marker is not None:
                state.unsealed = [k for k in self.provenance_items() if k.startswith("artifact:")]
            return state
        if seal["digest_version"] == 1:
            if self._root_digest_v1() != seal["root_digest"]:
                state.changed = ["*"]
            return state
        stored = self.con.execute("SELECT items FROM seal WHERE seq = ?", [seal["seq"]]).fetchall()[0][0]
        sealed = _loaded_items(stored) or {}
        current = self.provenance_items(seal["digest_version"])
        for key in sorted(set(sealed) | set(current)):
            if key not in current:
                state.removed.append(key)
            elif key not in sealed:
                (state.unsealed if marker is not None else state.added).append(key)
            elif sealed[key] != current[key]:
                state.changed.append(key)
        return state

    def changes_since_seal(self, state: SealState, arts: list[dict[str, Any]] | None = None) -> list[str]:
        """One line per item that differs from the last seal (an interrupted ingest's additions excepted)."""
        if state.changed == ["*"]:  # a version-1 seal: one digest, nothing to name
            return []
        named = {a["sha256"]: a for a in (self.artifacts() if arts is None else arts)}
        return [item_line(key, change, named, "after sealing") for keys, change in (
            (state.changed, "changed"), (state.removed, "removed"), (state.added, "added")) for key in keys]

    def take_over(self, notice: Callable[[str], None], derive: Callable[[Bundle], object]) -> None:
        """What a writer (ingest, merge --into) does before it adds anything. A bundle that differs from its
        last seal is refused: sealing now would vouch for a change nobody here made. Artifacts an ingest that
        did not finish left unsealed (its marker is there: kill -9, a power cut, a full disk) are sealed first,
        by a seal of their own marked incomplete and naming that ingest, after ``derive`` (the ingest stage's
        derivations: the store does not know them) completed their rows; ``notice`` says so in one line."""
        if self._checked:
            return
        state = self.seal_state()
        if state.altered:
            lines = self.changes_since_seal(state) or ["artifacts or incident metadata changed after sealing"]
            more = f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""
            raise BundleError(f"bundle {self.path} differs from its last seal: {lines[0]}{more}; refusing to seal "
                              f"over a change this run did not make (`gpuwb verify {self.path}` names each)")
        self._checked = True
        if state.marker is None:
            return
        if not state.unsealed:
            self.clear_open_marker()
            return
        count = state.unsealed_artifacts()
        marker = state.marker
        notice(f"gpuwb: sealing {count} artifact{'s' if count != 1 else ''} that an interrupted ingest (pid "
               f"{marker.get('pid', '?')}, started at {marker.get('started_at', '?')}) stored "
               + ("after the last seal" if state.seal else "and never sealed")
               + "; the seal is marked incomplete and names that ingest")
        with self.transaction():
            derive(self)
            self.seal(complete=False, note={"sealed_for": "interrupted ingest", "ingest": marker,
                                            "artifacts": count})


_SEAL_COLUMNS = ("seq", "sealed_at", "root_digest", "artifacts", "complete", "digest_version", "previous", "note")


@dataclass
class SealState:
    """The bundle against its last seal: item keys changed, removed, added by someone, and added by an ingest
    that has not sealed yet (its "ingest open" marker is there). ``changed == ['*']``: a version-1 seal, whose
    single digest differs."""

    seal: dict[str, Any] | None
    marker: dict[str, Any] | None
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    unsealed: list[str] = field(default_factory=list)

    @property
    def altered(self) -> bool:
        return bool(self.changed or self.removed or self.added)

    def unsealed_artifacts(self) -> int:
        return sum(key.startswith("artifact:") for key in self.unsealed)


def item_line(key: str, change: str, arts: dict[str, dict[str, Any]], when: str) -> str:
    """One sealed item that differs, as a line naming it."""
    what, _, name = key.partition(":")
    change = f"{change} {when}"
    if what == "artifact":
        return (f"artifact provenance altered: {artifact_label(arts[name]) if name in arts else name}: "
                f"collector, kind, host, source, captured_at or info {change}")
    if what == "alias":
        sha, _, host = name.partition("@")
        rows = f"its other-host (alias) row for host {host}" if host else "its other-host (alias) rows"
        return f"artifact provenance altered: {artifact_label(arts[sha]) if sha in arts else sha}: {rows} {change}"
    if what == "capture_log":
        collector, _, rest = name.partition("@")
        host, _, started = rest.partition("@")
        return (f"capture log altered: coverage rows of {collector}@{host}"
                + (f" (capture of {started})" if started else "") + f" {change}")
    if what == "meta":
        return f"incident metadata altered: {name} {change}"
    if what == "merged_from":
        return f"incident metadata altered: merged_from entry {name} (a bundle the merge took in) {change}"
    return f"incident metadata altered: {', '.join(SEALED_META)} {change}"


def _loaded_items(stored: str | None) -> dict[str, str] | None:
    if not stored:
        return None
    try:
        items = json.loads(stored)
    except ValueError:
        return {}
    return items if isinstance(items, dict) else {}


def _meta_items(meta: dict[str, str]) -> dict[str, str]:
    """The provenance keys one item each; ``merged_from`` one item per bundle taken in, so that ``merge --into``
    adding bundles is an addition, not a change."""
    items = {f"meta:{key}": digest_of(value) for key, value in meta.items() if key != "merged_from"}
    if "merged_from" in meta:
        try:
            sources = json.loads(meta["merged_from"])
        except ValueError:
            sources = None
        if isinstance(sources, list):
            items.update({f"merged_from:{n}": digest_of(source) for n, source in enumerate(sources)})
        else:
            items["meta:merged_from"] = digest_of(meta["merged_from"])
    return items


def chained_digest(items: dict[str, str], previous: str | None) -> str:
    """A version-3 root digest: the items and the digest of the seal before (None for the first)."""
    return digest_of({"items": items, "previous": previous})


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def digest_of(value: Any) -> str:
    """sha256 of a value's canonical JSON: the same items hash the same whatever their order."""
    return hashlib.sha256(_canonical(value).encode()).hexdigest()


def artifact_label(art: dict[str, Any]) -> str:
    """An artifact as a problem line names it: digest, kind, source and host."""
    return f"{art['sha256']} ({art['kind']} {art['source']}, host {art['host'] or '-'})"
