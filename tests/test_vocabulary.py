"""One vocabulary: every event the parsers and derivations write is declared in collectors/catalog/events.yaml,
docs/events.md is what that declaration generates, and the playbooks ask only for declared kinds."""

from __future__ import annotations

import ast
import json
import re

import pytest

from collectors.framework.vocabulary import (
    FAILED_JOB_STATES,
    LAYERS,
    SEVERITIES,
    SYMPTOM_KINDS,
    SYMPTOMS,
    VERDICT_MARKS,
    VERDICTS,
    VocabularyError,
    event_kinds,
    events_markdown,
    parse_catalog,
    problems,
)
from tests.conftest import CORPUS, ROOT
from workbench.analysis.playbook import checks_document
from workbench.demo import SCENARIOS as DEMOS
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle

SCENARIOS = ROOT / "tests" / "scenarios"
EMITTERS = (sorted((ROOT / "collectors").rglob("*.py"))
            + sorted((ROOT / "workbench" / "ingest" / "derivations").glob("*.py")))
_KIND = re.compile(r"[a-z][a-z0-9_]*")


@pytest.fixture(scope="module")
def evidence_events(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, str, str, dict]]:
    """(where, kind, layer, severity, attrs) of every event of the corpus, the NVML replays, each
    scenario and each demo incident, ingested as a user would (derivations included)."""
    tmp = tmp_path_factory.mktemp("vocabulary")
    inputs = {"corpus": CORPUS, "nvml-replays": ROOT / "tests" / "data" / "nvml"}
    inputs.update({p.name: p for p in sorted(SCENARIOS.iterdir()) if (p / "expected.yaml").exists()})
    for demo in DEMOS:
        demo.module.write(tmp / f"demo-{demo.name}")
        inputs[f"demo-{demo.name}"] = tmp / f"demo-{demo.name}"
    rows = []
    for where, path in inputs.items():
        with Bundle.create(tmp / f"{where}.duckdb") as bundle:
            ingest_paths(bundle, [str(path)])
            found = bundle.con.execute("SELECT kind, layer, severity, attrs FROM event").fetchall()
        rows += [(where, kind, layer, severity, json.loads(attrs) if attrs else {})
                 for kind, layer, severity, attrs in found]
    return rows


def test_every_event_of_the_corpus_scenarios_and_demos_is_declared(evidence_events: list) -> None:
    wrong = sorted({f"{where}: {p}" for where, kind, layer, _, attrs in evidence_events
                    for p in problems(kind, layer, attrs)})
    assert wrong == []
    assert {sev for *_, sev, _ in evidence_events} <= set(SEVERITIES)


def test_the_evidence_exercises_most_of_the_vocabulary(evidence_events: list) -> None:
    """The check above means something only if the evidence writes many kinds from many sources."""
    seen = {kind for _, kind, *_ in evidence_events}
    assert len(evidence_events) > 500
    assert len(seen) >= 55, sorted(seen)
    assert {layer for _, _, layer, *_ in evidence_events} == set(LAYERS)


