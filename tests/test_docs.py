"""docs/ says what the code does: its links lead somewhere, its generated pages are current, and the CLI
contract lists every sub-command and exit status the command line has."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType

from tests.conftest import ROOT, run_cli
from workbench import cli
from workbench.demo import training

DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
"""A Markdown inline link's target; images are not links to follow."""


def _causes_doc() -> ModuleType:
    spec = importlib.util.spec_from_file_location("causes_doc", ROOT / "scripts" / "causes_doc.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """Targets of a page's links that point into the repository (no scheme, not a bare #anchor)."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Links to a file that does not exist or lies outside ``root``, or to a heading a Markdown page lacks."""
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve()
        if not path.exists() or not (path == root or root in path.parents):
            broken.append(f"{page.relative_to(root)} -> {target}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{page.relative_to(root)} -> {target} (no such heading)")
    return broken


def returned_ints(path: Path, function: str) -> set[int]:
    """Every integer ``function`` of a module returns, directly or through a module constant (EX_SOFTWARE)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants = {node.targets[0].id: node.value.value for node in tree.body
                 if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                 and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int)}
    codes: set[int] = set()
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function):
        for node in ast.walk(fn):
            value = node.value if isinstance(node, ast.Return) else None
            if isinstance(value, ast.Constant) and type(value.value) is int:
                codes.add(value.value)
            elif isinstance(value, ast.Name) and value.id in constants:
                codes.add(constants[value.id])
    return codes


def documented_exit_codes() -> set[int]:
    """Exit statuses the command line can end with: those workbench/cli.py's docstring names ("exit 2"),
    every integer its ``main`` returns, and every integer a sub-command's ``run`` returns."""
    source = Path(cli.__file__)
    codes = {int(c) for c in re.findall(r"\bexit (\d+)", ast.get_docstring(ast.parse(source.read_text("utf-8"))) or "")}
    codes |= returned_ints(source, "main")
    for module in sorted((source.parent / "commands").glob("[!_]*.py")):
        codes |= returned_ints(module, "run")
    return codes


def test_the_docs_pages_exist_and_the_readme_points_at_them() -> None:
    names = {p.name for p in DOCS.glob("*.md")}
    assert {"README.md", "data-flow.md", "bundle.md", "cli.md", "conventions.md", "causes.md", "extending.md",
            "events.md"} <= names
    assert any(t.startswith("docs/") for t in relative_links(ROOT / "README.md"))
    index_targets = {t.split("#", 1)[0] for t in relative_links(DOCS / "README.md")}
    assert names - {"README.md"} <= index_targets


def test_every_relative_link_points_at_an_existing_file() -> None:
    assert [b for page in doc_pages() for b in broken_links(page)] == []


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# R\n## The `x` part: here\n", encoding="utf-8")
    (tmp_path / "outside.md").write_text("# o\n", encoding="utf-8")
    page = root / "docs" / "page.md"
    page.write_text("[ok](../README.md#the-x-part-here) [gone](missing.md#x) [web](https://example.org) [top](#here)\n"
                    "[out](../../outside.md) [no heading](../README.md#x) ![img](pic.png)\n"
                    "```\n[code](not-a-link.md)\n```\n", encoding="utf-8")
    assert relative_links(page) == ["../README.md#the-x-part-here", "missing.md#x", "../../outside.md",
                                    "../README.md#x"]
    assert broken_links(page, root) == ["docs/page.md -> missing.md#x", "docs/page.md -> ../../outside.md",
                                        "docs/page.md -> ../README.md#x (no such heading)"]


def test_every_sub_command_is_in_the_cli_contract() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    commands = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert len(commands) >= 10
    missing = [name for name in commands if f"## `gpuwb {name}" not in text]
    assert missing == []


def test_every_exit_status_is_in_the_cli_contract() -> None:
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    codes = documented_exit_codes()
    assert {0, 1, 2, 70, 130} <= codes
    missing = [code for code in sorted(codes) if f"| `{code}` |" not in text]
    assert missing == []


def test_docs_causes_md_is_what_the_catalog_generates() -> None:
    """Regenerate with ``python scripts/causes_doc.py`` after editing rules/causes/."""
    assert (DOCS / "causes.md").read_text(encoding="utf-8") == _causes_doc().causes_markdown()


def test_the_causes_page_lists_every_cause_in_its_layer() -> None:
    from workbench.analysis.causes import load_causes

    text = (DOCS / "causes.md").read_text(encoding="utf-8")
    sections = dict(re.findall(r"^## [^\n]*\(`(\w+)`\)\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M))
    for cid, entry in load_causes().items():
        assert f"| `{cid}` | {entry['title']} | {entry['scope']} |" in sections[entry["layer"]]


def test_first_sentence_stops_at_a_full_stop_not_inside_one() -> None:
    first = _causes_doc().first_sentence
    assert first("Slurm ended it (\"CANCELLED ... DUE TO TIME LIMIT\"). Raise it.") == \
        "Slurm ended it (\"CANCELLED ... DUE TO TIME LIMIT\")."
    assert first("One line,\n  wrapped. Second.") == "One line, wrapped."
    assert first("No stop at all") == "No stop at all"


def documented_keys(section: str) -> set[str]:
    """The first-column names of the tables under a heading of docs/cli.md (``| `name` | ...``)."""
    text = (DOCS / "cli.md").read_text(encoding="utf-8")
    body = text.split(f"## `gpuwb {section}`", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)`", body, flags=re.M)) | {
        name for cell in re.findall(r"^\| (`\w+`(?:, `\w+`)+) \|", body, flags=re.M)
        for name in re.findall(r"`(\w+)`", cell)}


def test_the_json_contracts_in_cli_md_name_every_key_the_commands_print(tmp_path: Path) -> None:
    training.write(tmp_path / "evidence")
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, tmp_path / "evidence")[0] == 0
    code, out, _ = run_cli("timeline", bundle, "--json", "--limit", "5")
    events = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and events
    assert set(events[0]) - documented_keys("timeline") == set()
    code, out, _ = run_cli("analyze", bundle, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["hypotheses"]
    analyze_keys = documented_keys("analyze")
    assert set(doc) - analyze_keys == set()
    assert set(doc["hypotheses"][0]) - analyze_keys == set()


def test_documented_keys_reads_single_and_grouped_rows() -> None:
    keys = documented_keys("analyze")
    assert {"workload", "first_anomaly", "stage0", "recover", "rank", "score", "symptom_evidence"} <= keys
    assert "verdict" not in keys  # a word in the text, not a row of a table
