"""A change made after sealing cannot be laundered by a later seal.

Seals form a chain: each covers the one before, and what seal k covered, seal k+1 must cover unchanged
(evidence is append-only). So after a tamper, a harmless ``gpuwb ingest`` refuses to seal over it, and even a
seal made regardless (an older gpuwb, a script calling ``Bundle.seal``) leaves verify naming the change."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.store import schema
from workbench.store.bundle import Bundle

DMESG = b"[  12.5] NVRM: Xid (PCI:0000:19:00): 79, pid=1, GPU has fallen off the bus.\n"
SYSLOG = b"Mar 14 10:00:01 node01 kernel: hello\n"
FORGED = b"[  12.5] NVRM: Xid (PCI:0000:19:00): 13, pid=1, Graphics Exception.\n"


def _sealed(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "node01").mkdir()
    (tmp_path / "node01" / "dmesg.txt").write_bytes(DMESG)
    (tmp_path / "node01" / "syslog").write_bytes(SYSLOG)
    path = tmp_path / "b.duckdb"
    code, _, err = run_cli("ingest", path, tmp_path / "node01", "--title", "GPU fell off the bus")
    assert code == 0, err
    return path, {"dmesg": hashlib.sha256(DMESG).hexdigest(), "syslog": hashlib.sha256(SYSLOG).hexdigest()}


def _forge(path: Path, *statements: tuple[str, list]) -> None:
    con = duckdb.connect(str(path))
    for sql, params in statements:
        con.execute(sql, params)
    con.close()


def _forge_bytes(path: Path, sha: str) -> None:
    """Other bytes in place of an artifact's, and its sha256 and size made to match them."""
    _forge(path, ("UPDATE artifact_chunk SET data = ?, codec = NULL, raw_size = ? WHERE artifact_id = "
                  "(SELECT id FROM artifact WHERE sha256 = ?)", [FORGED, len(FORGED), sha]),
           ("UPDATE artifact SET sha256 = ?, size = ? WHERE sha256 = ?",
            [hashlib.sha256(FORGED).hexdigest(), len(FORGED), sha]))


TAMPERINGS = {
    "captured_at": (lambda path, shas: _forge(path, ("UPDATE artifact SET captured_at = ? WHERE sha256 = ?",
                                                     [datetime(2020, 1, 1), shas["dmesg"]])),
                    lambda shas: f"artifact provenance altered: {shas['dmesg']} ("),
    "title": (lambda path, shas: _forge(path, ("UPDATE meta SET value = 'nothing happened' WHERE key = 'title'",
                                               [])),
              lambda shas: "incident metadata altered: title changed"),
    "artifact": (lambda path, shas: _forge(path, ("UPDATE artifact SET host = 'node99' WHERE sha256 = ?",
                                                  [shas["dmesg"]])),
                 lambda shas: f"artifact provenance altered: {shas['dmesg']} ("),
    "bytes and sha256": (lambda path, shas: _forge_bytes(path, shas["dmesg"]),
                         lambda shas: f"artifact provenance altered: {shas['dmesg']}: collector, kind, host, source, "
                                      "captured_at or info removed"),
}


def _problems(path: Path) -> tuple[int, list[str]]:
    code, out, err = run_cli("verify", path)
    assert not err, err
    return code, out.splitlines()


@pytest.mark.parametrize("tampering", TAMPERINGS)
def test_a_harmless_ingest_refuses_to_seal_over_a_tamper_and_verify_still_names_it(tmp_path, tampering):
    path, shas = _sealed(tmp_path)
    forge, named = TAMPERINGS[tampering]
    forge(path, shas)
    (tmp_path / "late.log").write_text("Mar 14 11:00:01 node02 kernel: later\n")

    code, out, err = run_cli("ingest", path, tmp_path / "late.log")

    assert code == 2, out + err
    (line,) = err.splitlines()
    assert line.startswith(f"gpuwb: error: bundle {path} differs from its last seal: {named(shas)}"), line
    assert "refusing to seal over a change" in line
    code, lines = _problems(path)
    assert code == 1 and lines[-1].startswith("ALTERED"), lines
    assert any(problem.startswith(named(shas)) for problem in lines), lines
    with Bundle.open(path) as bundle:
        assert len(bundle.seals()) == 1 and "late.log" not in json.dumps(bundle.artifacts(), default=str)


