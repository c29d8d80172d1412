"""Drill generators are found like every plugin: the ``@fault`` decorator files each in its module's
``FAULTS``, and :func:`registry.collect` reads the ``faults_*`` modules of a package through the shared
discovery, refusing two generators for one (cause, workload) instead of letting import order pick one."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from collectors.framework.plugins import PluginError
from workbench.prevention.drill import registry

GENERATOR = '''
from workbench.prevention.drill.registry import fault

@fault("{cause}", "training")
def {func}(job):
    """{doc}"""
'''


def _package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, modules: dict[str, str]) -> str:
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for module, text in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_the_faults_modules_of_a_package_are_read_and_only_they(tmp_path, monkeypatch) -> None:
    pkg = _package(tmp_path, monkeypatch, "tmp_drill_ok", {
        "faults_b": GENERATOR.format(cause="zeta_cause", func="zeta", doc="Zeta breaks.\n\n    More."),
        "faults_a": GENERATOR.format(cause="alpha_cause", func="alpha", doc="Alpha breaks."),
        "helpers": GENERATOR.format(cause="not_a_drill", func="helper", doc="Not in a faults_ module."),
    })
    found = registry.collect(pkg)
    assert list(found) == [("alpha_cause", "training"), ("zeta_cause", "training")]
    assert found[("zeta_cause", "training")].doc == "Zeta breaks."
    assert found[("alpha_cause", "training")].write.__module__ == f"{pkg}.faults_a"
    assert f"{pkg}.helpers" not in sys.modules


def test_two_generators_for_one_cause_and_workload_are_refused_naming_both(tmp_path, monkeypatch) -> None:
    pkg = _package(tmp_path, monkeypatch, "tmp_drill_twice", {
        "faults_a": GENERATOR.format(cause="same", func="first", doc="One."),
        "faults_b": GENERATOR.format(cause="same", func="second", doc="Two."),
    })
    with pytest.raises(PluginError, match=rf"^plugin {pkg}\.faults_b: second drills \('same', 'training'\), "
                                          rf"which {pkg}\.faults_a\.first already does$"):
        registry.collect(pkg)
