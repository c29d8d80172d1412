"""gpuwb merge: per-node bundles become one incident with the raw evidence intact, rows carried
once, derivations recomputed across nodes, and a fresh seal that verify accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from workbench.bundle import Bundle

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
