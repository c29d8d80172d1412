"""The seal covers every provenance field: forging any of them in a sealed bundle makes `gpuwb verify`
exit 1 and name what changed; bundles sealed by an older gpuwb still verify the way they were sealed."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.store import schema
from workbench.store.bundle import Bundle, BundleError
from workbench.store.seal import DIGEST_VERSION

DMESG = b"[  12.5] NVRM: Xid (PCI:0000:19:00): 79, pid=1, GPU has fallen off the bus.\n"
OTHER = b"Mar 14 10:00:01 node01 kernel: something else\n"


def _sealed(path: Path) -> tuple[str, str]:
    """A bundle with two artifacts (one also seen on a second host), a capture log and a seal."""
    with Bundle.create(path, title="incident", meta={"captured_on": "node01", "since": "2h"}) as bundle:
        sha = bundle.add_artifact(io.BytesIO(DMESG), kind="kernel_log", source="dmesg", collector="kernel",
                                  host="node01", captured_at=datetime(2026, 3, 14, 10, 0),
                                  info={"argv": ["dmesg"]})[0]
        other = bundle.add_artifact(io.BytesIO(OTHER), kind="kernel_log", source="syslog", collector="kernel",
                                    host="node01", captured_at=datetime(2026, 3, 14, 10, 0))[0]
        assert bundle.add_alias(sha, kind="kernel_log", source="dmesg", collector="kernel", host="node02",
                                captured_at=datetime(2026, 3, 14, 10, 1), info={"argv": ["dmesg"]})
        bundle.record_capture("kernel", host="node01", status="ok", started_at=datetime(2026, 3, 14, 10, 0),
                              duration_s=0.2, artifacts=2)
        bundle.record_capture("nvml", host="node01", status="timeout", reason="NVML hung",
                              started_at=datetime(2026, 3, 14, 10, 0), duration_s=10.0)
        bundle.seal()
    return sha, other


def _forge(path: Path, sql: str, params: list) -> None:
    con = duckdb.connect(str(path))
    con.execute(sql, params)
    con.close()


ARTIFACT_FIELDS = [("host", "node99"), ("source", "/var/log/forged"), ("kind", "syslog"),
                   ("collector", "host"), ("captured_at", datetime(2026, 3, 14, 9, 0)),
                   ("info", '{"argv": ["cat", "/dev/null"]}'), ("size", 7)]


@pytest.mark.parametrize(("field", "value"), ARTIFACT_FIELDS, ids=[f for f, _ in ARTIFACT_FIELDS])
def test_forged_artifact_field_fails_verify_naming_the_artifact(tmp_path, field, value):
    path = tmp_path / "b.duckdb"
    sha, other = _sealed(path)
    _forge(path, f"UPDATE artifact SET {field} = ? WHERE sha256 = ?", [value, sha])
    code, out, _ = run_cli("verify", path)
    assert code == 1, out
    assert f"altered: {sha}" in out and other not in out
    (named,) = [line for line in out.splitlines() if f"provenance altered: {sha}" in line]
    assert named.startswith(f"artifact provenance altered: {sha} (") and named.endswith("changed after sealing")


ALIAS_FIELDS = [("host", "node98"), ("source", "forged"), ("kind", "syslog"), ("collector", "host"),
                ("captured_at", datetime(2026, 3, 14, 11, 0)), ("info", "{}")]


@pytest.mark.parametrize(("field", "value"), ALIAS_FIELDS, ids=[f for f, _ in ALIAS_FIELDS])
def test_forged_alias_row_fails_verify_naming_the_artifact(tmp_path, field, value):
    path = tmp_path / "b.duckdb"
    sha, other = _sealed(path)
    _forge(path, f"UPDATE artifact_alias SET {field} = ?", [value])
    code, out, _ = run_cli("verify", path)
    assert code == 1, out
    assert f"altered: {sha}" in out and "alias" in out and other not in out


def test_alias_row_added_or_removed_fails_verify(tmp_path):
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    _forge(path, "DELETE FROM artifact_alias", [])
    code, out, _ = run_cli("verify", path)
    assert code == 1
    assert f"artifact provenance altered: {sha} (kernel_log dmesg, host node01): its other-host (alias) row for " \
           "host node02 removed after sealing" in out.splitlines()


def test_artifact_removed_after_sealing_is_named_by_its_hash(tmp_path):
    path = tmp_path / "b.duckdb"
    sha, other = _sealed(path)
    _forge(path, "DELETE FROM artifact_alias", [])
    _forge(path, "DELETE FROM artifact WHERE sha256 = ?", [sha])
    code, out, _ = run_cli("verify", path)
    assert code == 1
    assert f"artifact provenance altered: {sha}: collector, kind, host, source, captured_at or info removed after " \
           "sealing" in out.splitlines()
    assert other not in out


CAPTURE_FIELDS = [("status", "ok"), ("reason", ""), ("started_at", datetime(2026, 3, 14, 9, 0)),
                  ("duration_s", 0.1), ("artifacts", 3), ("detail", '{"missing": []}'), ("host", "node77"),
                  ("collector", "ipmi")]


@pytest.mark.parametrize(("field", "value"), CAPTURE_FIELDS, ids=[f for f, _ in CAPTURE_FIELDS])
def test_forged_capture_log_fails_verify_naming_the_collector(tmp_path, field, value):
    path = tmp_path / "b.duckdb"
    _sealed(path)
    _forge(path, f"UPDATE capture_log SET {field} = ? WHERE collector = 'nvml'", [value])
    code, out, _ = run_cli("verify", path)
    assert code == 1, out
    assert "capture log altered" in out and "nvml@node01" in out and "kernel@node01" not in out


@pytest.mark.parametrize("key", ["title", "created_at", "captured_on", "since", "incident_id"])
def test_forged_capture_metadata_fails_verify(tmp_path, key):
    path = tmp_path / "b.duckdb"
    _sealed(path)
    _forge(path, "UPDATE meta SET value = 'forged' WHERE key = ?", [key])
    code, out, _ = run_cli("verify", path)
    assert code == 1
    (mismatch,) = [line for line in out.splitlines() if line.startswith("root digest mismatch: sealed ")]
    assert mismatch.endswith(" (artifacts or incident metadata changed after sealing)")
    assert f"incident metadata altered: {key} changed after sealing" in out.splitlines()
    assert sum(line.startswith("incident metadata altered") for line in out.splitlines()) == 1


def test_intact_bundle_verifies_and_the_seal_records_its_version(tmp_path):
    path = tmp_path / "b.duckdb"
    _sealed(path)
    code, out, _ = run_cli("verify", path)
    assert code == 0 and out.startswith("OK: 2 artifacts intact"), out
    with Bundle.open(path) as bundle:
        seal = bundle.last_seal()
        assert seal["digest_version"] == DIGEST_VERSION == 3 and seal["artifacts"] == 2
        assert isinstance(seal["sealed_at"], datetime) and seal["complete"] is True
        assert seal["previous"] is None
        assert seal["root_digest"] == bundle.root_digest() == _digest_v3(bundle, None)


def _digest_v3(bundle: Bundle, previous: str | None) -> str:
    """The version-3 root digest as its contract says, computed here independently: one item per artifact,
    per alias row (sha@host), per capture's coverage rows of a collector (collector@host@started_at), per
    provenance metadata key and per merged bundle, and the root digest of the seal before."""
    def canonical(value) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    def digest(value) -> str:
        return hashlib.sha256(canonical(value).encode()).hexdigest()

    con = bundle.con
    items = {f"artifact:{r[0]}": digest(list(r)) for r in con.execute(
        "SELECT sha256, size, collector, kind, host, source, captured_at, info FROM artifact").fetchall()}
    grouped: dict[str, list[str]] = {}
    aliases = con.execute("SELECT sha256, collector, kind, host, source, captured_at, info FROM artifact_alias")
    for r in aliases.fetchall():
        grouped.setdefault(f"alias:{r[0]}@{r[3] or '-'}", []).append(canonical(list(r)))
    for r in con.execute("SELECT * FROM capture_log").fetchall():
        grouped.setdefault(f"capture_log:{r[0]}@{r[1] or '-'}@{r[4] or '-'}", []).append(canonical(list(r)))
    items.update({k: digest(sorted(v)) for k, v in grouped.items()})
    keys = ("incident_id", "title", "created_at", "captured_on", "capture_started", "since", "complete")
    for key, value in con.execute("SELECT key, value FROM meta").fetchall():
        if key in keys:
            items[f"meta:{key}"] = digest(value)
        elif key == "merged_from":
            items.update({f"merged_from:{n}": digest(entry) for n, entry in enumerate(json.loads(value))})
    return digest({"items": items, "previous": previous})


def _digest_v2(bundle: Bundle) -> str:
    """The version-2 root digest as its contract says, computed here independently: seals written with it
    must verify for as long as bundles are kept, so its spelling may never drift."""
    def canonical(value) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    def digest(value) -> str:
        return hashlib.sha256(canonical(value).encode()).hexdigest()

    con = bundle.con
    items = {f"artifact:{r[0]}": digest(list(r)) for r in con.execute(
        "SELECT sha256, size, collector, kind, host, source, captured_at, info FROM artifact").fetchall()}
    grouped: dict[str, list[str]] = {}
    aliases = con.execute("SELECT sha256, collector, kind, host, source, captured_at, info FROM artifact_alias")
    for r in aliases.fetchall():
        grouped.setdefault(f"alias:{r[0]}", []).append(canonical(list(r)))
    for r in con.execute("SELECT * FROM capture_log").fetchall():
        grouped.setdefault(f"capture_log:{r[0]}@{r[1] or '-'}", []).append(canonical(list(r)))
    items.update({k: digest(sorted(v)) for k, v in grouped.items()})
    keys = ("incident_id", "title", "created_at", "captured_on", "capture_started", "since", "complete", "merged_from")
    items["meta"] = digest({k: v for k, v in con.execute("SELECT key, value FROM meta").fetchall() if k in keys})
    return digest(items)


def test_coverage_rows_without_a_host_are_named_with_a_dash(tmp_path):
    path = tmp_path / "b.duckdb"
    with Bundle.create(path) as bundle:
        bundle.add_artifact(io.BytesIO(b"x"), kind="unknown", source="x")
        bundle.record_capture("ipmi", host=None, status="denied", reason="not root")
        bundle.seal()
        assert bundle.root_digest() == _digest_v3(bundle, None)
    _forge(path, "UPDATE capture_log SET status = 'ok'", [])
    code, out, _ = run_cli("verify", path)
    assert code == 1 and "capture log altered: coverage rows of ipmi@- (capture of -) changed after sealing" \
        in out.splitlines()


def test_a_multi_chunk_artifact_verifies_and_every_broken_artifact_is_named(tmp_path):
    path = tmp_path / "b.duckdb"
    big = b"".join(b"[%10.6f] NVRM: Xid (PCI:0000:19:00): 13, pid=%d\n" % (i / 7, i) for i in range(200_000))
    with Bundle.create(path) as bundle:
        shas = [bundle.add_artifact(io.BytesIO(big + tag), kind="kernel_log", source=tag.decode())[0]
                for tag in (b"a", b"b")]
        bundle.seal()
        assert bundle.con.execute("SELECT count(*) FROM artifact_chunk").fetchall()[0][0] > 2
        assert bundle.verify() == []
        blocks = list(bundle.artifact_bytes(shas[0]))
        assert all(type(b) is bytes for b in blocks) and b"".join(blocks) == big + b"a"
        with pytest.raises(BundleError, match="no artifact 0123"):
            list(bundle.artifact_bytes("0123"))
    _forge(path, "UPDATE artifact_chunk SET data = 'garbage' WHERE seq = 0 AND codec = 'zstd'", [])
    with Bundle.open(path) as bundle:
        problems = bundle.verify()
    for sha in shas:
        assert any(p.startswith(f"artifact altered: {sha}") and "no longer expands" in p for p in problems), problems


def test_journal_and_parse_stats_are_not_provenance(tmp_path):
    """The responders' journal is append-only work done after sealing; parse statistics are derived."""
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    with Bundle.open(path, write=True) as bundle:
        bundle.append_journal(author="ana", kind="note", target="gpu", body={"text": "looked"})
    _forge(path, "UPDATE artifact SET lines = 99 WHERE sha256 = ?", [sha])
    assert run_cli("verify", path)[0] == 0


