"""The cockpit's forms: small modal screens that return what the responder entered via ``dismiss``.

Keyboard first, the same in every form: Tab moves between fields, ←/→ change a choice, Enter
saves, Esc cancels (the caller gets None). A form checks what it can before it closes (a reason
for an override, a known cause id, a readable time) and says what is missing on its own line, so
the journal only ever sees values it accepts. Writing is the caller's job, through
``workbench.store.journal``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Generic, TypeVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Input

from collectors.framework.vocabulary import VERDICT_MARKS, VERDICTS
from workbench.errors import InputError
from workbench.store.journal import ACTION_STATUSES, PRIORITIES, SEVERITIES, STATUSES, TIME_KINDS, ActionItem
from workbench.store.row_columns import utc_naive
from workbench.timespec import parse_instant
from workbench.tui.text import plain, verdict_style
from workbench.tui.widgets import PlainLabel, PlainStatic

T = TypeVar("T")


class Choice(Widget, can_focus=True):
    """One of a few values, changed with ←/→ (or a click). Enter is left to the form: it saves."""

    DEFAULT_CSS = """
    Choice { height: 1; width: 1fr; }
    Choice:focus { background: $boost; }
    """
    BINDINGS = [
        Binding("left", "step(-1)", "previous", show=False),
        Binding("right", "step(1)", "next", show=False),
        Binding("home", "pick(0)", show=False),
        Binding("end", "pick(-1)", show=False),
    ]

    value: reactive[str | None] = reactive(None)

    class Changed(Message):
        def __init__(self, choice: Choice, value: str | None) -> None:
            super().__init__()
            self.choice = choice
            self.value = value

    def __init__(self, options: Sequence[tuple[str, str]], value: str | None = None, *, id: str | None = None,
                 styles: dict[str, str] | None = None) -> None:
        super().__init__(id=id)
        self.options = list(options)
        self._styles = styles or {}
        self._spans: list[tuple[int, int]] = []
        self.set_reactive(Choice.value, value)

    def render(self) -> Text:
        out = Text()
        self._spans = []
        for n, (value, label) in enumerate(self.options):
            if n:
                out.append("  ")
            start = out.cell_len
            if value == self.value:
                out.append(f"[{label}]", "bold reverse" if self.has_focus else "bold underline")
            else:
                out.append(f" {label} ", self._styles.get(value, ""))
            self._spans.append((start, out.cell_len))
        if self.has_focus:
            out.append("   ←/→", "dim")
        return out

    def _index(self) -> int:
        values = [v for v, _ in self.options]
        return values.index(self.value) if self.value in values else -1

    def action_step(self, delta: int) -> None:
        index = self._index()
        if index < 0:
            index = 0 if delta > 0 else len(self.options) - 1
        else:
            index = (index + delta) % len(self.options)
        self.value = self.options[index][0]

    def action_pick(self, index: int) -> None:
        self.value = self.options[index][0]

    def on_click(self, event: events.Click) -> None:
        for n, (start, end) in enumerate(self._spans):
            if start <= event.x < end:
                self.value = self.options[n][0]

    def watch_value(self, value: str | None) -> None:
        self.post_message(self.Changed(self, value))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()


class Dialog(ModalScreen[T], Generic[T]):
    """A form: a title, labelled fields, an error line, the keys. Subclasses give ``fields`` and ``result``."""

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > #dialog {
        width: 90; max-width: 100%; height: auto; max-height: 100%;
        border: thick $primary 60%; background: $surface; padding: 0 1;
    }
    Dialog .field { height: auto; margin-top: 1; }
    Dialog .field > Label { width: 12; }
    Dialog .field > Choice { margin: 0 0 0 1; }
    Dialog .field > Input { width: 1fr; }
    Dialog .dialog-info { color: $text-muted; width: 1fr; margin-top: 1; }
    Dialog #dialog-error { color: $error; text-style: bold; height: auto; width: 1fr; }
    Dialog .dialog-keys { color: $text-muted; width: 1fr; margin-top: 1; }
    """
    BINDINGS = [
        Binding("escape", "cancel", "cancel"),
        Binding("enter", "submit", "save"),
        Binding("ctrl+s", "submit", "save", show=False),
    ]

    title_text = ""
    _restore: tuple[dict[str, str | None], str | None] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield from self.fields()
            yield PlainStatic("", id="dialog-error")
            yield PlainStatic("enter save · esc cancel · tab next field · ←/→ change a choice", classes="dialog-keys")

    def fields(self) -> ComposeResult:
        yield from ()

    result: Callable[[], T]
    """Each form defines it: the form's value, or InputError with the one line the responder must read."""

    def on_mount(self) -> None:
        self.query_one("#dialog").border_title = plain(self.title_text)
        if self._restore is not None:
            filled, problem = self._restore
            for box in self.query(Input):
                if box.id in filled:
                    box.value = filled[box.id] or ""
            for choice in self.query(Choice):
                if choice.id in filled:
                    choice.value = filled[choice.id]
            self.query_one("#dialog-error", PlainStatic).update(problem or "")

    def filled(self) -> dict[str, str | None]:
        """What the form holds now, by field id: enough for :meth:`restore` to show it again."""
        values: dict[str, str | None] = {box.id: box.value for box in self.query(Input) if box.id}
        values.update({choice.id: choice.value for choice in self.query(Choice) if choice.id})
        return values

    def restore(self, filled: dict[str, str | None], problem: str | None = None) -> None:
        """Show ``filled`` (from :meth:`filled`) in the fields when the form opens, ``problem`` on
        its error line: a form whose entry was not saved comes back as the responder left it."""
        self._restore = (filled, problem)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()

    def action_submit(self) -> None:
        try:
            value = self.result()
        except InputError as exc:
            self.query_one("#dialog-error", PlainStatic).update(str(exc))
            return
        self.dismiss(value)

    def action_cancel(self) -> None:
        self.dismiss(None)

    # -- helpers for subclasses ---------------------------------------------------------------
    @staticmethod
    def field(label: str, widget: Widget) -> Horizontal:
        """A labelled row; inputs are one line high so a whole form fits in 80x24."""
        if isinstance(widget, Input):
            widget.compact = True
        return Horizontal(PlainLabel(label), widget, classes="field")

    def text(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def choice(self, widget_id: str) -> str | None:
        return self.query_one(f"#{widget_id}", Choice).value


def _verdict_options() -> list[tuple[str, str]]:
    return [(v, f"{VERDICT_MARKS[v]} {v.replace('_', ' ')}") for v in VERDICTS]


class NoteDialog(Dialog[str | None]):
    """A note, optionally pinned to an event (``pinned`` describes it: time, artifact, line).
    Returns the text, or None when cancelled."""

    title_text = "Add a note"

    def __init__(self, pinned: str | None = None) -> None:
        super().__init__()
        self.pinned = pinned

    def fields(self) -> ComposeResult:
        if self.pinned:
            yield PlainStatic(Text.assemble(("pinned to ", "dim"), self.pinned), classes="dialog-info", id="pinned")
        yield self.field("note", Input(placeholder="what you saw, did or decided", id="text"))

    def result(self) -> str | None:
        text = self.text("text")
        if not text:
            raise InputError("a note needs text")
        return text


@dataclass(frozen=True)
class VerdictChoice:
    verdict: str
    reason: str


class VerdictDialog(Dialog[VerdictChoice | None]):
    """Confirm or override a verdict. A reason is required to differ from the engine, and for any
    verdict listed in ``explain`` (verdict -> why a reason is needed, e.g. unreviewed checks)."""

    def __init__(self, subject: str, engine: str, *, current: str | None = None,
                 explain: dict[str, str] | None = None) -> None:
        super().__init__()
        self.title_text = f"Verdict on {subject}"
        self.engine = engine
        self.current = current or engine
        self.explain = explain or {}

    def fields(self) -> ComposeResult:
        yield PlainStatic(Text.assemble(("engine says ", "dim"),
                                   (f"{VERDICT_MARKS[self.engine]} {self.engine.replace('_', ' ')}",
                                    verdict_style(self.engine))), classes="dialog-info")
        yield self.field("verdict", Choice(_verdict_options(), self.current, id="verdict",
                                           styles={v: verdict_style(v) for v in VERDICTS}))
        yield self.field("reason", Input(placeholder="why (required to override the engine)", id="reason"))
        yield PlainStatic(self.explain.get(self.current, ""), classes="dialog-info", id="rule")

    def on_choice_changed(self, event: Choice.Changed) -> None:
        if self.is_mounted and self.query("#rule"):
            self.query_one("#rule", PlainStatic).update(self.explain.get(event.value or "", ""))

    def result(self) -> VerdictChoice:
        verdict = self.choice("verdict") or self.engine
        reason = self.text("reason")
        if not reason and verdict != self.engine:
            raise InputError(f"overriding the engine ({self.engine.replace('_', ' ')} → "
                             f"{verdict.replace('_', ' ')}) needs a reason")
        if not reason and verdict in self.explain:
            raise InputError(self.explain[verdict])
        return VerdictChoice(verdict, reason)


class ActionItemDialog(Dialog[dict[str, Any] | None]):
    """A new action item (every field returned), or an edit of ``item`` (only the changed fields,
    status included; an empty dict when nothing changed)."""

    def __init__(self, item: ActionItem | None = None, *, title: str = "") -> None:
        super().__init__()
        self.item = item
        self.prefill = title
        self.title_text = f"Edit action item {item.id}" if item else "Add an action item"

    def fields(self) -> ComposeResult:
        item = self.item
        yield self.field("title", Input(item.title if item else self.prefill, placeholder="what will be done",
                                        id="title"))
        yield self.field("owner", Input((item.owner or "") if item else "", placeholder="team or person",
                                        id="owner"))
        yield self.field("priority", Choice([(p, p) for p in PRIORITIES], item.priority if item else "P2",
                                            id="priority"))
        yield self.field("due", Input((item.due or "") if item else "", placeholder="YYYY-MM-DD (optional)",
                                      id="due"))
        if item:
            yield self.field("status", Choice([(s, s.replace("_", " ")) for s in ACTION_STATUSES], item.status,
                                              id="status"))

    def result(self) -> dict[str, Any]:
        title = self.text("title")
        if not title:
            raise InputError("an action item needs a title")
        due = self.text("due") or None
        if due:
            try:
                date.fromisoformat(due)
            except ValueError:
                raise InputError(f"due {due!r} is not a date (YYYY-MM-DD)") from None
        values: dict[str, Any] = {"title": title, "owner": self.text("owner") or None,
                                  "priority": self.choice("priority") or "P2", "due": due}
        if self.item is None:
            return values
        values["status"] = self.choice("status") or self.item.status
        return {name: value for name, value in values.items() if getattr(self.item, name) != value}


@dataclass(frozen=True)
class RootCauseChoice:
    cause: str
    host: str | None
    gpu: str | None
    text: str


class RootCauseDialog(Dialog[RootCauseChoice | None]):
    """Mark the root cause: a cause id of rules/causes/ (completed as you type), where it
    is, and a sentence. Prefilled from a hypothesis by the caller."""

    title_text = "Mark the root cause"

    def __init__(self, cause: str = "", *, host: str | None = None, gpu: str | None = None, text: str = "") -> None:
        super().__init__()
        from workbench.analysis.causes import load_causes

        self.causes = load_causes()
        self.initial = (cause, host or "", gpu or "", text)

    def fields(self) -> ComposeResult:
        cause, host, gpu, text = self.initial
        yield self.field("cause", Input(cause, id="cause", placeholder="cause id, e.g. gpu_fell_off_bus (→ completes)",
                                        suggester=SuggestFromList(sorted(self.causes))))
        yield PlainStatic(self._describe(cause), classes="dialog-info", id="cause-title")
        yield self.field("host", Input(host, id="host", placeholder="node03 (empty: whole job/service)"))
        yield self.field("GPU", Input(gpu, id="gpu", placeholder="PCI bus id, e.g. 0000:5d:00.0"))
        yield self.field("why", Input(text, id="text", placeholder="what convinced you"))

    def _describe(self, cause: str) -> str:
        entry = self.causes.get(cause)
        if entry:
            return f"{entry['layer']}: {entry['title']}"
        return "unknown cause id" if cause else "type a cause id"

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "cause" and self.query("#cause-title"):
            self.query_one("#cause-title", PlainStatic).update(self._describe(event.value.strip()))

    def result(self) -> RootCauseChoice:
        cause = self.text("cause")
        if cause not in self.causes:
            raise InputError(f"unknown cause id {cause!r}: start typing and press → to complete one")
        return RootCauseChoice(cause, self.text("host") or None, self.text("gpu") or None, self.text("text"))


class TimesDialog(Dialog[dict[str, datetime] | None]):
    """Detection, mitigation and recovery times (ISO 8601, UTC unless an offset is given); returns
    only the times that changed. An empty field leaves that time as it is."""

    title_text = "Incident times (UTC)"

    def __init__(self, current: dict[str, datetime | None] | None = None) -> None:
        super().__init__()
        self.current = {which: (current or {}).get(which) for which in TIME_KINDS}

    def fields(self) -> ComposeResult:
        for which in TIME_KINDS:
            ts = self.current[which]
            yield self.field(which, Input(ts.strftime("%Y-%m-%d %H:%M:%S") if ts else "", id=which,
                                          placeholder="2026-03-14 09:21:00"))

    def result(self) -> dict[str, datetime]:
        changed = {}
        for which in TIME_KINDS:
            text = self.text(which)
            if not text:
                continue
            try:
                ts = utc_naive(parse_instant(text))
            except InputError as exc:
                raise InputError(f"{which}: {exc}") from None
            if ts != self.current[which]:
                changed[which] = ts
        order = [changed.get(w) or self.current[w] for w in TIME_KINDS]
        known = [t for t in order if t is not None]
        if known != sorted(known):
            raise InputError("detection, mitigation and recovery must come in that order")
        return changed


class FieldDialog(Dialog[dict[str, str] | None]):
    """The incident's severity (SEV1..SEV4) and status; returns only what changed."""

    title_text = "Severity and status"

    def __init__(self, severity: str | None = None, status: str | None = None) -> None:
        super().__init__()
        self.current = {"severity": severity, "status": status}

    def fields(self) -> ComposeResult:
        yield self.field("severity", Choice([(s, s) for s in SEVERITIES], self.current["severity"], id="severity"))
        yield self.field("status", Choice([(s, s.replace("_", " ")) for s in STATUSES], self.current["status"],
                                          id="status"))

    def result(self) -> dict[str, str]:
        out = {}
        for name in ("severity", "status"):
            value = self.choice(name)
            if value is not None and value != self.current[name]:
                out[name] = value
        return out