def _strings(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _strings(node.body) + _strings(node.orelse)
    return []


def emitted_kinds(source: str) -> set[str]:
    """Kinds written as literals: ``Event(kind=...)`` or ``Event("k", ...)``, ``Finding("k", ...)``,
    ``Rule("k", ...)`` and the collectors' ``_event(..., "k", ...)`` helpers (the first literal of the
    first two arguments)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name == "Event":
            found.update(s for kw in node.keywords if kw.arg == "kind" for s in _strings(kw.value))
            found.update(_strings(node.args[0]) if node.args else [])
        elif name in ("Finding", "Rule") and node.args:
            found.update(_strings(node.args[0]))
        elif name == "_event":
            found.update(next((s for arg in node.args[:2] if (s := _strings(arg))), []))
    return {kind for kind in found if _KIND.fullmatch(kind)}


def test_every_kind_written_as_a_literal_is_declared() -> None:
    """Kinds the evidence above never reaches are still checked where the code spells them out."""
    declared = event_kinds()
    written = {str(path.relative_to(ROOT)): emitted_kinds(path.read_text(encoding="utf-8")) for path in EMITTERS}
    wrong = sorted(f"{name}: {kind}" for name, kinds in written.items() for kind in kinds if kind not in declared)
    assert wrong == []
    assert len(set().union(*written.values())) >= 70


def test_the_static_check_sees_each_way_of_writing_a_kind() -> None:
    source = """
Event(kind="a_kind", message="")
Event(kind="up" if x else "down_kind", message="")
Event("positional_kind", "message")
Finding("finding_kind", "error", {})
self._event(rec, "helper_kind", "gpu", "info")
self._event("other_helper_kind", message)
_event(reason, "FailedScheduling")
"""
    assert emitted_kinds(source) == {"a_kind", "up", "down_kind", "positional_kind", "finding_kind", "helper_kind",
                                     "other_helper_kind"}


def test_docs_events_md_is_what_the_declaration_generates() -> None:
    """Regenerate with ``python scripts/events_doc.py`` after editing collectors/catalog/events.yaml."""
    assert (ROOT / "docs" / "events.md").read_text(encoding="utf-8") == events_markdown()


def test_docs_list_every_kind_with_its_layer_and_attrs() -> None:
    text = events_markdown()
    for kind in event_kinds().values():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{kind.name}` |"))
        assert f"| {', '.join(kind.layers)} |" in row
        assert all(f"`{attr}`" in row for attr in kind.own)


def test_every_kind_has_a_meaning_and_known_layers() -> None:
    for kind in event_kinds().values():
        assert kind.meaning and set(kind.layers) <= set(LAYERS), kind.name
        assert all(kind.attrs.values()), kind.name


def test_symptoms_are_declared_event_kinds_with_an_impact() -> None:
    assert set(SYMPTOM_KINDS) <= set(event_kinds())
    assert {impact for impact, _ in SYMPTOMS.values()} == {"failure", "degradation"}


def test_verdicts_have_marks() -> None:
    assert list(VERDICT_MARKS) == list(VERDICTS)
    assert len(set(VERDICT_MARKS.values())) == len(VERDICTS)


def test_the_playbooks_need_only_declared_kinds() -> None:
    """A check whose ``needs: [kind:K]`` names a kind nobody writes can never be more than no_evidence."""
    needs = set()
    for path in (ROOT / "playbooks").rglob("*.yaml"):
        needs |= set(re.findall(r"\bkind:([a-z0-9_]+)", path.read_text(encoding="utf-8")))
    assert len(needs) >= 5
    assert needs - set(event_kinds()) == set()


def test_the_symptoms_query_fails_jobs_in_the_declared_states() -> None:
    """checks.yaml is SQL and cannot import: it must spell the same failed Slurm states."""
    checks = checks_document()
    listed = re.search(r"upper\(attrs->>'state'\) IN\s*\(([^)]*)\)", checks["symptoms"]["sql"])
    assert listed is not None
    assert sorted(re.findall(r"'([A-Z_]+)'", listed.group(1))) == sorted(FAILED_JOB_STATES)


@pytest.mark.parametrize(("text", "says"), [
    ("kinds: {k: {layer: gpus, meaning: m}}", "layer 'gpus'"),
    ("kinds: {k: {layer: gpu}}", "needs a layer and a meaning"),
    ("kinds: {k: {layer: gpu, meaning: m, attrs: {pci: }}}", "attr 'pci' has no meaning"),
    ("kinds: {k: {layer: gpu, meaning: m, groups: [nccl]}}", "attr group 'nccl'"),
])
def test_a_malformed_declaration_is_refused_with_its_place(text: str, says: str) -> None:
    with pytest.raises(VocabularyError, match=re.escape(says)):
        parse_catalog(text)


def test_attrs_take_the_shared_meaning_and_their_groups() -> None:
    kinds, _ = parse_catalog("attrs: {pci: bus id}\nattr_groups: {line: {pid: process id}}\n"
                             "kinds: {k: {layer: [gpu, hardware], meaning: m, groups: [line], attrs: {pci: }}}")
    assert kinds["k"].attrs == {"pid": "process id", "pci": "bus id"} and kinds["k"].layers == ("gpu", "hardware")
