"""The postmortem: golden Markdown and HTML, valid self-contained HTML5, inert evidence, journal shown."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import html5lib
import pytest
from markdown_it import MarkdownIt

from tests.conftest import run_cli
from tests.workbench.postmortem.report_scenario import CAUSES, GENERATED_AT, HOSTILE, build_bundle
from workbench.analysis import playbook_review
from workbench.analysis.playbook import load_library
from workbench.postmortem import render, report
from workbench.store import journal
from workbench.store.bundle import Bundle

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("GPUWB_UPDATE_GOLDEN") == "1"


@pytest.fixture
def scenario(bundle_path):
    analysis = build_bundle(bundle_path)
    return bundle_path, analysis


@pytest.fixture
def model(scenario):
    path, analysis = scenario
    with Bundle.open(path) as bundle:
        return report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT)


@pytest.fixture
def outputs(model):
    return {fmt: render.render(model, fmt) for fmt in ("md", "html", "json")}


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_matches_golden_file(outputs, fmt):
    golden = GOLDEN / f"training_report.{fmt}"
    if UPDATE:
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(outputs[fmt], encoding="utf-8")
    assert golden.exists(), f"missing {golden}; run with GPUWB_UPDATE_GOLDEN=1 to create it"
    assert outputs[fmt] == golden.read_text(encoding="utf-8"), \
        f"{fmt} report changed; review the diff and regenerate with GPUWB_UPDATE_GOLDEN=1"


def test_rendering_is_deterministic(scenario, outputs):
    path, analysis = scenario
    with Bundle.open(path) as bundle:
        again = render.render(report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT), "html")
    assert again == outputs["html"]


def test_html_is_valid_html5(outputs):
    parser = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False)
    doc = parser.parse(outputs["html"])
    assert parser.errors == []
    assert doc.find(".//head/title") is not None
    assert any(str(el.tag).endswith("}svg") for el in doc.iter()), "inline SVG charts"


def test_html_makes_no_external_requests_and_needs_no_script(outputs):
    html = outputs["html"]
    doc = html5lib.parse(html, namespaceHTMLElements=False)
    assert [el for el in doc.iter() if el.tag in ("script", "link", "iframe", "img", "object", "embed")] == []
    for el in doc.iter():
        for attr in ("src", "href", "srcset", "action", "data", "poster"):
            value = el.get(attr)
            assert value is None or value.startswith("#"), f"<{el.tag} {attr}={value!r}>"
    assert not re.search(r"@import|url\s*\(", html, re.IGNORECASE)
    assert "<style>" in html and "@media print" in html


def test_hostile_evidence_is_escaped_and_inert_in_html(outputs):
    html = outputs["html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html.lower()
    assert "{{ 7*7 }}" in html
    for line in html.splitlines():
        if "alert(1)" in line:
            assert "49" not in line
    doc = html5lib.parse(html, namespaceHTMLElements=False)
    quoted = [el.text for el in doc.iter("pre") if el.text and "alert(1)" in el.text]
    assert quoted == [HOSTILE], "the raw evidence line must be quoted verbatim, as text"


def test_hostile_evidence_is_literal_in_markdown(outputs):
    md = outputs["md"]
    assert HOSTILE in md, "the quoted evidence block keeps the raw line byte for byte"
    assert "{{ 7*7 }}" in md and not any("49" in line for line in md.splitlines() if "alert(1)" in line)
    rendered = MarkdownIt("commonmark").enable("table").render(md)
    assert "<script" not in rendered and "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered
    assert 'href="http://evil.example' not in rendered and "<b>" not in rendered


def test_markdown_parses_into_the_expected_sections_and_tables(outputs):
    tokens = MarkdownIt("commonmark").enable("table").parse(outputs["md"])
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h2"]
    assert headings == ["Summary", "Impact", "Timeline (UTC)", "Root cause and trigger",
                        "Layered findings (business → hardware)", "Contributing factors",
                        "What went well, what went wrong, where we got lucky", "Action items",
                        "Monitoring that would have caught it", "Evidence appendix"]
    rows = sum(1 for t in tokens if t.type == "tr_open")
    assert rows > 30
    # the action item whose title holds a pipe stays one row of seven cells
    md = MarkdownIt("commonmark").enable("table").render(outputs["md"])
    row = next(r for r in md.split("<tr>") if "RMA" in r)
    assert row.count("<td>") == 7 and "node02 | RMA" in row


def test_markdown_template_refuses_unescaped_values():
    env = render._environment("md")
    with pytest.raises(TypeError, match="unescaped"):
        env.from_string("{{ x }}").render(x="<b>")
    assert env.from_string("{{ x|md }} {{ x|code }}").render(x="<b>") == "\\<b\\> `<b>`"


@pytest.mark.parametrize("text", ["a`b", "``x``", "`", "| pipe |", "ends with `"])
def test_code_spans_survive_backticks_and_pipes(text):
    rendered = MarkdownIt("commonmark").enable("table").render(f"| h |\n|---|\n| {render.md_code(text, True)} |\n")
    code = re.search(r"<code>(.*?)</code>", rendered, re.S).group(1)
    assert code.replace("&amp;", "&").strip() == text.strip()


def test_report_tells_the_latest_verdict_and_who(outputs, model):
    layers = {row["layer"]: row for row in model["layers"]}
    assert layers["network_storage"]["verdict"] == "clear" and layers["network_storage"]["overridden"]
    assert layers["network_storage"]["decided"] == "overridden by bob"
    assert [h["author"] for h in layers["network_storage"]["history"]] == ["carol", "bob"]
    assert layers["hardware"]["decided"] == "confirmed by bob"
    assert "overridden by bob: IB counters clean" in outputs["md"]


def test_model_carries_impact_times_chain_and_evidence(model):
    assert model["header"]["responders"] == ["alice", "bob", "carol"]
    assert model["header"]["severity"] == "SEV2" and model["header"]["status"] == "resolved"
    training = model["impact"]["training"]
    assert training["basis"] == "last good checkpoint" and training["gpus"] == 4
    assert training["gpu_hours"] == pytest.approx(4 * (31 * 60 + 2) / 3600, abs=0.05)
    assert model["times"]["ttd"].total_seconds() == 20 * 60 + 57
    chain = {link["role"]: link for link in model["root_cause"]["chain"]}
    assert chain["cause"]["quotes"][0]["trigger"] and "AER" in chain["cause"]["quotes"][0]["text"]
    assert chain["symptom"]["quotes"][0]["kind"] == "nccl_timeout"
    ev = model["evidence"]
    assert ev["verify_ok"] and ev["root_digest"] == ev["sealed_digest"] and len(ev["artifacts"]) == 5
    assert any(g["status"] == "timeout" for g in ev["gaps"])
    titles = [a["title"] for a in model["actions"]]
    assert titles.count("Auto-drain a node on Xid 79.") == 1, "a responder item replaces the same template"


def test_json_format_is_the_model(outputs):
    data = json.loads(outputs["json"])
    assert data["root_cause"]["cause"] == "gpu_fell_off_bus" and "charts" not in data
    assert data["impact"]["training"]["since"] == "2026-03-14T09:00:00Z"


def test_responder_summary_replaces_the_generated_one(scenario):
    path, analysis = scenario
    with Bundle.open(path, write=True) as bundle:
        journal.set_summary(bundle, "alice", "Node02's GPU 3 dropped off PCIe; {{ 7*7 }} <i>not html</i>")
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT)
    assert model["summary"]["by"] == "alice" and not model["summary"]["generated"]
    md, html = render.render(model, "md"), render.render(model, "html")
    assert "\\{\\{ 7\\*7 \\}\\} \\<i\\>not html\\</i\\>" in md
    assert "{{ 7*7 }} &lt;i&gt;not html&lt;/i&gt;" in html


def test_altered_evidence_shows_in_the_appendix(scenario):
    path, analysis = scenario
    import duckdb

    con = duckdb.connect(str(path))
    con.execute("UPDATE artifact_chunk SET data = CAST('tampered' AS BLOB) WHERE artifact_id = 1")
    con.close()
    with Bundle.open(path) as bundle:
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT)
    assert not model["evidence"]["verify_ok"] and "artifact altered" in model["evidence"]["problems"][0]
    assert "FAIL" in render.render(model, "html")


def test_cli_writes_each_format(scenario, tmp_path):
    path, _ = scenario
    for name in ("pm.md", "pm.html", "pm.json"):
        out = tmp_path / name
        code, _, err = run_cli("report", path, "-o", out, "--generated-at", "2026-03-15T08:00:00Z")
        assert code == 0, err
        text = out.read_text()
        assert "Training job 48213 lost a GPU" in text
    assert json.loads((tmp_path / "pm.json").read_text())["generated_at"] == "2026-03-15T08:00:00Z"
    code, out, _ = run_cli("report", path, "-f", "md")
    assert code == 0 and out.startswith("# Training job 48213 lost a GPU")


def test_cli_reports_a_missing_bundle_in_one_line(tmp_path):
    code, _, err = run_cli("report", tmp_path / "nope.duckdb")
    assert code == 2 and err.count("\n") == 1


def test_a_responder_s_check_verdict_is_in_its_layer_row(scenario):
    path, analysis = scenario
    check = next(c for c in load_library()[0].values() if c.layer == "hardware")
    with Bundle.open(path, write=True) as bundle:
        playbook_review.judge_check(bundle, "bob", check.id, "clear", "riser <b>reseated</b>")
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=GENERATED_AT)
    hardware = next(row for row in model["layers"] if row["layer"] == "hardware")
    assert hardware["reviews"] == [{"check": check.title, "verdict": "clear", "author": "bob",
                                    "reason": "riser <b>reseated</b>"}]
    assert all(not row["reviews"] for row in model["layers"] if row["layer"] != "hardware")
    md, html = render.render(model, "md"), render.render(model, "html")
    assert "clear by bob: riser \\<b\\>reseated\\</b\\>" in md
    assert "clear by bob: riser &lt;b&gt;reseated&lt;/b&gt;" in html
