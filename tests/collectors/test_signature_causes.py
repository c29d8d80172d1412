"""A signature's cause is what the engine counts: every catalog entry that names a cause, its samples
alone in a bundle (what a ticket holds: the pasted lines, nothing else), ranks that cause first, unless
the entry says why not (``not_alone:``)."""

from __future__ import annotations

import json

import pytest

from collectors.framework.signatures import load_signatures
from tests.conftest import run_cli

WITH_CAUSE = [s for s in load_signatures() if s.cause and not s.not_alone]


@pytest.mark.parametrize("sig", WITH_CAUSE, ids=[s.id for s in WITH_CAUSE])
def test_its_samples_alone_rank_its_cause_first(sig, tmp_path) -> None:
    evidence = tmp_path / "ticket"
    evidence.mkdir()
    (evidence / "pasted.txt").write_text("".join(s.line + "\n" for s in sig.samples), encoding="utf-8")
    bundle = tmp_path / "b.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence)
    assert code == 0, err or out
    code, out, err = run_cli("analyze", bundle, "--json")
    assert code == 0, err
    top = [h["cause"] for h in json.loads(out)["hypotheses"]][:3]
    assert top and top[0] == sig.cause, f"{sig.id}: {sig.cause} expected first, ranked {top}"


def test_an_entry_that_says_why_not_is_still_read(monkeypatch) -> None:
    """not_alone is a reason, not an off switch: the entry keeps its cause for the engine."""
    reasons = [s for s in load_signatures() if s.not_alone]
    assert all(s.cause and len(s.not_alone) > 20 for s in reasons)
