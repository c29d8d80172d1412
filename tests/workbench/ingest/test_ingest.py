"""Ingest: folders, archives, hosts from folder names, nothing handed over is lost."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile

import pytest

from tests.conftest import run_cli
from workbench.ingest.inputs import IngestError, host_from_parts
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle


def _tree(root):
    (root / "node07").mkdir(parents=True)
    (root / "node07" / "uptime.txt").write_text("2026-11-29 08:00:00\n")
    (root / "node07" / "notes.bin").write_bytes(b"\x00\x01binary blob\xff")
    (root / "slurm").mkdir()
    (root / "slurm" / "README").write_text("handed over by the cluster team\n")
    return root


def test_folder_tree_assigns_hosts_and_keeps_unknown_files(tmp_path, bundle_path):
    evidence = _tree(tmp_path / "evidence")
    with Bundle.create(bundle_path) as bundle:
        results = ingest_paths(bundle, [str(evidence)])
        by_name = {r.path.rsplit("/", 1)[-1]: r for r in results}
        assert by_name["uptime.txt"].kind == "uptime_since" and by_name["uptime.txt"].host == "node07"
        assert by_name["notes.bin"].kind == "unknown" and by_name["notes.bin"].host == "node07"
        assert by_name["README"].host is None
        assert len(bundle.artifacts()) == 3
        boot = bundle.con.execute(
            "SELECT value FROM host_inventory WHERE host = 'node07' AND key = 'boot_time'").fetchall()
        assert boot == [("2026-11-29T08:00:00+00:00",)]


def test_same_files_twice_are_stored_once(tmp_path, bundle_path):
    evidence = _tree(tmp_path / "evidence")
    code, out, _ = run_cli("ingest", bundle_path, evidence)
    assert code == 0 and "3 new" in out
    code, out, _ = run_cli("ingest", bundle_path, evidence)
    assert code == 0 and "0 new, 3 duplicate" in out
    with Bundle.open(bundle_path) as bundle:
        assert len(bundle.artifacts()) == 3 and bundle.verify() == []


def test_same_bytes_on_two_hosts_are_stored_once_and_parsed_for_both(tmp_path, bundle_path):
    for node in ("node01", "node02"):
        (tmp_path / "ev" / node).mkdir(parents=True)
        (tmp_path / "ev" / node / "uptime.txt").write_text("2026-11-29 08:00:00\n")
    with Bundle.create(bundle_path) as bundle:
        results = ingest_paths(bundle, [str(tmp_path / "ev")])
        assert sorted(r.status for r in results) == ["new", "same bytes as another host's"]
        assert len(bundle.artifacts()) == 1
        boots = bundle.con.execute(
            "SELECT host FROM host_inventory WHERE key = 'boot_time' ORDER BY host").fetchall()
        assert boots == [("node01",), ("node02",)]
        assert bundle.verify() == []
        again = ingest_paths(bundle, [str(tmp_path / "ev")])
        assert {r.status for r in again} == {"duplicate"}


def test_tar_gz_and_zip_and_gz_are_unpacked(tmp_path, bundle_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in (("incident-42/node03/uptime.txt", b"2026-11-29 07:00:00\n"),
                           ("incident-42/logs/app.log", b"hello\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    (tmp_path / "bundle.tar.gz").write_bytes(buf.getvalue())
    with zipfile.ZipFile(tmp_path / "more.zip", "w") as zf:
        zf.writestr("node04/uptime.txt", "2026-11-29 06:00:00\n")
    (tmp_path / "node05.txt.gz").write_bytes(gzip.compress(b"2026-11-29 05:00:00\n"))
    with Bundle.create(bundle_path) as bundle:
        results = ingest_paths(bundle, [str(tmp_path / "bundle.tar.gz"), str(tmp_path / "more.zip"),
                                        str(tmp_path / "node05.txt.gz")])
        hosts = {r.path.rsplit("/", 1)[-1]: (r.kind, r.host) for r in results}
        assert hosts["uptime.txt"] in {("uptime_since", "node03"), ("uptime_since", "node04")}
        assert sorted(r.host for r in results if r.kind == "uptime_since" and r.host) == ["node03", "node04"]
        assert any(r.path.endswith("node05.txt") and r.kind == "uptime_since" for r in results)
        assert len(bundle.artifacts()) == 4


def test_path_traversal_in_archive_is_refused_and_nothing_written(tmp_path, bundle_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../etc/evil")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(buf.getvalue())
    good = tmp_path / "good.txt"
    good.write_text("2026-11-29 05:00:00\n")
    code, out, err = run_cli("ingest", bundle_path, bad, good)
    assert code == 0
    assert "unsafe path" in out and "1 new" in out
    assert not (tmp_path.parent / "etc" / "evil").exists()


def test_zip_bomb_is_refused(tmp_path, bundle_path):
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.txt", b"\x00" * (300 << 20))
    with Bundle.create(bundle_path) as bundle:
        results = ingest_paths(bundle, [str(bomb)])
    assert results[0].status == "error" and "decompression bomb" in results[0].error


def test_missing_path_is_a_usage_error(tmp_path, bundle_path):
    code, _, err = run_cli("ingest", bundle_path, tmp_path / "nope")
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_unknown_forced_kind_is_rejected(tmp_path, bundle_path):
    (tmp_path / "f").write_text("x")
    with Bundle.create(bundle_path) as bundle, pytest.raises(IngestError, match="unknown kind"):
        ingest_paths(bundle, [str(tmp_path / "f")], kind="no_such_kind")


def test_timeline_json_has_the_contract_fields(tmp_path, bundle_path):
    facts = {"hostname": "gpu-a1", "kernel": "6.1", "boot_time": "2026-11-29T00:00:00+00:00"}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    code, _, _ = run_cli("ingest", bundle_path, tmp_path / "facts.json")
    assert code == 0
    with Bundle.open(bundle_path, write=True) as bundle:
        from collectors.base import Event

        writer = bundle.writer(bundle.artifacts()[0]["sha256"])
        writer.add(Event(kind="xid", message="NVRM: Xid 79", host="gpu-a1", source="kernel", layer="hardware",
                         gpu="0000:19:00.0", attrs={"xid": 79}, line=3, ts_origin="iso"))
        writer.flush()
    code, out, _ = run_cli("timeline", bundle_path, "--json", "--kind", "xid")
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 1
    assert {"ts", "ts_approx", "host", "source", "layer", "kind", "severity", "gpu", "rank", "job", "message",
            "attrs", "artifact", "line"} <= set(rows[0])
    assert rows[0]["attrs"] == {"xid": 79} and len(rows[0]["artifact"]) == 64
    code, out, _ = run_cli("timeline", bundle_path, "--json", "--host", "other")
    assert out == ""


@pytest.mark.parametrize("parts,host", [(("node07", "dmesg.txt"), "node07"), (("slurm", "sacct.txt"), None),
                                        (("dmesg.txt",), None), (("logs", "gpu-b2", "rank0.log"), "gpu-b2")])
def test_host_from_folder_names(parts, host):
    assert host_from_parts(parts) == host
