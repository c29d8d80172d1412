"""The project stands on its own: nothing it runs, tests or documents reaches outside the repository
(not the material folder that sits beside this checkout, no path climbing above the repository
root, no absolute path of this machine), so a fresh clone with nothing beside it behaves like this
checkout."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import ROOT

SCOPE = ("workbench", "collectors", "playbooks", "tests", "docs", "scripts", ".ci", "README.md", "Makefile",
         "pyproject.toml")
DATA = ROOT / "tests" / "corpus"
"""Real logs kept byte for byte as their public sources wrote them: data, not the project's words."""

OUTSIDE = re.compile(r"(?:\.\./)+shared\b|/work/(?:share[d]|mai[n])\b"
                     r"|(?<![\w/.-])shared/(?:corpus|recipes|design|bench|hooks|DESIGN\.md|STYLE\.md)")
SHELL_CLIMB = re.compile(r"\$\(dirname \"?\$(?:0|\{BASH_SOURCE\[0\]\})\"?\)((?:/\.\.)+)")
TEXT_SUFFIXES = {".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".txt", ".tsv", ".json", ".j2",
                 ".html", ".tcss", ".css", ""}


def project_files() -> Iterator[Path]:
    """Every text file of the project's own (not caches, not the corpus' real logs)."""
    for entry in SCOPE:
        top = ROOT / entry
        paths = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for path in paths:
            if DATA in path.parents or "__pycache__" in path.parts or path.suffix not in TEXT_SUFFIXES:
                continue
            yield path


def _within(path: Path) -> bool:
    return path == ROOT or ROOT in path.parents


def _anchor(node: ast.AST, file: Path, names: dict[str, Path]) -> Path | None:
    """The folder an expression names when it is built from ``__file__`` or a name bound to one
    (``Path(__file__).resolve().parents[2]``, ``ROOT.parent``, ``HERE / ".."``); None otherwise."""
    if isinstance(node, ast.Name):
        return file if node.id == "__file__" else names.get(node.id)
    if isinstance(node, ast.Call):  # Path(x), x.resolve(), x.absolute(), os.path.abspath(x)
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("resolve", "absolute"):
            return _anchor(node.func.value, file, names)
        if node.args:
            return _anchor(node.args[0], file, names)
        return None
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        base = _anchor(node.value, file, names)
        return base.parent if base else None
    if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents"
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
        base = _anchor(node.value.value, file, names)
        if base is None:
            return None
        return base.parents[node.slice.value] if node.slice.value < len(base.parents) else Path(base.anchor)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        base = _anchor(node.left, file, names)
        if base is not None and isinstance(node.right, ast.Constant) and isinstance(node.right.value, str):
            for part in Path(node.right.value).parts:
                base = base.parent if part == ".." else base / part
        return base
    return None


def python_escapes(path: Path) -> list[str]:
    """Each expression of a Python file that names a folder above the repository root."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: dict[str, Path] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            where = _anchor(node.value, path.resolve(), names)
            if where is not None:
                names[node.targets[0].id] = where
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and not isinstance(getattr(node, "ctx", None), ast.Store):
            where = _anchor(node, path.resolve(), names)
            if where is not None and not _within(where):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)} -> {where}")
    return found


def test_the_scope_is_the_whole_project():
    files = {p.relative_to(ROOT).parts[0] for p in project_files()}
    assert {"workbench", "collectors", "playbooks", "tests", "scripts", "README.md", "Makefile"} <= files
    assert not any(DATA in p.parents for p in project_files())


def test_nothing_mentions_the_folder_beside_the_repository():
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in project_files()
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if OUTSIDE.search(line)]
    assert hits == []


def test_no_python_path_climbs_above_the_repository():
    hits = [hit for p in project_files() if p.suffix == ".py" for hit in python_escapes(p)]
    assert hits == []


def test_no_script_climbs_above_the_repository():
    hits = []
    for path in project_files():
        if path.suffix == ".py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in SHELL_CLIMB.finditer(line):
                where = path.parent.resolve()
                for _ in range(m.group(1).count("..")):
                    where = where.parent
                if not _within(where):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []
