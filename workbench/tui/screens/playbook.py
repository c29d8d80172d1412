"""Playbook: stage 0 → the five layers → validate & recover, walked one check at a time.

Left, the walk as a tree: every layer and check with the engine's verdict mark (✓ ? ✗ ·) and the
responder's word beside it ("✗ → ✓ by alice: replaced riser, 10:02"), then what the responders
decided (root cause, action items, notes). Right, the selected node: its question, why it is
asked, the verdict and its history, and the evidence rows behind it (Enter opens the raw line).

Everything the responder says goes to the bundle's journal (``workbench.store.journal``) signed with
their name, so it is there after a restart and in the postmortem. A layer is not called clear
while one of its checks is unreviewed unless the responder says why: the walk exists so that no
layer is skipped by accident.

The labels and the pane's text are written by workbench/tui/screens/_playbook_text.py; this module holds the
widgets, the keys and the journal writes.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets.tree import TreeNode

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS
from workbench.analysis.findings import Analysis
from workbench.analysis.playbook_review import CheckRows, check_rows, clear_needs_reason, judge_check
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.times import parse_iso
from workbench.tui.dialogs import (
    ActionItemDialog,
    FieldDialog,
    NoteDialog,
    RootCauseChoice,
    RootCauseDialog,
    TimesDialog,
    VerdictChoice,
    VerdictDialog,
)
from workbench.tui.screens._playbook_text import (
    DETAILS,
    Node,
    action_label,
    check_label,
    find_step,
    head_line,
    layer_label,
    root_label,
    section_detail,
    step_label,
)
from workbench.tui.screens.base import STORAGE_ERRORS, CockpitScreen, Spec, guarded, one_line
from workbench.tui.text import clip, plain, short_time
from workbench.tui.widgets import PlainStatic, PlainTable, PlainTree


class PlaybookScreen(CockpitScreen):
    """The layered walk, with the responder's verdicts, notes, root cause and action items."""

    BINDINGS = [
        Binding("c", "confirm", "confirm"),
        Binding("v", "override", "override a verdict"),
        Binding("n", "note", "note"),
        Binding("R", "root_cause", "root cause", key_display="R"),
        Binding("a", "add_action", "action item"),
        Binding("A", "edit_action", "edit item", key_display="A"),
        Binding("T", "times", "times", key_display="T"),
        Binding("S", "fields", "severity/status", key_display="S"),
        Binding("w", "switch_workload", "workload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.state = journal.JournalState()
        self.current: Node | None = None
        self.nodes: dict[Node, TreeNode[Node]] = {}
        self.rows: list[dict[str, Any]] = []
        self._row_cache: dict[tuple[str, str], CheckRows] = {}
        self._built_for: Analysis | None = None
        self._state_version = -1
        """The journal_version ``state`` was read at: a write of this screen reads it back at once."""

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="pb-head")
        with Horizontal(id="pb-body"):
            yield PlainTree(Text("playbook"), id="pb-tree", classes="panel")
            with Vertical(id="pb-right"):
                with VerticalScroll(id="pb-detail-box", classes="panel"):
                    yield PlainStatic(id="pb-detail")
                yield PlainTable(id="pb-rows", classes="panel", cursor_type="row")
        yield from self.bottom()

    def on_mount(self) -> None:
        tree = self.query_one("#pb-tree", PlainTree)
        tree.show_root = False
        tree.border_title = "Playbook"
        self.query_one("#pb-detail-box").border_title = "Selected"
        rows = self.query_one("#pb-rows", PlainTable)
        rows.border_title = "Evidence (enter: open raw line)"
        rows.add_columns("time", "host", "GPU", "str.", "kind", "line")
        self._load_journal()
        super().on_mount()
        self.watch(self.app, "playbook_layer", self._goto_layer, init=True)
        tree.focus()

    # -- data --------------------------------------------------------------------------------------
    @guarded("journal not read")
    def _load_journal(self) -> None:
        """The journal as the screen opens, before the tree is built from it."""
        with self.store.read() as bundle:
            self.state = journal.state(bundle)
        self._state_version = self.cockpit.journal_version

    @work(thread=True, exclusive=True, group="journal-read")
    def _reload_journal(self, version: int) -> None:
        """The journal again after a write or on coming back, in the background: while an ingest
        holds the bundle the read waits, and the cursor must not."""
        try:
            with self.store.read() as bundle:
                state = journal.state(bundle)
        except STORAGE_ERRORS as exc:  # busy for longer than the retry: keep what we have, say so
            self.cockpit.from_thread(self.notify, f"journal not reloaded: {one_line(exc)}", severity="warning")
            return
        self.cockpit.from_thread(self._journal_loaded, state, version)

    def _journal_loaded(self, state: journal.JournalState, version: int) -> None:
        self.state, self._state_version = state, version
        self._repaint_journal()

    def analysis_changed(self, analysis: Analysis | None) -> None:
        if analysis is None:
            self.query_one("#pb-head", PlainStatic).update(Text("analysing… the playbook appears when it is done",
                                                                "italic"))
            return
        if analysis is not self._built_for:
            self._built_for = analysis
            self._build_tree(analysis)
        self._paint_head()

    def journal_changed(self) -> None:
        if self._state_version != self.cockpit.journal_version:
            self._reload_journal(self.cockpit.journal_version)
        else:
            self._repaint_journal()

    def _repaint_journal(self) -> None:
        if self.analysis is None:
            return
        self._relabel(self.analysis)
        self._paint_head()
        self._show(self.current)

    def on_screen_resume(self) -> None:
        """Back on this screen: read the journal again, so another responder's work shows too."""
        if self.is_mounted and self._built_for is not None:
            self._state_version = -1
            self.journal_changed()

    # -- the tree ----------------------------------------------------------------------------------
    def _build_tree(self, analysis: Analysis) -> None:
        tree = self.query_one("#pb-tree", PlainTree)
        tree.clear()
        tree.root.label = Text(analysis.playbook_title or "playbook")
        self.nodes = {}
        stage0 = self._add(tree.root, Node("stage0"), Text("Stage 0 · before anything is touched", "bold"))
        for step in analysis.stage0:
            self._add(stage0, Node("step", f"stage0/{step.id}"), step_label(step), leaf=True)
        stage0.expand()
        focus = analysis.top.layer if analysis.top else None
        for layer in LAYERS:
            node = self._add(tree.root, Node("layer", layer), Text(LAYER_TITLES[layer]))
            for check in analysis.checks_in(layer):
                self._add(node, Node("check", check.id), Text(check.title), leaf=True)
            if layer == focus or analysis.layer_verdicts.get(layer) in ("fault", "suspect"):
                node.expand()
        recover = self._add(tree.root, Node("recover"), Text("Validate & recover", "bold"))
        for step in analysis.recover:
            self._add(recover, Node("step", f"recover/{step.id}"), step_label(step), leaf=True)
        self._add(tree.root, Node("root"), Text("Root cause"), leaf=True)
        self._add(tree.root, Node("actions"), Text("Action items"))
        self._add(tree.root, Node("notes"), Text("Notes"))
        self._relabel(analysis)
        target = self.nodes.get(Node("layer", self.cockpit.playbook_layer or "")) or self.nodes.get(
            Node("layer", focus or "")) or stage0
        self._move_to(target)

    def _add(self, parent: TreeNode[Node], ref: Node, label: Text, *, leaf: bool = False) -> TreeNode[Node]:
        node = parent.add_leaf(label, data=ref) if leaf else parent.add(label, data=ref)
        self.nodes[ref] = node
        return node

    def _relabel(self, analysis: Analysis) -> None:
        """Labels that carry the journal: verdicts, the root cause, the action items and notes."""
        for n, layer in enumerate(LAYERS, start=1):
            self.nodes[Node("layer", layer)].set_label(layer_label(analysis, self.state, n, layer))
            for check in analysis.checks_in(layer):
                self.nodes[Node("check", check.id)].set_label(check_label(check, self.state))
        self.nodes[Node("root")].set_label(root_label(analysis, self.state))
        actions = self.nodes[Node("actions")]
        actions.set_label(Text.assemble(("Action items", "bold"), f" ({len(self.state.actions)})"))
        self._refill(actions, [(Node("action", a.id), action_label(a)) for a in self.state.actions])
        notes = self.nodes[Node("notes")]
        notes.set_label(Text.assemble(("Notes", "bold"), f" ({len(self.state.notes)})"))
        self._refill(notes, [(Node("note", str(e.id)), Text(f"{e.author}: {clip(e.body.get('text'), 60)}"))
                             for e in self.state.notes])

    def _refill(self, parent: TreeNode[Node], children: list[tuple[Node, Text]]) -> None:
        """Replace a journal subtree; the cursor stays on the same item when it still exists."""
        for child in list(parent.children):
            self.nodes.pop(child.data, None)
        parent.remove_children()
        for ref, label in children:
            self._add(parent, ref, label, leaf=True)
        if self.current in {ref for ref, _ in children}:
            parent.expand()
            self._move_to(self.nodes[self.current])

    def _move_to(self, node: TreeNode[Node]) -> None:
        parent = node.parent
        while parent is not None:
            parent.expand()
            parent = parent.parent
        tree = self.query_one("#pb-tree", PlainTree)
        self.call_after_refresh(tree.move_cursor, node)
        self.current = node.data
        self._show(node.data)

    def _goto_layer(self, layer: str | None) -> None:
        node = self.nodes.get(Node("layer", layer or ""))
        if node is not None:
            node.expand()
            self._move_to(node)
            self.query_one("#pb-tree", PlainTree).focus()

    def on_tree_node_highlighted(self, event: PlainTree.NodeHighlighted) -> None:
        if event.node.data is not None and event.node.data != self.current:
            self.current = event.node.data
            self._show(self.current)

    def on_tree_node_selected(self, event: PlainTree.NodeSelected) -> None:
        if event.node.data is not None and event.node.data.kind in ("check", "step") and self.rows:
            self.query_one("#pb-rows", PlainTable).focus()

    # -- the right side ----------------------------------------------------------------------------
    def _show(self, ref: Node | None) -> None:
        self.refresh_bindings()
        analysis = self.analysis
        if ref is None or analysis is None:
            return
        paint = DETAILS.get(ref.kind, section_detail)
        self.query_one("#pb-detail", PlainStatic).update(paint(analysis, self.state, ref))
        if ref.kind == "check":
            cached = self._row_cache.get((analysis.workload, ref.key))
            if cached is not None:
                self._fill_rows(cached.rows, cached.total)
            else:
                self._fill_rows([], None)
                self._load_rows(analysis.workload, ref.key)
        elif ref.kind == "step":
            step = find_step(analysis, ref.key)
            self._fill_rows([{"ts": _parse(e.get("ts")), "host": e.get("host"), "text": e.get("text")}
                             for e in (step.evidence if step else ())], None)
        else:
            self._fill_rows([], None)

    @work(thread=True, exclusive=True, group="check-rows")
    def _load_rows(self, workload: str, check_id: str) -> None:
        """The check's SQL runs in the background: a big bundle must not freeze the cursor."""
        try:
            with self.store.read() as bundle:
                result = check_rows(bundle, workload, check_id)
        except Exception as exc:  # a background failure is told in one line, never a crashed cockpit
            self.cockpit.from_thread(self.notify, f"evidence of {check_id}: {one_line(exc)}", severity="error")
            return
        self.cockpit.from_thread(self._rows_loaded, workload, result)

    def _rows_loaded(self, workload: str, result: CheckRows) -> None:
        self._row_cache[(workload, result.check)] = result
        if self.current == Node("check", result.check):
            self._fill_rows(result.rows, result.total)

    def _fill_rows(self, rows: list[dict[str, Any]], total: int | None) -> None:
        table = self.query_one("#pb-rows", PlainTable)
        table.clear()
        self.rows = rows
        for n, row in enumerate(rows):
            strength = row.get("strength")
            table.add_row(short_time(row.get("ts"), seconds=True), plain(row.get("host") or "-"),
                          plain(row.get("gpu") or "-"), f"{strength:.2f}" if isinstance(strength, float) else "",
                          plain(row.get("kind") or ""), plain(row.get("text"), 200), key=str(n))
        shown = f"{len(rows)} of {total}" if total is not None and total > len(rows) else str(len(rows))
        table.border_title = plain(f"Evidence: {shown} row(s) (enter: open raw line)" if rows else "Evidence: none")

    def _paint_head(self) -> None:
        if self.analysis is not None:
            self.query_one("#pb-head", PlainStatic).update(head_line(self.analysis, self.state))

    # -- keys --------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The footer shows only what applies to the highlighted node."""
        kind = self.current.kind if self.current else None
        if action in ("confirm", "override"):
            return kind in ("layer", "check")
        if action == "edit_action":
            return kind == "action"
        return True

    def on_data_table_row_selected(self, event: PlainTable.RowSelected) -> None:
        if event.data_table.id != "pb-rows" or event.row_key.value is None:
            return
        row = self.rows[int(event.row_key.value)]
        if not row.get("artifact"):
            self.notify("this row has no raw line (derived or summarised)", severity="warning")
            return
        self.cockpit.open_evidence(row["artifact"], row.get("line"))

    def action_confirm(self) -> None:
        analysis, ref = self.analysis, self.current
        if analysis is None or ref is None:
            return
        author = self.store.author
        if ref.kind == "check":
            check = next(c for c in analysis.checks if c.id == ref.key)
            self._write(f"{check.title}: {check.verdict.replace('_', ' ')} confirmed",
                        lambda b, at: judge_check(b, author, check.id, check.verdict, at=at))
            return
        if ref.kind != "layer":
            return
        engine = analysis.layer_verdicts.get(ref.key, "no_evidence")
        why = clear_needs_reason(analysis, self.state, ref.key) if engine == "clear" else None
        if why:
            self._ask_verdict(ref.key, engine, engine, {"clear": why})
            return
        layer = ref.key
        self._write(f"{LAYER_TITLES[layer]}: {engine.replace('_', ' ')} confirmed",
                    lambda b, at: journal.set_verdict(b, author, layer, engine, at=at))

    def action_override(self) -> None:
        analysis, ref = self.analysis, self.current
        if analysis is None or ref is None:
            return
        if ref.kind == "check":
            check = next(c for c in analysis.checks if c.id == ref.key)
            mine = self.state.check_verdicts.get(check.id)
            current = mine.body.get("verdict") if mine else check.verdict
            author = self.store.author

            def done(choice: VerdictChoice, reopen: Callable[[str], None]) -> None:
                self._write(f"{check.title}: {choice.verdict.replace('_', ' ')}",
                            lambda b, at: judge_check(b, author, check.id, choice.verdict, choice.reason, at=at),
                            reopen)

            self.ask(lambda: VerdictDialog(f"check: {check.title}", check.verdict, current=current), done)
        elif ref.kind == "layer":
            engine = analysis.layer_verdicts.get(ref.key, "no_evidence")
            mine = self.state.verdicts.get(ref.key)
            why = clear_needs_reason(analysis, self.state, ref.key)
            self._ask_verdict(ref.key, engine, mine.body.get("verdict") if mine else engine,
                              {"clear": why} if why else {})

    def _ask_verdict(self, layer: str, engine: str, current: str, explain: dict[str, str]) -> None:
        author = self.store.author

        def done(choice: VerdictChoice, reopen: Callable[[str], None]) -> None:
            self._write(f"{LAYER_TITLES[layer]}: {choice.verdict.replace('_', ' ')}",
                        lambda b, at: journal.set_verdict(b, author, layer, choice.verdict, choice.reason, at=at),
                        reopen)

        self.ask(lambda: VerdictDialog(f"layer {LAYER_TITLES[layer]}", engine, current=current, explain=explain),
                 done)

    def action_note(self) -> None:
        pinned, ts = None, None
        table = self.query_one("#pb-rows", PlainTable)
        if self.focused is table and self.rows and 0 <= table.cursor_row < len(self.rows):
            row = self.rows[table.cursor_row]
            ts = row.get("ts")
            where = f" line {row['line']}" if row.get("line") else ""
            pinned = (f"{short_time(ts, seconds=True)} {row.get('host') or '-'}{where}: "
                      f"{clip(row.get('text'), 80)}")
        author = self.store.author

        def done(text: str, reopen: Callable[[str], None]) -> None:
            self._write("note added", lambda b, at: journal.add_note(b, author, text, ts=ts, at=at), reopen,
                        what=f"note {text!r}")

        self.ask(lambda: NoteDialog(pinned=pinned), done)

    def action_root_cause(self) -> None:
        marked, top = self.state.root_cause, self.cockpit.top()
        if marked is not None:
            body = marked.body
            initial = (body.get("cause", ""), body.get("host"), body.get("gpu"), body.get("text") or "")
        elif top is not None:
            initial = (top.cause, top.host, top.gpu, top.summary)
        else:
            initial = ("", None, None, "")
        author = self.store.author

        def done(choice: RootCauseChoice, reopen: Callable[[str], None]) -> None:
            self._write(f"root cause: {choice.cause}",
                        lambda b, at: journal.mark_root_cause(b, author, choice.cause, host=choice.host, gpu=choice.gpu,
                                                              text=choice.text, at=at), reopen)

        self.ask(lambda: RootCauseDialog(initial[0], host=initial[1], gpu=initial[2], text=initial[3]), done)

    def action_add_action(self) -> None:
        author = self.store.author

        def done(values: dict[str, Any], reopen: Callable[[str], None]) -> None:
            self._write(f"action item added: {values['title']}",
                        lambda b, at: journal.add_action_item(b, author, values["title"], owner=values.get("owner"),
                                                              priority=values["priority"], due=values.get("due"),
                                                              at=at), reopen)

        self.ask(ActionItemDialog, done)

    def action_edit_action(self) -> None:
        ref = self.current
        item = next((a for a in self.state.actions if ref is not None and a.id == ref.key), None)
        if item is None:
            return
        author = self.store.author

        def done(changes: dict[str, Any], reopen: Callable[[str], None]) -> None:
            if changes:
                self._write(f"{item.id} updated: {', '.join(changes)}",
                            lambda b, at: journal.update_action_item(b, author, item.id, at=at, **changes), reopen)

        self.ask(lambda: ActionItemDialog(item), done)

    def action_times(self) -> None:
        current = {which: parse_iso(e.body.get("ts")) for which, e in self.state.times.items()}
        author = self.store.author

        def done(changed: dict[str, datetime], reopen: Callable[[str], None]) -> None:
            if changed:
                def write(b: Bundle, at: datetime) -> None:
                    for which, ts in changed.items():
                        journal.set_time(b, author, which, ts, at=at)

                self._write(f"times set: {', '.join(changed)}", write, reopen)

        self.ask(lambda: TimesDialog(current), done)

    def action_fields(self) -> None:
        fields = self.state.fields
        severity = fields["severity"].body.get("value") if "severity" in fields else None
        status = fields["status"].body.get("value") if "status" in fields else None
        author = self.store.author

        def done(changed: dict[str, str], reopen: Callable[[str], None]) -> None:
            if changed:
                def write(b: Bundle, at: datetime) -> None:
                    for name, value in changed.items():
                        journal.set_field(b, author, name, value, at=at)

                self._write(" · ".join(f"{k} {v}" for k, v in changed.items()), write, reopen)

        self.ask(lambda: FieldDialog(severity, status), done)

    def action_switch_workload(self) -> None:
        analysis = self.analysis
        if analysis is None:
            self.notify("the analysis is still running", severity="warning")
            return
        workload = "inference" if analysis.workload == "training" else "training"
        self.cockpit.workload = workload
        self.cockpit.run_analysis(workload)
        self.notify(f"walking the {workload} playbook (re-analysing)…")

    def _write(self, done: str, write: Callable[[Bundle, datetime], object],
               reopen: Callable[[str], None] | None = None, *, what: str | None = None) -> None:
        """One journal entry, queued (:meth:`workbench.tui.app.Cockpit.save`): it lands in the
        writer's thread as soon as the bundle is free, then every screen hears of it."""
        self.cockpit.save(what or done, write, done=done, reopen=reopen)


def _parse(value: str | None) -> datetime | None:
    return parse_iso(value) if value else None


SCREEN = Spec(name="playbook", key="p", title="Playbook", order=20, factory=PlaybookScreen)
