"""gpuwb merge: per-node bundles become one incident with the raw evidence intact, rows carried
once, derivations recomputed across nodes, and a fresh seal that verify accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from workbench.store.bundle import Bundle
from workbench.store.schema import EVIDENCE_TABLES

DPKG = {
    "node07": "2025-03-05 03:12:40 startup packages configure\n"
              "2025-03-05 03:12:41 upgrade nvidia-driver-550:amd64 550.54.15-0ubuntu1 550.90.07-0ubuntu1\n"
              "2025-03-05 03:12:41 status half-configured nvidia-driver-550:amd64 550.90.07-0ubuntu1\n"
              "2025-03-05 03:12:44 status installed nvidia-driver-550:amd64 550.90.07-0ubuntu1\n",
    "node08": "2025-02-11 09:01:02 startup packages configure\n"
              "2025-02-11 09:01:03 upgrade nvidia-driver-550:amd64 550.40.07-0ubuntu1 550.54.15-0ubuntu1\n"
              "2025-02-11 09:01:05 status installed nvidia-driver-550:amd64 550.54.15-0ubuntu1\n",
}
SACCT = ("JobID|JobName|Partition|State|ExitCode|Start|End|NodeList\n"
         "4242|pretrain|gpu|FAILED|1:0|2025-03-05T08:00:00|2025-03-05T09:10:00|node[07-08]\n")


def node_bundle(tmp_path: Path, host: str) -> Path:
    folder = tmp_path / host
    folder.mkdir()
    (folder / "dpkg.log").write_text(DPKG[host])
    (folder / "sacct.txt").write_text(SACCT)
    path = tmp_path / f"{host}.duckdb"
    code, _, err = run_cli("ingest", path, folder, "--host", host)
    assert code == 0, err
    return path


def artifacts(path: Path) -> dict[str, tuple[int, bytes]]:
    with Bundle.open(path) as bundle:
        return {a["sha256"]: (a["size"], b"".join(bundle.artifact_bytes(a["id"]))) for a in bundle.artifacts()}


def test_merge_keeps_bytes_dedupes_and_recomputes_derivations(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    out = tmp_path / "incident.duckdb"
    code, text, err = run_cli("merge", out, n7, n8, "--title", "job 4242")
    assert code == 0, err
    assert "1 duplicate(s)" in text
    merged = artifacts(out)
    assert merged == {**artifacts(n7), **artifacts(n8)}
    code, text, _ = run_cli("verify", out)
    assert code == 0 and "OK" in text
    with Bundle.open(out) as bundle:
        con = bundle.con
        jobs = con.execute("SELECT count(*) FROM event WHERE kind = 'job_state' AND job = '4242' "
                           "AND attrs->>'state' = 'FAILED'").fetchall()[0][0]
        skew = con.execute("SELECT host, attrs->>'version' FROM event WHERE kind = 'version_skew'").fetchall()
        ids = con.execute("SELECT count(*), count(DISTINCT id) FROM event").fetchall()[0]
        meta = bundle.meta()
        digest = bundle.last_seal()["root_digest"]
    assert jobs == 1, "the shared sacct output was ingested twice but is carried once"
    assert skew and all(v for _, v in skew), "version skew only shows across the two nodes"
    assert ids[0] == ids[1]
    assert meta["title"] == "job 4242"
    sources = json.loads(meta["merged_from"])
    assert [s["path"] for s in sources] == [str(n7), str(n8)]
    for source in (n7, n8):
        with Bundle.open(source) as bundle:
            assert bundle.last_seal()["root_digest"] != digest
            assert not bundle.con.execute("SELECT count(*) FROM event WHERE kind = 'version_skew'").fetchall()[0][0]


def test_merge_refuses_existing_output_and_self(tmp_path: Path) -> None:
    n7 = node_bundle(tmp_path, "node07")
    code, _, err = run_cli("merge", n7, n7)
    assert code == 2 and "already exists" in err
    code, _, err = run_cli("merge", tmp_path / "out.duckdb", tmp_path / "missing.duckdb")
    assert code == 2 and "no such bundle" in err
    assert not (tmp_path / "out.duckdb").exists()


def test_merged_bundle_is_analyzed_across_hosts(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    out = tmp_path / "incident.duckdb"
    assert run_cli("merge", out, n7, n8)[0] == 0
    code, text, err = run_cli("analyze", out, "--json")
    assert code == 0, err
    doc = json.loads(text)
    top = doc["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("driver_stack_mismatch", "node07")


@pytest.mark.parametrize("bad", ["not a bundle", ""])
def test_merge_rejects_non_bundles(tmp_path: Path, bad: str) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_text(bad)
    code, _, err = run_cli("merge", tmp_path / "out.duckdb", junk)
    assert code == 2 and "gpuwb: error:" in err
    assert not (tmp_path / "out.duckdb").exists()


def test_same_bytes_from_two_nodes_keep_both_hosts_rows(tmp_path: Path) -> None:
    paths = []
    for host in ("node11", "node12"):
        folder = tmp_path / host
        folder.mkdir()
        (folder / "uptime.txt").write_text("2025-03-05 01:00:00\n")
        paths.append(tmp_path / f"{host}.duckdb")
        code, _, err = run_cli("ingest", paths[-1], folder, "--host", host)
        assert code == 0, err
    out = tmp_path / "merged.duckdb"
    code, _, err = run_cli("merge", out, *paths)
    assert code == 0, err
    with Bundle.open(out) as bundle:
        boots = bundle.con.execute(
            "SELECT host FROM host_inventory WHERE key = 'boot_time' ORDER BY host").fetchall()
        assert len(bundle.artifacts()) == 1
        assert bundle.verify() == []
    assert boots == [("node11",), ("node12",)]


def evidence(path: Path) -> dict[str, set[tuple]]:
    """Every parsed row by table (event ids and derived events left out): the rows and their provenance."""
    out: dict[str, set[tuple]] = {}
    with Bundle.open(path) as bundle:
        con = bundle.con
        for table in EVIDENCE_TABLES:
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND column_name <> 'id' "
                "ORDER BY ordinal_position", [table]).fetchall()]
            where = " WHERE coalesce(ts_origin, '') <> 'derived'" if table == "event" else ""
            out[table] = set(con.execute(f"SELECT {', '.join(cols)} FROM {table}{where}").fetchall())
    return out


def sealed_state(path: Path) -> tuple:
    with Bundle.open(path) as bundle:
        con = bundle.con
        counts = tuple(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                       for t in ("artifact", "artifact_alias", "artifact_chunk", *EVIDENCE_TABLES, "seal"))
        return counts, bundle.last_seal()["root_digest"], bundle.meta()["merged_from"]


def test_every_row_keeps_its_host_artifact_and_line(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    out = tmp_path / "incident.duckdb"
    assert run_cli("merge", out, n7, n8)[0] == 0
    merged, sources = evidence(out), [evidence(n7), evidence(n8)]
    for table in EVIDENCE_TABLES:
        assert merged[table] == sources[0][table] | sources[1][table], table
    hosts = {row[4] for row in merged["event"]}
    assert {"node07", "node08"} <= hosts


def test_merge_into_adds_late_nodes_like_one_merge(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    once, late = tmp_path / "once.duckdb", tmp_path / "late.duckdb"
    assert run_cli("merge", once, n7, n8)[0] == 0
    assert run_cli("merge", late, n7)[0] == 0
    first_digest = sealed_state(late)[1]
    code, text, err = run_cli("merge", "--into", late, n8)
    assert code == 0, err
    assert text.startswith("Added 1 bundle(s)")
    assert evidence(late) == evidence(once)
    assert artifacts(late) == artifacts(once)
    with Bundle.open(late) as bundle:
        assert bundle.verify() == []
        assert bundle.con.execute("SELECT count(*) FROM event WHERE kind = 'version_skew'").fetchall()[0][0], \
            "derivations are recomputed over the late node too"
        assert bundle.last_seal()["root_digest"] != first_digest
        assert [s["path"] for s in json.loads(bundle.meta()["merged_from"])] == [str(n7), str(n8)]
    assert run_cli("verify", late)[0] == 0


def test_merge_into_counts_a_bundle_once(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    out = tmp_path / "incident.duckdb"
    assert run_cli("merge", out, n7, n8)[0] == 0
    before = sealed_state(out)
    copy = tmp_path / "copy-of-node08.duckdb"
    copy.write_bytes(n8.read_bytes())
    code, text, err = run_cli("merge", "--into", out, n8, copy)
    assert code == 0, err
    assert text.count("already merged (same root digest)") == 2
    assert "Added 0 bundle(s)" in text
    assert sealed_state(out) == before, "nothing new: no rows, no new seal, merged_from unchanged"
    assert run_cli("verify", out)[0] == 0


def test_merge_into_is_all_or_nothing(tmp_path: Path) -> None:
    n7, n8 = node_bundle(tmp_path, "node07"), node_bundle(tmp_path, "node08")
    out = tmp_path / "incident.duckdb"
    assert run_cli("merge", out, n7)[0] == 0
    before = sealed_state(out)
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a bundle")
    code, _, err = run_cli("merge", "--into", out, n8, junk)
    assert code == 2 and "junk.duckdb is not a gpuwb bundle" in err
    assert sealed_state(out) == before
    code, _, err = run_cli("merge", "--into", n7, n8)
    assert code == 2 and "not made by gpuwb merge" in err


def test_merge_takes_a_folder_of_bundles(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    for host in ("node07", "node08"):
        node_bundle(tmp_path, host).rename(nodes / f"{host}.duckdb")
    (nodes / ".node09.duckdb").write_text("a capture still being written")
    (nodes / "notes.txt").write_text("not a bundle")
    out = tmp_path / "incident.duckdb"
    code, text, err = run_cli("merge", out, nodes)
    assert code == 0, err
    assert text.startswith("Merged 2 bundle(s)")
    with Bundle.open(out) as bundle:
        assert sorted(s["path"] for s in json.loads(bundle.meta()["merged_from"])) == sorted(
            str(nodes / f"{h}.duckdb") for h in ("node07", "node08"))
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli("merge", tmp_path / "none.duckdb", empty)
    assert code == 2 and "no bundles" in err
    assert not (tmp_path / "none.duckdb").exists()


def test_merge_into_skips_the_merged_bundle_in_its_own_folder(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    node_bundle(tmp_path, "node07").rename(nodes / "node07.duckdb")
    out = nodes / "incident.duckdb"
    assert run_cli("merge", out, nodes / "node07.duckdb")[0] == 0
    node_bundle(tmp_path, "node08").rename(nodes / "node08.duckdb")
    code, text, err = run_cli("merge", "--into", out, nodes)
    assert code == 0, err
    assert "incident.duckdb: the output bundle itself" in text and "already merged" in text
    assert "Added 1 bundle(s)" in text
    assert run_cli("verify", out)[0] == 0
