"""Capture: isolation with hard timeouts, atomic output, interruption, redaction."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import duckdb
import pytest

from collectors import host
from collectors.base import Artifact
from collectors.framework import registry
from tests.reliability._capture_fakes import fake_collector
from workbench.capture.live import capture
from workbench.store.bundle import Bundle


def _quick(ctx):
    yield Artifact(source="quick", kind="quick_text", data=b"fine\n")


def _hangs_after_one(ctx):
    yield Artifact(source="before-hang", kind="hangs_text", data=b"got this before the hang\n")
    time.sleep(3600)  # a GPU that fell off the bus stalls NVML like this
    yield Artifact(source="never", kind="hangs_text", data=b"never\n")


def _runs_hanging_command(ctx):
    yield ctx.run(["sleep", "30"], kind="quick_text", timeout=0.5)


@pytest.fixture
def fake_collectors(monkeypatch):
    def install(*modules):
        monkeypatch.setattr(registry, "all_collectors", lambda: tuple(modules))
    return install


def test_hanging_collector_is_cut_off_while_others_complete(tmp_path, fake_collectors):
    fake_collectors(fake_collector("quick", _quick), fake_collector("hangs", _hangs_after_one, timeout=1.0))
    began = time.monotonic()
    path, outcomes, complete = capture(tmp_path / "b.duckdb")
    elapsed = time.monotonic() - began
    assert elapsed < 15
    status = {o.name: o for o in outcomes}
    assert status["quick"].status == "ok"
    assert status["hangs"].status == "timeout" and "kept 1 artifact" in status["hangs"].reason
    assert complete
    with Bundle.open(path) as bundle:
        sources = {a["source"] for a in bundle.artifacts()}
        assert sources == {"quick", "before-hang"}
        coverage = {row["collector"]: row["status"] for row in bundle.coverage()}
        assert coverage == {"quick": "ok", "hangs": "timeout"}
        assert bundle.verify() == []


def test_hanging_command_is_killed_and_recorded(tmp_path, fake_collectors):
    fake_collectors(fake_collector("cmd", _runs_hanging_command))
    path, outcomes, _ = capture(tmp_path / "b.duckdb")
    with Bundle.open(path) as bundle:
        info = json.loads(bundle.con.execute("SELECT info FROM artifact").fetchall()[0][0])
    assert info["timed_out"] is True and info["argv"] == ["sleep", "30"] and info["duration_s"] < 5


def test_capture_writes_atomically_and_leaves_no_partial_file(tmp_path, fake_collectors):
    fake_collectors(fake_collector("quick", _quick))
    capture(tmp_path / "b.duckdb")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.duckdb"]


def _as_a_fresh_process() -> None:
    """Ctrl-C as a shell delivers it to a new ``gpuwb capture``: Python's own SIGINT handler. The child is
    spawned, not forked, so nothing the test process accumulated over thousands of tests before it
    (threads, open databases, handlers) is inherited."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _interrupted_capture(out: str, pid_file: str) -> None:
    _as_a_fresh_process()
    registry.all_collectors = lambda: (fake_collector("quick", _quick),
                                       fake_collector("hangs", _hangs_after_one, timeout=60))
    Path(pid_file).write_text(str(os.getpid()))
    try:
        capture(out)
    except KeyboardInterrupt:
        os._exit(3)
    os._exit(0)


def test_ctrl_c_leaves_a_valid_bundle_marked_incomplete(tmp_path):
    out, pid_file = tmp_path / "b.duckdb", tmp_path / "pid"
    proc = multiprocessing.get_context("spawn").Process(target=_interrupted_capture, args=(str(out), str(pid_file)))
    proc.start()
    deadline = time.monotonic() + 10
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # the quick collector is done, the hanging one is still running
    os.kill(proc.pid, signal.SIGINT)
    proc.join(timeout=30)
    assert proc.exitcode == 0
    with Bundle.open(out) as bundle:
        assert bundle.meta()["complete"] == "false"
        assert bundle.last_seal()["complete"] is False
        assert {a["source"] for a in bundle.artifacts()} == {"quick", "before-hang"}
        assert bundle.verify() == []
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]


def test_host_facts_redact_secret_environment(tmp_path, fake_collectors, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnop")
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    monkeypatch.setenv("LAUNCH_CMD",
                       "torchrun --token s3cr3tvalue train.py --header 'Authorization: Bearer abcdefgh12345'")
    monkeypatch.setenv("PLAIN_SETTING", "visible-value")
    fake_collectors(host)
    path, outcomes, _ = capture(tmp_path / "b.duckdb")
    assert outcomes[0].status == "ok"
    with Bundle.open(path) as bundle:
        raw = b"".join(bundle.artifact_bytes(bundle.artifacts()[0]["sha256"]))
        facts = dict(bundle.con.execute("SELECT key, value FROM host_inventory").fetchall())
    for secret in (b"hf_abcdefghijklmnop", b"0123456789abcdef", b"s3cr3tvalue", b"abcdefgh12345"):
        assert secret not in raw
    assert facts["env.HF_TOKEN"] == "***REDACTED***"
    assert facts["env.PLAIN_SETTING"] == "visible-value"
    assert "boot_time" in facts and "kernel" in facts


def test_capture_refuses_to_overwrite(tmp_path):
    from tests.conftest import run_cli

    target = tmp_path / "b.duckdb"
    duckdb.connect(str(target)).close()
    code, _, err = run_cli("capture", "-o", target)
    assert code == 2 and "already exists" in err


def _prints_a_secret_and_hangs(ctx):
    yield ctx.run(["sh", "-c", "echo HF_TOKEN=hf_abcdefghijklmnop; echo second line; exec sleep 300"],
                  kind="secret_text", timeout=600)


def _interrupted_mid_command(out: str, ready: str) -> None:
    _as_a_fresh_process()
    registry.all_collectors = lambda: (fake_collector("secret", _prints_a_secret_and_hangs, timeout=60),)
    Path(ready).write_text("")
    result = capture(out)
    _, _, complete = result
    os._exit(5 if result.stopped_by == signal.SIGINT and not complete else 4)


def test_a_command_cut_by_ctrl_c_keeps_its_output_redacted(tmp_path):
    """The collector is killed mid-command, before it could emit (and redact) what the command printed: the
    capture stores that output itself, marked cut, with the secret masked as the collector would have."""
    out, ready = tmp_path / "b.duckdb", tmp_path / "ready"
    proc = multiprocessing.get_context("spawn").Process(target=_interrupted_mid_command, args=(str(out), str(ready)))
    proc.start()
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)  # the command has printed and hangs
    os.kill(proc.pid, signal.SIGINT)
    proc.join(timeout=30)
    assert proc.exitcode == 5
    with Bundle.open(out) as bundle:
        (art,) = bundle.artifacts()
        raw = b"".join(bundle.artifact_bytes(art["sha256"]))
        info = json.loads(bundle.con.execute("SELECT info FROM artifact").fetchall()[0][0])
        assert bundle.verify() == []
    assert b"hf_abcdefghijklmnop" not in raw and raw.endswith(b"second line\n")
    assert info["cut"] == "its collector was stopped while it ran" and info["redacted_values"] == 1
