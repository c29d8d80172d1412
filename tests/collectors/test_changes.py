"""Changes and versions: dpkg.log, apt history, yum.log, dnf.rpm.log, yum history, deploy records,
pip freeze."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import changes
from collectors.base import Event, HostFact, ParseContext, SeriesPoint, Skipped
from collectors.changes.events import version_key
from tests.conftest import ingest_timeline

REFERENCE = datetime(2026, 1, 10, tzinfo=timezone.utc)

DPKG = """2026-11-28 09:59:58 startup archives unpack
2026-11-28 10:00:00 upgrade nvidia-driver-550:amd64 550.54.14-0ubuntu0.22.04.1 550.90.07-0ubuntu0.22.04.1
2026-11-28 10:00:00 status half-configured nvidia-driver-550:amd64 550.54.14-0ubuntu0.22.04.1
2026-11-28 10:00:01 status unpacked nvidia-driver-550:amd64 550.90.07-0ubuntu0.22.04.1
2026-11-28 10:00:05 configure nvidia-driver-550:amd64 550.90.07-0ubuntu0.22.04.1 <none>
2026-11-28 10:00:05 status installed nvidia-driver-550:amd64 550.90.07-0ubuntu0.22.04.1
2026-11-28 10:00:06 install libnccl2:amd64 <none> 2.21.5-1+cuda12.4
2026-11-28 10:00:07 status installed libnccl2:amd64 2.21.5-1+cuda12.4
2026-11-28 10:00:09 upgrade libc-bin:amd64 2.35-0ubuntu3.7 2.35-0ubuntu3.8
2026-11-28 10:00:10 remove cuda-toolkit-12-2:amd64 12.2.2-1 <none>
"""

APT_HISTORY = """Start-Date: 2026-11-28  09:59:50
Commandline: apt-get install -y nvidia-driver-550 libnccl2=2.21.5-1+cuda12.4
Requested-By: alice (1000)
Upgrade: nvidia-driver-550:amd64 (550.54.14-0ubuntu0.22.04.1, 550.90.07-0ubuntu0.22.04.1), libnvidia-compute-550:amd64 \
(550.54.14-0ubuntu0.22.04.1, 550.90.07-0ubuntu0.22.04.1)
Install: libnccl2:amd64 (2.21.5-1+cuda12.4), libnccl-dev:amd64 (2.21.5-1+cuda12.4, automatic)
End-Date: 2026-11-28  10:00:12

Start-Date: 2026-11-28  11:00:00
Commandline: apt-get purge -y slurm-client
Purge: slurm-client:amd64 (23.11.4-1)
End-Date: 2026-11-28  11:00:03
"""

# /var/log/yum.log has no year (blog.fpmurphy.com "YUM Package Installation Updating and Removal Forensics").
YUM_LOG = """Dec 30 10:00:44 Updated: 3:nvidia-driver-latest-dkms-550.90.07-1.el7.x86_64
Dec 30 10:00:48 Installed: libnccl-2.21.5-1+cuda12.4.x86_64
Jan 02 09:00:00 Erased: mlnx-ofa_kernel
"""

DNF_RPM = """2026-11-28T10:00:00+0000 INFO --- logging initialized ---
2026-11-28T10:00:12+0000 SUBDEBUG Upgrade: nvidia-driver-3:550.90.07-1.el9.x86_64
2026-11-28T10:00:14+0000 SUBDEBUG Upgraded: nvidia-driver-3:550.54.14-1.el9.x86_64
2022-03-28T14:27:24+00 SUBDEBUG Installed: crudini-0.9-11.el8ost.1
2026-11-28T10:01:00+0100 SUBDEBUG Erase: kmod-nvidia-latest-dkms-3:550.54.14-1.el9.x86_64
"""

# ``yum history list`` (Red Hat Deployment Guide 8.3.1 layout).
YUM_HISTORY = """Loaded plugins: product-id, refresh-packagekit, subscription-manager
ID     | Login user               | Date and time    | Action(s)      | Altered
-------------------------------------------------------------------------------
     5 | Jaromir ... <jhradilek>  | 2011-07-29 15:33 | Install        |    1
     3 | Jaromir ... <jhradilek>  | 2011-07-16 15:27 | I, U           |   73
