"""A bundle whose storage is damaged is told as such, in one line, by every command; never an internal error.

The damage is real: a byte flipped inside a DuckDB data block of a bundle gpuwb wrote, found through DuckDB's
own storage map (``pragma_storage_info``), so the block is one that holds the table's rows. DuckDB checks each
block's checksum when it loads it; ``verify`` reads every table so that it finds the block and names the table
(exit 1, ``storage damaged: ...``), and the other commands stop with exit 2 when they reach it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.store.bundle import Bundle

HEADER_BYTES = 3 * 4096
"""DuckDB's file header and its two database headers, before block 0."""


def _events_bundle(folder: Path) -> Path:
    log = folder / "dmesg.log"
    with open(log, "w") as out:
        for n in range(20_000):
            out.write(f"[{n * 0.25:12.6f}] NVRM: Xid (PCI:0000:{n % 256:02x}:00): 79, pid={n}, GPU has fallen off\n")
    (folder / "blob.bin").write_bytes(os.urandom(1 << 20))
    path = folder / "b.duckdb"
    code, _, err = run_cli("ingest", path, log, folder / "blob.bin")
    assert code == 0, err
    return path


def _flip(path: Path, table: str, column: str) -> None:
    """Flip bytes in the middle of a block that holds ``column`` of ``table``."""
    con = duckdb.connect(str(path), read_only=True)
    block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchall()[0][0]
    blocks = sorted({b for (b,) in con.execute(
        f"SELECT block_id FROM pragma_storage_info('{table}') WHERE column_name = ? AND block_id >= 0",
        [column]).fetchall()})
    con.close()
    assert blocks, f"no block of {table}.{column}"
    at = HEADER_BYTES + blocks[0] * block_size + block_size // 2
    with open(path, "r+b") as f:
        f.seek(at)
        data = f.read(16)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _events_bundle(tmp_path_factory.mktemp("made"))


@pytest.fixture
def damaged_events(made: Path, tmp_path: Path) -> Path:
    path = tmp_path / "b.duckdb"
    shutil.copyfile(made, path)
    _flip(path, "event", "message")
    return path


def _one_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_verify_names_the_damaged_table(damaged_events: Path) -> None:
    code, out, err = run_cli("verify", damaged_events)
    assert code == 1 and not err, out + err
    lines = out.splitlines()
    assert any(line.startswith("storage damaged: table event cannot be read in full (") and "checksum" in line
               for line in lines), lines
    assert lines[-1].startswith("DAMAGED: ") and lines[-1].endswith("its storage cannot be read in full"), lines


COMMANDS = (("timeline",), ("timeline", "--json"), ("analyze",), ("analyze", "--json"), ("report",),
            ("report", "-f", "json"), ("export", "--parquet", "{tmp}/pq"))


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_says_the_bundle_is_damaged_in_one_line(damaged_events: Path, tmp_path: Path,
                                                                command: tuple[str, ...]) -> None:
    args = [a.format(tmp=tmp_path) for a in command]
    code, _, err = run_cli(args[0], damaged_events, *args[1:])
    assert code == 2, err
    line = _one_line(err)
    assert line.startswith(f"gpuwb: error: bundle {damaged_events} is damaged: "), line
    assert line.endswith(f"`gpuwb verify {damaged_events}` tells what is still intact"), line
    assert "internal error" not in line


def test_damaged_artifact_bytes_are_named_by_artifact(made: Path, tmp_path: Path) -> None:
    path = tmp_path / "b.duckdb"
    shutil.copyfile(made, path)
    _flip(path, "artifact_chunk", "data")
    with Bundle.open(path) as bundle:
        blob = next(a for a in bundle.artifacts() if a["source"].endswith("blob.bin"))
    code, out, _ = run_cli("verify", path)
    assert code == 1
    assert any(line.startswith(f"storage damaged: the bytes of artifact {blob['sha256']} (unknown ")
               for line in out.splitlines()), out
    assert out.splitlines()[-1].startswith("DAMAGED: "), out


ODD = {"schema_version -1": (("UPDATE meta SET value = '-1' WHERE key = 'schema_version'",),
                             "is damaged: its schema_version is -1"),
       "no event table": (("DROP TABLE event",), "is damaged: table event is missing"),
       "no seal nor journal": (("DROP TABLE seal", "DROP TABLE journal"),
                               "is damaged: tables seal, journal are missing")}


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("command", (("verify",), ("timeline",), ("analyze",), ("report",),
                                     ("export", "--parquet", "{tmp}/pq"), ("ingest", "{tmp}/x.log")), ids=" ".join)
def test_odd_schema_values_are_a_damaged_bundle(made: Path, tmp_path: Path, odd: str, command: tuple[str, ...]) -> None:
    path = tmp_path / "b.duckdb"
    shutil.copyfile(made, path)
    statements, needle = ODD[odd]
    con = duckdb.connect(str(path))
    for sql in statements:
        con.execute(sql)
    con.close()
    (tmp_path / "x.log").write_text("Mar 14 10:00:01 node01 kernel: hello\n")
    before = path.read_bytes()
    args = [a.format(tmp=tmp_path) for a in command]
    code, _, err = run_cli(args[0], path, *args[1:])
    assert code == 2, err
    line = _one_line(err)
    assert line.startswith(f"gpuwb: error: bundle {path} {needle}"), line
    assert path.read_bytes() == before  # nothing written into a damaged bundle
