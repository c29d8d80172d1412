"""``gpuwb demo``: realistic built-in incidents, taken through the user's own path.

Each scenario writes the raw files a responder would be handed (native formats, one folder per
host plus shared folders), ingests them with :func:`workbench.ingest.session.ingest_paths` exactly as
``gpuwb ingest`` does, records the on-call engineer's times and a note in the journal, runs the
analysis and writes the Markdown and HTML postmortems. Nothing is faked past the raw files: if a
parser or the engine gets a scenario wrong, the demo shows it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from workbench.demo import inference, training
from workbench.errors import UsageError
from workbench.ingest.session import ingest_paths
from workbench.postmortem import report
from workbench.postmortem.render import render
from workbench.store import journal
from workbench.store.bundle import Bundle

MARKER = ".gpuwb-demo"
"""Marks a folder the demo wrote, so a second run may replace it and never touches anything else."""

AUTHOR = "demo-oncall"


@dataclass
class Scenario:
    """One built-in incident: where its files come from and what its analysis should find."""

    name: str
    module: ModuleType
    notes: list[tuple[str, str]] = field(default_factory=list)
    """(milestone it is written at, text) of the on-call engineer's notes"""


SCENARIOS = (
    Scenario("training", training, [
        ("detection", "Paged by the 'training job stalled' alert for job 48213; all ranks stuck in ALLREDUCE."),
        ("mitigation", "node03 already drained by NHC; requeued 48214 on node01,02,04 + spare node05 from step 42000."),
        ("recovery", "Job 48214 past step 42050; loss matches the pre-incident curve.")]),
    Scenario("inference", inference, [
        ("detection", "Paged: p99 latency SLO burn alert for llama3-70b-chat."),
        ("mitigation", "Gateway rate limit 40 req/s per tenant on the campaign client; HPA cannot add pods "
                       "(no free GPUs)."),
        ("recovery", "p99 back under the SLO; queue empty on all three pods.")]),
)


@dataclass
class DemoResult:
    """What one scenario produced, for printing and for tests."""

    name: str
    evidence: Path
    bundle: Path
    markdown: Path
    html: Path
    analysis: dict[str, Any]
    seconds: float


class DemoError(UsageError):
    """The output folder cannot be used (it holds something the demo did not write)."""


def prepare(out: Path) -> None:
    """Create ``out`` or reuse a previous demo's folder; refuse anything else that is not empty."""
    if out.exists() and not out.is_dir():
        raise DemoError(f"--out {out} is a file; the demo writes a folder")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise DemoError(f"{out} exists and was not written by gpuwb demo; choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by gpuwb demo; safe to delete\n")
    for scenario in SCENARIOS:
        target = out / scenario.name
        if target.exists():
            shutil.rmtree(target)


def run_scenario(scenario: Scenario, out: Path, *, analyze: Callable[[Bundle], dict[str, Any]],
                 generated_at: datetime | None = None) -> DemoResult:
    """Write, ingest, analyze and report one incident under ``out/<name>``."""
    started = time.monotonic()
    root = out / scenario.name
    evidence = root / "evidence"
    scenario.module.write(evidence)
    path = root / "incident.duckdb"
    meta = {"slo_p99_ms": str(scenario.module.SLO_P99_MS)} if hasattr(scenario.module, "SLO_P99_MS") else None
    with Bundle.create(path, title=scenario.module.TITLE, meta=meta) as bundle:
        ingest_paths(bundle, [str(evidence)])
        _journal(bundle, scenario)
    with Bundle.open(path) as bundle:
        result = analyze(bundle)
        model = report.build(bundle, analysis=result, generated_at=generated_at)
    markdown, html = root / "postmortem.md", root / "postmortem.html"
    markdown.write_text(render(model, "md"), encoding="utf-8")
    html.write_text(render(model, "html"), encoding="utf-8")
    return DemoResult(scenario.name, evidence, path, markdown, html, result, time.monotonic() - started)


def _journal(bundle: Bundle, scenario: Scenario) -> None:
    """The on-call engineer's milestones and notes, written when they happened."""
    milestones = scenario.module.MILESTONES
    for which, when in milestones.items():
        journal.set_time(bundle, AUTHOR, which, when, at=when)
    for which, text in scenario.notes:
        journal.add_note(bundle, AUTHOR, text, ts=milestones[which], at=milestones[which])
