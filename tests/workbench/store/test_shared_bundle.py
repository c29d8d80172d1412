"""Two responders on one bundle (two processes, as two SSH sessions would be): both read, both
write journal entries at the same time, nothing is lost and neither sees a lock error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from workbench.store import journal
from workbench.store.bundle import Bundle, BundleBusy
from workbench.store.shared_bundle import SharedBundle, _turns

WRITER = textwrap.dedent("""
    import sys
    from workbench.store import journal
    from workbench.query import events as query
    from workbench.store.shared_bundle import SharedBundle
    store = SharedBundle(sys.argv[1], sys.argv[2])
    for i in range(int(sys.argv[3])):
        with store.read() as bundle:
            query.count_events(bundle)
        with store.write() as bundle:
            journal.add_note(bundle, store.author, f"{store.author} note {i}")
""")


def test_two_processes_write_notes_concurrently_and_all_are_kept(tmp_path):
    path = tmp_path / "b.duckdb"
    Bundle.create(path).close()
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), who, "15"], stderr=subprocess.PIPE, text=True)
             for who in ("alice", "bob")]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with Bundle.open(path) as bundle:
        notes = journal.state(bundle).notes
    texts = sorted(n.body["text"] for n in notes)
    assert texts == sorted([f"alice note {i}" for i in range(15)] + [f"bob note {i}" for i in range(15)])
    assert {n.author for n in notes} == {"alice", "bob"}


def test_a_reader_waits_for_a_short_writer_instead_of_failing(tmp_path):
    path = tmp_path / "b.duckdb"
    Bundle.create(path).close()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from workbench.store.bundle import Bundle; "
                               "b = Bundle.open(sys.argv[1], write=True); print('held', flush=True); "
                               "time.sleep(0.5); b.close()", str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    store = SharedBundle.__new__(SharedBundle)
    store.path, store.author, store.retry_s = path, "carol", 10.0
    with store.read() as bundle:
        assert bundle.meta()
    holder.wait(timeout=30)


def test_a_write_waits_for_a_background_read_of_the_same_process(tmp_path):
    """DuckDB refuses a writable connection while this process holds a read-only one to the same file
    (the cockpit's analysis thread and a journal write): they take turns instead of failing."""
    path = tmp_path / "b.duckdb"
    Bundle.create(path).close()
    store = SharedBundle(path, "alice")
    reading = threading.Event()

    def background_read() -> None:
        with store.read() as bundle:
            reading.set()
            bundle.meta()
            threading.Event().wait(0.3)

    reader = threading.Thread(target=background_read)
    reader.start()
    assert reading.wait(10)
    with store.write() as bundle:
        journal.add_note(bundle, store.author, "written while the analysis read")
    reader.join()
    with store.read() as bundle:
        assert [n.body["text"] for n in journal.state(bundle).notes] == ["written while the analysis read"]


HOLD = textwrap.dedent("""
    import sys
    from workbench.store.bundle import Bundle
    bundle = Bundle.open(sys.argv[1], write=True)
    print("held", flush=True)
    sys.stdin.readline()
    bundle.close()
""")


def test_a_wait_for_the_bundle_is_one_deadline_not_one_per_lock(tmp_path):
    """The turn inside this process and the file's lock share one wait: a cockpit thread holding its
    turn and a bundle held by another process cost ``retry_s`` in all (it was the two waits added)."""
    path = tmp_path / "b.duckdb"
    Bundle.create(path).close()
    store = SharedBundle(path, "alice", retry_s=3.0)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    taken, done = threading.Event(), threading.Event()

    def take_a_turn() -> None:  # a background reader of this cockpit, in the middle of a query
        with _turns(path).hold(write=False, deadline=time.monotonic() + 10, path=path):
            taken.set()
            done.wait(2.5)

    turn = threading.Thread(target=take_a_turn)
    try:
        assert holder.stdout.readline().strip() == "held"
        turn.start()
        assert taken.wait(10)
        start = time.monotonic()
        with pytest.raises(BundleBusy), store.write():
            pass
        waited = time.monotonic() - start
        assert 2.4 < waited < 4.2, waited  # 2.5 s for the turn, the rest of the 3 s for the file, not 2.5 + 3
    finally:
        done.set()
        turn.join()
        holder.kill()
        holder.wait(timeout=30)
