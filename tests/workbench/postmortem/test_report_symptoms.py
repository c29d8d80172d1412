"""The postmortem shows the analysis' symptoms: it quotes the lines the analysis attached to the
root cause and dates detection by the analysis' first symptom, with no symptom rules of its own."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from collectors.base import Event
from tests.workbench.postmortem.report_scenario import CAUSES, GENERATED_AT, build_bundle
from workbench.postmortem import chain, report
from workbench.store.bundle import Bundle


def _chain(path: Path, analysis: dict) -> dict[str, list[dict]]:
    with Bundle.open(path) as bundle:
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT, verify=False)
    return {link["role"]: link["quotes"] for link in model["root_cause"]["chain"]}


def test_symptom_quotes_are_the_analysis_lines_with_their_group_size(bundle_path: Path) -> None:
    analysis = build_bundle(bundle_path)
    given = analysis["hypotheses"][0]["symptom_evidence"]
    chain = _chain(bundle_path, analysis)
    assert [(q["artifact"], q["line"], q["of_total"]) for q in chain["symptom"]] == \
        [(s["artifact"], s["line"], s["count"]) for s in given]
    others = {(q["artifact"], q["line"]) for q in chain["cause"] + chain["intermediate"]}
    assert others.isdisjoint((s["artifact"], s["line"]) for s in given)


def test_without_symptom_lines_from_the_analysis_the_report_finds_none_itself(bundle_path: Path) -> None:
    analysis = build_bundle(bundle_path)
    analysis["hypotheses"][0]["symptom_evidence"] = []
    assert "symptom" not in _chain(bundle_path, analysis)


def test_a_cause_line_the_analysis_also_calls_a_symptom_is_quoted_once_as_a_symptom(bundle_path: Path) -> None:
    analysis = build_bundle(bundle_path)
    hyp = analysis["hypotheses"][0]
    hyp["evidence"].append(dict(hyp["symptom_evidence"][2]))
    chain = _chain(bundle_path, analysis)
    quoted = [(q["artifact"], q["line"]) for quotes in chain.values() for q in quotes]
    assert len(quoted) == len(set(quoted))
    assert (hyp["symptom_evidence"][2]["artifact"], 2) in {(q["artifact"], q["line"]) for q in chain["symptom"]}


def test_detection_is_inferred_from_the_analysis_first_symptom(tmp_path: Path) -> None:
    path = tmp_path / "b.duckdb"
    with Bundle.create(path) as bundle:
        writer = bundle.writer(None)
        writer.add(Event("nccl_timeout", "watchdog timeout", datetime(2026, 3, 14, 9, 5), host="n1",
                         layer="network_storage", severity="error"))
        writer.flush()
    analysis = {"window": {"start": "2026-03-14T09:00:00Z", "end": "2026-03-14T10:00:00Z"},
                "first_anomaly": {"ts": "2026-03-14T09:00:00Z", "host": "n1", "kind": "xid"},
                "symptoms": [{"kind": "straggler_rank", "host": "n2", "first_seen": "2026-03-14T09:20:00.000Z"},
                             {"kind": "job_failed", "host": None, "first_seen": "2026-03-14T09:10:00.000Z"},
                             {"kind": "latency_spike", "host": "n3", "first_seen": "2026-03-14T08:00:00.000Z"}]}
    with Bundle.open(path) as bundle:
        times = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT, verify=False)["times"]
    assert times["detection"] == {"ts": datetime(2026, 3, 14, 9, 10), "approx": True,
                                  "by": "inferred: first symptom (job_failed)"}


def test_the_analysis_names_the_symptom_each_quoted_line_shows(tmp_path: Path) -> None:
    from collectors.framework.vocabulary import SYMPTOM_KINDS
    from workbench.analysis.engine import analyze
    from workbench.demo import training
    from workbench.ingest.session import ingest_paths

    training.write(tmp_path / "evidence")
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        ingest_paths(bundle, [str(tmp_path / "evidence")])
    with Bundle.open(tmp_path / "b.duckdb") as bundle:
        top = analyze(bundle)["hypotheses"][0]
    lines = top["symptom_evidence"]
    assert lines and all(s["kind"] in SYMPTOM_KINDS and s["count"] >= 1 for s in lines)
    assert {s["kind"] for s in lines} == set(top["symptoms"])


def test_the_few_quotes_of_a_symptom_show_how_far_it_spread(bundle_path: Path) -> None:
    analysis = build_bundle(bundle_path)
    hyp = analysis["hypotheses"][0]
    timeout = hyp["symptom_evidence"][0]
    hyp["symptom_evidence"] = [{**timeout, "host": host, "line": line} for host in ("node01", "node02")
                               for line in (3, 4, 3)]
    quotes = _chain(bundle_path, analysis)["symptom"]
    assert len(quotes) == chain.KEY_PER_KIND and {q["host"] for q in quotes} == {"node01", "node02"}
