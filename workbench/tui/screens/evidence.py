"""Evidence: the raw artifact with line numbers, opened at an event's line, with its hash and provenance.

Huge artifacts are read a chunk at a time (:class:`workbench.query.artifact_text.ArtifactText`): the
table holds a window of lines around the cursor and loads the next window at its edges. Without a
target it lists the bundle's artifacts to pick from.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input

from workbench.query.artifact_text import ArtifactText
from workbench.tui.screens.base import CockpitScreen, Spec, guarded
from workbench.tui.text import plain
from workbench.tui.widgets import PlainStatic, PlainTable

BEFORE = 40
AFTER = 160
EDGE = 3


class EvidenceScreen(CockpitScreen):
    """Raw lines of one artifact, or the list of artifacts."""

    BINDINGS = [
        Binding("slash", "search", "search", key_display="/"),
        Binding("n", "find_next", "next match"),
        Binding("N", "find_previous", "prev match"),
        Binding("f", "artifacts", "files"),
        Binding("enter", "pick", "open", show=False),
        Binding("home", "top", "top", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.reader: ArtifactText | None = None
        self.shown: list[tuple[int, str]] = []
        self.target_line: int | None = None
        self.needle = ""
        self._artifacts: list[dict] = []
        self._loading = False

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="provenance")
        yield Input(placeholder="search this artifact (enter finds, n/N next/previous, esc closes)", id="search",
                    classes="-hidden")
        yield PlainTable(id="lines", cursor_type="row")
        yield from self.bottom()

    def on_mount(self) -> None:
        super().on_mount()
        # the lines have the keys from the start: should the first load fail (a damaged bundle), focus would
        # otherwise fall to the hidden search box, which would swallow every key, the screen keys included
        self.query_one("#lines", PlainTable).focus()
        self.watch(self.app, "evidence_target", self._on_target, init=True)

    def _on_target(self, target: tuple[str, int | None] | None) -> None:
        if target is None:
            self.action_artifacts()
        else:
            self.show(*target)

    # -- one artifact -----------------------------------------------------------------------------
    @guarded("artifact not opened")
    def show(self, sha256: str, line: int | None) -> None:
        self.reader = None
        self.reader = ArtifactText(self.store, sha256)
        self.target_line = line
        self._paint_provenance()
        self._load(line or 1)

    def _paint_provenance(self) -> None:
        meta = self.reader.meta if self.reader else None
        if meta is None:
            return
        size = f"{meta.size:,} bytes" + (f", {meta.lines:,} lines" if meta.lines is not None else "")
        text = Text.assemble((meta.source, "bold"), f"  {meta.kind} · host {meta.host or '-'} · collector "
                             f"{meta.collector or 'ingest'} · captured {meta.captured_at or '?'} · {size}\n",
                             ("sha256 ", "dim"), meta.sha256)
        if meta.aliases:
            text.append("\nalso handed over as: " + ", ".join(
                f"{a.get('host') or '-'}:{a.get('source')}" for a in meta.aliases[:4]), "dim")
        if self.target_line is not None:
            text.append(f"\nline {self.target_line} is the event's line (▶)", "dim")
        self.query_one("#provenance", PlainStatic).update(text)

    @guarded("lines not read")
    def _load(self, around: int) -> None:
        if self.reader is None:
            return
        start = max(1, around - BEFORE)
        self.shown = self.reader.lines(start, BEFORE + AFTER)
        table = self.query_one("#lines", PlainTable)
        self._loading = True
        table.clear(columns=True)
        table.add_column("line", width=8, key="n")
        table.add_column("text", key="text")
        for number, body in self.shown:
            mark = "▶" if number == self.target_line else " "
            style = "bold reverse" if number == self.target_line else ""
            hit = self.needle and self.needle.lower() in body.lower()
            table.add_row(Text(f"{mark}{number:>6}", style), plain(body, 2000, style or ("bold" if hit else "")),
                          key=str(number))
        index = next((i for i, (n, _) in enumerate(self.shown) if n >= around), max(0, len(self.shown) - 1))
        if self.shown:
            table.move_cursor(row=index, animate=False)
        self._loading = False
        table.focus()

    def on_data_table_row_highlighted(self, event: PlainTable.RowHighlighted) -> None:
        row = event.cursor_row
        if self._loading or self.reader is None or row != event.data_table.cursor_row or not 0 <= row < len(self.shown):
            return  # queued before the window was refilled, or passed over on the way to the target row
        first, last = self.shown[0][0], self.shown[-1][0]
        if row >= len(self.shown) - EDGE and len(self.shown) == BEFORE + AFTER:
            self._load(last - EDGE + 1)
        elif row < EDGE and first > 1:
            self._load(self.shown[row][0])

    # -- the artifact list ----------------------------------------------------------------------------
    @guarded("artifacts not listed")
    def action_artifacts(self) -> None:
        with self.store.read() as bundle:
            self._artifacts = bundle.artifacts()
        self.reader = None
        self.query_one("#provenance", PlainStatic).update(Text(f"{len(self._artifacts)} artifacts in this bundle "
                                                          "(enter opens one)", "bold"))
        table = self.query_one("#lines", PlainTable)
        table.clear(columns=True)
        for name in ("host", "source", "kind", "size", "events", "sha256"):
            table.add_column(name, key=name)
        for a in self._artifacts:
            table.add_row(plain(a["host"] or "-"), plain(a["source"], 60), plain(a["kind"]), f"{a['size']:,}",
                          str(a["events"] if a["events"] is not None else "-"), a["sha256"][:12], key=a["sha256"])
        table.focus()

    def on_data_table_row_selected(self, event: PlainTable.RowSelected) -> None:
        self.action_pick()

    def action_pick(self) -> None:
        if self.reader is not None or not self._artifacts:
            return
        table = self.query_one("#lines", PlainTable)
        chosen = self._artifacts[min(table.cursor_row, len(self._artifacts) - 1)]
        self.show(chosen["sha256"], None)

    def action_top(self) -> None:
        self._load(1)

    # -- search --------------------------------------------------------------------------------------
    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.remove_class("-hidden")
        box.value = self.needle
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.needle = event.value.strip()
        event.input.add_class("-hidden")
        self.query_one("#lines", PlainTable).focus()
        self._find(backwards=False)

    def on_key(self, event) -> None:
        box = self.query_one("#search", Input)
        if event.key == "escape" and box.has_focus:
            box.add_class("-hidden")
            self.query_one("#lines", PlainTable).focus()
            event.stop()

    def action_find_next(self) -> None:
        self._find(backwards=False)

    def action_find_previous(self) -> None:
        self._find(backwards=True)

    @guarded("search failed")
    def _find(self, *, backwards: bool) -> None:
        if self.reader is None or not self.needle:
            return
        table = self.query_one("#lines", PlainTable)
        here = self.shown[table.cursor_row][0] if self.shown else 1
        found = self.reader.find(self.needle, after=here, backwards=backwards)
        if found is None:
            self.notify(f"{self.needle!r} not found {'above' if backwards else 'below'} line {here}")
            return
        self._load(found)


SCREEN = Spec(name="evidence", key="e", title="Evidence", order=30, factory=EvidenceScreen)
