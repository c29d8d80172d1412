"""Per-node bundles into one incident bundle, so the analysis spans hosts.

Each node is usually captured on its own (``gpuwb capture`` on node07, node08, ...). Merging
copies every artifact byte for byte (same sha256, same chunks) and the rows parsed from it;
an artifact present in several inputs (the shared sacct output) is kept once with its rows once.
Derived events are not copied but recomputed over the merged evidence, since a straggler or a
version skew only shows across nodes. The merged bundle is sealed with its own root digest and
records which bundles (incident id, root digest) it was made from.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from workbench.bundle import Bundle, BundleError
from workbench.derive import run_derivations
from workbench.schema import EVIDENCE_TABLES


@dataclass
class MergeResult:
    """What the merge did, for the command's summary."""

    path: Path
    inputs: list[dict[str, str | None]] = field(default_factory=list)
    artifacts: int = 0
    duplicates: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    derived: dict[str, int] = field(default_factory=dict)
    root_digest: str = ""


def merge_bundles(out: str | os.PathLike[str], inputs: list[str | os.PathLike[str]], *,
                  title: str | None = None) -> MergeResult:
    """Create ``out`` from ``inputs``; refuses to overwrite and to merge a bundle into itself."""
    out_path = Path(out)
    if out_path.exists():
        raise BundleError(f"{out_path} already exists; merge writes a new bundle")
    paths = [Path(p) for p in inputs]
    if not paths:
        raise BundleError("nothing to merge: give at least one bundle")
    seen: set[Path] = set()
    for path in paths:
        if path.resolve() in seen:
            raise BundleError(f"{path} is given twice; give each bundle once")
        seen.add(path.resolve())
    described = []
    for path in paths:
        if path.resolve() == out_path.resolve():
            raise BundleError(f"{path} is the output bundle")
        with Bundle.open(path) as src:  # also brings an older bundle to the current schema
            meta = src.meta()
            seal = src.last_seal()
            described.append({"path": str(path), "incident_id": meta.get("incident_id"),
                              "title": meta.get("title"), "root_digest": seal["root_digest"] if seal else None})
    result = MergeResult(path=out_path, inputs=described)
    titles = [d["title"] for d in described if d["title"]]
    name = title or ("merged: " + "; ".join(dict.fromkeys(titles)) if titles else "merged incident")
    bundle = Bundle.create(out_path, title=name, meta={"merged_from": json.dumps(described)})
    try:
        for n, path in enumerate(paths):
            _copy(bundle, path, f"src{n}", result)
        result.derived = run_derivations(bundle)
        result.root_digest = bundle.seal()
    except BaseException:
        bundle.close()
        out_path.unlink(missing_ok=True)
        raise
    bundle.close()
    return result


def _copy(bundle: Bundle, path: Path, alias: str, result: MergeResult) -> None:
    con = bundle.con
    con.execute(f"ATTACH ? AS {alias} (READ_ONLY)", [str(path)])
    try:
        con.execute("BEGIN")
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _map AS "
            f"SELECT s.id AS old_id, s.sha256, (SELECT coalesce(max(id), 0) FROM artifact) "
            f"       + row_number() OVER (ORDER BY s.id) AS new_id "
            f"FROM {alias}.artifact s WHERE s.sha256 NOT IN (SELECT sha256 FROM artifact)")
        added = con.execute("SELECT count(*) FROM _map").fetchall()[0][0]
        total = con.execute(f"SELECT count(*) FROM {alias}.artifact").fetchall()[0][0]
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_name = 'artifact' AND table_catalog = current_database() ORDER BY ordinal_position").fetchall()]
        select = ", ".join("m.new_id" if c == "id" else f"s.{c}" for c in cols)
        con.execute(f"INSERT INTO artifact ({', '.join(cols)}) SELECT {select} FROM {alias}.artifact s "
                    "JOIN _map m ON m.old_id = s.id")
        con.execute("INSERT INTO artifact_chunk SELECT m.new_id, c.seq, c.data, c.codec, c.raw_size "
                    f"FROM {alias}.artifact_chunk c JOIN _map m ON m.old_id = c.artifact_id")
        for table in EVIDENCE_TABLES:
            result.rows[table] = result.rows.get(table, 0) + _copy_rows(bundle, alias, table)
        con.execute(f"INSERT INTO artifact_alias SELECT * FROM {alias}.artifact_alias "
                    "WHERE sha256 IN (SELECT sha256 FROM _map)")
        _copy_other_hosts(bundle, alias, result)
        con.execute(f"INSERT INTO capture_log SELECT * FROM {alias}.capture_log")
        con.execute(f"INSERT INTO journal SELECT (SELECT coalesce(max(id), 0) FROM journal) "
                    f"+ row_number() OVER (ORDER BY id), at_ts, author, kind, target, body FROM {alias}.journal")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        con.execute(f"DETACH {alias}")
    result.artifacts += added
    result.duplicates += total - added


def _copy_other_hosts(bundle: Bundle, alias: str, result: MergeResult) -> None:
    """Bytes already in the merged bundle but from another host (the same dpkg.log on two nodes of
    one image): keep this host's provenance as an alias and its rows, parsed for this host."""
    con = bundle.con
    provenance = con.execute(
        f"SELECT sha256, host, collector, kind, source, captured_at, info FROM {alias}.artifact "
        "WHERE sha256 NOT IN (SELECT sha256 FROM _map) "
        f"UNION ALL SELECT sha256, host, collector, kind, source, captured_at, info FROM {alias}.artifact_alias "
        "WHERE sha256 NOT IN (SELECT sha256 FROM _map)").fetchall()
    for sha, host, collector, kind, source, captured_at, info in provenance:
        if not bundle.add_alias(sha, kind=kind, source=source, collector=collector, host=host,
                                captured_at=captured_at, info=json.loads(info) if info else None):
            continue
        for table in EVIDENCE_TABLES:
            result.rows[table] = result.rows.get(table, 0) + _copy_rows(
                bundle, alias, table, where="s.artifact = ? AND s.host IS NOT DISTINCT FROM ?", params=[sha, host])


def _copy_rows(bundle: Bundle, alias: str, table: str, *, where: str | None = None,
               params: list | None = None) -> int:
    """Rows of newly copied artifacts (and unattributed, non-derived ones); event ids renumbered."""
    con = bundle.con
    cols = [r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ? "
        "AND table_catalog = current_database() ORDER BY ordinal_position", [table]).fetchall()]
    where = where or "s.artifact IN (SELECT sha256 FROM _map) OR s.artifact IS NULL"
    if table == "event":
        where = f"({where}) AND coalesce(s.ts_origin, '') <> 'derived'"
        base = con.execute("SELECT coalesce(max(id), 0) FROM event").fetchall()[0][0]
        select = ", ".join(f"{base} + row_number() OVER (ORDER BY s.id)" if c == "id" else f's."{c}"' for c in cols)
    else:
        select = ", ".join(f's."{c}"' for c in cols)
    quoted = ", ".join(f'"{c}"' for c in cols)
    before = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    con.execute(f"INSERT INTO {table} ({quoted}) SELECT {select} FROM {alias}.{table} s WHERE {where}", params or [])
    after = con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
    if table == "event":
        bundle._next_event_id = None  # ids were assigned here, not through the bundle's counter
    return after - before
