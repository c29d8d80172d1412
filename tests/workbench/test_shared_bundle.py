"""Two responders on one bundle (two processes, as two SSH sessions would be): both read, both
write journal entries at the same time, nothing is lost and neither sees a lock error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from workbench import journal
from workbench.bundle import Bundle
from workbench.shared_bundle import SharedBundle

WRITER = textwrap.dedent("""
    import sys
    from workbench import journal, query
    from workbench.shared_bundle import SharedBundle
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
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from workbench.bundle import Bundle; "
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
    import threading

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
