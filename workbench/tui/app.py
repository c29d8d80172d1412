"""The cockpit application: one bundle, its analysis, the screens, the global keys."""

from __future__ import annotations

import os
from collections.abc import Iterable

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import reactive
from textual.screen import Screen

from workbench import report
from workbench.findings import Analysis, Hypothesis
from workbench.shared_bundle import SharedBundle
from workbench.tui.screens import all_specs
from workbench.tui.screens.base import Spec

CSS_PATH = "cockpit.tcss"


def default_author() -> str:
    """Who signs this responder's journal entries when ``--author`` is not given."""
    return os.environ.get("GPUWB_AUTHOR") or os.environ.get("USER") or os.environ.get("LOGNAME") or "responder"


class Cockpit(App):
    """``gpuwb open``: Overview first; every other screen one key away."""

    TITLE = "gpuwb"
    CSS_PATH = CSS_PATH
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = [
        Binding("q", "quit", "quit", priority=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("escape", "back", "back", show=False),
    ]

    analysis: reactive[Analysis | None] = reactive(None, always_update=True)
    model: reactive[dict | None] = reactive(None, always_update=True)
    """The postmortem model (header, impact, layers with the journal merged): the Overview's numbers
    and the Report screen's text come from here, so they cannot disagree with the written report."""
    journal_version: reactive[int] = reactive(0)
    analysis_error: reactive[str | None] = reactive(None)
    evidence_target: reactive[tuple[str, int | None] | None] = reactive(None, always_update=True)
    """(artifact sha256, line) the Evidence screen shows; set by :meth:`open_evidence`."""
    playbook_layer: reactive[str | None] = reactive(None, always_update=True)
    """The layer the Playbook screen selects; set by :meth:`show_layer` (keys 1-5)."""

    def __init__(self, store: SharedBundle, *, workload: str | None = None, theme: str = "dark",
                 analysis: Analysis | None = None, baseline: dict | None = None) -> None:
        self.store = store
        self.workload = workload
        self.baseline = baseline  # a loaded accepted baseline (open --baseline): the GPUs screen marks drift
        self.specs: list[Spec] = all_specs()
        self._given = analysis
        self._history: list[str] = []
        super().__init__()
        self.theme = "textual-light" if theme == "light" else "textual-dark"
        for spec in self.specs:
            self.add_mode(spec.name, spec.factory)
            self._bindings.bind(spec.key, f"show('{spec.name}')", spec.title.lower(), show=spec.order < 100)

    @property
    def author(self) -> str:
        return self.store.author

    def on_mount(self) -> None:
        self.sub_title = str(self.store.path)
        self.switch_mode(self.specs[0].name)
        if self._given is not None:
            self.analysis = self._given
            self.refresh_model()
        else:
            self.run_analysis()

    # -- data ------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="analysis")
    def run_analysis(self, workload: str | None = None) -> None:
        """Analyze in the background: the first paint must not wait for the engine."""
        from workbench import findings

        try:
            with self.store.read() as bundle:
                result = findings.run(bundle, workload=workload or self.workload)
        except Exception as exc:  # the cockpit still shows the evidence, and says why the analysis is missing
            self.call_from_thread(setattr, self, "analysis_error", f"{type(exc).__name__}: {exc}")
            return
        self.call_from_thread(setattr, self, "analysis", result)  # the culprit now, the postmortem numbers next
        self._build_model(result)

    @work(thread=True, exclusive=True, group="model")
    def refresh_model(self) -> None:
        """Rebuild the postmortem model after a journal write (verdicts, times, root cause)."""
        if self.analysis is not None:
            self._build_model(self.analysis)

    def _build_model(self, analysis: Analysis) -> None:
        """Evidence is sealed: it is verified (every artifact hashed) once per session, not after
        every note; a rebuild keeps the first verification's result."""
        previous = self.model
        try:
            with self.store.read() as bundle:
                model = report.build(bundle, analysis=analysis.to_json(), verify=previous is None)
        except Exception as exc:  # a failed rebuild keeps the last good preview and says why
            self.call_from_thread(self.notify, f"postmortem not refreshed: {type(exc).__name__}: {exc}",
                                  severity="error")
            return
        if previous is not None:
            for key in ("verified", "verify_ok", "problems"):
                model["evidence"][key] = previous["evidence"][key]
        self.call_from_thread(setattr, self, "model", model)

    def journal_written(self) -> None:
        """Screens call this after writing through ``workbench.journal``."""
        self.journal_version += 1
        self.refresh_model()

    def top(self) -> Hypothesis | None:
        return self.analysis.top if self.analysis else None

    # -- actions -----------------------------------------------------------------------------------
    def action_show(self, name: str) -> None:
        if self.current_mode != name:
            self._history.append(self.current_mode)
            self.switch_mode(name)

    def _run_on(self, name: str, action: str) -> None:
        """Switch to a screen, then run one of its actions once it is shown."""
        self.action_show(name)

        async def run() -> None:
            await self.run_action(action, self.screen)

        self.set_timer(0.05, run)

    def open_evidence(self, artifact: str, line: int | None) -> None:
        """Show an artifact's raw text at ``line`` (Esc comes back)."""
        self.evidence_target = (artifact, line)
        self.action_show("evidence")

    def show_layer(self, layer: str) -> None:
        """Walk to a layer of the playbook."""
        self.playbook_layer = layer
        self.action_show("playbook")

    def action_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    async def action_back(self) -> None:
        if len(self.screen_stack) > 1:
            self.pop_screen()
        elif self._history:
            self.switch_mode(self._history.pop())
        elif self.current_mode != self.specs[0].name:
            self.switch_mode(self.specs[0].name)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of the cockpit in the command palette: the screens, this screen's own actions,
        then every other screen's, which switch to that screen first."""
        for spec in self.specs:
            yield SystemCommand(f"Go to {spec.title}", f"switch to the {spec.title} screen ({spec.key})",
                                lambda name=spec.name: self.action_show(name))
        for binding in screen.active_bindings.values():
            b = binding.binding
            if b.description and binding.node is screen:
                yield SystemCommand(b.description.capitalize(), f"key {b.key_display or b.key}",
                                    lambda action=b.action: self.run_action(action, screen))
        for spec in self.specs:
            if spec.name == self.current_mode:
                continue
            for b in getattr(spec.factory, "BINDINGS", ()):
                if isinstance(b, Binding) and b.description and b.show:
                    yield SystemCommand(f"{spec.title}: {b.description}", f"on the {spec.title} screen, key "
                                        f"{b.key_display or b.key}",
                                        lambda name=spec.name, action=b.action: self._run_on(name, action))
        yield SystemCommand("Light theme", "switch to the light theme", lambda: setattr(self, "theme", "textual-light"))
        yield SystemCommand("Dark theme", "switch to the dark theme", lambda: setattr(self, "theme", "textual-dark"))
        yield SystemCommand("Quit", "leave the cockpit (q)", self.exit)
