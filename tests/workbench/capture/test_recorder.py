"""`gpuwb record` end to end: the real command in its own process, driven through a kernel log file.

Every recorder started here is stopped by its pid in a ``finally``; short ``--after`` and poll-friendly
values keep the whole file near half a minute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tests.conftest import run_cli
from tests.integration.processes import stop_children
from workbench.capture.recorder.ring import read_ring
from workbench.store.bundle import Bundle

ROOT = Path(__file__).resolve().parents[3]


def kernel_line(message: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    return f"{stamp} node07 kernel: {message}\n"


def append(path: Path, *messages: str) -> None:
    with open(path, "a") as f:
        f.write("".join(kernel_line(m) for m in messages))


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what} after {timeout:.0f} s")


def status_of(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@contextmanager
def recorder(out: Path, log: Path, *extra: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``gpuwb record`` process, stopped by its pid however the test ends."""
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "record", "--out", str(out), "--kernel-log",
                             str(log), "--no-capture", "--after", "2s", *extra],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_for("the recorder's status file", lambda: status_of(out).get("pid") == proc.pid, timeout=20)
        yield proc
    finally:
        stop_children([("recorder", proc)])  # TERM, then KILL after 10 s
        if proc.stdout:
            proc.stdout.close()


def bundles(out: Path) -> list[Path]:
    return sorted(out.glob("incident-*.duckdb"))


def written(out: Path, count: int) -> list[str]:
    """Wait until the recorder reports ``count`` bundles finished (all three freezing steps done)."""
    return wait_for(f"{count} finished bundle(s)", lambda: (s := status_of(out)) and not s.get("freezing")
                    and len(s.get("bundles", [])) == count and s["bundles"], timeout=60)


def test_xid_freezes_one_bundle_with_the_aer_lines_before_it_and_a_second_xid_joins_it(tmp_path: Path) -> None:
    out, log = tmp_path / "rec", tmp_path / "kern.log"
    log.write_text(kernel_line("old line, before the recorder started: not in the ring"))
    with recorder(out, log, "--cooldown", "60s", "--nvml-interval", "1s") as proc:
        append(log, "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex",
               "systemd[1]: Started Session 3 of user slurm.")
        append(log, "pcieport 0000:5c:00.0: AER: Corrected error received: 0000:5d:00.0",
               "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
               "nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)")
        time.sleep(1.5)
        first = time.monotonic()
        append(log, "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")
        appeared = wait_for("a bundle", lambda: bundles(out), timeout=60)
        assert time.monotonic() - first < 60
        (path,) = written(out, 1)
        assert [Path(path)] == appeared == bundles(out)

        time.sleep(max(0.0, 10 - (time.monotonic() - first)))
        append(log, "NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.")
        wait_for("the second Xid to be seen", lambda: status_of(out).get("absorbed") == 1)
        time.sleep(3)
        assert bundles(out) == appeared, "a second Xid within the cool-down makes no second bundle"
        assert proc.poll() is None

    code, text, err = run_cli("timeline", path, "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in text.splitlines()]
    aer = [r for r in rows if r["kind"] == "pcie_aer"]
    xid = [r for r in rows if r["kind"] == "xid"]
    assert len(aer) == 2 and all(r["attrs"]["severity"] == "corrected" for r in aer)
    assert len(xid) == 1 and xid[0]["attrs"]["xid"] == 79 and xid[0]["gpu"] == "0000:5d:00.0"
    assert max(r["ts"] for r in aer) < xid[0]["ts"]
    assert not any("before the recorder started" in r["message"] for r in rows)
    with Bundle.open(path) as bundle:
        assert bundle.verify() == []
        coverage = {row["collector"]: row for row in bundle.coverage()}
        meta = bundle.meta()
    assert coverage["recorder"]["status"] == "ok" and coverage["recorder"]["reason"].startswith("6 lines")
    assert coverage["recorder-after"]["status"] == "ok"
    assert coverage["capture"]["status"] == "skipped" and "--no-capture" in coverage["capture"]["reason"]
    assert meta["title"].startswith("xid 79 on ")


def test_kill_9_mid_ring_then_a_restart_continues_the_ring(tmp_path: Path) -> None:
    out, log = tmp_path / "rec", tmp_path / "kern.log"
    log.touch()
    with recorder(out, log, "--no-nvml") as proc:
        append(log, *[f"usb 1-{i}: new high-speed USB device number {i}" for i in range(40)])
        wait_for("40 lines in the ring", lambda: len(read_ring(out / "ring")[0]) == 40)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    (last,) = sorted((out / "ring").glob("seg-*.jsonl"))
    with open(last, "ab") as f:  # what a kill in the middle of a write leaves
        f.write(b'{"t": 17, "src": "kernel:')
    append(log, *[f"usb 2-{i}: new high-speed USB device number {i}" for i in range(10)])  # while it was down

    with recorder(out, log, "--no-nvml"):
        append(log, *[f"usb 3-{i}: new high-speed USB device number {i}" for i in range(5)])
        records = wait_for("55 lines in the ring", lambda: (r := read_ring(out / "ring"))[0]
                           and len(r[0]) == 55 and r)
    lines, torn = records
    assert torn == 1
    assert [r.text.split(": ", 1)[1].split(":")[0] for r in lines] == (
        [f"usb 1-{i}" for i in range(40)] + [f"usb 2-{i}" for i in range(10)] + [f"usb 3-{i}" for i in range(5)])
    segments = sorted((out / "ring").glob("seg-*.jsonl"))
    assert len(segments) >= 2 and segments[0] == last, "the restart opened a new segment after the old one"


def test_record_trigger_and_sigusr1_freeze_on_request_and_status_prints(tmp_path: Path) -> None:
    out, log = tmp_path / "rec", tmp_path / "kern.log"
    log.touch()
    with recorder(out, log, "--cooldown", "60s", "--no-nvml") as proc:
        append(log, "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode")
        time.sleep(1.2)
        code, text, err = run_cli("record", "trigger", "--out", out, "--reason", "slurm epilog: job 42 failed")
        assert code == 0 and "trigger dropped" in text, err
        (path,) = written(out, 1)
        with Bundle.open(path) as bundle:
            coverage = {row["collector"]: row for row in bundle.coverage()}
            assert bundle.verify() == []
        assert coverage["recorder"]["reason"].startswith("1 lines")

        os.kill(proc.pid, signal.SIGUSR1)
        wait_for("SIGUSR1 seen", lambda: (status_of(out).get("last_trigger") or {}).get("reason")
                 == "requested: SIGUSR1")
        code, text, err = run_cli("record", "status", "--out", out)
    assert code == 0, err
    assert "running" in text.splitlines()[0] and f"pid {proc.pid}" in text
    assert f"follows    kernel:{log}" in text
    assert "trigger    requested: SIGUSR1" in text and "1 further trigger(s) joined" in text
    assert f"bundle     {path}" in text
    assert bundles(out) == [Path(path)]


def test_record_refuses_bad_options_in_one_line(tmp_path: Path) -> None:
    for args, word in ((("record",), "--out DIR is required"),
                       (("record", "--out", tmp_path, "--window", "soon"), "--window"),
                       (("record", "--out", tmp_path, "--max-disk", "10k"), "at least 1MB"),
                       (("record", "status", "--out", tmp_path / "nothing"), "no recorder status"),
                       (("record", "--out", tmp_path, "--reason", "x"), "--reason goes with")):
        code, text, err = run_cli(*args)
        assert code == 2 and word in err and len(err.strip().splitlines()) == 1, (args, err)