@pytest.mark.parametrize(("field", "value"), ARTIFACT_FIELDS, ids=[f for f, _ in ARTIFACT_FIELDS])
def test_each_provenance_field_changes_the_root_digest(tmp_path, field, value):
    """Host and source (and every other provenance field) are inside the digest itself, not only
    compared one by one: leaving one out of the digest fails here."""
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    with Bundle.open(path, write=True) as bundle:
        before = bundle.root_digest()
        items_before = bundle.provenance_items()
        bundle.con.execute(f"UPDATE artifact SET {field} = ? WHERE sha256 = ?", [value, sha])
        assert bundle.root_digest() != before
        changed = {k for k, v in bundle.provenance_items().items() if items_before.get(k) != v}
        assert changed == {f"artifact:{sha}"}


def test_verify_rehash_catches_same_size_substitution(tmp_path):
    """Bytes replaced by others of the same length: only the re-hash of the stored bytes can see it."""
    path = tmp_path / "b.duckdb"
    sha, other = _sealed(path)
    _forge(path, "UPDATE artifact_chunk SET data = ? WHERE artifact_id = (SELECT id FROM artifact WHERE sha256 = ?)",
           [DMESG.replace(b"79", b"13"), sha])
    with Bundle.open(path) as bundle:
        problems = bundle.verify()
    assert len(problems) == 1
    assert problems[0].startswith(f"artifact altered: {sha}")
    assert hashlib.sha256(DMESG.replace(b"79", b"13")).hexdigest() in problems[0]


