"""What a tired responder types wrong: every sub-command answers a bad bundle, a bad option or a bad
output path with exit 2 and one ``gpuwb: error:`` line, never a traceback, and never loses evidence."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.conftest import CORPUS, ROOT, run_cli
from workbench.bundle import Bundle

KERNEL_LOG = CORPUS / "kernel" / "nvsentinel_155_fallen_off_bus_no_xid_dmesg.log"
SYSLOG_LINE = ("2026-06-03T14:00:00+00:00 node01 kernel: NVRM: Xid (PCI:0000:19:00): 79, pid=1, "
               "GPU has fallen off the bus.\n")


def assert_usage_error(code: int, err: str, *needles: str) -> None:
    """Exit 2, exactly one line on stderr, starting ``gpuwb: error:``, naming what went wrong."""
    assert code == 2, err
    assert err.startswith("gpuwb: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small sealed bundle with a few events."""
    folder = tmp_path_factory.mktemp("good")
    (folder / "node01").mkdir()
    (folder / "node01" / "kern.log").write_text(SYSLOG_LINE)
    bundle = folder / "good.duckdb"
    code, out, err = run_cli("ingest", bundle, folder / "node01", KERNEL_LOG)
    assert code == 0, err or out
    return bundle


def _bad_bundles(folder: Path) -> dict[str, tuple[Path, str]]:
    """Things that are not a usable bundle, with a word the error message must contain."""
    (folder / "a-folder").mkdir()
    (folder / "empty.duckdb").write_bytes(b"")
    (folder / "junk.duckdb").write_bytes(os.urandom(4096))
    con = duckdb.connect(str(folder / "nometa.duckdb"))
    con.execute("CREATE TABLE x (a INTEGER)")
    con.close()
    with Bundle.create(folder / "newer.duckdb") as bundle:
        bundle.seal()
        bundle.set_meta("schema_version", "999")
    with Bundle.create(folder / "garbled.duckdb") as bundle:
        bundle.set_meta("schema_version", "abc")
    return {"missing": (folder / "missing.duckdb", "no such bundle"),
            "folder": (folder / "a-folder", "a-folder"),
            "empty file": (folder / "empty.duckdb", "not a gpuwb bundle"),
            "random bytes": (folder / "junk.duckdb", "not a gpuwb bundle"),
            "DuckDB without meta": (folder / "nometa.duckdb", "not a gpuwb bundle"),
            "newer schema": (folder / "newer.duckdb", "newer gpuwb"),
            "garbled schema version": (folder / "garbled.duckdb", "not a gpuwb bundle")}


BAD_KINDS = ("missing", "folder", "empty file", "random bytes", "DuckDB without meta", "newer schema",
             "garbled schema version")
READERS = (("timeline",), ("analyze",), ("analyze", "--json"), ("report",), ("report", "-f", "html"), ("verify",),
           ("export", "--parquet", "{tmp}/pq"))


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    return _bad_bundles(tmp_path_factory.mktemp("bad"))


@pytest.mark.parametrize("kind", BAD_KINDS)
@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_reading_commands_reject_what_is_not_a_bundle(command, kind, bad, tmp_path):
    path, needle = bad[kind]
    args = [a.format(tmp=tmp_path) for a in command]
    code, _, err = run_cli(args[0], path, *args[1:])
    assert_usage_error(code, err, needle)


@pytest.mark.parametrize("kind", [k for k in BAD_KINDS if k != "missing"])
def test_ingest_into_what_is_not_a_bundle_leaves_it_alone(kind, bad, tmp_path):
    path, needle = bad[kind]
    before = path.read_bytes() if path.is_file() else None
    (tmp_path / "f.log").write_text(SYSLOG_LINE)
    code, _, err = run_cli("ingest", path, tmp_path / "f.log")
    assert_usage_error(code, err, needle)
    assert (path.read_bytes() if path.is_file() else None) == before


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_merge_rejects_an_input_that_is_not_a_bundle_and_writes_nothing(kind, bad, good, tmp_path):
    path, needle = bad[kind]
    out = tmp_path / "merged.duckdb"
    code, _, err = run_cli("merge", out, good, path)
    assert_usage_error(code, err, needle)
    assert not out.exists()


def test_new_bundle_in_a_missing_folder_is_a_clear_error(tmp_path):
    (tmp_path / "f.log").write_text(SYSLOG_LINE)
    code, _, err = run_cli("ingest", tmp_path / "nope" / "b.duckdb", tmp_path / "f.log")
    assert_usage_error(code, err, "does not exist")


def test_newer_bundle_is_not_migrated_or_touched(bad):
    path, _ = bad["newer schema"]
    con = duckdb.connect(str(path), read_only=True)
    assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == [("999",)]
    con.close()


def _gpuwb(*args: str | Path, **kwargs) -> subprocess.Popen:
    """gpuwb in a child process with ordinary (block-buffered) stdout, as a shell pipeline runs it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.Popen([sys.executable, "-m", "workbench.cli", *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


@pytest.mark.parametrize("command", [("timeline",), ("timeline", "--json"), ("analyze",), ("verify",), ("report",)],
                         ids=" ".join)
def test_closed_pipe_is_quiet(command, good):
    """`gpuwb timeline B | head -1`: the reader goes away; no 'Exception ignored', no traceback."""
    proc = _gpuwb(command[0], good, *command[1:])
    proc.stdout.close()  # the reader is gone before gpuwb writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""
