"""`gpuwb catalog unknown`: a bundle's unrecognised error lines, grouped, and as entry skeletons that load."""

from __future__ import annotations

import json

import yaml

from tests.conftest import run_cli

LOG = (b"2024-05-12T10:11:12Z node1 myapp[1]: ERROR reactor 7 overheated\n"
       b"2024-05-12T10:11:13Z node1 myapp[1]: ERROR reactor 8 overheated\n"
       b"2024-05-12T10:11:14Z node2 myapp[1]: ERROR reactor 9 overheated\n"
       b"2024-05-12T10:11:15Z node1 kubelet[9]: error: unheard-of [bold]kubelet[/bold] trouble\n")


def _bundle(tmp_path):
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "app.log").write_bytes(LOG)
    code, out, err = run_cli("ingest", tmp_path / "b.duckdb", tmp_path / "e")
    assert code == 0, err or out
    return tmp_path / "b.duckdb"


def test_groups_count_repeats_across_hosts(tmp_path) -> None:
    code, out, _ = run_cli("catalog", "unknown", _bundle(tmp_path), "--json")
    assert code == 0
    groups = [json.loads(line) for line in out.splitlines()]
    assert [(g["program"], g["lines"], g["hosts"], g["layer"]) for g in groups] == [
        ("myapp", 3, 2, "business"), ("kubelet", 1, 1, "scheduling")]


def test_the_table_shows_evidence_verbatim(tmp_path) -> None:
    code, out, _ = run_cli("catalog", "unknown", _bundle(tmp_path))
    assert code == 0 and "[bold]kubelet[/bold]" in out and "2 group(s)" in out


def test_skeletons_are_yaml_a_person_completes(tmp_path) -> None:
    code, out, _ = run_cli("catalog", "unknown", _bundle(tmp_path), "--yaml")
    assert code == 0
    entries = yaml.safe_load("signatures:\n" + out)["signatures"]
    assert len(entries) == 2 and entries[0]["layer"] == "business"
    assert entries[1]["samples"][0]["line"].startswith("error: unheard-of")
    assert all(entry["anchors"][0] in entry["samples"][0]["line"] for entry in entries)


def test_a_bundle_with_nothing_unknown_says_so(tmp_path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "app.log").write_bytes(b"all good\n")
    run_cli("ingest", tmp_path / "b.duckdb", tmp_path / "e")
    code, out, _ = run_cli("catalog", "unknown", tmp_path / "b.duckdb")
    assert code == 0 and out.startswith("no unrecognised error lines")