def test_verify_rehash_catches_a_truncated_chunk(tmp_path):
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    _forge(path, "UPDATE artifact_chunk SET data = ?, raw_size = ? "
           "WHERE artifact_id = (SELECT id FROM artifact WHERE sha256 = ?)", [DMESG[:10], 10, sha])
    with Bundle.open(path) as bundle:
        problems = bundle.verify()
    assert problems == [f"artifact altered: {sha} (kernel_log dmesg, host node01): now sha256 "
                        f"{hashlib.sha256(DMESG[:10]).hexdigest()}, 10 bytes"]


def test_artifact_added_after_sealing_is_named(tmp_path):
    path = tmp_path / "b.duckdb"
    _sealed(path)
    late = hashlib.sha256(b"late\n").hexdigest()
    _forge(path, "INSERT INTO artifact (id, sha256, kind, source, size, info) "
           "VALUES (99, ?, 'unknown', 'late', 5, '{}')", [late])
    _forge(path, "INSERT INTO artifact_chunk VALUES (99, 0, ?, NULL, 5)", [b"late\n"])
    code, out, _ = run_cli("verify", path)
    assert code == 1
    (named,) = [line for line in out.splitlines() if late in line]
    assert named.startswith(f"artifact provenance altered: {late} (unknown late, host -): ")
    assert named.endswith("added after sealing"), named


