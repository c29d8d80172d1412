"""The cockpit application: one bundle, its analysis, the screens, the global keys.

Three things hold for every screen, here rather than in each: a notification is plain text, never
markup (it carries paths, evidence and what the responder typed); a journal write goes through
:meth:`Cockpit.save`, which queues it for the writer thread (``workbench/tui/saving.py``) so a busy
bundle neither freezes the cockpit nor loses the entry; and SIGTERM or SIGHUP end the cockpit the
way ``q`` does, with the terminal restored, instead of raising in whatever handler was running (the
command then exits 143 or 129, saying what was not saved).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen

from workbench.analysis.findings import Analysis, Hypothesis
from workbench.postmortem import report
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.keymap import APP_BINDINGS
from workbench.tui.saving import JournalWriter, Pending
from workbench.tui.screens import all_specs
from workbench.tui.screens.base import STORAGE_ERRORS, Spec, one_line

CSS_PATH = "cockpit.tcss"


def default_author() -> str:
    """Who signs this responder's journal entries when ``--author`` is not given."""
    return os.environ.get("GPUWB_AUTHOR") or os.environ.get("USER") or os.environ.get("LOGNAME") or "responder"


class Cockpit(App):
    """``gpuwb open``: Overview first; every other screen one key away."""

    TITLE = "gpuwb"
    CSS_PATH = CSS_PATH
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    BINDINGS = APP_BINDINGS

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
    saving: reactive[str] = reactive("")
    """What the writer is waiting for ("saving 2 journal entries… (bundle busy: …)"); empty when
    nothing waits. Every screen shows it on its last line."""

    def __init__(self, store: SharedBundle, *, workload: str | None = None, theme: str = "dark",
                 analysis: Analysis | None = None, baseline: dict | None = None) -> None:
        self.store = store
        self.workload = workload
        self.baseline = baseline  # a loaded accepted baseline (open --baseline): the GPUs screen marks drift
        self.specs: list[Spec] = all_specs()
        self._given = analysis
        self._history: list[str] = []
        self.writer = JournalWriter(store, on_status=lambda text: self.from_thread(self._saving, text),
                                    on_landed=lambda item: self.from_thread(self._landed, item),
                                    on_failed=lambda item, why: self.from_thread(self._not_saved, item, why))
        self.unsaved: list[str] = []
        """What was still waiting when a signal ended the cockpit: ``gpuwb open`` prints it."""
        self.terminated: int | None = None
        """The signal that ended the cockpit, if one did."""
        self._signals: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        super().__init__()
        self.theme = "textual-light" if theme == "light" else "textual-dark"
        for spec in self.specs:
            self.add_mode(spec.name, spec.factory)
            self._bindings.bind(spec.key, f"show('{spec.name}')", spec.title.lower(), show=spec.order < 100)

    @property
    def author(self) -> str:
        return self.store.author

    def on_mount(self) -> None:
        self._catch_signals()
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
        from workbench.analysis import findings

        try:
            with self.store.read() as bundle:
                result = findings.run(bundle, workload=workload or self.workload)
        except Exception as exc:  # the cockpit still shows the evidence, and says why the analysis is missing
            self.from_thread(setattr, self, "analysis_error", _said(exc))
            return
        self.from_thread(setattr, self, "analysis", result)  # the culprit now, the postmortem numbers next
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
            self.from_thread(self.notify, f"postmortem not refreshed: {_said(exc)}", severity="error")
            return
        if previous is not None:
            for key in ("verified", "verify_ok", "problems"):
                model["evidence"][key] = previous["evidence"][key]
        self.from_thread(setattr, self, "model", model)

    def from_thread(self, fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        """``call_from_thread`` for a worker that may outlive the app: once the cockpit has closed
        (q, a signal) there is nothing left to update, and nothing is scheduled on a closed loop."""
        loop = self._loop
        if not self.is_running or loop is None or loop.is_closed():
            return
        try:
            self.call_from_thread(fn, *args, **kwargs)
        except RuntimeError:  # closed between the check and the call
            return

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notification is plain text: it carries paths, evidence and what the responder typed,
        any of which may hold ``[/]``. (Screens' ``notify`` ends here too.)"""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # -- journal writes ------------------------------------------------------------------------------
    def save(self, what: str, write: Callable[[Bundle, datetime], object], *, done: str,
             reopen: Callable[[str], None] | None = None) -> None:
        """Queue one journal write, stamped now: ``write(bundle, at)`` runs in the writer thread, in
        order, as soon as the bundle is free; ``done`` is said when it landed. If it cannot land,
        ``reopen(problem)`` brings its form back filled in (else a notification names ``what``)."""
        self.writer.submit(Pending(what, write, done, reopen=reopen))

    def _saving(self, text: str) -> None:
        self.saving = text if self.writer.pending else ""

    def _landed(self, item: Pending) -> None:
        if not self.writer.pending:
            self.saving = ""
        self.journal_written()
        self.notify(f"{item.done} (by {self.author})")

    def _not_saved(self, item: Pending, why: str) -> None:
        if not self.writer.pending:
            self.saving = ""
        if item.reopen is not None:
            item.reopen(f"not saved: {why}. enter tries again, esc discards it")
        else:
            self.notify(f"not saved: {item.what}: {why}", severity="error", timeout=30)

    async def action_quit(self) -> None:
        """Quit; with entries still waiting for the bundle, hand them back instead (their forms come
        back filled in, saying they were not saved), so that quitting never drops one unsaid."""
        left = self.writer.abandon()
        if not left:
            self.exit()
            return
        self.saving = ""
        busy = self.writer.busy
        why = f"the bundle was still busy ({busy})" if busy else "the bundle was still busy"
        for item in left:
            self._not_saved(item, f"{why} when you quit")
        self.notify(f"{len(left)} journal entr{'y was' if len(left) == 1 else 'ies were'} not saved; q again quits",
                    severity="warning", timeout=30)

    # -- signals -------------------------------------------------------------------------------------
    async def run_async(self, **kwargs: Any) -> Any:
        """As App's, with SIGTERM and SIGHUP taken by the event loop for the whole run."""
        self._catch_signals()
        try:
            return await super().run_async(**kwargs)
        finally:
            self._release_signals()

    def _catch_signals(self) -> None:
        """SIGTERM and SIGHUP become a call on the event loop (:meth:`_terminate`) instead of the
        command line's ``Terminated`` raised in whatever the main thread was doing: inside Textual
        that is a handler, whose exception prints a traceback over a half-restored terminal."""
        if self._signals:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous = signal.getsignal(signum)
            try:
                loop.add_signal_handler(signum, self._terminate, signum)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no such signal here
                continue
            self._signals[signum] = (loop, previous)

    def _release_signals(self) -> None:
        """Give the signals back to whoever had them (the command line's handler)."""
        for signum, (loop, previous) in self._signals.items():
            if not loop.is_closed():
                loop.remove_signal_handler(signum)
            signal.signal(signum, previous)
        self._signals.clear()

    def on_unmount(self) -> None:
        self._release_signals()

    def _terminate(self, signum: int) -> None:
        """Stopped by a scheduler or a closed terminal: nobody is there to answer a form, so what has
        not landed is kept for ``gpuwb open`` to print, and the cockpit exits as on q."""
        self.terminated = signum
        self.unsaved = [item.what for item in self.writer.abandon()]
        self.exit(return_code=128 + signum)

    def journal_written(self) -> None:
        """Screens call this after writing through ``workbench.store.journal``."""
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
        yield SystemCommand("Quit", "leave the cockpit (q)", self.action_quit)


def _said(exc: Exception) -> str:
    """A worker's failure in one line: a storage error as the responder reads it, anything else (a
    bug of the engine or the report) with its type."""
    if isinstance(exc, STORAGE_ERRORS):
        return one_line(exc)
    return f"{type(exc).__name__}: {one_line(exc)}"
