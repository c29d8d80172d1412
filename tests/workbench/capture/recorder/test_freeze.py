"""Freezing a ring into a bundle: raw lines and NVML readings parsed by the normal parsers, each step
sealed, and a one-shot capture that cannot finish recorded in the coverage table."""

from __future__ import annotations

import json
import time
from pathlib import Path

from collectors.nvml.adapter import NvmlAdapter
from collectors.nvml.recording import record as nvml_record
from tests.nvml_replay import FakeNvml, recording
from workbench.capture.recorder import freeze as freeze_module
from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.freeze import freeze, merge_nvml
from workbench.capture.recorder.ring import Ring, RingRecord
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle


def kernel(t: float, message: str) -> RingRecord:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t))
    return RingRecord(t, "kernel:/var/log/kern.log", "line", f"{stamp}.000000+00:00 node07 kernel: {message}")


def test_freeze_writes_a_sealed_bundle_with_lines_nvml_and_a_capture_that_timed_out(tmp_path: Path) -> None:
    config = RecorderConfig(out=str(tmp_path), after_s=0.5, capture=True, capture_timeout_s=0.3)
    rec = recording("replay_8xa100_nvlink.json")
    now = time.time()
    docs = [nvml_record(NvmlAdapter(FakeNvml(rec)), samples=1, interval=0.0, host="node07") for _ in range(2)]
    ring = Ring(config.ring_dir, max_bytes=1 << 20, window_s=config.window_s)
    ring.append([kernel(now - 5000, "AER outside the window: pcieport 0000:5c:00.0: AER: Corrected error"),
                 kernel(now - 20, "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
                                  "(Receiver ID)"),
                 *[RingRecord(now - 10 + k, "nvml", "nvml", json.dumps(d)) for k, d in enumerate(docs)],
                 RingRecord(now - 5, "recorder", "note", "nvml sampling"),
                 kernel(now, "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")])
    ring.append([kernel(now + 0.2, "NVRM: GPU 0000:5d:00.0: RmInitAdapter failed! (0x24:0x65:1457)")])
    ring.close()
    path = tmp_path / "incident.duckdb"
    spec = {"config": json.loads(config.to_json()), "bundle": str(path), "host": "node07", "kernel_source": None,
            "trigger": {"at": now, "reason": "xid 79", "source": "kernel:/var/log/kern.log", "line": ""}}
    assert freeze(spec) == path
    with Bundle.open(path) as bundle:
        assert bundle.verify() == []
        coverage = {row["collector"]: row for row in bundle.coverage()}
        kinds = dict(bundle.con.execute("SELECT kind, count(*) FROM event GROUP BY kind").fetchall())
        samples = bundle.con.execute("SELECT count(*), count(DISTINCT gpu) FROM gpu_sample").fetchall()[0]
        messages = [m for (m,) in bundle.con.execute("SELECT message FROM event").fetchall()]
    assert coverage["recorder"]["reason"].startswith("2 lines, 2 NVML readings")
    assert coverage["recorder-after"]["reason"].startswith("1 lines")
    assert coverage["capture"]["status"] == "timeout" and "did not finish within 0.3 s" in coverage["capture"]["reason"]
    assert kinds["xid"] == 1 and kinds["pcie_aer"] == 1
    assert samples == (16, 8), "two readings of eight GPUs, parsed as the capture's NVML document"
    assert not any("outside the window" in m for m in messages)


def test_merge_nvml_keeps_every_reading_and_the_latest_inventory() -> None:
    rec = recording("replay_rtx4090_sw_power_cap.json")
    docs = [nvml_record(NvmlAdapter(FakeNvml(rec)), samples=1, interval=0.0) for _ in range(3)]
    merged = merge_nvml([*docs, {"unavailable": "not a reading"}])
    assert merged is not None and len(merged["samples"]) == 3 and merged["devices"] == docs[-1]["devices"]
    assert merged["started_at"] == docs[0]["started_at"]
    assert merge_nvml([]) is None


