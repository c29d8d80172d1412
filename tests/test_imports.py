"""Only workbench/tui may import Textual: capture must start fast on a bare GPU node."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import importlib, pkgutil, sys
import collectors, workbench
for pkg in (collectors, workbench):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if info.name.startswith("workbench.tui"):
            continue
        importlib.import_module(info.name)
from workbench.cli import build_parser
build_parser()
print("textual" in sys.modules, "pynvml" in sys.modules)
"""


def test_core_never_imports_textual_or_pynvml():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"], out.stdout
