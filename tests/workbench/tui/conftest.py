"""Shared fixtures for the cockpit's Pilot tests: the demo's training incident, built once, copied per test."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from workbench.analysis import analyze
from workbench.demo import SCENARIOS, run_scenario
from workbench.findings import Analysis


@dataclass(frozen=True)
class Incident:
    """A demo bundle and the engine's analysis of it (passed to the Cockpit to skip re-running it)."""

    path: Path
    analysis: Analysis


@pytest.fixture(scope="session")
def training_incident(tmp_path_factory) -> Incident:
    """The demo's training incident (GPU off the bus on node03), ingested and analyzed once."""
    out = tmp_path_factory.mktemp("tui-demo")
    scenario = next(s for s in SCENARIOS if s.name == "training")
    result = run_scenario(scenario, out, analyze=analyze)
    return Incident(result.bundle, Analysis.from_json(result.analysis))


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
