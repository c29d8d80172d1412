"""The five kinds of plugin (collectors, derivations, cockpit screens, sub-commands, drill generators) are
found one way, :func:`collectors.framework.plugins.discover`. Each registry's list is pinned here against
what the source files declare, read without importing them (the top-level ``NAME =``, ``SCREEN = Spec(...)``
and ``@fault(...)`` of each module), in the registry's own order; so a change of the discovery that loses,
adds or re-orders a plugin fails, and so does a second discovery mechanism."""

from __future__ import annotations

import ast
from pathlib import Path

from collectors.framework import registry
from workbench import cli
from workbench.ingest.derive import derivations
from workbench.prevention.drill.registry import faults
from workbench.tui.screens import all_specs

ROOT = Path(__file__).resolve().parents[1]


def _top_level(path: Path) -> dict[str, ast.expr | None]:
    """Names a module assigns or defines at top level: the assigned value, None for a def."""
    found: dict[str, ast.expr | None] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign):
            found.update({t.id: node.value for t in node.targets if isinstance(t, ast.Name)})
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node.value
        elif isinstance(node, ast.FunctionDef):
            found[node.name] = None
    return found


def _candidates(folder: Path, exclude: tuple[str, ...] = ()) -> dict[str, Path]:
    """Module name -> the file that declares it: ``X.py`` or ``X/__init__.py``, not ``_`` or excluded."""
    found = {p.stem: p for p in folder.glob("*.py")}
    found.update({p.parent.name: p for p in folder.glob("*/__init__.py")})
    return {n: p for n, p in sorted(found.items()) if not n.startswith("_") and n not in exclude}


def _declaring(folder: Path, marker: str, exclude: tuple[str, ...] = ()) -> dict[str, dict[str, ast.expr | None]]:
    tops = {name: _top_level(path) for name, path in _candidates(folder, exclude).items()}
    return {name: top for name, top in tops.items() if marker in top}


def test_collectors_are_the_modules_and_packages_declaring_name_by_priority() -> None:
    declared = _declaring(ROOT / "collectors", "NAME", exclude=("base", "framework", "catalog"))
    expected = sorted(declared, key=lambda n: (ast.literal_eval(declared[n].get("PRIORITY") or ast.Constant(50)),
                                               ast.literal_eval(declared[n]["NAME"])))
    assert [m.__name__ for m in registry.all_collectors()] == [f"collectors.{n}" for n in expected]
    assert "nvidia_smi" in expected  # a package is one collector, its format modules are not collectors


def test_derivations_are_the_modules_declaring_name_and_derive_by_name() -> None:
    declared = _declaring(ROOT / "workbench" / "ingest" / "derivations", "NAME")
    assert all("derive" in top for top in declared.values())
    expected = sorted(declared, key=lambda n: ast.literal_eval(declared[n]["NAME"]))
    assert [m.__name__ for m in derivations()] == [f"workbench.ingest.derivations.{n}" for n in expected]
    assert len(expected) >= 5


def test_screens_are_the_modules_declaring_screen_by_order() -> None:
    declared = _declaring(ROOT / "workbench" / "tui" / "screens", "SCREEN", exclude=("base",))
    specs = {}
    for top in declared.values():
        call = top["SCREEN"]
        assert isinstance(call, ast.Call)
        words = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg in ("name", "order")}
        specs[words["name"]] = words["order"]
    assert [s.name for s in all_specs()] == sorted(specs, key=lambda n: (specs[n], n))
    assert len(specs) >= 6


def test_commands_are_the_modules_declaring_name_in_command_order() -> None:
    declared = _declaring(ROOT / "workbench" / "commands", "NAME")
    assert all({"HELP", "add_arguments", "run"} <= set(top) for top in declared.values())
    rank = {name: i for i, name in enumerate(cli.COMMAND_ORDER)}
    names = {n: ast.literal_eval(top["NAME"]) for n, top in declared.items()}
    expected = sorted(declared, key=lambda n: (rank.get(names[n], 99), names[n]))
    assert [m.__name__ for m in cli._commands()] == [f"workbench.commands.{n}" for n in expected]
    assert [m.NAME for m in cli._commands(only="drill")] == ["drill"]


def test_drills_are_the_fault_decorators_of_the_faults_modules() -> None:
    declared = {}
    for path in sorted((ROOT / "workbench" / "prevention" / "drill").glob("faults_*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "fault":
                    key = tuple(ast.literal_eval(a) for a in deco.args)
                    assert key not in declared, f"{key} drilled twice"
                    declared[key] = f"workbench.prevention.drill.{path.stem}.{node.name}"
    found = faults()
    assert list(found) == sorted(declared)
    assert {k: f"{f.write.__module__}.{f.write.__name__}" for k, f in found.items()} == declared
    assert len(declared) >= 30


def test_no_other_module_discovers_plugins_its_own_way() -> None:
    """pkgutil (the walk over a package's modules) is imported by the one discovery alone."""
    def imports_pkgutil(path: Path) -> bool:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) else []
            if "pkgutil" in names:
                return True
        return False

    walkers = [p.relative_to(ROOT).as_posix() for top in ("collectors", "workbench")
               for p in sorted((ROOT / top).rglob("*.py")) if imports_pkgutil(p)]
    assert walkers == ["collectors/framework/plugins.py"]