history list
"""

RECORDS_CSV = """ts,what,version,who,host,description
2026-11-28T10:30:00Z,model llama-3-70b-instruct,v2 (fp8),alice,,new quantized weights
2026-11-28T10:45:00+01:00,vllm config max_num_seqs,256,bob,node07,
2026-11-28 11:00,gpu driver,550.90.07,ops,,
,no time at all,1,carol,,
"""

RECORDS_JSON = {"changes": [
    {"timestamp": 1764325800, "service": "inference-gateway", "image": "registry/gw@sha256:1f2e3d", "user": "ci"},
    {"time": "2026-11-28T10:35:00Z", "component": "nccl", "version": "2.21.5", "by": "ops"},
    {"time": "2026-11-28T10:40:00Z", "version": "no what"},
]}


def _rows(kind: str, text: str, host: str = "node01") -> list:
    ctx = ParseContext(host=host, reference_time=REFERENCE)
    return list(changes.parse(kind, io.BytesIO(text.encode()), ctx))


def _changes(rows: list) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == "change"]


def _facts(rows: list) -> dict[str, str]:
    return {r.key: r.value for r in rows if isinstance(r, HostFact)}


def test_dpkg_driver_upgrade() -> None:
    assert changes.sniff("dpkg.log", DPKG) == {"dpkg_log": 95}
    rows = _rows("dpkg_log", DPKG)
    events = _changes(rows)
    assert [(e.attrs["what"], e.attrs["action"], e.layer) for e in events] == [
        ("nvidia-driver-550", "upgrade", "gpu"), ("libnccl2", "install", "gpu"), ("libc-bin", "upgrade", "business"),
        ("cuda-toolkit-12-2", "remove", "gpu")]
    driver = events[0]
    assert driver.attrs["version"] == "550.90.07-0ubuntu0.22.04.1"
    assert driver.attrs["from_version"] == "550.54.14-0ubuntu0.22.04.1" and driver.attrs["via"] == "dpkg"
    assert driver.ts == datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc) and driver.ts_approx
    assert driver.ts_origin == "local_as_utc" and driver.severity == "info"
    assert events[2].severity == "debug", "an OS library update is on record but not a deploy"
    assert _facts(rows) == {"versions.driver": "550.90.07", "versions.nccl": "2.21.5"}


def test_apt_history_who_and_versions() -> None:
    rows = _rows("apt_history", APT_HISTORY)
    events = _changes(rows)
    assert [(e.attrs["what"], e.attrs["action"], e.attrs["who"]) for e in events] == [
        ("nvidia-driver-550", "upgrade", "alice"), ("libnvidia-compute-550", "upgrade", "alice"),
        ("libnccl2", "install", "alice"), ("libnccl-dev", "install", "alice"), ("slurm-client", "purge", None)]
    assert events[0].attrs["from_version"] == "550.54.14-0ubuntu0.22.04.1"
    assert events[4].layer == "scheduling" and events[4].attrs["from_version"] == "23.11.4-1"
    assert events[0].ts == datetime(2026, 11, 28, 9, 59, 50, tzinfo=timezone.utc)
    assert _facts(rows)["versions.driver"] == "550.90.07"


def test_yum_log_year_from_reference_and_nevra() -> None:
    rows = _rows("yum_log", YUM_LOG)
    events = _changes(rows)
    assert [(e.attrs["what"], e.attrs["version"], e.ts.year) for e in events] == [
        ("nvidia-driver-latest-dkms", "550.90.07-1.el7", 2025), ("libnccl", "2.21.5-1+cuda12.4", 2025),
        ("mlnx-ofa_kernel", None, 2026)]
    assert events[2].layer == "network_storage" and events[2].attrs["action"] == "remove"
    assert _facts(rows) == {"versions.driver": "550.90.07", "versions.nccl": "2.21.5"}


def test_dnf_rpm_log_pairs_upgrade_with_the_old_version() -> None:
    assert changes.sniff("dnf.rpm.log", DNF_RPM) == {"dnf_rpm_log": 85}
    events = _changes(_rows("dnf_rpm_log", DNF_RPM))
    summary = [(e.attrs["what"], e.attrs["action"], e.attrs["version"], e.attrs["from_version"]) for e in events]
    assert summary == [("nvidia-driver", "upgrade", "550.90.07-1.el9", "550.54.14-1.el9"),
                       ("crudini", "install", "0.9-11.el8ost.1", None),
                       ("kmod-nvidia-latest-dkms", "remove", None, "550.54.14-1.el9")]
    assert events[0].ts == datetime(2026, 11, 28, 10, 0, 12, tzinfo=timezone.utc) and not events[0].ts_approx
    assert events[2].ts == datetime(2026, 11, 28, 9, 1, tzinfo=timezone.utc)


def test_yum_history_list_transactions() -> None:
    events = _changes(_rows("yum_history", YUM_HISTORY))
    assert [(e.attrs["action"], e.attrs["who"], e.ts.day) for e in events] == [
        ("install", "jhradilek", 29), ("i, u", "jhradilek", 16)]
    assert "73 packages altered" in events[1].attrs["note"]


def test_change_records_csv_layers_and_zones() -> None:
    assert changes.sniff("deploys.csv", RECORDS_CSV) == {"change_records": 85}
    rows = _rows("change_records", RECORDS_CSV)
    events = _changes(rows)
    assert [(e.attrs["what"], e.layer, e.attrs["who"]) for e in events] == [
        ("model llama-3-70b-instruct", "business", "alice"), ("vllm config max_num_seqs", "business", "bob"),
        ("gpu driver", "gpu", "ops"), ("no time at all", "business", "carol")]
    assert events[0].ts == datetime(2026, 11, 28, 10, 30, tzinfo=timezone.utc) and not events[0].ts_approx
    assert events[1].ts == datetime(2026, 11, 28, 9, 45, tzinfo=timezone.utc) and events[1].host == "node07"
    assert events[2].ts_approx and events[3].ts is None
    assert events[0].attrs["note"] == "new quantized weights" and events[0].attrs["via"] == "records"


def test_change_records_json_with_aliases() -> None:
    text = json.dumps(RECORDS_JSON)
    assert changes.sniff("changes.json", text) == {"change_records": 75}
    assert changes.sniff("x.json", json.dumps([{"what": "model", "ts": 1}])) == {"change_records": 85}
    assert changes.sniff("events.json", '{"apiVersion": "v1", "items": [{"component": "kubelet", "time": 1}]}') == {}
    rows = _rows("change_records", text)
    events = _changes(rows)
    assert [(e.attrs["what"], e.attrs["version"], e.attrs["who"], e.layer) for e in events] == [
        ("inference-gateway", "registry/gw@sha256:1f2e3d", "ci", "business"), ("nccl", "2.21.5", "ops", "gpu")]
    assert events[0].ts == datetime(2025, 11, 28, 10, 30, tzinfo=timezone.utc)
    assert [r.reason for r in rows if isinstance(r, Skipped)] == ["change record without 'what'"]


def test_pip_freeze_versions() -> None:
    text = "accelerate==0.30.1\nnumpy==1.26.4\ntorch==2.3.1+cu121\nvllm==0.5.0.post1\nnvidia-nccl-cu12==2.20.5\n"
    assert changes.sniff("pip.txt", text) == {"pip_freeze": 80}
    facts = _facts(_rows("pip_freeze", text))
    assert facts == {"versions.accelerate": "0.30.1", "versions.torch": "2.3.1+cu121", "versions.vllm": "0.5.0.post1",
                     "versions.nvidia-nccl-cu12": "2.20.5"}


@pytest.mark.parametrize(("package", "version", "expected"), [
    ("nvidia-driver-550:amd64", "550.90.07-0ubuntu1", ("driver", "550.90.07")),
    ("cuda-toolkit-12-4", "12.4.1-1", ("cuda", "12.4")),
    ("libnccl2", "2.21.5-1+cuda12.4", ("nccl", "2.21.5")),
    ("libcudnn9-cuda-12", "9.1.0.70-1", ("cudnn", "9.1.0.70")),
    ("nvidia-fabricmanager-550", "550.90.07-1", ("fabricmanager", "550.90.07")),
    ("libc6", "2.35-0ubuntu3", None)])
def test_version_key(package: str, version: str, expected: tuple[str, str] | None) -> None:
    assert version_key(package, version) == expected


def test_driver_upgrade_through_ingest_with_host_folder(tmp_path: Path) -> None:
    node = tmp_path / "evidence" / "node07"
    node.mkdir(parents=True)
    (node / "dpkg.log").write_text(DPKG)
    (tmp_path / "evidence" / "deploys").mkdir()
    (tmp_path / "evidence" / "deploys" / "changes.csv").write_text(RECORDS_CSV)
    bundle = tmp_path / "b.duckdb"
    events = ingest_timeline(bundle, tmp_path / "evidence")
    driver = [e for e in events if e["kind"] == "change" and e["attrs"]["what"] == "nvidia-driver-550"]
    assert driver[0]["host"] == "node07" and driver[0]["layer"] == "gpu"
    assert driver[0]["attrs"]["version"] == "550.90.07-0ubuntu0.22.04.1"
    model = [e for e in events if e["kind"] == "change" and e["attrs"]["what"].startswith("model")]
    assert model[0]["host"] is None and model[0]["layer"] == "business"
    con = duckdb.connect(str(bundle), read_only=True)
    try:
        facts = con.execute("SELECT host, key, value FROM host_inventory ORDER BY key").fetchall()
    finally:
        con.close()
    assert facts == [("node07", "versions.driver", "550.90.07"), ("node07", "versions.nccl", "2.21.5")]


def test_capture_reads_package_logs_and_change_files(tmp_path: Path, monkeypatch) -> None:
    records = tmp_path / "deploys.json"
    records.write_text(json.dumps(RECORDS_JSON))
    read: list[tuple[str, str]] = []
    notes: list[str] = []

    class Ctx:
        host, since = "h", None
        options = {"changes": [str(records)]}

        def read_file(self, path, *, kind, max_bytes=None, tail=False):
            read.append((path, kind))
            return (path, kind) if path in ("/var/log/dpkg.log", str(records)) else None

        def missing(self, what, reason):
            notes.append(what)

    monkeypatch.setattr(changes.os.path, "exists", lambda p: p in ("/var/log/dpkg.log", "/var/log/dnf.rpm.log"))
    found = list(changes.capture(Ctx()))
    assert found == [("/var/log/dpkg.log", "dpkg_log"), (str(records), "change_records")]
    assert ("/var/log/dnf.rpm.log", "dnf_rpm_log") in read and notes == []
    assert ("/var/log/yum.log", "yum_log") not in read, "absent package managers are not a coverage gap"


REAL_LINES = (DPKG + APT_HISTORY + YUM_LOG + DNF_RPM + YUM_HISTORY + RECORDS_CSV).splitlines()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40),
       st.sampled_from(changes.KINDS))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str], kind: str) -> None:
    rows = _rows(kind, "\n".join(lines).encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)
