"""The cockpit's screens, one module each. A module that defines ``SCREEN`` (a
:class:`workbench.tui.screens.base.Spec`) is found by the app; adding a screen touches no other file."""

from __future__ import annotations

import importlib
import pkgutil

from workbench.tui.screens.base import Spec


def all_specs() -> list[Spec]:
    """Every screen module's spec, in the order of their keys on the footer."""
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        spec = getattr(module, "SCREEN", None)
        if isinstance(spec, Spec):
            found.append(spec)
    return sorted(found, key=lambda s: (s.order, s.name))
