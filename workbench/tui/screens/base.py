"""What every cockpit screen shares: the bundle, the analysis, the journal, and how it learns of changes.

A bundle that cannot be read (damaged, a table missing, busy for longer than the retry) must cost
the responder one line, never the cockpit: a screen method that reads the bundle is wrapped in
:func:`guarded`, which turns a storage error (:data:`STORAGE_ERRORS`) into one notification and
leaves the screen as it was. A Textual handler that raises takes its widget's message loop down
with it, so the error has to be caught here, where the screen calls the query layer.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from workbench.analysis.findings import Analysis
from workbench.errors import GpuwbError
from workbench.store.shared_bundle import SharedBundle
from workbench.table import printable
from workbench.tui.widgets import PlainStatic

if TYPE_CHECKING:
    from workbench.tui.app import Cockpit
    from workbench.tui.dialogs import Dialog

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

STORAGE_ERRORS: tuple[type[Exception], ...] = (GpuwbError, duckdb.Error)
"""What reading a bundle may raise that is not a bug of the cockpit: gpuwb's own one-line errors
(busy, not a bundle, damaged) and DuckDB's (a corrupt block, a table that is gone)."""


def one_line(exc: BaseException) -> str:
    """An error as the one line a responder reads: gpuwb's message, or DuckDB's first line named as
    a storage failure (its later lines are DuckDB's internals)."""
    first = printable((str(exc).strip().splitlines() or [type(exc).__name__])[0])
    if isinstance(exc, duckdb.Error):
        return f"the bundle could not be read ({type(exc).__name__}): {first}"
    return first


def guarded(what: str) -> Callable[[F], F]:
    """Wrap a screen method that reads the bundle: a storage error becomes the notification
    ``"<what>: <one line>"`` and the method returns None; any other exception is a bug and propagates."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Screen, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except STORAGE_ERRORS as exc:
                self.app.notify(f"{what}: {one_line(exc)}", severity="error", timeout=10)
                return None

        return run  # type: ignore[return-value]

    return wrap


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
    :meth:`journal_changed`; both run once on mount and again whenever the data changes. A screen's
    ``compose`` ends with :meth:`bottom`: the saving line (journal entries waiting for a busy bundle,
    said while they wait) above the footer."""

    @property
    def cockpit(self) -> Cockpit:
        return self.app  # type: ignore[return-value]

    @property
    def store(self) -> SharedBundle:
        return self.cockpit.store

    @property
    def analysis(self) -> Analysis | None:
        return self.cockpit.analysis

    def bottom(self) -> ComposeResult:
        """The last lines of every screen, for its ``compose`` to end with: the saving line, the keys."""
        yield PlainStatic(id="saving")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "analysis", self._on_analysis, init=True)
        self.watch(self.app, "journal_version", self._on_journal, init=False)
        if self.query("#saving"):
            self.watch(self.app, "saving", self._on_saving, init=True)

    def _on_analysis(self, analysis: Analysis | None) -> None:
        self.analysis_changed(analysis)

    def _on_journal(self, _version: int) -> None:
        self.journal_changed()

    def _on_saving(self, text: str) -> None:
        line = self.query_one("#saving", PlainStatic)
        line.update(text)
        line.set_class(bool(text), "-shown")

    def ask(self, make: Callable[[], Dialog[T]], then: Callable[[T, Callable[[str], None]], None]) -> None:
        """Show the form ``make()``; ``then(value, reopen)`` gets what the responder entered (never
        None: a cancelled form calls nothing) and ``reopen(problem)``, which shows the form again,
        filled in as it was, with ``problem`` on its error line: the way a journal write that could
        not land (:meth:`workbench.tui.app.Cockpit.save`) keeps the responder's text."""

        def show(filled: dict[str, str | None] | None, problem: str | None) -> None:
            dialog = make()
            if filled is not None:
                dialog.restore(filled, problem)

            def closed(value: T | None) -> None:
                if value is not None:
                    kept = dialog.filled()
                    then(value, lambda why: show(kept, why))

            self.app.push_screen(dialog, closed)

        show(None, None)

    def analysis_changed(self, analysis: Analysis | None) -> None:
        """The analysis arrived (it runs in the background after the first paint)."""

    def journal_changed(self) -> None:
        """A responder (this one or another on the same bundle) wrote to the journal."""