def test_an_alias_is_kept_once_per_host(tmp_path):
    """The same bytes from a host that already has them add nothing; from a new host they add an alias."""
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    with Bundle.open(path, write=True) as bundle:
        assert not bundle.add_alias(sha, kind="kernel_log", source="dmesg", host="node01")
        assert not bundle.add_alias(sha, kind="kernel_log", source="dmesg", host="node02")
        assert bundle.add_alias(sha, kind="kernel_log", source="dmesg", host="node03")
        hosts = bundle.con.execute("SELECT host FROM artifact_alias ORDER BY host").fetchall()
    assert hosts == [("node02",), ("node03",)]


def test_an_alias_keeps_the_provenance_it_was_given(tmp_path):
    path = tmp_path / "b.duckdb"
    sha, _ = _sealed(path)
    with Bundle.open(path, write=True) as bundle:
        bundle.add_alias(sha, kind="kernel_log", source="dmesg", host="node03",
                         captured_at=datetime(2026, 3, 14, 10, 5), info={"argv": ["dmesg", "-T"]})
        bundle.add_alias(sha, kind="kernel_log", source="dmesg", host="node04",
                         info={"mtime": datetime(2026, 3, 14, 9, 0)})
        rows = dict((host, (at, json.loads(info))) for host, at, info in bundle.con.execute(
            "SELECT host, captured_at, info FROM artifact_alias").fetchall())
    assert rows["node03"] == (datetime(2026, 3, 14, 10, 5), {"argv": ["dmesg", "-T"]})
    assert rows["node04"][0] is not None and rows["node04"][1] == {"mtime": "2026-03-14 09:00:00"}


