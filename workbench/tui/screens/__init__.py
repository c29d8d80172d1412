"""The cockpit's screens, one module each. A module that defines ``SCREEN`` (a
:class:`workbench.tui.screens.base.Spec`) is found by the app through the one plugin discovery
(:func:`collectors.framework.plugins.discover`); adding a screen touches no other file."""

from __future__ import annotations

from collectors.framework.plugins import discover
from workbench.tui.screens.base import Spec


def all_specs() -> list[Spec]:
    """Every screen module's spec, in the order of their keys on the footer."""
    found = [module.SCREEN for module in discover(__name__, attr="SCREEN", kind=Spec, exclude=("base",))]
    return sorted(found, key=lambda s: (s.order, s.name))
