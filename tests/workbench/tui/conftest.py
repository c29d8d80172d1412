"""Shared fixtures for the cockpit's Pilot tests: the demo's training incident, built once, copied per test."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import select
import shutil
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.analysis.engine import analyze
from workbench.analysis.findings import Analysis
from workbench.demo import SCENARIOS, run_scenario


@dataclass(frozen=True)
class Incident:
    """A demo bundle and the engine's analysis of it (passed to the Cockpit to skip re-running it)."""

    path: Path
    analysis: Analysis


def demo_incident(out: Path) -> Incident:
    """The demo's training incident (GPU off the bus on node03) under ``out``, ingested and analyzed."""
    scenario = next(s for s in SCENARIOS if s.name == "training")
    result = run_scenario(scenario, out, analyze=analyze)
    return Incident(result.bundle, Analysis.from_json(result.analysis))


@pytest.fixture(scope="session")
def training_incident(tmp_path_factory) -> Incident:
    """The demo's training incident, built once."""
    return demo_incident(tmp_path_factory.mktemp("tui-demo"))


@pytest.fixture
def incident(training_incident, tmp_path) -> Incident:
    """A private copy of the training bundle: a test may write to its journal."""
    path = tmp_path / "incident.duckdb"
    shutil.copyfile(training_incident.path, path)
    return Incident(path, training_incident.analysis)


async def wait_for(pilot, condition: Callable[[], bool], *, seconds: float = 10.0) -> None:
    """Let the app work (workers, messages) until ``condition()`` holds; fail after ``seconds``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not condition():
        assert loop.time() < deadline, "the cockpit did not get there in time"
        await pilot.pause(0.02)


async def type_text(pilot, text: str) -> None:
    """Type into the focused field in one go: key by key costs the Pilot ~50 ms a character."""
    pilot.app.focused.insert_text_at_cursor(text)
    await pilot.pause()


class Terminal:
    """``gpuwb ARGS`` run as a user runs it: on a pseudo-terminal of its own (``cols`` x ``rows``), from this
    checkout, with keys typed into it and everything it wrote kept (``output``)."""

    def __init__(self, *args: str, cols: int = 120, rows: int = 40, env: dict[str, str] | None = None) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        root = Path(__file__).resolve().parents[3]
        environ = dict(os.environ, PYTHONPATH=str(root), TERM="xterm-256color")
        environ.update(env or {})
        self.process = subprocess.Popen([sys.executable, "-m", "workbench.cli", *args], stdin=slave, stdout=slave,
                                        stderr=slave, env=environ, cwd=environ["PYTHONPATH"], start_new_session=True)
        os.close(slave)
        self.output = b""

    def read(self, seconds: float) -> bytes:
        """What it writes in the next ``seconds`` (less if it closes the terminal)."""
        start, end = len(self.output), time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:  # the other side closed
                    break
                if not chunk:
                    break
                self.output += chunk
        return self.output[start:]

    def wait_for(self, text: bytes, seconds: float = 60) -> None:
        """Read until ``text`` has been written (a screen drawn); fail after ``seconds``."""
        end = time.monotonic() + seconds
        while text not in self.output:
            assert time.monotonic() < end, f"{text!r} never shown; last output: {self.output[-500:]!r}"
            assert self.process.poll() is None, f"exited {self.process.returncode}: {self.output[-2000:]!r}"
            self.read(0.2)

    def type(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def finish(self, seconds: float = 60) -> int:
        """Its exit status, reading what it writes meanwhile."""
        end = time.monotonic() + seconds
        while self.process.poll() is None and time.monotonic() < end:
            self.read(0.2)
        self.read(0.5)
        return self.process.wait(timeout=5)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        os.close(self.master)