def test_the_one_shot_capture_is_merged_into_the_frozen_bundle(tmp_path: Path, monkeypatch) -> None:
    """The capture itself is ``gpuwb capture`` (tests/test_capture_cli.py); here its bundle is a small one,
    so that what freeze does with it (merge, seal, replace, mode 0600) is checked in seconds."""
    config = RecorderConfig(out=str(tmp_path / "rec"), after_s=0.1, capture=True)
    now = time.time()
    ring = Ring(config.ring_dir, max_bytes=1 << 20, window_s=config.window_s)
    ring.append([kernel(now, "NVRM: Xid (PCI:0000:5d:00): 48, pid=1234, name=python, Ch 00000008, DBE")])
    ring.close()
    dmesg = tmp_path / "node07" / "dmesg.log"
    dmesg.parent.mkdir()
    dmesg.write_text("[  3.000000] nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
                     "(Receiver ID)\n")

    def fake_capture(cfg: RecorderConfig, spec: dict, since: float, folder: Path) -> tuple[Path, str]:
        out = folder / "capture.duckdb"
        with Bundle.create(out, title="capture") as bundle:
            ingest_paths(bundle, [str(dmesg)], host="node07")
            bundle.record_capture("kernel", host="node07", status="ok")
            bundle.seal()
        return out, ""

    monkeypatch.setattr(freeze_module, "run_capture", fake_capture)
    path = tmp_path / "rec" / "incident.duckdb"
    spec = {"config": json.loads(config.to_json()), "bundle": str(path), "host": "node07", "kernel_source": None,
            "trigger": {"at": now, "reason": "xid 48", "source": "kernel:/var/log/kern.log", "line": ""}}
    freeze(spec)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir() if p.suffix == ".duckdb"] == ["incident.duckdb"]
    with Bundle.open(path) as bundle:
        assert bundle.verify() == []
        assert {row["collector"] for row in bundle.coverage()} == {"recorder", "recorder-after", "kernel"}
        kinds = {k for (k,) in bundle.con.execute("SELECT DISTINCT kind FROM event").fetchall()}
        assert bundle.meta()["title"] == "xid 48 on node07 (gpuwb record)"
    assert {"xid", "pcie_aer"} <= kinds


def test_a_frozen_window_holds_no_secret_the_followed_logs_printed(tmp_path: Path) -> None:
    """The ring is an early capture: a trainer that prints its environment or a token-bearing URL must not
    put the secret into the bundle, its chunks or its coverage notes."""
    now = time.time()
    records = [RingRecord(now, "file:/scratch/job42/rank0.log", "line", "env HF_TOKEN=hf_abcdefghijklmnopqrstuvwx12"),
               RingRecord(now, "file:/scratch/job42/rank0.log", "line", "pulling https://u:s3cretpass@repo.local/x"),
               RingRecord(now, "recorder", "note", "watching with PGPASSWORD=n0tes3cret"),
               kernel(now, "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")]
    path = tmp_path / "b.duckdb"
    with Bundle.create(path) as bundle:
        freeze_module.add_window(bundle, records, host="node07", name="recorder", since=now - 1, until=now + 1,
                                 extra={})
    with Bundle.open(path) as bundle:
        stored = b"".join(b"".join(bundle.artifact_bytes(a["id"])) for a in bundle.artifacts())
        rows = str(bundle.con.execute("SELECT * FROM event").fetchall() + bundle.coverage()
                   + bundle.con.execute("SELECT detail FROM capture_log").fetchall())
        xids = bundle.con.execute("SELECT count(*) FROM event WHERE kind = 'xid'").fetchall()[0][0]
    for secret in ("hf_abcdefghijklmnopqrstuvwx12", "s3cretpass", "n0tes3cret"):
        assert secret.encode() not in stored and secret not in rows
    assert b"GPU has fallen off the bus" in stored and xids == 1, "evidence itself is kept"
