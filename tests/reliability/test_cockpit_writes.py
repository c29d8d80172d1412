"""Journal writes while another process holds the bundle for writing: none is lost, none freezes the cockpit.

DuckDB lets no other process in while one writes a file, and an ingest holds the bundle for minutes. A note
written meanwhile used to freeze the cockpit for ten seconds and then vanish. Here a real second process holds
it (a child that opens the bundle for writing, a real ``gpuwb ingest`` stopped half-way), while the responder
writes notes with the cockpit's own keys and forms.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.reliability.conftest import ROOT
from tests.workbench.tui.conftest import Incident, Terminal, demo_incident, type_text, wait_for
from workbench.store import journal
from workbench.store.bundle import Bundle, BundleBusy
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.dialogs import NoteDialog
from workbench.tui.widgets import PlainStatic

HOLD_S = 8.0
"""At least this long the other process holds the bundle in the first test, as a short ingest would."""
HOLDER = textwrap.dedent("""
    import sys, time
    from datetime import datetime, timezone
    from workbench.store.bundle import Bundle, BundleBusy
    for _ in range(600):  # the cockpit may be in the middle of one of its short reads
        try:
            bundle = Bundle.open(sys.argv[1], write=True)
            break
        except BundleBusy:
            time.sleep(0.1)
    print("held", flush=True)
    sys.stdin.readline()  # until the test lets go (or kills it)
    bundle.close()
    print(datetime.now(timezone.utc).replace(tzinfo=None).isoformat(), flush=True)
""")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Incident:
    return demo_incident(tmp_path_factory.mktemp("writes"))


@pytest.fixture
def bundle(demo, tmp_path) -> Path:
    path = tmp_path / "incident.duckdb"
    shutil.copyfile(demo.path, path)
    return path


@pytest.fixture
def holder(bundle) -> Iterator[Callable[[], subprocess.Popen[str]]]:
    """``hold()`` starts a second process that holds ``bundle`` open for writing until a line on its stdin
    (``release``) or the end of the test."""
    started: list[subprocess.Popen[str]] = []

    def hold() -> subprocess.Popen[str]:
        child = subprocess.Popen([sys.executable, "-c", HOLDER, str(bundle)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        started.append(child)
        assert child.stdout.readline().strip() == "held"
        return child

    yield hold
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def release(child: subprocess.Popen[str]) -> datetime:
    """Let the holder close the bundle; when it did (UTC)."""
    child.stdin.write("\n")
    child.stdin.flush()
    return datetime.fromisoformat(child.stdout.readline().strip())


async def _timeline(pilot, app: Cockpit) -> None:
    await wait_for(pilot, lambda: app.model is not None, seconds=60)  # no background read left to collide with
    await pilot.press("t")
    await wait_for(pilot, lambda: app.current_mode == "timeline")
    await pilot.pause()


async def _write_note(pilot, app: Cockpit, text: str) -> None:
    """``n``, the text, Enter: as the responder does it."""
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog))
    await type_text(pilot, text)
    await pilot.press("enter")
    await wait_for(pilot, lambda: not isinstance(app.screen, NoteDialog))


def _notes(path: Path) -> list[journal.Entry]:
    with Bundle.open(path) as bundle:
        return journal.state(bundle).notes


async def test_three_notes_written_while_another_process_writes_all_land_in_order(bundle, demo, holder):
    app = Cockpit(SharedBundle(bundle, "alice"), analysis=demo.analysis)
    texts = ["riser reseated", "Xid 79 gone after reboot", "node03 back in the pool"]
    async with app.run_test(size=(120, 40)) as pilot:
        await _timeline(pilot, app)
        child, held_at = holder(), time.monotonic()
        beats: list[float] = []
        app.set_interval(0.05, lambda: beats.append(time.monotonic()))
        written = []
        for text in texts:
            await _write_note(pilot, app, text)
            written.append(datetime.now(timezone.utc).replace(tzinfo=None))
        await wait_for(pilot, lambda: app.saving.startswith("saving 3 journal entries…"), seconds=10)
        assert f"(bundle busy: PID {child.pid} " in app.saving
        line = app.screen.query_one("#saving", PlainStatic)
        assert line.display and "bundle busy" in str(line.render())
        assert _held(app.store) and app.writer.pending == 3  # nothing has landed behind its back
        await pilot.pause(max(0.0, HOLD_S - (time.monotonic() - held_at)))
        released = release(child)
        await wait_for(pilot, lambda: not app.saving and app.writer.pending == 0, seconds=30)
        stall = max((b - a for a, b in zip(beats, beats[1:], strict=False)), default=0.0)
    assert stall < 1.5, f"the cockpit froze for {stall:.1f} s"  # a write used to wait on the event loop, 5-10 s
    notes = _notes_of(bundle, "alice")
    assert [n.body["text"] for n in notes] == texts
    assert all(n.at <= w < released for n, w in zip(notes, written, strict=True))  # when written, not when landed


def _held(store: SharedBundle) -> bool:
    """Whether another process holds the bundle for writing (it cannot even be read then). Through the
    store, which takes turns with the cockpit's writer thread in this process."""
    try:
        with store.read(wait=0.5):
            return False
    except BundleBusy:
        return True


def _notes_of(path: Path, author: str) -> list[journal.Entry]:
    return [n for n in _notes(path) if n.author == author]


