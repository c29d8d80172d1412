"""Report: the postmortem as it will be written, with the responders' journal merged in.

The preview is ``workbench.postmortem.render.render`` of the cockpit's model, the same function and model
``gpuwb report`` uses, so what the responder reads here is what the file will say. Export writes
``<bundle stem>-postmortem.md`` or ``.html`` beside the bundle, from a model built afresh (the
other responder's latest notes included), atomically, never over the bundle itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Markdown

from workbench.errors import GpuwbError
from workbench.postmortem import report
from workbench.postmortem.output import check_output, write_atomically
from workbench.postmortem.render import render as render_report
from workbench.table import printable
from workbench.tui.screens.base import CockpitScreen, Spec, one_line
from workbench.tui.widgets import PlainStatic

SUFFIX = {"md": "md", "html": "html"}


def export_path(bundle: Path, fmt: str) -> Path:
    """Where an export of ``bundle`` goes: ``incident.duckdb`` -> ``incident-postmortem.md``."""
    return bundle.with_name(f"{bundle.stem}-postmortem.{SUFFIX[fmt]}")


class ReportScreen(CockpitScreen):
    """The postmortem preview; m and h write it next to the bundle."""

    BINDINGS = [
        Binding("m", "export('md')", "export Markdown"),
        Binding("h", "export('html')", "export HTML"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.source = ""
        """The Markdown shown now (what ``m`` would write, give or take a newer journal entry)."""
        self.written: list[Path] = []

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="rp-head")
        with VerticalScroll(id="rp-scroll"):
            yield Markdown(id="rp-md")
        yield from self.bottom()

    def on_mount(self) -> None:
        super().on_mount()
        self.watch(self.app, "model", self._on_model, init=True)
        self.watch(self.app, "analysis_error", self._on_error, init=True)
        self.query_one("#rp-scroll").focus()

    def _on_model(self, model: dict[str, Any] | None) -> None:
        head = self.query_one("#rp-head", PlainStatic)
        if model is None:
            error = self.cockpit.analysis_error
            head.update(Text(f"analysis failed: {error}; m/h still write the postmortem, without the engine's "
                             "findings", "bold red") if error else
                        Text("building the postmortem… (it waits for the analysis)", "italic"))
            return
        if not self.is_current:  # rendered when shown again: a hidden preview costs nothing per journal write
            return
        text = printable(render_report(model, "md"))
        head.update(Text.assemble(("Postmortem preview", "bold"),
                                  f" · m → {export_path(self.store.path, 'md').name}"
                                  f" · h → {export_path(self.store.path, 'html').name}"))
        if text != self.source:
            self.source = text
            self.query_one("#rp-md", Markdown).update(text)

    def on_screen_resume(self) -> None:
        if self.is_mounted:
            self._on_model(self.cockpit.model)

    def _on_error(self, error: str | None) -> None:
        if error and self.cockpit.model is None:
            self._on_model(None)

    def action_export(self, fmt: str) -> None:
        if self.analysis is None and self.cockpit.analysis_error is None:
            self.notify("the analysis is still running; export when the preview shows", severity="warning")
            return
        self._export(fmt)

    @work(thread=True, exclusive=False, group="export")
    def _export(self, fmt: str) -> None:
        """Build, render and write in the background: re-hashing the evidence of a big bundle takes a while."""
        path = export_path(self.store.path, fmt)
        try:
            check_output(path)
            with self.store.read() as bundle:
                model = report.build(bundle, analysis=self.analysis.to_json() if self.analysis else None)
            text = printable(render_report(model, fmt))
            replaced = write_atomically(path, text)
        except (GpuwbError, OSError) as exc:
            self.cockpit.from_thread(self.notify, f"export failed: {one_line(exc)}", severity="error")
            return
        except Exception as exc:  # a bug in the renderer, or DuckDB's refusal: one line here, never a crashed cockpit
            self.cockpit.from_thread(self.notify, f"export failed: {type(exc).__name__}: {one_line(exc)}",
                                     severity="error")
            return
        self.cockpit.from_thread(self._exported, path, len(text.encode()), replaced)

    def _exported(self, path: Path, size: int, replaced: bool) -> None:
        self.written.append(path)
        self.notify(f"wrote {path} ({size} bytes{', replaced the old file' if replaced else ''})", timeout=8)


SCREEN = Spec(name="report", key="r", title="Report", order=60, factory=ReportScreen)
