"""The tree is the pipeline, and imports keep to its direction: a stage reads only the stages before it
(store ← query ← ingest ← capture/analysis ← fleet ← prevention ← postmortem ← demo/tui ← commands ← cli),
and collectors never import workbench. A test instead of a convention, so a shortcut fails here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGES = {
    "__init__": 0, "errors": 0, "table": 1, "timespec": 1, "times": 1,
    "store": 2, "query": 3, "ingest": 4, "capture": 5, "analysis": 5, "fleet": 6,
    "prevention": 7, "postmortem": 8, "demo": 9, "tui": 9, "commands": 10, "cli": 11,
}
"""Each room of workbench/ and its place in the pipeline: a module may import its own room or a lower one."""


def _room(path: Path) -> str:
    parts = path.relative_to(ROOT / "workbench").with_suffix("").parts
    return parts[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def test_every_room_of_workbench_has_a_place() -> None:
    rooms = {_room(p) for p in (ROOT / "workbench").rglob("*.py")}
    assert rooms - set(STAGES) == set(), "a new package needs its place in STAGES"


def test_no_stage_imports_a_later_one() -> None:
    wrong = []
    for path in sorted((ROOT / "workbench").rglob("*.py")):
        room = _room(path)
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "workbench" or len(parts) < 2 or parts[1] == room or parts[1] not in STAGES:
                continue
            if STAGES[parts[1]] >= STAGES[room]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({room}) imports {module}")
    assert wrong == []


def test_collectors_and_data_never_import_workbench() -> None:
    wrong = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for top in ("collectors", "playbooks", "rules") for p in sorted((ROOT / top).rglob("*.py"))
             for line, m in _imports(p) if m.split(".")[0] == "workbench"]
    assert wrong == []
