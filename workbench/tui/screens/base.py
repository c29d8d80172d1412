"""What every cockpit screen shares: the bundle, the analysis, the journal, and how it learns of changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.screen import Screen

from workbench.findings import Analysis
from workbench.shared_bundle import SharedBundle

if TYPE_CHECKING:
    from workbench.tui.app import Cockpit


@dataclass(frozen=True)
class Spec:
    """A screen as the app lists it: mode name, the key that switches to it, its title."""

    name: str
    key: str
    title: str
    order: int
    factory: Callable[[], Screen]


class CockpitScreen(Screen):
    """Base of the cockpit's screens. Subclasses override :meth:`analysis_changed` and
    :meth:`journal_changed`; both run once on mount and again whenever the data changes."""

    @property
    def cockpit(self) -> Cockpit:
        return self.app  # type: ignore[return-value]

    @property
    def store(self) -> SharedBundle:
        return self.cockpit.store

    @property
    def analysis(self) -> Analysis | None:
        return self.cockpit.analysis

    def on_mount(self) -> None:
        self.watch(self.app, "analysis", self._on_analysis, init=True)
        self.watch(self.app, "journal_version", self._on_journal, init=False)

    def _on_analysis(self, analysis: Analysis | None) -> None:
        self.analysis_changed(analysis)

    def _on_journal(self, _version: int) -> None:
        self.journal_changed()

    def analysis_changed(self, analysis: Analysis | None) -> None:
        """The analysis arrived (it runs in the background after the first paint)."""

    def journal_changed(self) -> None:
        """A responder (this one or another on the same bundle) wrote to the journal."""
