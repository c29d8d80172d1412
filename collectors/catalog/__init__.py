"""Parse-time catalogs: the event vocabulary (events.yaml), the Xid catalog (xid.yaml) and the
signature catalog (signatures/, one file per family). Read while evidence is parsed, before any
analysis; the playbooks (playbooks/) and the postmortem rules (rules/) are read by later stages."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType


def package_text(package: ModuleType, name: str) -> str:
    """A data file shipped in ``package`` (this one, ``playbooks`` or ``rules``). Read through the
    package path rather than importlib.resources, which refuses the namespace-style path an editable
    install gives it."""
    return (Path(next(iter(package.__path__))) / name).read_text(encoding="utf-8")
