"""Timeline: every event of every source, merged in time, paged from the bundle.

The table never holds more than a window of rows around the cursor; moving past either edge loads
the next window by keyset (:func:`workbench.query.events.page`), so a bundle of millions of events scrolls
as smoothly as one of a hundred. Filters are typed in one line (``/``), lnav/k9s style:
``host:node03 layer:gpu sev:error rank:19 since:09:10 xid`` — words with a ``name:`` narrow that
facet, the rest is searched in the message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input

from workbench.analysis.findings import Analysis
from workbench.errors import InputError
from workbench.query import events as query
from workbench.query.events import Cursor, EventFilter
from workbench.query.timeline_filter import describe, parse_filter
from workbench.tui.screens.base import CockpitScreen, Spec, guarded
from workbench.tui.text import clip, plain, severity_style
from workbench.tui.widgets import PlainStatic, PlainTable

WINDOW_BEFORE = 40
WINDOW_AFTER = 100
EDGE = 3
MESSAGE_WIDTH = 200
"""Fixed, so the table never measures every row to size the column."""
WIDE_COLUMNS = (("time", 19), ("host", 16), ("source", 10), ("layer", 10), ("kind", 18), ("message", MESSAGE_WIDTH))
NARROW_COLUMNS = (("time", 19), ("host", 10), ("kind", 12), ("message", MESSAGE_WIDTH))
"""Below 120 columns the message must still show: source and layer give way (the status line names
the source; ``layer:`` filters still work)."""
ERRORS = ("error", "critical")


class TimelineScreen(CockpitScreen):
    """The merged timeline with filters, jumps and a way down to the raw line."""

    BINDINGS = [
        Binding("slash", "search", "filter", key_display="/"),
        Binding("enter", "open", "raw line"),
        Binding("right_square_bracket", "next_error", "next error", key_display="]"),
        Binding("left_square_bracket", "previous_error", "prev error", key_display="["),
        Binding("a", "first_anomaly", "first anomaly"),
        Binding("x", "clear", "clear filters"),
        Binding("n", "note", "note"),
        Binding("home", "start", "start", show=False, priority=True),  # the timeline's start, not the window's
        Binding("end", "end", "end", show=False, priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.flt = EventFilter()
        self.filter_text = ""
        self.window_rows: list[dict[str, Any]] = []
        self.more_before = False
        self.more_after = False
        self.window_start = 0
        self.match_count = 0
        self._loading = False
        self._generation = 0
        self._counted: EventFilter | None = None

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="filters")
        yield Input(placeholder="host:H layer:L source:S kind:K sev:S rank:N gpu:G since:T until:T text…  "
                    "(enter applies, esc closes)", id="search", classes="-hidden")
        yield PlainTable(id="events", cursor_type="row")
        yield PlainStatic(id="status")
        yield from self.bottom()

    def on_mount(self) -> None:
        table = self.query_one("#events", PlainTable)
        self.columns = WIDE_COLUMNS if self.app.size.width >= 120 else NARROW_COLUMNS
        for key, width in self.columns:
            table.add_column(key, width=width, key=key)
        self.load_window(None)
        super().on_mount()
        table.focus()

    def analysis_changed(self, analysis: Analysis | None) -> None:
        self._paint_filters()

    # -- loading --------------------------------------------------------------------------------
    @guarded("timeline not loaded")
    def load_window(self, anchor: Cursor | None, *, at_end: bool = False, anchor_position: int | None = None) -> None:
        """Fill the table with the rows around ``anchor`` (None: the start) and put the cursor on it.
        ``anchor_position`` (the anchor's row number, known when scrolling) saves counting again."""
        with self.store.read() as bundle:
            if at_end:
                pg = query.page(bundle, self.flt, last=True, limit=WINDOW_BEFORE + WINDOW_AFTER)
                rows, head_more, tail_more, target = pg.rows, pg.more_before, False, len(pg.rows) - 1
            elif anchor is None:
                pg = query.page(bundle, self.flt, limit=WINDOW_BEFORE + WINDOW_AFTER)
                rows, head_more, tail_more, target = pg.rows, False, pg.more_after, 0
            else:
                back = query.page(bundle, self.flt, before=anchor, limit=WINDOW_BEFORE)
                ahead = query.page(bundle, self.flt, at_or_after=anchor, limit=WINDOW_AFTER)
                rows = back.rows + ahead.rows
                head_more, tail_more = back.more_before, ahead.more_after
                target = len(back.rows) if ahead.rows else max(0, len(rows) - 1)
            if self._counted != self.flt:  # the count changes with the filter, not with scrolling
                self.match_count, self._counted = query.count_events(bundle, self.flt), self.flt
            if anchor_position is not None and anchor is not None and not at_end:
                self.window_start = anchor_position - target
            elif anchor is None and not at_end:
                self.window_start = 0
            else:
                self.window_start = query.position(bundle, self.flt, rows[0]["cursor"]) if rows else 0
        self.window_rows, self.more_before, self.more_after = rows, head_more, tail_more
        self._fill(target)

    def _fill(self, target: int) -> None:
        table = self.query_one("#events", PlainTable)
        self._loading = True
        table.clear()
        self._generation += 1
        for n, row in enumerate(self.window_rows):
            cells = _cells(row)
            table.add_row(*(cells[key] for key, _ in self.columns), key=f"{self._generation}:{n}")
        if self.window_rows:
            table.move_cursor(row=min(target, len(self.window_rows) - 1), animate=False)
        self._loading = False
        self._paint_filters()
        self._paint_status()

    def on_data_table_row_highlighted(self, event: PlainTable.RowHighlighted) -> None:
        row = event.cursor_row
        key = event.row_key.value or ""
        stale = (self._loading or not key.startswith(f"{self._generation}:")
                 or row != event.data_table.cursor_row or not 0 <= row < len(self.window_rows))
        if stale:
            return  # queued before the window was refilled, or passed over on the way to the target row
        if row >= len(self.window_rows) - EDGE and self.more_after or row < EDGE and self.more_before:
            self.load_window(self.window_rows[row]["cursor"], anchor_position=self.window_start + row)
        else:
            self._paint_status()

    def on_data_table_row_selected(self, event: PlainTable.RowSelected) -> None:
        self.action_open()

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#events", PlainTable)
        if not self.window_rows:
            return None
        return self.window_rows[min(max(table.cursor_row, 0), len(self.window_rows) - 1)]

    # -- painting ----------------------------------------------------------------------------------
    def _paint_filters(self) -> None:
        text = Text.assemble(("filter ", "bold"), describe(self.flt) or "none (/ to filter, x clears)")
        self.query_one("#filters", PlainStatic).update(text)

    def _paint_status(self) -> None:
        table = self.query_one("#events", PlainTable)
        here = self.window_start + table.cursor_row + 1 if self.window_rows else 0
        row = self.selected()
        where = ""
        if row:
            where = f" · {row['source'] or '-'}"
            if row["artifact"]:
                where += f" {row['artifact'][:8]}:{row['line'] if row['line'] is not None else '-'}"
            if row["ts_approx"]:
                where += " · time approximate (~)"
        self.query_one("#status", PlainStatic).update(plain(f"row {here:,} of {self.match_count:,}{where}"))

    # -- actions -------------------------------------------------------------------------------------
    def action_search(self) -> None:
        box = self.query_one("#search", Input)
        box.remove_class("-hidden")
        box.value = self.filter_text
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "search":
            return
        self.apply_filter(event.value)

    def apply_filter(self, text: str) -> None:
        """Parse and apply a filter line; a bad one is said in one line and changes nothing."""
        analysis = self.analysis
        try:
            flt = parse_filter(text, reference=analysis.window[1] if analysis else None)
        except InputError as exc:
            self.notify(str(exc), severity="error")
            return
        anchor = self.selected()
        self.flt, self.filter_text = flt, text
        box = self.query_one("#search", Input)
        box.add_class("-hidden")
        self.load_window(anchor["cursor"] if anchor else None)
        self.query_one("#events", PlainTable).focus()

    def on_key(self, event: Any) -> None:
        box = self.query_one("#search", Input)
        if event.key == "escape" and box.has_focus:
            box.add_class("-hidden")
            self.query_one("#events", PlainTable).focus()
            event.stop()

    def action_clear(self) -> None:
        self.apply_filter("")

    def action_open(self) -> None:
        row = self.selected()
        if row is None:
            return
        if not row["artifact"]:
            self.notify(f"derived by {row['source']}: no raw line; its evidence is in the message", severity="warning")
            return
        self.cockpit.open_evidence(row["artifact"], row["line"])

    @guarded("no jump")
    def _jump_error(self, backwards: bool) -> None:
        row = self.selected()
        with self.store.read() as bundle:
            found = query.seek(bundle, self.flt, after=row["cursor"] if row else None, severities=ERRORS,
                               backwards=backwards)
        if found is None:
            self.notify(f"no {'earlier' if backwards else 'later'} error", severity="information")
            return
        self.load_window(found)

    def action_next_error(self) -> None:
        self._jump_error(False)

    def action_previous_error(self) -> None:
        self._jump_error(True)

    def action_first_anomaly(self) -> None:
        first = self.analysis.first_anomaly if self.analysis else None
        if first is None or first.ts is None:
            self.notify("the analysis found no first anomaly", severity="warning")
            return
        self.load_window(query.cursor_at(first.ts))

    def action_start(self) -> None:
        box = self.query_one("#search", Input)
        if box.has_focus:  # home/end are bound with priority: in the filter box they still move the caret
            box.action_home()
            return
        self.load_window(None)

    def action_end(self) -> None:
        box = self.query_one("#search", Input)
        if box.has_focus:
            box.action_end()
            return
        self.load_window(None, at_end=True)

    def action_note(self) -> None:
        from workbench.store import journal
        from workbench.tui.dialogs import NoteDialog

        row = self.selected()
        pinned = f"{row['ts'] or '?'} {row['host'] or '-'} {clip(row['message'], 60)}" if row else None

        ts, author = (row["ts"] if row else None), self.cockpit.author

        def write(text: str, reopen: Callable[[str], None]) -> None:
            self.cockpit.save(f"note {text!r}", lambda b, at: journal.add_note(b, author, text, ts=ts, at=at),
                              done="note saved", reopen=reopen)

        self.ask(lambda: NoteDialog(pinned), write)


def _cells(row: dict[str, Any]) -> dict[str, Text | str]:
    ts = row["ts"]
    when = ts.strftime("%m-%d %H:%M:%S.%f")[:-3] if ts else "undated"
    if row["ts_approx"]:
        when = "~" + when
    style = severity_style(row["severity"])
    where = row["host"] or "-"
    if row["rank"] is not None:
        where += f" r{row['rank']}"
    return {"time": when, "host": plain(where, 16), "source": plain(row["source"] or "-", 10),
            "layer": plain(row["layer"] or "-", 10), "kind": plain(row["kind"], 18, style),
            "message": plain(row["message"], MESSAGE_WIDTH, style)}


SCREEN = Spec(name="timeline", key="t", title="Timeline", order=10, factory=TimelineScreen)