def test_unsealed_bundle_is_reported(tmp_path):
    path = tmp_path / "b.duckdb"
    with Bundle.create(path) as bundle:
        bundle.add_artifact(io.BytesIO(b"x"), kind="unknown", source="x")
    code, out, _ = run_cli("verify", path)
    assert code == 1 and out.splitlines()[0] == "bundle was never sealed"
    assert out.splitlines()[-1] == f"NOT SEALED: {path} was never sealed"
    with Bundle.open(path) as bundle:
        assert bundle.root_digest() == _digest_v3(bundle, None)


# -- bundles sealed before the seal covered captured_at -------------------------------------------

def _old_digest(meta: dict[str, str], artifacts: list[list], aliases: list[list]) -> str:
    """How gpuwb 0.1 (bundle schema 1) computed the root digest."""
    doc = {"meta": meta, "artifacts": artifacts}
    if aliases:
        doc["aliases"] = aliases
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def _old_bundle(path: Path) -> str:
    """A bundle exactly as schema version 1 wrote it, sealed under the version-1 digest."""
    sha = hashlib.sha256(DMESG).hexdigest()
    meta = {"incident_id": "abc123", "title": "old", "created_at": "2025-01-01T00:00:00"}
    con = duckdb.connect(str(path))
    con.execute(schema.MIGRATIONS[1])
    for key, value in {**meta, "schema_version": "1"}.items():
        con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])
    con.execute("INSERT INTO artifact (id, sha256, collector, kind, host, source, captured_at, size, info) "
                "VALUES (1, ?, 'kernel', 'kernel_log', 'node01', 'dmesg', '2025-01-01 00:00:00', ?, '{}')",
                [sha, len(DMESG)])
    con.execute("INSERT INTO artifact_chunk VALUES (1, 0, ?, NULL, ?)", [DMESG, len(DMESG)])
    con.execute("INSERT INTO artifact_alias VALUES (?, 'kernel', 'kernel_log', 'node02', 'dmesg', "
                "'2025-01-01 00:00:00', '{}')", [sha])
    digest = _old_digest(meta, [[sha, len(DMESG), "kernel", "kernel_log", "node01", "dmesg"]],
                         [[sha, "kernel", "kernel_log", "node02", "dmesg"]])
    con.execute("INSERT INTO seal VALUES (1, '2025-01-01 00:01:00', ?, 1, true)", [digest])
    con.close()
    return digest


def test_old_bundle_still_verifies_as_intact_after_migration(tmp_path):
    path = tmp_path / "old.duckdb"
    digest = _old_bundle(path)
    code, out, _ = run_cli("verify", path)
    assert code == 0, out
    assert digest in out
    with Bundle.open(path) as bundle:
        assert bundle.last_seal()["digest_version"] == 1
        assert bundle.root_digest() == digest
        assert schema.current_version(bundle.con) == schema.SCHEMA_VERSION


@pytest.mark.parametrize("table", ["artifact", "artifact_alias"])
def test_old_bundle_forged_host_still_fails(tmp_path, table):
    path = tmp_path / "old.duckdb"
    _old_bundle(path)
    _forge(path, f"UPDATE {table} SET host = 'node99'", [])
    code, out, _ = run_cli("verify", path)
    assert code == 1 and "root digest mismatch" in out


def test_old_bundle_resealed_by_ingest_covers_captured_at(tmp_path):
    path = tmp_path / "old.duckdb"
    _old_bundle(path)
    extra = tmp_path / "extra.log"
    extra.write_text("Mar 14 10:00:01 node01 kernel: hello\n")
    code, _, err = run_cli("ingest", path, extra)
    assert code == 0, err
    with Bundle.open(path) as bundle:
        first, resealed = bundle.seals()
        assert (first["digest_version"], resealed["digest_version"]) == (1, DIGEST_VERSION)
        assert resealed["previous"] == first["root_digest"]  # the chain starts from the old seal
    assert run_cli("verify", path)[0] == 0
    sha = hashlib.sha256(DMESG).hexdigest()
    _forge(path, "UPDATE artifact SET captured_at = '2024-06-01 00:00:00' WHERE sha256 = ?", [sha])
    code, out, _ = run_cli("verify", path)
    assert code == 1 and f"altered: {sha}" in out