@pytest.mark.parametrize("tampering", TAMPERINGS)
def test_a_seal_made_over_a_tamper_regardless_does_not_hide_it(tmp_path, tampering):
    """What an older gpuwb did: seal whatever the bundle held. The link from the first seal shows the change."""
    path, shas = _sealed(tmp_path)
    forge, named = TAMPERINGS[tampering]
    forge(path, shas)
    with Bundle.open(path, write=True) as bundle:
        bundle.seal()
        assert bundle.seal_state().altered is False  # the bundle does match its (laundering) last seal

    code, lines = _problems(path)

    assert code == 1 and lines[-1].startswith("ALTERED"), lines
    (link,) = [line for line in lines if line.startswith(named(shas))]
    assert "between seal 1 and seal 2, which absorbed the change" in link, link


def test_an_untouched_bundle_ingested_many_times_verifies_through_the_whole_chain(tmp_path):
    path, _ = _sealed(tmp_path)
    for n in range(3):
        (tmp_path / f"more{n}.log").write_text(f"Mar 14 1{n}:00:01 node0{n + 2} kernel: more\n")
        assert run_cli("ingest", path, tmp_path / f"more{n}.log")[0] == 0
    code, lines = _problems(path)
    assert code == 0 and lines[-1].startswith("OK: 5 artifacts intact"), lines
    with Bundle.open(path) as bundle:
        seals = bundle.seals()
    assert [s["previous"] for s in seals] == [None] + [s["root_digest"] for s in seals[:-1]]


def test_a_seal_removed_from_the_middle_of_the_chain_is_named(tmp_path):
    path, _ = _sealed(tmp_path)
    for n in range(2):
        (tmp_path / f"more{n}.log").write_text(f"Mar 14 1{n}:00:01 node0{n + 2} kernel: more\n")
        assert run_cli("ingest", path, tmp_path / f"more{n}.log")[0] == 0
    _forge(path, ("DELETE FROM seal WHERE seq = 2", []))
    code, lines = _problems(path)
    assert code == 1
    assert any(line.startswith("seal chain broken: seal 3 (sealed at ") and "does not follow seal 1" in line
               for line in lines), lines


def test_a_seal_whose_items_were_rewritten_is_named(tmp_path):
    path, shas = _sealed(tmp_path)
    with Bundle.open(path) as bundle:
        items = bundle.seals()[0]["items"]
    items[f"artifact:{shas['dmesg']}"] = "0" * 64
    _forge(path, ("UPDATE seal SET items = ?", [json.dumps(items)]))
    code, lines = _problems(path)
    assert code == 1 and any(line.startswith("seal altered: seal 1 (sealed at ") for line in lines), lines


def test_merge_into_grows_merged_from_without_breaking_the_chain(tmp_path):
    """The documented exception: ``merge --into`` adds entries to ``merged_from``, which is no change to the
    entries sealed before."""
    bundles = []
    for n in range(3):
        (tmp_path / f"n{n}").mkdir()
        (tmp_path / f"n{n}" / "syslog").write_text(f"Mar 14 10:00:0{n} node0{n} kernel: hello {n}\n")
        bundles.append(tmp_path / f"node{n}.duckdb")
        assert run_cli("ingest", bundles[-1], tmp_path / f"n{n}" / "syslog", "--host", f"node0{n}")[0] == 0
    merged = tmp_path / "merged.duckdb"
    assert run_cli("merge", merged, bundles[0], bundles[1])[0] == 0
    code, _, err = run_cli("merge", "--into", merged, bundles[2])
    assert code == 0, err
    code, lines = _problems(merged)
    assert code == 0 and lines[-1].startswith("OK: 3 artifacts intact"), lines
    _forge(merged, ("UPDATE meta SET value = ? WHERE key = 'merged_from'",
                    [json.dumps(json.loads(_meta(merged)["merged_from"])[1:])]))
    code, lines = _problems(merged)
    assert code == 1 and any(line.startswith("incident metadata altered: merged_from entry 0") for line in lines)


