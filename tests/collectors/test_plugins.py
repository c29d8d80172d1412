"""The one plugin discovery (collectors/framework/plugins.py), over throw-away packages: what is a candidate
(modules and sub-packages, not a sub-package's own modules, not ``_`` or excluded names), the order, and
the one error that names the module when a plugin is broken."""

from __future__ import annotations

import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.framework.plugins import PluginError, discover


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator:
    """A fresh importable package (unique name per test); ``make(files)`` writes its modules."""
    name = "tmp_plugins_" + re.sub(r"\W", "_", request.node.name)
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(files: dict[str, str]) -> str:
        for rel, text in files.items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text))
        return name

    yield make
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def _names(modules: list) -> list[str]:
    return [m.__name__.rsplit(".", 1)[-1] for m in modules]


def test_modules_and_packages_that_declare_the_marker_in_module_name_order(package) -> None:
    pkg = package({"zeta.py": "NAME = 'z'\n", "alpha.py": "NAME = 'a'\n", "plain.py": "OTHER = 1\n",
                   "_helper.py": "NAME = 'helper'\n", "base.py": "NAME = 'base'\n",
                   "tool/__init__.py": "NAME = 'tool'\n", "tool/fmt_one.py": "NAME = 'part'\n",
                   "bare/__init__.py": "", "bare/inner.py": "NAME = 'inner'\n"})
    assert _names(discover(pkg, attr="NAME", exclude=("base",))) == ["alpha", "tool", "zeta"]
    assert f"{pkg}.tool.fmt_one" not in sys.modules  # a package's own modules are never candidates
    assert f"{pkg}.bare.inner" not in sys.modules
    assert f"{pkg}._helper" not in sys.modules  # helpers are not even imported


def test_only_imports_that_module_alone_and_prefix_narrows_the_candidates(package) -> None:
    pkg = package({"one.py": "NAME = 'one'\n", "two.py": "NAME = 'two'\n", "faults_a.py": "FAULTS = []\n",
                   "lines.py": "FAULTS = []\n"})
    assert _names(discover(pkg, attr="NAME", only="two")) == ["two"]
    assert f"{pkg}.one" not in sys.modules
    assert discover(pkg, attr="NAME", only="nothing") == []
    assert _names(discover(pkg, attr="FAULTS", kind=list, prefix="faults_")) == ["faults_a"]
    assert f"{pkg}.lines" not in sys.modules


@pytest.mark.parametrize("body, error", [
    ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    ("import no_such_module_anywhere\n", "ModuleNotFoundError: No module named 'no_such_module_anywhere'"),
    ("def broken(:\n", "SyntaxError"),
], ids=["raises", "missing_dependency", "syntax_error"])
def test_a_plugin_that_fails_to_import_is_one_error_naming_it(package, body: str, error: str) -> None:
    pkg = package({"good.py": "NAME = 'good'\n", "broken.py": body})
    with pytest.raises(PluginError, match=rf"^plugin {pkg}\.broken failed to import: ") as caught:
        discover(pkg, attr="NAME")
    assert error in str(caught.value)
    assert caught.value.__cause__ is not None  # the original traceback is kept for the bug report


def test_a_malformed_plugin_is_one_error_naming_it(package) -> None:
    pkg = package({"fine.py": "NAME = 'fine'\nHELP = 'h'\ndef run(args): return 0\n",
                   "wrong_type.py": "NAME = 3\n", "half.py": "NAME = 'half'\ndef run(args): return 0\n"})
    with pytest.raises(PluginError, match=rf"^plugin {pkg}\.half: declares NAME but not HELP$"):
        discover(pkg, attr="NAME", kind=str, requires=("HELP", "run"), exclude=("wrong_type",))
    with pytest.raises(PluginError, match=rf"^plugin {pkg}\.wrong_type: NAME is a int, not a str$"):
        discover(pkg, attr="NAME", kind=str, exclude=("half",))
    assert _names(discover(pkg, attr="NAME", kind=str, requires=("HELP", "run"), only="fine")) == ["fine"]