async def test_quitting_while_a_note_waits_brings_its_form_back_not_saved(bundle, demo, holder):
    app = Cockpit(SharedBundle(bundle, "alice"), analysis=demo.analysis)
    async with app.run_test(size=(120, 40)) as pilot:
        await _timeline(pilot, app)
        child = holder()
        await _write_note(pilot, app, "do not lose me")
        await wait_for(pilot, lambda: "bundle busy" in app.saving, seconds=10)
        await pilot.press("q")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog) and app.screen.filled().get("text"))
        dialog = app.screen
        assert dialog.filled()["text"] == "do not lose me"
        error = str(dialog.query_one("#dialog-error", PlainStatic).render())
        assert error.startswith("not saved: the bundle was still busy") and f"PID {child.pid}" in error
        assert app.is_running and not app.saving
        child.kill()
        child.wait(timeout=30)
        await pilot.press("enter")  # saved again, now that the bundle is free
        await wait_for(pilot, lambda: not isinstance(app.screen, NoteDialog) and app.writer.pending == 0)
        await wait_for(pilot, lambda: app.journal_version > 0, seconds=20)
    assert [n.body["text"] for n in _notes(bundle) if n.author == "alice"] == ["do not lose me"]


async def test_a_note_that_cannot_land_in_time_comes_back_in_its_form(bundle, demo, holder):
    app = Cockpit(SharedBundle(bundle, "alice"), analysis=demo.analysis)
    app.writer.bound_s = 2.0
    async with app.run_test(size=(120, 40)) as pilot:
        await _timeline(pilot, app)
        child = holder()
        await pilot.press("n")
        await wait_for(pilot, lambda: isinstance(app.screen, NoteDialog))
        first = app.screen
        await type_text(pilot, "written during the ingest")
        await pilot.press("enter")

        def back() -> str:
            shown = app.screen
            if shown is first or not isinstance(shown, NoteDialog) or not shown.query("#dialog-error"):
                return ""
            return str(shown.query_one("#dialog-error", PlainStatic).render())

        await wait_for(pilot, back, seconds=20)  # a new form: the first one closed when the note was queued
        assert back().startswith("not saved: the bundle stayed busy for")
        assert app.screen.filled()["text"] == "written during the ingest"
        await pilot.press("escape")  # the responder's own choice to drop it
        release(child)
        await pilot.pause(1)
    assert _notes_of(bundle, "alice") == []


async def test_a_real_ingest_holding_the_bundle_is_named_and_the_note_lands_after_it(bundle, demo, tmp_path):
    """A real ``gpuwb ingest`` into the bundle, stopped (SIGSTOP) once it holds it: as long as it is stopped
    it holds the bundle, whatever the speed of the machine."""
    big = tmp_path / "node09-dmesg.txt"
    big.write_text("".join(f"[{n * 0.001:12.6f}] mlx5_core 0000:0c:00.0: Port module event: module {n % 8}, "
                           "Cable plugged\n" for n in range(20000)))
    app = Cockpit(SharedBundle(bundle, "alice"), analysis=demo.analysis)
    async with app.run_test(size=(120, 40)) as pilot:
        await _timeline(pilot, app)
        ingest = subprocess.Popen([sys.executable, "-m", "workbench.cli", "ingest", "-q", str(bundle), str(big),
                                   "--host", "node09", "--boot-time", "2026-03-14T00:00:00Z"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))
        try:
            deadline = time.monotonic() + 120
            while not _has_open(ingest.pid, bundle):
                assert ingest.poll() is None, ingest.communicate()
                assert time.monotonic() < deadline, "the ingest never opened the bundle"
                time.sleep(0.01)
            os.kill(ingest.pid, signal.SIGSTOP)
            await _write_note(pilot, app, "noted while ingesting")
            await wait_for(pilot, lambda: "bundle busy" in app.saving, seconds=10)
            assert f"gpuwb ingest in progress, PID {ingest.pid}" in app.saving
            os.kill(ingest.pid, signal.SIGCONT)
            out, err = ingest.communicate(timeout=300)
        finally:
            if ingest.poll() is None:
                os.kill(ingest.pid, signal.SIGCONT)
                ingest.kill()
                ingest.wait(timeout=30)
        assert ingest.returncode == 0, err
        await wait_for(pilot, lambda: app.writer.pending == 0 and not app.saving, seconds=30)
    assert [n.body["text"] for n in _notes(bundle) if n.author == "alice"] == ["noted while ingesting"]
    with Bundle.open(bundle) as opened:
        assert any(a["source"].endswith("node09-dmesg.txt") for a in opened.artifacts())


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (it took the bundle's lock when it opened it)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path.resolve()):
                return True
        except OSError:
            continue
    return False


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_while_a_note_waits_names_the_note_and_restores_the_terminal(bundle, holder, signum, status):
    term = Terminal("open", str(bundle), "--author", "alice")
    try:
        term.wait_for(b"Root cause")
        term.read(3)  # the analysis and the postmortem model, read before the other process takes the bundle
        child = holder()
        term.type("t")
        term.wait_for(b"filter")
        term.type("n")
        term.wait_for(b"Add a note")
        term.type("kept on stderr\r")
        term.wait_for(b"bundle busy", seconds=30)
        before = len(term.output)
        term.process.send_signal(signum)
        assert term.finish() == status
        tail = term.output[before:].decode("utf-8", "replace")
        release(child)
    finally:
        term.close()
    assert "Traceback" not in tail and "RuntimeWarning" not in tail
    assert "\x1b[?1049l" in tail  # the alternate screen left: the shell's own screen is back
    assert "gpuwb: not saved (the bundle was busy): note 'kept on stderr'" in tail
    assert f"gpuwb: terminated by {signal.Signals(signum).name}" in tail
    assert _notes_of(bundle, "alice") == []
