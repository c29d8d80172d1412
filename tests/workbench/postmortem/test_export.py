"""Parquet export: partitioned by table/host, read back by DuckDB with the same row counts."""

from __future__ import annotations

import duckdb

from tests.conftest import run_cli
from tests.workbench.postmortem.report_scenario import build_bundle
from workbench.postmortem.export import PARTITIONED, UNPARTITIONED, export_parquet, incident_key, read_back_counts
from workbench.store.bundle import Bundle


def _bundle_counts(path) -> dict[str, int]:
    with Bundle.open(path) as bundle:
        counts = {t: bundle.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                  for t in (*PARTITIONED, *UNPARTITIONED)}
        counts["incident"] = bundle.con.execute("SELECT count(*) FROM meta").fetchall()[0][0]
    return counts


def test_read_back_with_duckdb_gives_the_same_row_counts(bundle_path, tmp_path):
    build_bundle(bundle_path)
    out = tmp_path / "pq"
    code, stdout, err = run_cli("export", bundle_path, "--parquet", out)
    assert code == 0, err
    expected = _bundle_counts(bundle_path)
    assert expected["event"] > 0 and expected["topology"] > 0 and expected["journal"] > 0
    con = duckdb.connect()
    for table, rows in expected.items():
        files = list((out / table).rglob("*.parquet"))
        if rows == 0:
            assert files == []
            continue
        got = con.execute("SELECT count(*) FROM read_parquet(?, hive_partitioning = true)",
                          [str(out / table / "**" / "*.parquet")]).fetchall()[0][0]
        assert got == rows, table
    assert "MISMATCH" not in stdout


def test_partitioned_by_host_with_host_as_a_column(bundle_path, tmp_path):
    build_bundle(bundle_path)
    with Bundle.open(bundle_path) as bundle:
        export_parquet(bundle, tmp_path)
        per_host = dict(bundle.con.execute("SELECT coalesce(host, '?'), count(*) FROM event GROUP BY 1").fetchall())
    folders = sorted(p.name for p in (tmp_path / "event").iterdir())
    assert folders == sorted(f"host={h}" if h != "?" else "host=__HIVE_DEFAULT_PARTITION__" for h in per_host)
    con = duckdb.connect()
    got = dict(con.execute("SELECT coalesce(host, '?'), count(*) FROM read_parquet(?, hive_partitioning = true) "
                           "GROUP BY 1", [str(tmp_path / "event/**/*.parquet")]).fetchall())
    assert got == per_host
    kinds = con.execute("SELECT DISTINCT kind FROM read_parquet(?, hive_partitioning = true) ORDER BY 1",
                        [str(tmp_path / "event/**/*.parquet")]).fetchall()
    assert ("xid",) in kinds


def test_incidents_accumulate_and_reexport_replaces_only_its_own_files(tmp_path):
    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    build_bundle(first)
    with Bundle.create(second, title="other", incident_id="inc_other") as bundle:
        bundle.seal()
    out = tmp_path / "fleet"
    for path in (first, second, first):
        with Bundle.open(path) as bundle:
            export_parquet(bundle, out)
    with Bundle.open(first) as bundle:
        key = incident_key(bundle)
    counts = _bundle_counts(first)
    assert read_back_counts(out, key)["event"] == counts["event"], "exporting twice must not double the rows"
    assert read_back_counts(out, "inc-other")["seal"] == 1 and read_back_counts(out)["seal"] == 2
