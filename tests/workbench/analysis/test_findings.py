"""The typed analysis: it reads ``analyze --json`` whole and gives the same object back, and the
CLI's text rendering reads the typed object."""

from __future__ import annotations

import json

from tests.conftest import run_cli
from workbench.analysis.engine import analyze
from workbench.analysis.findings import Analysis
from workbench.demo import SCENARIOS, run_scenario
from workbench.store.bundle import Bundle
from workbench.times import iso


def test_round_trip_and_typed_fields_agree_with_the_json(tmp_path):
    scenario = next(s for s in SCENARIOS if s.name == "training")
    result = run_scenario(scenario, tmp_path, analyze=analyze)
    typed = Analysis.from_json(json.loads(json.dumps(result.analysis)))
    assert typed.to_json() == result.analysis
    top, raw = typed.top, result.analysis["hypotheses"][0]
    assert (top.cause, top.host, top.gpu, list(top.ranks), iso(top.first_seen)) == (
        raw["cause"], raw["host"], raw["gpu"], raw["ranks"], raw["first_seen"])
    assert typed.layer_verdicts == {k: v["verdict"] for k, v in result.analysis["layers"].items()}
    assert [e.line for e in top.evidence] == [e["line"] for e in raw["evidence"]]
    code, out, _ = run_cli("analyze", result.bundle)
    assert code == 0 and f"#1 {top.score:.2f}  {top.layer}/{top.cause}  {top.host} {top.gpu}" in out
    with Bundle.open(result.bundle) as bundle:
        assert Analysis.from_json(analyze(bundle)).top.cause == top.cause
