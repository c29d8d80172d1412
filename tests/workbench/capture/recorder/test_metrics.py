"""The recorder's exporter: the counter's labels and their bounds, the 0 a new series shows first, the
textfile and the loopback page, counts that survive a restart, and the same labels in the replay the
promtool tests are built from (so a rule that fires in the replay reads a series the exporter writes)."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from workbench.capture.recorder import metrics
from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.daemon import Recorder
from workbench.capture.recorder.metrics import OTHER, EventCounters, event_labels
from workbench.prevention import alert_replay, alert_rules
from workbench.store.bundle import Bundle

XID_79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus."
OOM = "Out of memory: Killed process 4242 (python3) total-vm:812345kB, anon-rss:401234kB, file-rss:0kB, shmem-rss:0kB"


def kernel_line(message: str, host: str = "node07") -> str:
    return f"{datetime.now().astimezone().isoformat(timespec='microseconds')} {host} kernel: {message}\n"


def test_labels_keep_what_rules_ask_for_and_bound_the_rest():
    assert event_labels("node07", "xid", {"xid": 79, "pci": "0000:5d:00.0"}) == (
        ("instance", "node07"), ("kind", "xid"), ("xid", "79"))
    assert dict(event_labels("node07", "pcie_aer", {"severity": "uncorrected_fatal"}))["event_severity"] == \
        "uncorrected_fatal"
    free = dict(event_labels("ctl", "node_state", {"state": "DRAIN", "reason": "Xid 79 GPU fell off bus"}))
    assert free["state"] == "DRAIN" and free["reason"] == OTHER, "free text is not a label value"
    assert dict(event_labels("h", "xid", {"xid": 12345}))["xid"] == OTHER
    assert dict(event_labels("h", "made_up_kind", {}, kinds=metrics.catalog_kinds()))["kind"] == OTHER
    assert dict(event_labels("bad host$(x)", "xid", {}))["instance"] == OTHER
    assert "xid" not in dict(event_labels("h", "xid", {"xid": True})), "a flag is no Xid code"
    assert "instance" not in dict(event_labels(None, "xid", {}))


def test_the_exporter_writes_every_label_a_rule_selects_on():
    asked = set()
    for templates in alert_rules.load_templates().values():
        for t in templates:
            if alert_replay.LOG_COUNTER in t.series:
                expr = alert_replay.parse(alert_rules.render_expr(t, alert_replay.LOG_COUNTER, 0.0))
                asked |= {label for label, _, _ in expr.matchers}
    assert asked == set(metrics.LABELS) - {"instance"}, "no label the rules ask for is missing, none unused"


def test_a_label_past_its_bound_reads_other(monkeypatch):
    monkeypatch.setitem(metrics.MAX_VALUES, "reason", 2)
    counters = EventCounters(hold_s=0)
    kept = [counters.add((("kind", "k8s_event"), ("reason", r))) for r in ("Evicted", "OOMKilled", "BackOff",
                                                                           "Evicted", "Pulled")]
    assert [dict(k)["reason"] for k in kept] == ["Evicted", "OOMKilled", OTHER, "Evicted", OTHER]
    assert {dict(k)["reason"]: c.count for k, c in counters.series.items()} == {"Evicted": 2, "OOMKilled": 1,
                                                                              OTHER: 2}


def test_a_new_series_shows_zero_for_the_hold_then_its_count():
    counters = EventCounters(hold_s=30)
    labels = event_labels("node07", "xid", {"xid": 79})
    counters.add(labels, now=1000.0)
    counters.add(labels, now=1010.0)
    assert 'gpuwb_log_events_total{instance="node07",kind="xid",xid="79"} 0' in counters.text(1020.0)
    assert counters.due(1020.0) == 1030.0
    assert 'gpuwb_log_events_total{instance="node07",kind="xid",xid="79"} 2' in counters.text(1030.0)
    assert counters.due(1030.0) is None
    page = counters.text(1030.0)
    assert page.startswith("# HELP gpuwb_log_events_total ") and "# TYPE gpuwb_log_events_total counter" in page


def test_label_values_are_escaped_and_saved_counters_load_back():
    counters = EventCounters(hold_s=0)
    counters.add((("instance", 'a"b\\c'), ("kind", "xid")), n=3, now=5.0)
    assert 'instance="a\\"b\\\\c"' in counters.text(6.0)
    again = EventCounters(hold_s=0)
    assert again.load(json.loads(json.dumps(counters.to_json())) + [{"labels": {"bogus": "x"}, "count": 1,
                                                                      "shown_from": 0}, "junk"]) == 1
    assert again.text(6.0) == counters.text(6.0)


def test_textfile_is_replaced_in_one_rename(tmp_path: Path):
    metrics.write_textfile(tmp_path, "one\n")
    path = metrics.write_textfile(tmp_path, "two\n")
    assert path == tmp_path / "gpuwb.prom" and path.read_text() == "two\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuwb.prom"], "no temporary file is left behind"
    assert oct(path.stat().st_mode & 0o777) == "0o644", "node_exporter runs as its own user"


def _config(tmp_path: Path, hold: float = 0.0) -> RecorderConfig:
    return RecorderConfig(out=str(tmp_path / "rec"), kernel_log=str(tmp_path / "kern.log"), nvml=False,
                          capture=False, textfile_dir=str(tmp_path / "textfile"), metrics_hold_s=hold)


def _append(path: Path, *lines: str) -> None:
    with open(path, "a") as f:
        f.write("".join(lines))


def _page(tmp_path: Path) -> dict[str, float]:
    out = {}
    for line in (tmp_path / "textfile" / "gpuwb.prom").read_text().splitlines():
        if not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_recorder_counts_kernel_lines_and_a_restart_keeps_the_counts_without_counting_twice(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.write_text(kernel_line(XID_79))  # before the recorder: not counted
    config = _config(tmp_path)
    recorder = Recorder(config)
    try:
        recorder.poll_once()
        _append(log, kernel_line(XID_79), kernel_line(OOM), kernel_line("usb 1-1: new high-speed USB device"))
        recorder.poll_once()
    finally:
        recorder.close()
    xid = 'gpuwb_log_events_total{instance="node07",kind="xid",xid="79"}'
    oom = 'gpuwb_log_events_total{instance="node07",kind="oom_kill"}'
    assert _page(tmp_path)[xid] == 1 and _page(tmp_path)[oom] == 1

    _append(log, kernel_line(XID_79))  # while it was down
    again = Recorder(config)
    try:
        again.poll_once()
        assert _page(tmp_path)[xid] == 2, "the line written while down is counted once, the old ones not again"
        assert _page(tmp_path)[oom] == 1
        again.write_status()
    finally:
        again.close()
    status = json.loads((tmp_path / "rec" / "status.json").read_text())
    assert status["metrics"]["state"] == "exporting" and status["metrics"]["events"] == 3 + 2  # + gpu_fell_off_bus
    assert status["metrics"]["kinds"] == {f"kernel:{log}": "journal"}


def test_the_hold_is_kept_on_the_page_until_it_ends(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.touch()
    recorder = Recorder(_config(tmp_path, hold=1.5))
    try:
        recorder.poll_once()
        _append(log, kernel_line(XID_79))
        recorder.poll_once()
        xid = 'gpuwb_log_events_total{instance="node07",kind="xid",xid="79"}'
        assert _page(tmp_path)[xid] == 0
        time.sleep(1.6)
        recorder.poll_once()  # no new line: the hold ending alone rewrites the page
        assert _page(tmp_path)[xid] == 1
    finally:
        recorder.close()


def test_a_parser_that_fails_is_noted_and_recording_goes_on(tmp_path: Path, monkeypatch, capsys):
    log = tmp_path / "kern.log"
    log.touch()
    recorder = Recorder(_config(tmp_path))

    def broken(self, source, lines):
        raise RuntimeError("parser bug")
        yield  # pragma: no cover

    monkeypatch.setattr(metrics.LineEvents, "events", broken)
    try:
        recorder.poll_once()
        _append(log, kernel_line(XID_79))
        (trigger,) = recorder.poll_once()
    finally:
        recorder.close()
    assert trigger.reason == "xid 79", "the trigger still fires"
    assert "not counted: RuntimeError: parser bug" in capsys.readouterr().err


def test_metrics_port_serves_the_page_on_loopback(tmp_path: Path):
    log = tmp_path / "kern.log"
    log.touch()
    recorder = Recorder(RecorderConfig(out=str(tmp_path / "rec"), kernel_log=str(log), nvml=False, capture=False,
                                       metrics_port=0, metrics_hold_s=0.0))
    assert recorder.server is not None
    try:
        recorder.poll_once()
        _append(log, kernel_line(OOM, host="gpu-3"))
        recorder.poll_once()
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{recorder.server.port}/metrics", timeout=5) as response:
            page = response.read().decode()
            kind = response.headers["Content-Type"]
    finally:
        recorder.close()
    assert 'gpuwb_log_events_total{instance="gpu-3",kind="oom_kill"} 1' in page
    assert kind.startswith("text/plain; version=0.0.4")
    assert not (tmp_path / "textfile").exists()


def test_an_old_rings_offsets_are_still_read(tmp_path: Path):
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps({"/var/log/kern.log": {"inode": 5, "offset": 10}}))
    assert metrics.load_state(path) == ({"/var/log/kern.log": {"inode": 5, "offset": 10}}, [])
    path.write_text("{torn")
    assert metrics.load_state(path) == ({}, [])


def test_the_replay_labels_a_bundles_events_as_the_exporter_does(tmp_path: Path):
    start = datetime(2026, 3, 14, 9, 0)
    drain = {"state": "DRAIN", "reason": "Xid 79 GPU fell off bus"}
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        for minute, kind, attrs in ((3, "node_state", drain), (4, "xid", {"xid": 79})):
            bundle.con.execute("INSERT INTO event (ts, ts_origin, host, kind, severity, message, attrs) "
                               "VALUES (?, 'iso', 'gpu-7', ?, 'error', 'm', ?)",
                               [start + timedelta(minutes=minute), kind, json.dumps(attrs)])
        grid = alert_replay.replay(bundle, {alert_replay.LOG_COUNTER}, start, start + timedelta(minutes=10),
                                   ["node_state", "xid"])
    labels = {s.labels for s in grid.series[alert_replay.LOG_COUNTER]}
    assert labels == {event_labels("gpu-7", "node_state", drain), event_labels("gpu-7", "xid", {"xid": 79})}
    assert ("reason", OTHER) in event_labels("gpu-7", "node_state", drain)


@pytest.mark.parametrize("head, kind", [
    ("JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|NodeList\n", "sacct"),
    ("[2026-03-14T09:20:01.001] update_node: node gpu07 reason set to: Xid 79\n", "slurm_log"),
])
def test_a_followed_file_is_parsed_as_ingest_would_sniff_it(tmp_path: Path, head: str, kind: str):
    path = tmp_path / "followed.log"
    path.write_text(head)
    found = metrics.LineEvents("here").source_kind(f"watch:{path}", [])
    assert found.kind == kind
    assert (found.header == head.encode()) == (kind in metrics.HEADED_KINDS)


def test_counting_keeps_the_long_running_process_free_of_duckdb_and_pandas():
    import subprocess
    import sys

    code = ("import sys\n"
            "from workbench.capture.recorder.daemon import Recorder\n"
            "from workbench.capture.recorder.metrics import LineEvents\n"
            f"list(LineEvents('h').events('kernel:journal', [{kernel_line(XID_79).strip()!r}]))\n"
            "print(sorted(m for m in ('duckdb', 'pandas', 'pyarrow', 'workbench.store.bundle') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[4])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("line", [
    "Mar 14 09:21:16 gpu-3 kernel: " + XID_79,
    "[1058829.402920] " + XID_79,
    XID_79,
])
def test_a_kernel_log_that_starts_empty_is_read_as_kernel_lines_whatever_its_first_line(line: str):
    events = metrics.LineEvents("here")
    kinds = [kind for _, kind, _ in events.events("kernel:/no/such/kern.log", [line])]
    assert kinds == ["xid", "gpu_fell_off_bus"]
    assert events.kinds["kernel:/no/such/kern.log"].module == "collectors.kernel"


def test_the_recorder_sniffs_with_the_ingests_constants():
    from workbench.ingest import session as ingest

    assert (metrics.SNIFF_BYTES, metrics.CONFIDENT) == (ingest.SNIFF_BYTES, ingest.CONFIDENT)
