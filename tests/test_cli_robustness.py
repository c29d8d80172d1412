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
from workbench.store.bundle import Bundle

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


def _gpuwb(*args: str | Path, cwd: Path = ROOT) -> subprocess.Popen:
    """gpuwb in a child process with ordinary (block-buffered) stdout, as a shell pipeline runs it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen([sys.executable, "-m", "workbench.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("command", [("timeline",), ("timeline", "--json"), ("analyze",), ("verify",), ("report",)],
                         ids=" ".join)
def test_closed_pipe_is_quiet(command, good):
    """`gpuwb timeline B | head -1`: the reader goes away; no 'Exception ignored', no traceback."""
    proc = _gpuwb(command[0], good, *command[1:])
    proc.stdout.close()  # the reader is gone before gpuwb writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert err == ""


# -- ingest of hostile inputs ---------------------------------------------------------------------

def _ingest_in_child(bundle: Path, *paths: Path | str, cwd: Path = ROOT) -> tuple[int, str, str]:
    """In a child with a deadline: a pipe or a device that is opened by mistake blocks forever."""
    proc = _gpuwb("ingest", bundle, *paths, cwd=cwd)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out.decode(), err.decode()


def _tar_gz(path: Path, members: dict[str, bytes]) -> None:
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _status(out: str) -> dict[str, str]:
    """file -> status from the ingest summary table."""
    rows = {}
    for line in out.splitlines()[2:]:
        cells = line.split()
        if len(cells) >= 8 and cells[-1] in ("new", "duplicate", "error", "skipped"):
            rows[cells[0]] = cells[-1]
    return rows


def test_hostile_folder_lands_the_good_files_and_reports_each_bad_one(tmp_path, bundle_path):
    import socket
    import zipfile

    node = tmp_path / "evidence" / "node01"
    node.mkdir(parents=True)
    (node / "kern.log").write_text(SYSLOG_LINE)
    (node / "junk.bin").write_bytes(os.urandom(65536))
    (node / "nuls.txt").write_bytes(b"\0" * 65536)
    (node / "one-line.log").write_bytes(b"x" * (50 << 20))
    (node / "bad-utf8.log").write_bytes(b"NVRM: Xid \xff\xfe\xc3(PCI:0000:19:00): 79\n" * 50)
    (node / "empty.log").write_bytes(b"")
    (node / "fake.gz").write_bytes(b"not gzip at all\n")
    os.mkfifo(node / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(node / "sock"))
    (node / "zero").symlink_to("/dev/zero")
    (node / "passwd").symlink_to("/etc/passwd")
    (node / "loop").mkdir()
    (node / "loop" / "self").symlink_to("../loop")
    (node / "a").symlink_to(node / "b")
    (node / "b").symlink_to(node / "a")
    (node / "inside-link.log").symlink_to(node / "kern.log")
    whole = tmp_path / "whole.tar.gz"
    _tar_gz(whole, {f"node05/f{i}.log": f"2026-06-03T14:00:0{i}+00:00 node05 kernel: line {i}\n".encode() * 4000
                    for i in range(6)})
    (node / "truncated.tar.gz").write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with zipfile.ZipFile(node / "absolute.zip", "w") as zf:
        zf.writestr("/etc/evil.txt", "evil")
        zf.writestr("ok.txt", "kept")
    (node / "not-a.zip").write_bytes(b"PK\x03\x04 but nothing else")
    try:
        code, out, err = _ingest_in_child(bundle_path, "evidence", cwd=tmp_path)  # short names in the table
    finally:
        sock.close()
    assert code == 0, err
    assert "Traceback" not in err + out
    status = _status(out)
    base = "evidence/node01"
    for name in ("fifo", "sock", "zero", "passwd", "loop/self", "a", "b"):
        assert status[f"{base}/{name}"] == "skipped", (name, out)
    assert status[f"{base}/absolute.zip!/etc/evil.txt"] == "error"
    assert status[f"{base}/truncated.tar.gz"] == "error" and "truncated or damaged archive" in out
    assert status[f"{base}/not-a.zip"] == "error" and "not a readable zip archive" in out
    assert "outside the folder" in out and "named pipe" in out and "socket" in out
    with Bundle.open(bundle_path) as bundle:
        sources = {a["source"].removeprefix(base + "/") for a in bundle.artifacts()}
        assert bundle.verify() == []
    assert {"junk.bin", "nuls.txt", "one-line.log", "bad-utf8.log", "empty.log", "fake.gz",
            "absolute.zip!ok.txt"} <= sources
    # a link that stays inside the folder is followed (its target is then the same bytes again)
    assert status[f"{base}/inside-link.log"] == "new" and status[f"{base}/kern.log"] == "duplicate"
    assert any(s.startswith("truncated.tar.gz!node05/") for s in sources)  # what came before the damage
    assert not any("passwd" in s or "evil" in s for s in sources)


@pytest.mark.parametrize("make", ["fifo", "dev-zero", "socket"])
def test_a_special_file_named_directly_is_refused_not_read(make, tmp_path, bundle_path):
    import socket

    target = tmp_path / "thing"
    sock = None
    if make == "fifo":
        os.mkfifo(target)
    elif make == "dev-zero":
        target.symlink_to("/dev/zero")
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    try:
        code, out, err = _ingest_in_child(bundle_path, target)
    finally:
        if sock:
            sock.close()
    assert code == 2 and "not a regular file" in out
    assert err == "gpuwb: error: nothing was ingested (see the reasons above)\n"


def test_unreadable_file_is_reported_and_the_rest_lands(tmp_path, bundle_path, monkeypatch):
    import builtins

    import workbench.ingest.inputs

    folder = tmp_path / "node01"
    folder.mkdir()
    (folder / "kern.log").write_text(SYSLOG_LINE)
    (folder / "secret.log").write_text("root only\n")

    def guarded_open(file, *args, **kwargs):
        if str(file).endswith("secret.log"):  # chmod 000 means nothing to root, so deny it here
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, *args, **kwargs)

    monkeypatch.setattr(workbench.ingest.inputs, "open", guarded_open, raising=False)
    monkeypatch.chdir(tmp_path)  # short names in the summary table
    code, out, err = run_cli("ingest", bundle_path, "node01")
    assert code == 0, err
    assert _status(out)["node01/secret.log"] == "error" and "Permission denied" in out
    with Bundle.open(bundle_path) as bundle:
        assert [a["source"] for a in bundle.artifacts()] == ["node01/kern.log"]
        assert bundle.verify() == []


def test_corrupt_zip_member_is_reported_and_its_neighbours_land(tmp_path, bundle_path, monkeypatch):
    import zipfile

    archive = tmp_path / "logs.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("node09/kern.log", SYSLOG_LINE * 2000)
        zf.writestr("node09/uptime.txt", "2026-06-03 10:00:00\n")
    data = bytearray(archive.read_bytes())
    start = data.index(b"node09/kern.log") + 200
    data[start:start + 64] = bytes(64)  # a damaged stretch inside the first member's compressed data
    archive.write_bytes(bytes(data))
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ingest", bundle_path, "logs.zip")
    assert code == 0, err
    status = _status(out)
    assert status["logs.zip!node09/kern.log"] == "error" and "damaged or unsupported archive member" in out
    assert status["logs.zip!node09/uptime.txt"] == "new"


def test_interrupted_ingest_keeps_committed_files_and_still_verifies(tmp_path, bundle_path, monkeypatch):
    """Ctrl-C in the middle: the group in flight is rolled back, earlier groups stay and are sealed
    (incomplete); running the same ingest again adds the rest and seals complete."""
    import workbench.ingest.session
    from workbench.ingest.session import ingest_paths

    folder = tmp_path / "node01"
    folder.mkdir()
    for i in range(4):
        (folder / f"f{i}.log").write_text(SYSLOG_LINE.replace("pid=1", f"pid={i}"))
    monkeypatch.setattr(workbench.ingest.session, "BATCH_BYTES", 1)  # commit after every file
    original = Bundle.add_artifact

    def interrupted(self, stream, **kwargs):
        result = original(self, stream, **kwargs)
        if kwargs["source"].endswith("f2.log"):
            raise KeyboardInterrupt
        return result

    with Bundle.create(bundle_path) as bundle:
        monkeypatch.setattr(Bundle, "add_artifact", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ingest_paths(bundle, [str(folder)])
        monkeypatch.setattr(Bundle, "add_artifact", original)
    with Bundle.open(bundle_path) as bundle:
        assert sorted(Path(a["source"]).name for a in bundle.artifacts()) == ["f0.log", "f1.log"]
        assert bundle.verify() == [] and bundle.last_seal()["complete"] is False
        sources = {r[0] for r in bundle.con.execute("SELECT DISTINCT artifact FROM event").fetchall()}
        assert sources == {a["sha256"] for a in bundle.artifacts()}  # no rows of the rolled-back file
    code, out, err = run_cli("ingest", bundle_path, folder)
    assert code == 0 and "2 new, 2 duplicate" in out, err
    code, out, _ = run_cli("verify", bundle_path)
    assert code == 0 and "interrupted" not in out


def test_mistyped_ingest_leaves_no_empty_bundle_behind(tmp_path, bundle_path):
    (tmp_path / "f.log").write_text(SYSLOG_LINE)
    code, _, err = run_cli("ingest", bundle_path, tmp_path / "f.lgo")
    assert_usage_error(code, err, "no such file or folder")
    code, _, err = run_cli("ingest", bundle_path, tmp_path / "f.log", "--kind", "dmseg")
    assert_usage_error(code, err, "unknown kind 'dmseg'")
    assert not bundle_path.exists()


# -- outputs ----------------------------------------------------------------------------------------

def test_report_never_overwrites_a_bundle(good, tmp_path):
    other = tmp_path / "other.duckdb"
    other.write_bytes(good.read_bytes())
    for target in (good, other):
        before = target.read_bytes()
        code, _, err = run_cli("report", good, "-o", target)
        assert_usage_error(code, err, "DuckDB file", "refusing to overwrite")
        assert target.read_bytes() == before
    code, out, _ = run_cli("verify", good)
    assert code == 0, out


@pytest.mark.parametrize("where, needle", [("missing/r.md", "does not exist"), ("a-folder", "is a folder")])
def test_report_output_path_problems_are_found_before_the_work(where, needle, good, tmp_path):
    (tmp_path / "a-folder").mkdir()
    code, _, err = run_cli("report", good, "-o", tmp_path / where)
    assert_usage_error(code, err, needle)


def test_report_replaces_an_older_report_whole(good, tmp_path):
    target = tmp_path / "postmortem.md"
    target.write_text("an older draft\n")
    code, _, err = run_cli("report", good, "-o", target)
    assert code == 0 and "replaced the old file" in err
    assert target.read_text().startswith("# ") and "older draft" not in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["postmortem.md"]  # no temporary file left behind


def test_unwritable_report_path_is_one_line(good, monkeypatch, tmp_path):
    from workbench.commands import report

    def full_disk(self, *args, **kwargs):
        raise OSError(28, "No space left on device", str(self))

    monkeypatch.setattr(report.Path, "write_text", full_disk)
    code, _, err = run_cli("report", good, "-o", tmp_path / "r.md")
    assert_usage_error(code, err, str(tmp_path / "r.md"), "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_export_into_a_file_is_refused(good, tmp_path):
    target = tmp_path / "export.parquet"
    target.write_bytes(b"keep me")
    code, _, err = run_cli("export", good, "--parquet", target)
    assert_usage_error(code, err, "is a file")
    assert target.read_bytes() == b"keep me"


def test_export_into_an_uncreatable_folder_is_one_line(good, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli("export", good, "--parquet", tmp_path / "file" / "sub")
    assert_usage_error(code, err, "Not a directory")


def test_merge_with_the_same_bundle_twice_is_refused(good, tmp_path):
    out = tmp_path / "merged.duckdb"
    code, _, err = run_cli("merge", out, good, good.parent / "." / good.name)
    assert_usage_error(code, err, "given twice")
    assert not out.exists()


def test_merge_into_an_existing_file_is_refused(good, tmp_path):
    out = tmp_path / "exists.duckdb"
    out.write_bytes(b"precious")
    code, _, err = run_cli("merge", out, good)
    assert_usage_error(code, err, "already exists")
    assert out.read_bytes() == b"precious"


def test_capture_into_a_missing_folder_fails_before_collecting(tmp_path):
    code, out, err = run_cli("capture", "-o", tmp_path / "nope" / "b.duckdb", "--only", "host")
    assert_usage_error(code, err, "does not exist")
    assert out == ""


def test_demo_into_a_file_is_refused(tmp_path):
    target = tmp_path / "not-a-folder"
    target.write_text("x")
    code, _, err = run_cli("demo", "--out", target)
    assert_usage_error(code, err, "is a file")


# -- options --------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (("timeline", "{b}", "--since", "yesterday"), "not an ISO 8601 time"),
    (("timeline", "{b}", "--until", "2026-13-45"), "not an ISO 8601 time"),
    (("timeline", "{b}", "--limit", "-1"), "--limit"),
    (("timeline", "{b}", "--layer", "hw"), "invalid choice"),
    (("analyze", "{b}", "--top", "0"), "--top"),
    (("analyze", "{b}", "--workload", "batch"), "invalid choice"),
    (("report", "{b}", "-f", "pdf"), "invalid choice"),
    (("report", "{b}", "--generated-at", "now"), "not an ISO 8601 time"),
    (("ingest", "{b}", "{b}", "--boot-time", "yesterday"), "not an ISO 8601 time"),
    (("capture", "-o", "{tmp}/c.duckdb", "--since", "last tuesday"), "not a duration or time"),
    (("capture", "-o", "{tmp}/c.duckdb", "--timeout-scale", "0"), "--timeout-scale"),
    (("capture", "-o", "{tmp}/c.duckdb", "--only", "nosuch"), "unknown collector"),
    (("capture", "-o", "{b}"), "already exists"),
    (("frobnicate",), "invalid choice"),
    (("timeline",), "required"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_bad_options_are_one_line(args, needle, good, tmp_path):
    code, _, err = run_cli(*(a.format(b=good, tmp=tmp_path) for a in args))
    assert_usage_error(code, err, needle)
    assert not (tmp_path / "c.duckdb").exists()


def test_timeline_filter_on_a_kind_the_bundle_never_mentions_says_so(good):
    code, out, err = run_cli("timeline", good, "--kind", "xdi")
    assert code == 0 and out == ""
    assert "no event has kind 'xdi'" in err and "gpu_fell_off_bus" in err and err.count("\n") == 1


# -- empty and odd bundles ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("empty") / "empty.duckdb"
    with Bundle.create(path, title="nothing yet") as bundle:
        bundle.seal()
    return path


@pytest.fixture(scope="module")
def unknown_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("unknown")
    (folder / "junk.bin").write_bytes(os.urandom(8192))
    (folder / "notes.txt").write_text("called the vendor, waiting\n")
    path = folder / "unknown.duckdb"
    code, out, err = run_cli("ingest", path, folder / "junk.bin", folder / "notes.txt")
    assert code == 0 and "0 events" in out, err or out
    return path


@pytest.mark.parametrize("which", ["empty", "unknown_only"])
@pytest.mark.parametrize("command", [("report",), ("report", "-f", "html"), ("report", "-f", "json"), ("analyze",),
                                     ("analyze", "--json"), ("timeline",), ("verify",)], ids=" ".join)
def test_bundles_without_events_are_reported_plainly(command, which, request):
    bundle = request.getfixturevalue(which)
    code, out, err = run_cli(command[0], bundle, *command[1:])
    assert code == 0, err
    assert "Traceback" not in err
    if command[0] == "analyze" and "--json" in command:
        import json

        result = json.loads(out)
        assert result["hypotheses"] == [] and result["first_anomaly"] is None
    if command == ("report",):
        assert "no root cause" in out.lower()


def test_merge_of_event_free_bundles_verifies(empty, unknown_only, tmp_path):
    out = tmp_path / "merged.duckdb"
    code, text, err = run_cli("merge", out, empty, unknown_only)
    assert code == 0, err
    code, text, _ = run_cli("verify", out)
    assert code == 0 and text.startswith("OK: 2 artifacts intact")


def test_a_bundle_never_ingests_itself(tmp_path, monkeypatch):
    (tmp_path / "node01").mkdir()
    (tmp_path / "node01" / "kern.log").write_text(SYSLOG_LINE)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ingest", "b.duckdb", ".")  # the bundle lives inside the folder handed over
    assert code == 0, err
    assert _status(out)["b.duckdb"] == "skipped" and "the bundle being written" in out
    code, out, err = run_cli("ingest", "b.duckdb", "b.duckdb")
    assert code == 2 and err == "gpuwb: error: nothing was ingested (see the reasons above)\n"
    with Bundle.open("b.duckdb") as bundle:
        assert [a["source"] for a in bundle.artifacts()] == ["node01/kern.log"]


@pytest.mark.parametrize("command", ["timeline", "analyze", "report", "verify"])
def test_ctrl_c_is_one_line_and_exit_130(command, good, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Bundle, "open", interrupted)
    code, _, err = run_cli(command, good)
    assert code == 130 and err == "gpuwb: interrupted\n"


def test_full_disk_inside_duckdb_is_one_line(tmp_path, bundle_path, monkeypatch):
    def no_space(self):
        raise duckdb.TransactionException('Failed to commit: Could not write file "b.duckdb.wal": '
                                          "No space left on device")

    (tmp_path / "f.log").write_text(SYSLOG_LINE)
    monkeypatch.setattr(Bundle, "commit_batch", no_space)
    code, _, err = run_cli("ingest", bundle_path, tmp_path / "f.log")
    assert_usage_error(code, err, "No space left on device")


def test_file_names_that_are_not_utf8_are_ingested(tmp_path, bundle_path, monkeypatch):
    folder = os.fsencode(tmp_path) + b"/node\xff01"  # the byte 0xff, which no UTF-8 text holds
    os.mkdir(folder)
    with open(os.path.join(folder, b"kern-\xe9t\xe9.log"), "wb") as f:  # a Latin-1 name
        f.write(SYSLOG_LINE.encode())
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ingest", bundle_path, os.fsdecode(b"node\xff01"))
    assert code == 0, err
    assert "node\\xff01/kern-\\xe9t\\xe9.log" in out
    with Bundle.open(bundle_path) as bundle:
        assert [a["source"] for a in bundle.artifacts()] == ["node\\xff01/kern-\\xe9t\\xe9.log"]
        assert bundle.verify() == []


def test_truncated_gzip_keeps_what_came_before_the_cut(tmp_path, monkeypatch):
    import gzip

    lines = "".join(SYSLOG_LINE.replace("pid=1", f"pid={i}") for i in range(20000)).encode()
    whole = gzip.compress(lines)
    (tmp_path / "kern.log.gz").write_bytes(whole[: len(whole) // 2])
    _tar_gz(tmp_path / "bundle.tar.gz", {"node03/kern.log.gz": whole[: len(whole) // 2]})
    monkeypatch.chdir(tmp_path)
    for source, bundle in (("kern.log.gz", "a.duckdb"), ("bundle.tar.gz", "b.duckdb")):
        code, out, err = run_cli("ingest", bundle, source)
        assert code == 0, err
        assert "truncated or damaged compressed file: kept the" in out
        with Bundle.open(bundle) as b:
            [(events,)] = b.con.execute("SELECT count(*) FROM event WHERE kind = 'xid'").fetchall()
            assert 1000 < events < 20000
            assert b.verify() == []


@pytest.fixture
def held(good, tmp_path):
    """A copy of the good bundle that another process holds open for writing."""
    import shutil
    import textwrap

    path = tmp_path / "held.duckdb"
    shutil.copy(good, path)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys
        con = duckdb.connect({str(path)!r})
        print("ready", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "ready"
    yield path
    holder.stdin.close()
    holder.wait(timeout=30)


@pytest.mark.parametrize("command", [("timeline",), ("analyze",), ("report",), ("verify",), ("ingest", "{log}"),
                                     ("export", "--parquet", "{tmp}/pq"), ("merge",)], ids=" ".join)
def test_a_bundle_held_by_another_writer_is_busy_not_a_traceback(command, held, tmp_path):
    (tmp_path / "f.log").write_text(SYSLOG_LINE)
    args = [a.format(log=tmp_path / "f.log", tmp=tmp_path) for a in command[1:]]
    if command[0] == "merge":
        code, _, err = run_cli("merge", tmp_path / "out.duckdb", held)
    else:
        code, _, err = run_cli(command[0], held, *args)
    assert_usage_error(code, err, "is busy", "try again")


def test_archives_inside_an_archive_are_unpacked(tmp_path, monkeypatch):
    """A zip of per-node tarballs, as evidence is often handed over: every node's files land."""
    import zipfile

    for node in ("node01", "node02"):
        _tar_gz(tmp_path / f"{node}.tar.gz", {f"{node}/kern.log": SYSLOG_LINE.replace("node01", node).encode(),
                                              f"{node}/uptime.txt": f"2026-06-03 10:00:0{node[-1]}\n".encode()})
    with zipfile.ZipFile(tmp_path / "evidence.zip", "w") as zf:
        for node in ("node01", "node02"):
            zf.write(tmp_path / f"{node}.tar.gz", f"{node}.tar.gz")
        zf.writestr("fake.tar.gz", b"only the name is an archive")
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ingest", "b.duckdb", "evidence.zip")
    assert code == 0, err
    with Bundle.open("b.duckdb") as bundle:
        sources = {a["source"]: a["host"] for a in bundle.artifacts()}
        hosts = {r[0] for r in bundle.con.execute("SELECT DISTINCT host FROM event WHERE kind = 'xid'").fetchall()}
        assert bundle.verify() == []
    assert sources["evidence.zip!node01.tar.gz!node01/kern.log"] == "node01"
    assert sources["evidence.zip!node02.tar.gz!node02/uptime.txt"] == "node02"
    assert "evidence.zip!fake.tar.gz" in sources  # kept as it is
    assert hosts == {"node01", "node02"}


def test_a_bomb_inside_an_archive_is_refused_and_its_neighbours_land(tmp_path, monkeypatch):
    import zipfile

    import workbench.ingest.archives

    monkeypatch.setattr(workbench.ingest.archives, "MAX_ARCHIVE_BYTES", 1 << 20)  # a 1 MiB budget stands in for 32 GiB
    bomb = tmp_path / "zeros.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", b"\0" * (4 << 20))
    with zipfile.ZipFile(tmp_path / "outer.zip", "w") as zf:
        zf.write(bomb, "inner/zeros.zip")
        zf.writestr("node01/kern.log", SYSLOG_LINE)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("ingest", "b.duckdb", "outer.zip")
    assert code == 0, err
    assert "decompression bomb" in out
    with Bundle.open("b.duckdb") as bundle:
        assert [a["source"] for a in bundle.artifacts()] == ["outer.zip!node01/kern.log"]
