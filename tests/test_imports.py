"""Import hygiene: collectors never load the application, ``gpuwb capture`` never loads the TUI, report
or analysis libraries (it must start fast on a bare GPU node), and only ``workbench/tui`` imports
Textual. Probes run in a fresh interpreter, so what another test imported cannot hide a violation."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("collectors", "workbench", "playbooks", "rules")
CAPTURE_MUST_NOT_LOAD = ("textual", "pandas", "jinja2", "pynvml")


def modules_of(package: str, *, skip: str | None = None) -> list[str]:
    """Dotted names of every module file under ``package`` (read from disk: importing a package to
    walk it would itself run the code under test)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if skip is None or not (name == skip or name.startswith(skip + ".")):
            names.append(name)
    return names


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import statement in a file, function-level (deferred) ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module)]
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def loaded_after(code: str, watched: tuple[str, ...]) -> list[str]:
    """Which of ``watched`` (top-level names) are in sys.modules after running ``code`` in a new
    interpreter."""
    probe = (f"import json, sys\n{code}\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(watched)!r}))))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _violations(files: list[Path], forbidden) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line}: imports {name}" for path in files
            for line, name in imports_of(path) if forbidden(path, name)]


def _is(name: str, module: str) -> bool:
    return name == module or name.startswith(module + ".")


def test_collectors_import_nothing_from_workbench():
    files = sorted((ROOT / "collectors").rglob("*.py"))
    assert len(files) > 10
    assert _violations(files, lambda path, name: _is(name, "workbench")) == []


def test_importing_any_collector_never_loads_workbench():
    code = "\n".join(f"import {name}" for name in modules_of("collectors"))
    code += "\nfrom collectors.framework import registry\nassert len(registry.all_collectors()) > 10"
    assert loaded_after(code, ("workbench",)) == []


def test_commands_do_not_import_the_cli():
    """cli discovers the commands; a command importing cli back is a cycle."""
    files = sorted((ROOT / "workbench" / "commands").rglob("*.py"))
    assert _violations(files, lambda path, name: _is(name, "workbench.cli")) == []


def test_only_workbench_tui_imports_textual():
    tui = ROOT / "workbench" / "tui"
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert _violations(files, lambda path, name: _is(name, "textual") and tui not in path.parents) == []


def test_the_capture_code_path_loads_no_tui_report_or_analysis_library():
    """What ``gpuwb capture`` imports before it runs: the parser with every sub-command, the capture
    command and orchestrator, and every collector it starts."""
    code = ("from workbench.cli import build_parser\n"
            "args = build_parser().parse_args(['capture', '-o', 'x.duckdb', '--since', '1h'])\n"
            "assert args.command == 'capture'\n"
            "import workbench.capture.live, workbench.commands.capture\n"
            "from collectors.framework import registry\n"
            "assert registry.all_collectors()\n")
    assert loaded_after(code, CAPTURE_MUST_NOT_LOAD) == []


PARSER_MUST_NOT_LOAD = ("duckdb", "pyarrow", "numpy", "pandas", "jinja2", "yaml", "textual")
PARSER_MUST_NOT_LOAD_MODULES = ("workbench.store.bundle", "workbench.analysis.engine", "workbench.postmortem.report",
                                "workbench.postmortem.render",
                                "workbench.fleet.history", "workbench.ingest.session", "workbench.capture.live",
                                "workbench.ingest.merge", "workbench.query.events")


def test_building_the_parser_loads_no_bundle_storage_or_analysis():
    """``gpuwb --help``, ``--version`` and every ``gpuwb CMD --help`` only build the parser: each command
    imports what its run() needs when it runs, so the fixed cost of every command stays small."""
    code = ("import contextlib, io\n"
            "from workbench.cli import build_parser, main\n"
            "build_parser()\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['ingest', '--help'])\n"
            f"print(json.dumps(sorted(set(sys.modules) & set({list(PARSER_MUST_NOT_LOAD_MODULES)!r}))))\n")
    assert loaded_after(code, PARSER_MUST_NOT_LOAD) == []
    probe = subprocess.run([sys.executable, "-c", f"import json, sys\n{code}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert json.loads(probe.stdout.strip().splitlines()[-1]) == []


def test_the_report_command_offers_the_formats_the_report_writes():
    """The command spells the formats out so that its parser does not load workbench.postmortem.report."""
    from workbench.commands.report import FORMATS
    from workbench.postmortem.render import FORMATS as WRITTEN

    assert FORMATS == WRITTEN


def test_a_capture_run_loads_no_tui_or_report_library(tmp_path):
    """A whole capture (one collector, written, sealed and summarised). pandas is not watched here:
    pyarrow imports it by itself on its first ``pa.array`` call when it is installed."""
    out = tmp_path / "run.duckdb"
    code = ("import contextlib, io\n"
            "from workbench.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
            f"    assert main(['capture', '--only', 'host', '-o', {str(out)!r}, '--since', '1h']) == 0\n")
    assert loaded_after(code, ("textual", "jinja2", "pynvml")) == []
    assert out.exists()


def test_the_application_outside_the_tui_never_loads_textual():
    names = [*modules_of("collectors"), *modules_of("workbench", skip="workbench.tui")]
    code = ("import importlib\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "from workbench.cli import build_parser\n"
            "build_parser()\n")
    assert loaded_after(code, ("textual", "pynvml")) == []


def _declares_name(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(node, (ast.Assign, ast.AnnAssign)) and "NAME" in
               {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                if isinstance(t, ast.Name)} for node in tree.body)


def test_modules_that_are_not_plugins_say_so_with_an_underscore():
    """In collectors/ and workbench/commands/ a module either is a plugin (declares NAME, found by the
    registry or the CLI) or is a ``_``-prefixed helper; the packages' interface modules are named."""
    interface = {"collectors": {"base", "registry", "vocabulary"}, "workbench/commands": set()}
    strays = [str(path.relative_to(ROOT)) for folder, named in interface.items()
              for path in sorted((ROOT / folder).glob("*.py"))
              if not path.stem.startswith("_") and path.stem not in named and not _declares_name(path)]
    assert strays == []
