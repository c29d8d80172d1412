"""The one way a plugin is found: a module of a package that declares a marker attribute.

Collectors (``NAME``), derivations (``NAME``), cockpit screens (``SCREEN``), sub-commands (``NAME``) and
drill generators (``FAULTS``) are all found by :func:`discover`, so adding one is adding a module and
touching no list, and the rules are the same everywhere:

- the candidates are the package's own modules and sub-packages (a sub-package is one plugin, declared in
  its ``__init__``; its submodules are never candidates), skipping names that start with ``_`` (the
  package's helpers) and the names the caller excludes;
- each candidate is imported; a module that fails to import, or declares the marker with a value of the
  wrong type or without the attributes that go with it, raises :class:`PluginError` naming the module, so
  a broken plugin is one clear line instead of a plugin that silently is not there;
- the plugins come in the order of their module names; a registry that has its own order (a collector's
  PRIORITY, a screen's ``order``) sorts that list by its key.

Lowest stage (standard library only) so that both ``collectors`` and ``workbench`` may use it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection
from types import ModuleType


class PluginError(Exception):
    """A plugin module that cannot be imported, or that declares a malformed plugin."""


def discover(package: str, *, attr: str, kind: type | tuple[type, ...] = object, requires: Collection[str] = (),
             exclude: Collection[str] = (), prefix: str = "", only: str | None = None) -> list[ModuleType]:
    """Every module or sub-package of ``package`` (a dotted name) that declares ``attr``, in module-name order.

    ``kind``: the type ``attr``'s value must have; ``requires``: the other attributes a module declaring
    ``attr`` must also have; ``exclude``: module names that are not plugins though not ``_``-prefixed;
    ``prefix``: only module names that start with it are candidates; ``only``: just that module name, so a
    caller that needs one plugin imports no other."""
    root = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(root.__path__)
                   if not info.name.startswith("_") and info.name not in exclude
                   and info.name.startswith(prefix) and (only is None or info.name == only))
    found = []
    for name in names:
        module = _load(f"{package}.{name}")
        if not hasattr(module, attr):
            continue
        value = getattr(module, attr)
        if not isinstance(value, kind):
            raise PluginError(f"plugin {module.__name__}: {attr} is a {type(value).__name__}, "
                              f"not a {_names(kind)}")
        missing = [other for other in requires if not hasattr(module, other)]
        if missing:
            raise PluginError(f"plugin {module.__name__}: declares {attr} but not {', '.join(missing)}")
        found.append(module)
    return found


def _load(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is that plugin's, said once
        raise PluginError(f"plugin {name} failed to import: {type(exc).__name__}: {exc}") from exc


def _names(kind: type | tuple[type, ...]) -> str:
    return " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
