"""``gpuwb open``: which bundle it opens, and what it says when it cannot open a terminal UI."""

from __future__ import annotations

import signal

import pytest

from tests.conftest import run_cli
from workbench.commands.open import bundle_for
from workbench.errors import UsageError


def test_a_bundle_opens_as_it_is(tmp_path):
    from workbench.store.bundle import Bundle

    path = tmp_path / "incident.duckdb"
    Bundle.create(path).close()
    assert bundle_for([str(path)], None) == (path, False)


def test_raw_evidence_gets_a_new_bundle_beside_it_and_reuses_it_next_time(tmp_path):
    folder = tmp_path / "incident-42"
    folder.mkdir()
    (folder / "dmesg.txt").write_text("[    1.0] hello\n")
    target, ingest = bundle_for([str(folder)], None)
    assert target == tmp_path / "incident-42.duckdb" and ingest
    target.write_bytes(b"")  # exists now: opened as it is, never re-ingested over
    assert bundle_for([str(folder)], None) == (target, False)
    assert bundle_for([str(folder / "dmesg.txt")], str(tmp_path / "x.duckdb")) == (tmp_path / "x.duckdb", True)


def test_a_file_is_never_its_own_bundle(tmp_path):
    log = tmp_path / "kern.duckdb"
    log.write_text("not a bundle\n")
    with pytest.raises(UsageError):
        bundle_for([str(log)], None)


def test_without_a_terminal_it_says_so_in_one_line(tmp_path):
    from workbench.store.bundle import Bundle

    path = tmp_path / "b.duckdb"
    Bundle.create(path).close()
    code, out, err = run_cli("open", path)
    assert code == 2 and err.count("\n") == 1 and "needs a terminal" in err and "Traceback" not in err


@pytest.fixture(scope="module")
def demo_bundle(tmp_path_factory):
    from tests.workbench.tui.conftest import demo_incident

    return demo_incident(tmp_path_factory.mktemp("open-signals")).path


@pytest.mark.parametrize(("when", "after"), [(b"\x1b[?1049h", 0.2), (b"\x1b[?1049h", 0.7), (b"\x1b[?1049h", 1.5),
                                             (b"Root cause, ranked", 0.0)])
@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_closes_the_cockpit_cleanly_with_its_status(demo_bundle, when, after, signum, status):
    """Sent while the cockpit starts (screens mounting, the analysis and the report model in their
    threads) or once it is drawn: the terminal is given back, one line names the signal. It used to
    raise where the main thread was, inside a Textual handler: a traceback, and at times exit 0."""
    from tests.workbench.tui.conftest import Terminal

    term = Terminal("open", str(demo_bundle), "--author", "alice")
    try:
        term.wait_for(when)
        term.read(after)
        before = len(term.output)
        term.process.send_signal(signum)
        code = term.finish()
    finally:
        term.close()
    tail = term.output[before:].decode("utf-8", "replace")
    assert code == status
    assert "Traceback" not in tail and "RuntimeWarning" not in tail and "Exception" not in tail, tail[-2000:]
    assert "\x1b[?1049l" in tail  # the alternate screen left
    assert tail.rstrip().endswith(f"gpuwb: terminated by {signal.Signals(signum).name}")


def test_the_demos_cockpit_ends_on_a_signal_as_gpuwb_open_does(tmp_path):
    """``gpuwb demo`` opens the same cockpit: SIGTERM there is exit 143 and one line too, not exit 0."""
    from tests.workbench.tui.conftest import Terminal

    term = Terminal("demo", "--only", "training", "--out", str(tmp_path / "demo"))
    try:
        term.wait_for(b"Root cause, ranked")
        before = len(term.output)
        term.process.send_signal(signal.SIGTERM)
        code = term.finish()
    finally:
        term.close()
    tail = term.output[before:].decode("utf-8", "replace")
    assert code == 143 and "Traceback" not in tail
    assert tail.rstrip().endswith("gpuwb: terminated by SIGTERM")
