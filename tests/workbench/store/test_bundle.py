"""Bundle store: schema, sealing, verification, and the one-writer rule."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import duckdb
import pytest

from tests.conftest import run_cli
from workbench.store import schema
from workbench.store.bundle import Bundle, BundleBusy, BundleError


def _bundle_with(path, *blobs: bytes) -> list[str]:
    with Bundle.create(path, title="t") as bundle:
        shas = [bundle.add_artifact(io.BytesIO(b), kind="unknown", source=f"f{i}")[0] for i, b in enumerate(blobs)]
        bundle.seal()
    return shas


def test_new_bundle_has_current_schema_version(bundle_path):
    _bundle_with(bundle_path, b"x")
    con = duckdb.connect(str(bundle_path), read_only=True)
    assert schema.current_version(con) == schema.SCHEMA_VERSION
    con.close()


def test_same_bytes_are_stored_once(bundle_path):
    with Bundle.create(bundle_path) as bundle:
        first = bundle.add_artifact(io.BytesIO(b"same"), kind="unknown", source="a")
        second = bundle.add_artifact(io.BytesIO(b"same"), kind="unknown", source="b")
        assert first[0] == second[0] and first[2] is True and second[2] is False
        assert len(bundle.artifacts()) == 1


def test_large_artifact_round_trips_in_chunks(bundle_path):
    data = bytes(range(256)) * (40_000)  # ~10 MB, several chunks
    with Bundle.create(bundle_path) as bundle:
        sha, aid, _ = bundle.add_artifact(io.BytesIO(data), kind="unknown", source="big")
        assert b"".join(bundle.artifact_bytes(sha)) == data
        chunks = bundle.con.execute("SELECT count(*) FROM artifact_chunk WHERE artifact_id = ?", [aid]).fetchall()
        assert chunks[0][0] > 1


def test_verify_passes_on_fresh_bundle(bundle_path):
    _bundle_with(bundle_path, b"alpha\n", b"beta\n")
    code, out, _ = run_cli("verify", bundle_path)
    assert code == 0 and out.startswith("OK: 2 artifacts intact")


def test_verify_names_the_artifact_with_one_altered_byte(bundle_path):
    shas = _bundle_with(bundle_path, b"alpha\n", b"NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus.\n")
    con = duckdb.connect(str(bundle_path))
    aid = con.execute("SELECT id FROM artifact WHERE sha256 = ?", [shas[1]]).fetchall()[0][0]
    data = con.execute("SELECT data FROM artifact_chunk WHERE artifact_id = ?", [aid]).fetchall()[0][0]
    altered = data.replace(b"79", b"78", 1)
    con.execute("UPDATE artifact_chunk SET data = ? WHERE artifact_id = ?", [altered, aid])
    con.close()
    code, out, _ = run_cli("verify", bundle_path)
    assert code == 1
    assert shas[1] in out and shas[0] not in out


def test_verify_detects_changed_metadata(bundle_path):
    _bundle_with(bundle_path, b"alpha\n")
    con = duckdb.connect(str(bundle_path))
    con.execute("UPDATE meta SET value = 'rewritten' WHERE key = 'title'")
    con.close()
    code, out, _ = run_cli("verify", bundle_path)
    assert code == 1 and "root digest mismatch" in out


def test_busy_bundle_gives_one_line_message(bundle_path):
    _bundle_with(bundle_path, b"x")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import duckdb, sys, time
        con = duckdb.connect({str(bundle_path)!r})
        print("ready", flush=True)
        sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(BundleBusy) as err:
            Bundle.open(bundle_path, write=True)
        assert "busy" in str(err.value) and "\n" not in str(err.value)
        code, _, stderr = run_cli("verify", bundle_path)
        assert code == 2 and stderr.count("\n") == 1 and "Traceback" not in stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


def test_not_a_bundle_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(BundleError):
        Bundle.open(junk)
    code, _, stderr = run_cli("timeline", junk)
    assert code == 2 and stderr.startswith("gpuwb: error:") and "Traceback" not in stderr


def test_journal_is_append_only_rows(bundle_path):
    _bundle_with(bundle_path, b"x")
    with Bundle.open(bundle_path, write=True) as bundle:
        first = bundle.append_journal(author="ana", kind="note", target="gpu", body={"text": "a"})
        second = bundle.append_journal(author="bo", kind="note", target="gpu", body={"text": "b"})
        assert second == first + 1
        assert bundle.verify() == []


def test_compressed_chunks_round_trip_and_tampering_is_caught(bundle_path):
    log = b"".join(b"[%10.6f] NVRM: Xid (PCI:0000:19:00): 13, pid=%d, Graphics Exception\n" % (i / 7, i)
                   for i in range(200_000))
    with Bundle.create(bundle_path) as bundle:
        sha, aid, _ = bundle.add_artifact(io.BytesIO(log), kind="kernel_log", source="dmesg")
        bundle.seal()
        stored = bundle.con.execute("SELECT sum(octet_length(data)), min(codec) FROM artifact_chunk").fetchall()[0]
        assert stored[1] == "zstd" and stored[0] < len(log) / 4
        assert b"".join(bundle.artifact_bytes(sha)) == log
    con = duckdb.connect(str(bundle_path))
    data = con.execute("SELECT data FROM artifact_chunk WHERE seq = 0").fetchall()[0][0]
    middle = len(data) // 2
    flipped = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
    con.execute("UPDATE artifact_chunk SET data = ? WHERE seq = 0", [flipped])
    con.close()
    code, out, _ = run_cli("verify", bundle_path)
    assert code == 1 and sha in out
