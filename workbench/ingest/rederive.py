"""The parsed rows again from the sealed bytes, compared with the bundle's (``gpuwb verify --deep``).

No seal covers the rows parsed from the evidence (``event``, ``gpu_sample``, ``series``, ``topology``, ...):
hashing millions of rows at every ingest would cost more than the ingest. They need no seal of their own,
because they are a function of what the seal does cover, each artifact's bytes and provenance. So ``--deep``
parses every artifact again, the way ingest or capture did (same kind, host, source, times and parse options,
in the order they were stored, aliases after), into a scratch bundle, recomputes the derivations there, and
compares the two table by table: a row edited, added or deleted in the bundle shows as rows its artifact's
bytes do not give, or re-derived rows the bundle lacks, named by table and artifact.
"""

from __future__ import annotations

import json
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from collectors.framework import registry
from workbench.ingest.derive import run_derivations
from workbench.ingest.inputs import Item
from workbench.ingest.session import Session, _classify
from workbench.store.bundle import Bundle
from workbench.store.schema import EVIDENCE_TABLES

HANDED_OVER_INFO = {"mtime", "boot_time"}
"""The provenance ``gpuwb ingest`` keeps for a file handed over; a captured artifact keeps more (argv, path)."""


def compare_rederived(bundle: Bundle) -> list[str]:
    """One line per table and artifact whose rows differ from those its sealed bytes give; empty when all match."""
    with tempfile.TemporaryDirectory(prefix="gpuwb-verify-deep-") as tmp:
        scratch = Path(tmp) / "rederived.duckdb"
        rederive(bundle, scratch, Path(tmp))
        bundle.con.execute("ATTACH ? AS rederived (READ_ONLY)", [str(scratch)])
        try:
            return _differences(bundle)
        finally:
            bundle.con.execute("DETACH rederived")


def rederive(bundle: Bundle, out: Path, tmp: Path) -> None:
    """Parse every artifact of ``bundle`` again into a new bundle at ``out`` (``tmp``: where bytes are spooled)."""
    aliases = bundle.con.execute("SELECT sha256, collector, kind, host, source, captured_at, info "
                                 "FROM artifact_alias ORDER BY rowid").fetchall()
    with Bundle.create(out) as scratch:
        session = Session(scratch)
        spooled = tmp / "artifact.bytes"
        try:
            arts = bundle.artifacts()
            ids = {a["sha256"]: a["id"] for a in arts}
            for art in arts:
                _spool(bundle, art["id"], spooled)
                _parse_again(session, art, spooled)
            for sha, collector, kind, host, source, captured_at, info in aliases:
                if sha in ids:
                    _spool(bundle, ids[sha], spooled)
                    _parse_again(session, {"collector": collector, "kind": kind, "host": host, "source": source,
                                           "captured_at": captured_at, "info": info}, spooled)
            session.finish()
        finally:
            session.close()
        run_derivations(scratch)


def _spool(bundle: Bundle, artifact_id: int, path: Path) -> None:
    with open(path, "wb") as out:
        for block in bundle.artifact_bytes(artifact_id):
            out.write(block)


def _parse_again(session: Session, art: dict[str, Any], path: Path) -> None:
    """Store and parse one artifact's bytes with the provenance it was stored with, as its run did: a handed-over
    file (ingest) with its mtime, the --boot-time it was given and the sniffer's verdict on unwrapping; a captured
    one with its capture time."""
    info = _info(art["info"])
    handed_over = set(info) <= HANDED_OVER_INFO
    module = _module(art["collector"])
    unwrap = False
    if handed_over and module is not None:
        item = Item(art["source"], (), lambda: open(path, "rb"), None, path=path)
        kind, sniffed = _classify(item, None, None)
        unwrap = item.unwrap and kind == art["kind"] and sniffed is module
    session.default_boot = _instant(info.get("boot_time")) if handed_over else None
    captured_at = None if handed_over else (art["captured_at"].replace(tzinfo=timezone.utc)
                                            if art["captured_at"] else None)
    session.store_and_parse(lambda: open(path, "rb"), name=art["source"], kind=art["kind"], module=module,
                            host=art["host"], source=art["source"], captured_at=captured_at,
                            mtime=_instant(info.get("mtime")) if handed_over else None, info=info, unwrap=unwrap,
                            path=path)


def _info(stored: str | None) -> dict[str, Any]:
    try:
        info = json.loads(stored or "{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _module(collector: str | None) -> Any:
    if collector is None:
        return None
    try:
        return registry.by_name(collector)
    except KeyError:  # a collector this gpuwb no longer has: its bytes are kept, parsed by the catalog alone
        return None


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def _differences(bundle: Bundle) -> list[str]:
    con = bundle.con
    arts = {a["sha256"]: a for a in bundle.artifacts()}
    lines: list[str] = []
    for table in EVIDENCE_TABLES:
        columns = [c for (c,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_catalog = current_database() "
            "AND table_schema = 'main' AND table_name = ? ORDER BY ordinal_position", [table]).fetchall()
            if not (table == "event" and c == "id")]  # the insertion number, renumbered by every merge
        cols = ", ".join(f'"{c}"' for c in columns)
        here, there = f"SELECT {cols} FROM {table}", f"SELECT {cols} FROM rederived.{table}"
        counts: dict[str | None, list[int]] = {}
        for side, artifact, count in con.execute(
                f"SELECT 0, artifact, count(*) FROM ({here} EXCEPT ALL {there}) GROUP BY artifact UNION ALL "
                f"SELECT 1, artifact, count(*) FROM ({there} EXCEPT ALL {here}) GROUP BY artifact").fetchall():
            counts.setdefault(artifact, [0, 0])[side] += count
        for artifact, (extra, missing) in sorted(counts.items(), key=lambda kv: kv[0] or ""):
            lines.append(f"rows differ: table {table}, {_whose(artifact, arts)}: {extra} row(s) in the bundle that "
                         f"its sealed bytes do not give, {missing} re-derived row(s) not in the bundle")
    for sha, in con.execute(
            "SELECT sha256 FROM (SELECT sha256, lines, events, rows, skipped, skip_reasons FROM artifact EXCEPT "
            "SELECT sha256, lines, events, rows, skipped, skip_reasons FROM rederived.artifact) ORDER BY sha256"
    ).fetchall():
        lines.append(f"parse statistics differ: {_whose(sha, arts)}: lines, events, rows or skipped lines are not "
                     "what its sealed bytes give")
    return lines


def _whose(artifact: str | None, arts: dict[str, dict[str, Any]]) -> str:
    if artifact is None:
        return "derived rows (computed across artifacts)"
    art = arts.get(artifact)
    if art is None:
        return f"artifact {artifact} (not in the bundle)"
    return f"artifact {artifact} ({art['kind']} {art['source']}, host {art['host'] or '-'})"
