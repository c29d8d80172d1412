"""The recorder's poll loop in-process: a watched trainer log whose NCCL watchdog line triggers, a
Prometheus page scraped over loopback, the status it writes, and the bundle frozen from that ring."""

from __future__ import annotations

import http.server
import json
import threading
import time
from pathlib import Path

from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.daemon import Recorder
from workbench.capture.recorder.freeze import freeze
from workbench.capture.recorder.status import format_status, read_status
from workbench.store.bundle import Bundle

CORPUS = Path(__file__).resolve().parents[3] / "corpus"
PAGE = (CORPUS / "latency" / "vllm_22227_request_decode_time_histogram_engine_label.prom").read_bytes()


class _Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        return None


def test_watchdog_line_triggers_and_scrapes_land_in_the_bundle_at_their_times(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    trainer = tmp_path / "job42" / "rank1.log"
    trainer.parent.mkdir()
    trainer.write_text("[rank1] step 1 loss 2.5\n")
    config = RecorderConfig(out=str(tmp_path / "rec"), watch=[str(tmp_path / "job*" / "rank*.log")], prom=url,
                            prom_interval_s=0.5, nvml=False, capture=False, after_s=0.1,
                            kernel_log=str(tmp_path / "kern.log"))
    recorder = Recorder(config)
    try:
        assert recorder.poll_once() == []
        time.sleep(0.6)
        watchdog = (CORPUS / "nccl" / "ofa_271_watchdog_allreduce_1800s_legacy_format.log").read_text().splitlines()[0]
        with open(trainer, "a") as f:
            f.write("[rank1] step 2 loss 2.4\n" + watchdog + "\n")
        (trigger,) = recorder.poll_once()
        recorder.write_status()
    finally:
        recorder.close()
        server.shutdown()
        server.server_close()
    assert trigger.reason == "NCCL watchdog/timeout" and trigger.source == f"watch:{trainer}"
    status = read_status(config.status_path)
    assert status is not None
    text = format_status(status)
    assert f"follows    watch:{trainer}" in text and f"follows    prom:{url}" in text
    assert "kern.log  (No such file or directory)" in text, "a kernel log that is not there yet is said so"

    spec = {"config": json.loads(config.to_json()), "bundle": str(tmp_path / "rec" / "b.duckdb"), "host": "node07",
            "kernel_source": None, "trigger": trigger.as_dict()}
    with Bundle.open(freeze(spec)) as bundle:
        scrapes = bundle.con.execute("SELECT count(DISTINCT ts) FROM series").fetchall()[0][0]
        kinds = {k for (k,) in bundle.con.execute("SELECT DISTINCT kind FROM event").fetchall()}
        coverage = {row["collector"]: row["reason"] for row in bundle.coverage()}
    assert scrapes == 2, "each page keeps its own scrape time"
    assert any("watchdog" in k or "timeout" in k for k in kinds), kinds
    assert coverage["recorder"].startswith("2 lines, 0 NVML readings, 2 Prometheus pages")


def test_a_failed_freeze_is_reported_not_listed_as_a_bundle_and_health_is_logged(tmp_path: Path, capsys) -> None:
    import subprocess

    config = RecorderConfig(out=str(tmp_path / "rec"), nvml=False, kernel_log=str(tmp_path / "kern.log"))
    recorder = Recorder(config)
    try:
        recorder.freezer = subprocess.Popen(["sh", "-c", "exit 70"])
        recorder.freezer.wait()
        recorder.freezing_bundle = str(tmp_path / "rec" / "never-written.duckdb")
        recorder.handle(recorder.poll_once())
        recorder.log_health()
    finally:
        recorder.close()
    status = read_status(config.status_path)
    assert status is not None and status["bundles"] == [] and status["failed"] == [recorder.freezing_bundle]
    assert "failed     " in format_status(status)
    err = capsys.readouterr().err
    assert "no bundle: freezing" in err and "exit 70" in err
    assert "health: ring " in err and "kern.log: No such file or directory" in err
