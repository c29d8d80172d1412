"""Per-node bundles into one incident bundle, so the analysis spans hosts.

Each node is usually captured on its own (``gpuwb capture`` on node07, node08, ...). Merging
copies every artifact byte for byte (same sha256, same chunks) and the rows parsed from it;
an artifact present in several inputs (the shared sacct output) is kept once with its rows once.
Derived events are not copied but recomputed over the merged evidence, since a straggler or a
version skew only shows across nodes. The merged bundle is sealed with its own root digest and
records which bundles (incident id, root digest) it was made from.

A fleet is a thousand bundles, so the copy is set-based: up to ``BATCH`` source bundles are attached
to the merged bundle's DuckDB connection at once and each table is copied with one
``INSERT ... SELECT`` over all of them; only the per-artifact decisions (new bytes, another host's
copy of known bytes, a plain duplicate) are made in Python, on the small artifact tables. Late nodes
are added with :func:`merge_into`, which copies only the new bundles, recomputes the derivations and
seals again; a bundle whose root digest is already recorded in ``merged_from`` is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from workbench.ingest.derive import run_derivations
from workbench.store import schema
from workbench.store.bundle import Bundle, BundleError
from workbench.store.connection import remove_files
from workbench.store.schema import EVIDENCE_TABLES

BATCH = 32
"""Source bundles attached at once: one INSERT per table for all of them."""

BATCH_BYTES = 128 << 20
"""A batch also ends once its bundles' files add up to this: a batch is one transaction, whose rows and
chunks DuckDB keeps in memory until the commit, and an attached bundle's blocks are cached as read."""

TITLES_SHOWN = 3
"""A merged incident's default title names this many distinct input titles, then counts the rest."""