def _meta(path: Path) -> dict[str, str]:
    with Bundle.open(path) as bundle:
        return bundle.meta()


# -- bundles sealed by an older gpuwb (digest version 2) ------------------------------------------------

def _v2_items(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """How gpuwb sealed with digest version 2: one item per artifact, per sha256's aliases, per collector@host's
    coverage rows, and one for the metadata."""
    def digest(value) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()

    items = {f"artifact:{r[0]}": digest(list(r)) for r in con.execute(
        "SELECT sha256, size, collector, kind, host, source, captured_at, info FROM artifact").fetchall()}
    keys = ("incident_id", "title", "created_at", "captured_on", "capture_started", "since", "complete", "merged_from")
    items["meta"] = digest({k: v for k, v in con.execute("SELECT key, value FROM meta").fetchall() if k in keys})
    return items


def _v2_seal(con: duckdb.DuckDBPyConnection, seq: int) -> None:
    items = _v2_items(con)
    root = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
    con.execute("INSERT INTO seal VALUES (?, '2025-06-01 00:00:00', ?, 1, true, 2, ?)", [seq, root, json.dumps(items)])


def _v2_bundle(path: Path) -> str:
    """A bundle as schema version 2 wrote it, sealed with digest version 2."""
    sha = hashlib.sha256(DMESG).hexdigest()
    con = duckdb.connect(str(path))
    con.execute(schema.MIGRATIONS[1])
    con.execute(schema.MIGRATIONS[2])
    for key, value in {"incident_id": "abc123", "title": "old", "created_at": "2025-06-01T00:00:00",
                       "schema_version": "2"}.items():
        con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])
    con.execute("INSERT INTO artifact (id, sha256, collector, kind, host, source, captured_at, size, info) "
                "VALUES (1, ?, 'kernel', 'dmesg', 'node01', 'dmesg', '2025-06-01 00:00:00', ?, '{}')",
                [sha, len(DMESG)])
    con.execute("INSERT INTO artifact_chunk VALUES (1, 0, ?, NULL, ?)", [DMESG, len(DMESG)])
    _v2_seal(con, 1)
    con.close()
    return sha


def test_a_version_2_bundle_verifies_as_sealed_and_a_new_ingest_chains_from_it(tmp_path):
    path = tmp_path / "v2.duckdb"
    _v2_bundle(path)
    code, lines = _problems(path)
    assert code == 0 and lines[-1].startswith("OK: 1 artifacts intact"), lines
    (tmp_path / "late.log").write_bytes(SYSLOG)
    assert run_cli("ingest", path, tmp_path / "late.log")[0] == 0
    code, lines = _problems(path)
    assert code == 0 and lines[-1].startswith("OK: 2 artifacts intact"), lines
    with Bundle.open(path) as bundle:
        old, new = bundle.seals()
    assert (old["digest_version"], new["digest_version"]) == (2, 3) and new["previous"] == old["root_digest"]


def test_a_version_2_bundle_laundered_by_an_old_gpuwb_fails_verify(tmp_path):
    """Tampered, then sealed again the way gpuwb did with digest version 2: the link between the two old seals
    still names the artifact."""
    path = tmp_path / "v2.duckdb"
    sha = _v2_bundle(path)
    con = duckdb.connect(str(path))
    con.execute("UPDATE artifact SET captured_at = '2020-01-01 00:00:00'")
    _v2_seal(con, 2)
    con.close()
    code, lines = _problems(path)
    assert code == 1, lines
    assert any(line.startswith(f"artifact provenance altered: {sha} (dmesg dmesg, host node01): ")
               and "between seal 1 and seal 2" in line for line in lines), lines
