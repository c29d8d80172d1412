"""Expected failures are one line and exit 2; a bug says "internal error", keeps its traceback in a
file it names, and exits 70."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

import workbench.commands.verify
from tests.conftest import run_cli
from workbench.analysis.causes import CatalogError
from workbench.analysis.playbook import PlaybookError
from workbench.cli import EX_SOFTWARE
from workbench.demo import DemoError
from workbench.errors import GpuwbError, InputError, UsageError
from workbench.ingest.inputs import IngestError
from workbench.store.bundle import BundleError
from workbench.timespec import parse_duration, parse_instant, parse_since

LINE = re.compile(r"gpuwb: internal error: (?P<type>\w+): (?P<message>.*) \(traceback saved to (?P<path>.+)\)")


def _raising(exc: BaseException):
    def run(args):
        raise exc
    return run


@pytest.mark.parametrize("error", [BundleError, IngestError, UsageError, InputError, PlaybookError, CatalogError,
                                   DemoError])
def test_every_expected_failure_shares_one_root(error):
    assert issubclass(error, GpuwbError)


@pytest.mark.parametrize("parse", [parse_duration, parse_instant, parse_since])
def test_a_bad_time_is_an_input_error(parse):
    with pytest.raises(InputError, match="yesterday"):
        parse("yesterday")


def test_expected_failure_is_one_line_exit_2(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(InputError("not a time: 'soon'")))
    code, out, err = run_cli("verify", tmp_path / "x.duckdb")
    assert (code, out, err) == (2, "", "gpuwb: error: not a time: 'soon'\n")
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("bug", [ValueError("invalid literal for int() with base 10: 'x'"), KeyError("host"),
                                 ZeroDivisionError("division by zero"), TypeError("bad operand\nsecond line")])
def test_a_bug_is_an_internal_error_with_its_traceback_kept(monkeypatch, tmp_path, bug):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(bug))
    code, out, err = run_cli("verify", tmp_path / "x.duckdb")
    assert code == EX_SOFTWARE == 70 and out == ""
    assert err.count("\n") == 1, err
    m = LINE.fullmatch(err.strip())
    assert m, err
    assert m["type"] == type(bug).__name__ and m["message"] == str(bug).splitlines()[0]
    saved = Path(m["path"])
    assert saved.parent == tmp_path / "state" / "gpuwb"
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and f"{type(bug).__name__}:" in text
    assert text.startswith("gpuwb ") and " verify " in text.splitlines()[0]


def test_the_traceback_file_masks_secrets_of_the_command_line(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(RuntimeError("HF_TOKEN=hf_abcdefghijklmnopqrstuv")))
    code, _, err = run_cli("verify", "HF_TOKEN=hf_abcdefghijklmnopqrstuv")
    assert code == EX_SOFTWARE
    text = Path(LINE.fullmatch(err.strip())["path"]).read_text()
    assert "hf_abcdefghijklmnopqrstuv" not in text and "HF_TOKEN=" in text


def test_an_unwritable_state_folder_falls_back_to_the_temp_folder(monkeypatch, tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder should be")
    spare = tmp_path / "tmp"
    spare.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(RuntimeError("boom")))
    code, _, err = run_cli("verify", tmp_path / "x.duckdb")
    assert code == EX_SOFTWARE
    assert Path(LINE.fullmatch(err.strip())["path"]).parent == spare


def test_nowhere_to_write_still_prints_one_line(monkeypatch, tmp_path):
    blocker = tmp_path / "state"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "below-a-file"))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(RuntimeError("boom")))
    code, _, err = run_cli("verify", tmp_path / "x.duckdb")
    assert (code, err) == (EX_SOFTWARE, "gpuwb: internal error: RuntimeError: boom "
                                        "(the traceback could not be saved)\n")


def test_a_bad_since_on_the_command_line_is_a_usage_error(tmp_path):
    code, out, err = run_cli("capture", "-o", tmp_path / "x.duckdb", "--since", "yesterday")
    assert code == 2 and err.startswith("gpuwb: error: not a duration or time: 'yesterday'") and "\n" == err[-1]
    assert err.count("\n") == 1


STORAGE = [("Corrupt database file: computed checksum 1 does not match stored checksum 2 in block at location 3",
            "is damaged: Corrupt database file"),
           ("Catalog Error: Table with name event does not exist!", "is damaged: Catalog Error: Table with name event"),
           ("IO Error: Could not write file \"x.duckdb.wal\": No space left on device", "could not be written")]


@pytest.mark.parametrize(("text", "said"), STORAGE, ids=["checksum", "missing table", "full disk"])
def test_a_storage_error_from_duckdb_is_one_line_exit_2(monkeypatch, tmp_path, text, said):
    import duckdb

    kind = {"C": duckdb.Error, "Ca": duckdb.CatalogException, "I": duckdb.IOException}[
        "Ca" if text.startswith("Catalog") else text[0]]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run", _raising(kind(text)))
    code, out, err = run_cli("verify", tmp_path / "x.duckdb")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("gpuwb: error: ") and said in err and "internal error" not in err
    assert not (tmp_path / "state").exists()


def test_a_catalog_error_about_no_bundle_table_is_still_a_bug(monkeypatch, tmp_path):
    import duckdb

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run",
                        _raising(duckdb.CatalogException("Catalog Error: Table with name evnt does not exist!")))
    code, _, err = run_cli("verify", tmp_path / "x.duckdb")
    assert code == EX_SOFTWARE and "internal error" in err


def test_a_signal_duckdb_turned_into_query_interrupted_ends_the_command_as_that_signal(monkeypatch, tmp_path):
    """DuckDB runs the signal handler while it executes a statement, swallows the handler's exception and raises
    RuntimeError('Query interrupted'): the command still ends as SIGTERM ends it, not as a bug."""
    import os
    import signal
    import threading

    import duckdb

    def run(args):
        con = duckdb.connect()
        threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGTERM)).start()  # arrives while DuckDB runs
        con.execute("SELECT sum(hash(i)) FROM range(300000000) t(i)").fetchall()
        return 0

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(workbench.commands.verify, "run", run)
    code, _, err = run_cli("verify", tmp_path / "x.duckdb")
    assert (code, err) == (143, "gpuwb: terminated by SIGTERM\n")
