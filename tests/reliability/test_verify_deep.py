"""``gpuwb verify --deep``: the parsed rows, which no seal covers, are re-derived from the sealed bytes and
compared, so an edited, added or deleted row is named by table and artifact."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.store.bundle import Bundle

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two incidents' evidence merged: events, GPU readings and inventory, topology, series, host facts, derived
    events, and a raw dmesg read with --boot-time."""
    folder = tmp_path_factory.mktemp("deep")
    parts = []
    for name in ("train_thermal_straggler", "train_ecc_xid94", "train_ib_link_flap"):
        parts.append(folder / f"{name}.duckdb")
        code, _, err = run_cli("ingest", parts[-1], SCENARIOS / name)
        assert code == 0, err
    raw = folder / "node09" / "dmesg"
    raw.parent.mkdir()
    raw.write_text("[  812.345678] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, GPU has fallen off the bus.\n")
    parts.append(folder / "boot.duckdb")
    code, _, err = run_cli("ingest", parts[-1], raw.parent, "--boot-time", "2026-03-14T09:00:00Z")
    assert code == 0, err
    merged = folder / "merged.duckdb"
    code, _, err = run_cli("merge", merged, *parts)
    assert code == 0, err
    with Bundle.open(merged) as bundle:
        counts = {t: bundle.con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                  for t in ("event", "gpu_sample", "gpu_inventory", "topology", "series", "host_inventory")}
    assert all(counts.values()), counts
    return merged


def _copy(made: Path, tmp_path: Path) -> Path:
    path = tmp_path / "b.duckdb"
    shutil.copyfile(made, path)
    return path


def _forge(path: Path, sql: str) -> str:
    """Run ``sql`` on the bundle; returns the artifact of the first row it touched (RETURNING artifact)."""
    con = duckdb.connect(str(path))
    rows = con.execute(sql).fetchall()
    con.close()
    assert rows, sql
    return rows[0][0]


def test_an_untouched_bundle_re_derives_to_the_same_rows(made: Path) -> None:
    code, out, err = run_cli("verify", "--deep", made)
    assert code == 0, out + err
    assert out.splitlines()[-1].endswith("; rows re-derived from the sealed bytes match"), out


FORGERIES = {
    "event edited": ("UPDATE event SET message = 'nothing to see' WHERE id = (SELECT min(id) FROM event WHERE "
                     "kind LIKE 'xid%') RETURNING artifact", "event", 1, 1),
    "gpu readings deleted": ("DELETE FROM gpu_sample WHERE rowid IN (SELECT rowid FROM gpu_sample LIMIT 3) "
                             "RETURNING artifact", "gpu_sample", 0, 3),
    "series value edited": ("UPDATE series SET value = value + 1 WHERE rowid = (SELECT min(rowid) FROM series) "
                            "RETURNING artifact", "series", 1, 1),
    "topology row added": ("INSERT INTO topology SELECT * REPLACE (999 AS rank) FROM topology LIMIT 1 "
                           "RETURNING artifact", "topology", 1, 0),
    "host fact edited": ("UPDATE host_inventory SET value = 'forged' WHERE rowid = (SELECT min(rowid) FROM "
                         "host_inventory) RETURNING artifact", "host_inventory", 1, 1),
    "inventory edited": ("UPDATE gpu_inventory SET serial = 'forged' RETURNING artifact", "gpu_inventory", None, None),
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_row_is_named_by_table_and_artifact(made: Path, tmp_path: Path, forgery: str) -> None:
    path = _copy(made, tmp_path)
    sql, table, extra, missing = FORGERIES[forgery]
    artifact = _forge(path, sql)
    assert run_cli("verify", path)[0] == 0  # no seal covers the rows: the plain verify cannot see it

    code, out, err = run_cli("verify", "--deep", path)

    assert code == 1 and not err, out + err
    lines = out.splitlines()
    (named,) = [line for line in lines if line.startswith(f"rows differ: table {table}, artifact {artifact} (")]
    if extra is not None:
        assert f": {extra} row(s) in the bundle that its sealed bytes do not give, {missing} re-derived row(s) " \
               "not in the bundle" in named, named
    assert lines[-1].startswith("ALTERED: ")
    assert not any(line.startswith("rows differ") and artifact not in line for line in lines), lines


def test_forged_derived_events_and_parse_statistics_are_named(made: Path, tmp_path: Path) -> None:
    path = _copy(made, tmp_path)
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM event WHERE ts_origin = 'derived'")
    sha = con.execute("UPDATE artifact SET lines = lines + 5 WHERE id = 1 RETURNING sha256").fetchall()[0][0]
    con.close()
    code, out, _ = run_cli("verify", "--deep", path)
    assert code == 1
    lines = out.splitlines()
    assert any(line.startswith("rows differ: table event, derived rows (computed across artifacts): 0 row(s) in "
                               "the bundle") for line in lines), lines
    assert any(line.startswith(f"parse statistics differ: artifact {sha} (") for line in lines), lines


def test_deep_verify_of_altered_bytes_reports_them_without_re_deriving(made: Path, tmp_path: Path) -> None:
    path = _copy(made, tmp_path)
    con = duckdb.connect(str(path))
    con.execute("UPDATE artifact_chunk SET data = 'x'::BLOB, codec = 'zstd' WHERE artifact_id = 1")
    con.close()
    code, out, _ = run_cli("verify", "--deep", path)
    assert code == 1 and "artifact altered:" in out
    assert "rows not re-derived: the sealed evidence itself did not verify" in out.splitlines()