@dataclass
class MergeResult:
    """What the merge did, for the command's summary."""

    path: Path
    inputs: list[dict[str, str | None]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(path, why) of the inputs not copied: already merged (same root digest), or the output itself."""
    artifacts: int = 0
    duplicates: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    derived: dict[str, int] = field(default_factory=dict)
    root_digest: str = ""


def bundle_paths(inputs: list[str | os.PathLike[str]]) -> list[Path]:
    """The bundles named: a file as given, a folder as the ``*.duckdb`` files directly in it (sorted;
    hidden ones, such as a capture still being written, left out). The same file named twice is refused."""
    paths: list[Path] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.duckdb") if p.is_file() and not p.name.startswith("."))
            if not found:
                raise BundleError(f"no bundles (*.duckdb) in folder {path}")
            paths.extend(found)
        elif not path.exists():
            raise BundleError(f"no such bundle: {path}")
        else:
            paths.append(path)
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:
            raise BundleError(f"{path} is given twice; give each bundle once")
        seen.add(path.resolve())
    return paths


def merge_bundles(out: str | os.PathLike[str], inputs: list[str | os.PathLike[str]], *,
                  title: str | None = None) -> MergeResult:
    """Create ``out`` from ``inputs`` (bundles or folders of bundles); refuses to overwrite."""
    out_path = Path(out)
    if out_path.exists():
        raise BundleError(f"{out_path} already exists; merge writes a new bundle "
                          "(--into adds bundles to an existing merged bundle)")
    paths = bundle_paths(inputs)
    if not paths:
        raise BundleError("nothing to merge: give at least one bundle")
    bundle = Bundle.create(out_path, title=title or "merged incident")
    try:
        merger = _Merger(bundle, atomic=False)
        result = merger.add(paths)
        if not title:
            bundle.set_meta("title", _title([d["title"] for d in result.inputs]))
        _finish(bundle, merger, result)
        bundle.close()  # checkpointed: a merge the disk could not take fails here, and leaves no bundle
    except BaseException:
        with contextlib.suppress(BundleError):
            bundle.close()
        remove_files(out_path)
        raise
    return result


def merge_into(target: str | os.PathLike[str], inputs: list[str | os.PathLike[str]]) -> MergeResult:
    """Add late bundles to a merged bundle without redoing the merge: only the new bundles are copied,
    all or none; the derivations are recomputed and the bundle sealed again."""
    target_path = Path(target)
    paths = bundle_paths(inputs)
    if not paths:
        raise BundleError("nothing to add: give at least one bundle")
    with Bundle.open(target_path, write=True) as bundle:
        if "merged_from" not in bundle.meta():
            raise BundleError(f"{target_path} was not made by gpuwb merge; --into adds to a merged bundle")
        # refuses a bundle changed since its last seal: the new seal would absorb it
        bundle.take_over(_to_stderr, run_derivations)
        merger = _Merger(bundle, atomic=True)
        merger.check(paths)  # outside the transaction: DuckDB refusing a bad source would abort it
        with bundle.transaction():
            result = merger.add(paths)
            if result.inputs:
                _finish(bundle, merger, result)
            else:
                result.root_digest = (bundle.last_seal() or {}).get("root_digest") or ""
    return result


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _finish(bundle: Bundle, merger: _Merger, result: MergeResult) -> None:
    bundle.set_meta("merged_from", json.dumps(merger.sources))
    result.derived = run_derivations(bundle)
    result.root_digest = bundle.seal()


def _title(titles: list[str | None]) -> str:
    distinct = list(dict.fromkeys(t for t in titles if t))
    if not distinct:
        return "merged incident"
    more = len(distinct) - TITLES_SHOWN
    return "merged: " + "; ".join(distinct[:TITLES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _batches(paths: list[Path]) -> Iterator[list[Path]]:
    """Consecutive groups of at most BATCH bundles and, past the first bundle, BATCH_BYTES of files."""
    batch: list[Path] = []
    size = 0
    for path in paths:
        grows = path.stat().st_size
        if batch and (len(batch) >= BATCH or size + grows > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(path)
        size += grows
    if batch:
        yield batch


class _Merger:
    """Copies batches of source bundles into one open, writable bundle."""

    def __init__(self, bundle: Bundle, *, atomic: bool) -> None:
        self.bundle = bundle
        self.con = bundle.con
        self.atomic = atomic
        self.columns = {table: self._columns(table) for table in
                        ("artifact", "artifact_alias", "artifact_chunk", "capture_log", "journal", *EVIDENCE_TABLES)}
        meta = bundle.meta()
        self.sources: list[dict[str, str | None]] = json.loads(meta["merged_from"]) if "merged_from" in meta else []
        self.digests = {s["root_digest"] for s in self.sources if s.get("root_digest")}
        self.hosts: dict[str, set[str | None]] = {}
        for sha, host in self.con.execute("SELECT sha256, host FROM artifact UNION ALL "
                                          "SELECT sha256, host FROM artifact_alias").fetchall():
            self.hosts.setdefault(sha, set()).add(host)
        self.own = bundle.path.resolve()
        self.sizes: dict[tuple[str, str], int] = {}

    def _columns(self, table: str) -> list[str]:
        return [r[0] for r in self.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ? "
            "AND table_catalog = current_database() ORDER BY ordinal_position", [table]).fetchall()]

    def check(self, paths: list[Path]) -> None:
        """Attach and describe every source without copying: one that is not a bundle fails here, and an
        older one is brought to the current schema."""
        for batch in _batches([p for p in paths if p.resolve() != self.own]):
            with self._attached(batch) as attached:
                self._describe(attached)

    def add(self, paths: list[Path]) -> MergeResult:
        """Copy the sources; with ``atomic`` inside the caller's transaction, else one per batch."""
        result = MergeResult(path=self.bundle.path)
        result.skipped = [(str(p), "the output bundle itself") for p in paths if p.resolve() == self.own]
        paths = [p for p in paths if p.resolve() != self.own]
        self.con.execute("SET enable_progress_bar = false")  # a long INSERT would draw one on stderr
        try:
            for batch in _batches(paths):
                self._batch(batch, result)
        finally:
            self.bundle._next_event_id = None  # ids were assigned here, not through the bundle's counter
        return result

    # -- one batch ----------------------------------------------------------------------------
    @contextmanager
    def _attached(self, paths: list[Path]) -> Iterator[dict[str, Path]]:
        """The sources attached read-only as src0, src1, ... and detached on the way out."""
        attached: dict[str, Path] = {}
        try:
            for path in paths:
                alias = f"src{len(attached)}"
                self._attach(path, alias)
                attached[alias] = path
            yield attached
        finally:
            self.sizes = {}
            for alias in attached:
                self.con.execute(f"DETACH DATABASE IF EXISTS {alias}")

    def _batch(self, paths: list[Path], result: MergeResult) -> None:
        with self._attached(paths) as attached:
            copied = []
            for alias, described in self._describe(attached).items():
                if described["root_digest"] in self.digests:
                    result.skipped.append((str(attached[alias]), "already merged (same root digest)"))
                    continue
                if described["root_digest"]:
                    self.digests.add(described["root_digest"])
                self.sources.append(described)
                result.inputs.append(described)
                copied.append(alias)
            if copied:
                self._copy_batch(copied, result)

    def _copy_batch(self, attached: list[str], result: MergeResult) -> None:
        """One transaction per batch, unless the whole add is one (``atomic``)."""
        if self.atomic:
            self._copy(attached, result)
            return
        self.con.execute("BEGIN")
        try:
            self._copy(attached, result)
            self.con.execute("COMMIT")
        except BaseException:
            _rollback(self.con)
            raise

    def _attach(self, path: Path, alias: str) -> None:
        """Attach one source read-only; when DuckDB refuses it, :meth:`Bundle.open` says why in one line."""
        try:
            self.con.execute(f"ATTACH ? AS {alias} (READ_ONLY)", [str(path)])
        except duckdb.Error:
            self._reopen(path, alias)

    def _reopen(self, path: Path, alias: str) -> None:
        """Open a source the way every command does: a one-line error for what is not a bundle, an older
        bundle brought to the current schema; then attach it again."""
        self.con.execute(f"DETACH DATABASE IF EXISTS {alias}")
        with Bundle.open(path):
            pass
        self.con.execute(f"ATTACH ? AS {alias} (READ_ONLY)", [str(path)])

    def _describe(self, attached: dict[str, Path]) -> dict[str, dict[str, str | None]]:
        """Incident id, title and last root digest of each attached source, in one query per table;
        a source that is not a current bundle is reopened first (see :meth:`_reopen`)."""
        aliases = list(attached)
        if not aliases:
            return {}
        try:
            versions = dict(self.con.execute(
                f"SELECT src, value FROM ({self._union('meta', aliases, ['key', 'value'])}) "
                "WHERE key = 'schema_version'").fetchall())
        except duckdb.Error:
            versions = {n: self._schema_version(alias) for n, alias in enumerate(aliases)}
        for n, alias in enumerate(aliases):
            if str(versions.get(n)) != str(schema.SCHEMA_VERSION):
                self._reopen(attached[alias], alias)
        meta: dict[int, dict[str, str]] = {}
        for src, key, value in self.con.execute(
                f"SELECT src, key, value FROM ({self._union('meta', aliases, ['key', 'value'])}) "
                "WHERE key IN ('incident_id', 'title')").fetchall():
            meta.setdefault(src, {})[key] = value
        digests = dict(self.con.execute(
            f"SELECT src, arg_max(root_digest, seq) FROM ({self._union('seal', aliases, ['seq', 'root_digest'])}) "
            "GROUP BY src").fetchall())
        return {alias: {"path": str(attached[alias]), "incident_id": meta.get(n, {}).get("incident_id"),
                        "title": meta.get(n, {}).get("title"), "root_digest": digests.get(n)}
                for n, alias in enumerate(aliases)}

    def _schema_version(self, alias: str) -> str | None:
        try:
            rows = self.con.execute(f"SELECT value FROM {alias}.meta WHERE key = 'schema_version'").fetchall()
        except duckdb.Error:
            return None
        return rows[0][0] if rows else None

    def _union(self, table: str, attached: list[str], columns: list[str]) -> str:
        """``table`` of every attached source with its number as ``src``; sources known to hold no rows in
        it are left out (binding a branch costs more than scanning a small table), the first always kept."""
        cols = ", ".join(f'"{c}"' for c in columns)
        return " UNION ALL ".join(f"SELECT {n} AS src, {cols} FROM {alias}.{table}" for n, alias in enumerate(attached)
                                  if n == 0 or self.sizes.get((alias, table), 1) > 0)

    def _measure(self, attached: list[str]) -> None:
        """Row counts of the sources' tables from DuckDB's catalog (deleted rows still count until a
        checkpoint, so zero means empty)."""
        self.sizes = {(db, table): size for db, table, size in self.con.execute(
            "SELECT database_name, table_name, estimated_size FROM duckdb_tables() "
            "WHERE database_name IN (SELECT unnest(?::VARCHAR[]))", [attached]).fetchall()}

    def _copy(self, attached: list[str], result: MergeResult) -> None:
        con = self.con
        self._measure(attached)
        con.execute(f"CREATE OR REPLACE TEMP TABLE _art AS "
                    f"{self._union('artifact', attached, self.columns['artifact'])}")
        con.execute(f"CREATE OR REPLACE TEMP TABLE _alias AS "
                    f"{self._union('artifact_alias', attached, self.columns['artifact_alias'])}")
        arts = con.execute("SELECT src, id, sha256, host FROM _art ORDER BY src, id").fetchall()
        aliases = con.execute("SELECT src, sha256, host FROM _alias ORDER BY src").fetchall()
        next_id = con.execute("SELECT coalesce(max(id), 0) FROM artifact").fetchall()[0][0]
        new: list[tuple[int, int, int]] = []        # (src, old id, new id): bytes not stored yet
        whole: list[tuple[int, str]] = []           # (src, sha): every row parsed from these bytes comes along
        hosted: list[tuple[int, str, str | None]] = []  # (src, sha, host): only that host's rows come along
        art_alias: list[tuple[int, int]] = []       # (src, old id): known bytes from another host
        kept_alias: list[tuple[int, str, str | None]] = []  # (src, sha, host): alias rows kept as they are
        fresh: set[tuple[int, str]] = set()
        for src, old_id, sha, host in arts:
            if sha not in self.hosts:
                next_id += 1
                new.append((src, old_id, next_id))
                whole.append((src, sha))
                fresh.add((src, sha))
                self.hosts[sha] = {host}
            elif host not in self.hosts[sha]:
                art_alias.append((src, old_id))
                hosted.append((src, sha, host))
                self.hosts[sha].add(host)
        for src, sha, host in aliases:
            if (src, sha) in fresh:
                kept_alias.append((src, sha, host))
                self.hosts[sha].add(host)
            elif host not in self.hosts.setdefault(sha, set()):
                kept_alias.append((src, sha, host))
                hosted.append((src, sha, host))
                self.hosts[sha].add(host)
        result.artifacts += len(new)
        result.duplicates += len(arts) - len(new)
        self._register("_new", {"src": [n[0] for n in new], "old_id": [n[1] for n in new],
                                "new_id": [n[2] for n in new]}, ('INTEGER', 'BIGINT', 'BIGINT'))
        self._register("_whole", {"src": [w[0] for w in whole], "sha": [w[1] for w in whole]},
                       ('INTEGER', 'VARCHAR'))
        self._register("_hosted", {"src": [h[0] for h in hosted], "sha": [h[1] for h in hosted],
                                   "host": [h[2] for h in hosted]}, ('INTEGER', 'VARCHAR', 'VARCHAR'))
        self._register("_art_alias", {"src": [a[0] for a in art_alias], "old_id": [a[1] for a in art_alias]},
                       ('INTEGER', 'BIGINT'))
        self._register("_kept_alias", {"src": [k[0] for k in kept_alias], "sha": [k[1] for k in kept_alias],
                                       "host": [k[2] for k in kept_alias]}, ('INTEGER', 'VARCHAR', 'VARCHAR'))
        try:
            self._copy_artifacts(attached)
            for table in EVIDENCE_TABLES:
                result.rows[table] = result.rows.get(table, 0) + self._copy_rows(table, attached)
            self._append("capture_log", attached)
            self._append("journal", attached, renumber=True)
        finally:
            for name in ("_art", "_alias", "_new", "_whole", "_hosted", "_art_alias", "_kept_alias"):
                con.execute(f"DROP TABLE IF EXISTS {name}")

    def _register(self, name: str, columns: dict[str, list], types: tuple[str, ...]) -> None:
        """A small temp table from Python lists (the batch's decisions), passed as list parameters."""
        select = ", ".join(f"unnest(?::{kind}[]) AS {col}" for col, kind in zip(columns, types))
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {select}", list(columns.values()))

    def _copy_artifacts(self, attached: list[str]) -> None:
        con = self.con
        art_cols = self.columns["artifact"]
        con.execute(
            f"INSERT INTO artifact ({_quoted(art_cols)}) SELECT "
            + ", ".join("m.new_id" if c == "id" else f's."{c}"' for c in art_cols)
            + " FROM _art s JOIN _new m ON m.src = s.src AND m.old_id = s.id")
        chunk_cols = self.columns["artifact_chunk"]
        con.execute(
            f"INSERT INTO artifact_chunk ({_quoted(chunk_cols)}) SELECT "
            + ", ".join("m.new_id" if c == "artifact_id" else f'c."{c}"' for c in chunk_cols)
            + f" FROM ({self._union('artifact_chunk', attached, chunk_cols)}) c "
            "JOIN _new m ON m.src = c.src AND m.old_id = c.artifact_id")
        alias_cols = self.columns["artifact_alias"]
        con.execute(
            f"INSERT INTO artifact_alias ({_quoted(alias_cols)}) SELECT "
            + ", ".join(f's."{c}"' for c in alias_cols)
            + " FROM _art s JOIN _art_alias a ON a.src = s.src AND a.old_id = s.id")
        con.execute(
            f"INSERT INTO artifact_alias ({_quoted(alias_cols)}) SELECT "
            + ", ".join(f's."{c}"' for c in alias_cols)
            + " FROM _alias s JOIN _kept_alias k "
            "ON k.src = s.src AND k.sha = s.sha256 AND k.host IS NOT DISTINCT FROM s.host")

    def _copy_rows(self, table: str, attached: list[str]) -> int:
        """Rows of newly stored bytes, another host's rows of known bytes, and rows from no artifact
        (derived events excepted: they are recomputed); event ids renumbered after the merged ones."""
        cols = self.columns[table]
        picked = (f"SELECT s.* FROM ({self._union(table, attached, cols)}) s "
                  "LEFT JOIN _whole w ON w.src = s.src AND w.sha = s.artifact "
                  "LEFT JOIN _hosted h ON h.src = s.src AND h.sha = s.artifact AND h.host IS NOT DISTINCT FROM s.host "
                  "WHERE (s.artifact IS NULL OR w.src IS NOT NULL OR h.src IS NOT NULL)")
        if table == "event":
            picked += " AND coalesce(s.ts_origin, '') <> 'derived'"
            base = self.con.execute("SELECT coalesce(max(id), 0) FROM event").fetchall()[0][0]
            select = ", ".join(f"{int(base)} + row_number() OVER (ORDER BY src, id)" if c == "id" else f'"{c}"'
                               for c in cols)
        else:
            select = _quoted(cols)
        inserted = self.con.execute(f"INSERT INTO {table} ({_quoted(cols)}) SELECT {select} FROM ({picked})")
        return inserted.fetchall()[0][0]

    def _append(self, table: str, attached: list[str], *, renumber: bool = False) -> None:
        cols = self.columns[table]
        select = _quoted(cols)
        if renumber:
            base = self.con.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchall()[0][0]
            select = ", ".join(f"{int(base)} + row_number() OVER (ORDER BY src, id)" if c == "id" else f'"{c}"'
                               for c in cols)
        self.con.execute(f"INSERT INTO {table} ({_quoted(cols)}) SELECT {select} "
                         f"FROM ({self._union(table, attached, cols)})")


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Undo the open transaction; a COMMIT that failed has already ended it."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException:
        pass


def _quoted(columns: list[str]) -> str:
    return ", ".join(f'"{c}"' for c in columns)
