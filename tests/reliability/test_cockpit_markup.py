"""Evidence is never markup: text from a bundle shows in the cockpit exactly as it is, on every screen.

Rich and Textual read square brackets in a ``str`` as style tags: a kernel line naming ``[/dev/nvidia0]``
or holding ``[/]`` crashed ``gpuwb open`` with a MarkupError, and ``[rank5]: torch.OutOfMemoryError``
showed as ``: torch.OutOfMemoryError``. The bundles here are real ones (the demo's incidents, ingested)
whose evidence, host and file names, title, author and journal hold such text.
"""

from __future__ import annotations

import ast
import io
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console
from textual.app import App, ComposeResult
from textual.content import Content
from textual.widgets._data_table import default_cell_formatter  # what a table does with a cell

from tests.workbench.tui.conftest import wait_for
from workbench.analysis.engine import analyze
from workbench.analysis.findings import Analysis
from workbench.analysis.playbook_review import check_rows
from workbench.demo import inference, training
from workbench.ingest.session import ingest_paths
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle
from workbench.tui.app import Cockpit
from workbench.tui.screens._playbook_text import Node
from workbench.tui.text import clip, plain
from workbench.tui.widgets import PlainLabel, PlainOptionList, PlainStatic, PlainTable, PlainTree, _cell

ROOT = Path(__file__).resolve().parents[2]
OOM = "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB."
XID = "NVRM: Xid (PCI:0000:2a:00): 13, pid=48211, name=python3, [/dev/nvidia0] [/] [bold red]x[/] Quasar fault"
TITLE = "[bold]Zephyr[/] [/] job"
AUTHOR = "[red]eve[/]"
NOTE = "reseated [/] [@click=app.quit]quit[/] \\[x] [link=https://example.com]see[/link]"
ACTION = "[bold]replace[/bold] riser [/dev/nvidia3]"
HOST = "[bold]node05"
POD = "vllm-[bold]-tq8zw[red]"
VBIOS = "96.00.[/]01"


@dataclass(frozen=True)
class Hostile:
    path: Path
    analysis: Analysis


def _insert_after(path: Path, match: str, line: str) -> None:
    lines = path.read_text().splitlines()
    at = next(n for n, text in enumerate(lines) if match in text)
    lines.insert(at + 1, line)
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def hostile_training(tmp_path_factory) -> Hostile:
    """The demo's training incident with markup-like evidence: an Xid line holding ``[/dev/nvidia0] [/]
    [bold red]x[/]``, a rank's OOM under torchrun's ``[rank5]:`` prefix, a host folder ``[bold]node05``
    with a file ``dmesg [red].txt``, node02's GPUs reporting VBIOS ``96.00.[/]01``, a title, a note and
    an action item full of brackets."""
    root = tmp_path_factory.mktemp("hostile")
    evidence = root / "evidence"
    training.write(evidence)
    dmesg = evidence / "node02" / "dmesg.txt"
    first = next(line for line in dmesg.read_text().splitlines() if "Xid" in line)
    _insert_after(dmesg, "Xid", first.split("]")[0] + "] " + XID)
    smi = evidence / "node02" / "nvidia-smi-q.txt"
    smi.write_text(smi.read_text().replace(": 96.00.99.00.01", f": {VBIOS}"))
    log = evidence / "node01" / "torchrun-48213.log"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([*lines[:-1], OOM, lines[-1]]) + "\n")
    odd = evidence / HOST
    odd.mkdir()
    boot = (evidence / "node01" / "uptime-s.txt").read_text()
    (odd / "uptime-s.txt").write_text(boot.replace(":52", ":53"))  # not node01's bytes: its own artifact
    (odd / "dmesg [red].txt").write_text((evidence / "node01" / "dmesg.txt").read_text() + "[   99.000001] ok\n")
    path = root / "incident.duckdb"
    with Bundle.create(path, title=TITLE) as bundle:
        ingest_paths(bundle, [str(evidence)])
        journal.add_note(bundle, AUTHOR, NOTE)
        journal.add_action_item(bundle, AUTHOR, ACTION, owner="[b]infra[/b]")
    with Bundle.open(path) as bundle:
        return Hostile(path, Analysis.from_json(analyze(bundle)))


@pytest.fixture
def hostile(hostile_training, tmp_path) -> Hostile:
    path = tmp_path / "incident.duckdb"
    shutil.copyfile(hostile_training.path, path)
    return Hostile(path, hostile_training.analysis)


def screen_text(app: App) -> str:
    """What the terminal shows now, as text (the way Textual's screenshots render the screen)."""
    console = Console(width=app.size.width, height=app.size.height, file=io.StringIO(), force_terminal=True,
                      record=True, legacy_windows=False, safe_box=False, color_system="truecolor")
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def assert_never_eaten(text: str) -> None:
    """Wherever a marker of the hostile text shows, its brackets show with it: none was read as a tag."""
    for marker, before, after in (("Zephyr", "[bold]", "[/] [/]"), ("OutOfMemoryError", "[rank5]: torch.", ""),
                                  ("Quasar", "[/dev/nvidia0] [/] [bold red]x[/] ", " fault"),
                                  ("reseated", "", " [/] [@click=app.quit]quit[/]")):
        at = text.find(marker)
        while at >= 0:
            assert text[:at].endswith(before) and text[at + len(marker):].startswith(after), text[at - 60:at + 60]
            at = text.find(marker, at + 1)


async def _cockpit(pilot, app: Cockpit) -> None:
    await wait_for(pilot, lambda: app.model is not None, seconds=60)
    await pilot.pause()


# -- the helper, over any text ---------------------------------------------------------------------
TRICKY = st.sampled_from(["[", "]", "\\", "[/]", "[bold]", "[/bold]", "[@click=app.quit]", "[@click=app.bell()]",
                          "[link=https://example.com]", "[/link]", "[red on blue]", "[rank5]:", "[/dev/nvidia0]",
                          "\x1b[31m", "\x00", "\t", "\n", "\r", "\x7f", "\u200b", ":smile:", "[b]x[/b]", "\\[", "é"])
TEXTS = st.lists(st.one_of(TRICKY, st.text(max_size=8)), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(TEXTS, st.one_of(st.none(), st.integers(min_value=1, max_value=40)))
def test_plain_text_never_raises_and_shows_exactly_what_clip_shows(text, width):
    shown = plain(text, width, "bold")
    assert shown.plain == clip(text, width)
    console = Console(width=200, file=io.StringIO(), record=True, color_system=None, legacy_windows=False)
    console.print(shown, end="", soft_wrap=True)
    assert console.export_text() == clip(text, width)
    assert Content.from_rich_text(shown).plain == clip(text, width)  # what a Static shows of it
    assert str(default_cell_formatter(shown)) == clip(text, width)  # what a DataTable cell shows


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_a_str_handed_to_a_cockpit_table_is_a_plain_cell(text):
    assert str(default_cell_formatter(_cell(text))) == clip(text, None)


class _Widgets(App):
    CSS = "PlainStatic, PlainLabel { height: 1; } PlainTable, PlainTree, PlainOptionList { height: 4; }"

    def compose(self) -> ComposeResult:
        yield PlainStatic(id="static")
        yield PlainLabel(id="label")
        yield PlainTable(id="table")
        yield PlainTree("root", id="tree")
        yield PlainOptionList(id="options")


async def test_the_cockpit_s_widgets_show_a_str_exactly_as_it_is():
    app = _Widgets()
    async with app.run_test(size=(200, 30)) as pilot:
        table, tree, options = app.query_one(PlainTable), app.query_one(PlainTree), app.query_one(PlainOptionList)
        column = table.add_column("[/]col[bold]")
        for text in ["[/]", "[/dev/nvidia0] ok", "[rank5]: torch.OutOfMemoryError", "[bold red]x[/]", "a\\[b]",
                     "[@click=app.quit]q[/]", "[link=https://example.com]l[/link]", "x\\", "[$text]v"]:
            app.query_one(PlainStatic).update(text)
            app.query_one(PlainLabel).update(text)
            table.clear()
            tree.clear()
            options.clear_options()
            row = table.add_row(text)
            table.update_cell(row, column, text)
            tree.root.add_leaf(text)
            tree.root.expand()
            options.add_option(text)
            await pilot.pause()
            shown = screen_text(app)
            assert shown.count(text) >= 5, (text, shown)
        assert "[/]col[bold]" in screen_text(app)


def test_no_cockpit_module_hands_text_to_a_markup_reading_widget_of_textual():
    """The cockpit's widgets (workbench/tui/widgets.py) are the only way to Textual's text widgets, and a
    border title built at run time is a Rich Text: a new screen cannot forget either."""
    readers = {"Static", "Label", "DataTable", "Tree", "OptionList", "RichLog", "Log", "Button", "Pretty"}
    found = []
    for path in sorted((ROOT / "workbench" / "tui").rglob("*.py")):
        if path.name == "widgets.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("textual.widgets"):
                found += [f"{path.name}: imports {a.name}" for a in node.names if a.name in readers]
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr in (
                    "border_title", "border_subtitle") for t in node.targets):
                value = node.value
                literal = isinstance(value, ast.Constant) and isinstance(value.value, str)
                called = getattr(value, "func", None)
                wrapped = getattr(called, "id", getattr(called, "attr", "")) in ("plain", "Text", "assemble")
                if not (literal or wrapped):
                    found.append(f"{path.name}:{node.lineno}: a border title from a str built at run time")
    assert found == []


# -- every screen, over a real bundle --------------------------------------------------------------
async def test_overview_shows_the_evidence_lines_and_the_title_verbatim(hostile):
    app = Cockpit(SharedBundle(hostile.path, AUTHOR))
    async with app.run_test(size=(220, 60)) as pilot:
        await _cockpit(pilot, app)
        table = app.screen.query_one("#hypotheses", PlainTable)
        seen = set()
        for row in range(len(app.analysis.hypotheses)):
            table.move_cursor(row=row)
            await pilot.pause()
            text = screen_text(app)
            assert_never_eaten(text)
            seen |= {part for part in (OOM[:40], XID[-60:]) if part in text}
        assert TITLE in screen_text(app)
        assert seen == {OOM[:40], XID[-60:]}  # each line was some cause's evidence, and showed whole
    assert app.return_code in (None, 0)


async def test_timeline_shows_hosts_and_lines_verbatim_and_filters_on_them(hostile):
    app = Cockpit(SharedBundle(hostile.path, AUTHOR), analysis=hostile.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.press("t")
        await wait_for(pilot, lambda: app.current_mode == "timeline")
        screen = app.screen
        for line, wanted in (("allocate 3.50", OOM[:60]), ("nvidia0", XID[:100]), (f"host:{HOST}", HOST)):
            screen.apply_filter(line)
            await pilot.pause()
            assert screen.match_count > 0
            text = screen_text(app)
            assert any(wanted in row for row in text.splitlines()[1:]), line  # in a row, not only on the filter line
            assert_never_eaten(text)
        screen.apply_filter("[/] [bold] [@click=app.quit]")  # what a responder types is text too
        await pilot.pause()
        assert "[/] [bold] [@click=app.quit]" in screen_text(app)
    assert app.return_code in (None, 0)


async def test_evidence_shows_the_raw_line_and_the_file_names_verbatim(hostile):
    oom = next(e for h in hostile.analysis.hypotheses for e in h.evidence if e.text.startswith("[rank5]"))
    app = Cockpit(SharedBundle(hostile.path, AUTHOR), analysis=hostile.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        app.open_evidence(oom.artifact, oom.line)
        await wait_for(pilot, lambda: app.current_mode == "evidence" and app.screen.reader is not None)
        await pilot.pause()
        text = screen_text(app)
        assert OOM in text
        assert_never_eaten(text)
        await pilot.press("f")
        await pilot.pause()
        assert HOST in screen_text(app)
        with Bundle.open(hostile.path) as bundle:
            odd = next(a for a in bundle.artifacts() if a["source"].endswith("dmesg [red].txt"))
        app.open_evidence(odd["sha256"], None)
        await wait_for(pilot, lambda: app.screen.reader is not None)
        await pilot.pause()
        text = screen_text(app)
        assert f"{HOST}/dmesg [red].txt" in text and f"host {HOST}" in text
    assert app.return_code in (None, 0)


async def test_playbook_shows_notes_action_items_authors_and_check_rows_verbatim(hostile):
    with Bundle.open(hostile.path) as bundle:
        check = next(c for c in hostile.analysis.checks if c.rows and any(
            "[rank5]" in (r.get("text") or "") for r in check_rows(bundle, hostile.analysis.workload, c.id).rows))
        note = journal.state(bundle).notes[0]
    app = Cockpit(SharedBundle(hostile.path, AUTHOR), analysis=hostile.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.press("p")
        await wait_for(pilot, lambda: app.current_mode == "playbook" and bool(app.screen.nodes))
        screen = app.screen
        screen._move_to(screen.nodes[Node("check", check.id)])
        await wait_for(pilot, lambda: bool(screen.rows))
        await pilot.pause()
        text = screen_text(app)
        assert "[rank5]: torch.OutOfMemoryError" in text
        assert_never_eaten(text)
        screen._move_to(screen.nodes[Node("note", str(note.id))])
        await pilot.pause()
        text = screen_text(app)
        assert NOTE in text and f"{AUTHOR}: {NOTE[:30]}" in text
        screen._move_to(screen.nodes[Node("action", "A1")])
        await pilot.pause()
        text = screen_text(app)
        assert ACTION in text and "[b]infra[/b]" in text
        assert_never_eaten(text)
    assert app.return_code in (None, 0)


async def test_gpus_shows_a_gpu_s_events_verbatim(hostile):
    app = Cockpit(SharedBundle(hostile.path, AUTHOR), analysis=hostile.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.press("g")
        await wait_for(pilot, lambda: app.current_mode == "gpus" and bool(app.screen._gpus))
        screen = app.screen
        table = screen.query_one("#gpus-table", PlainTable)
        row = next(n for n, g in enumerate(screen.ordered()) if g.host == "node02" and "2a:00" in g.gpu.lower())
        table.move_cursor(row=row)
        await pilot.pause()
        text = screen_text(app)
        assert "[/dev/nvidia0] [/] [bold red]x[/]" in text
        assert any(VBIOS in line and "node02" in line for line in text.splitlines())  # the table's own cells
        assert_never_eaten(text)
    assert app.return_code in (None, 0)


async def test_report_preview_shows_the_title_and_the_journal_verbatim(hostile):
    app = Cockpit(SharedBundle(hostile.path, AUTHOR), analysis=hostile.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        await wait_for(pilot, lambda: app.model is not None, seconds=60)
        await pilot.press("r")
        await wait_for(pilot, lambda: app.current_mode == "report" and bool(app.screen.source))
        await pilot.pause()
        text = screen_text(app)
        assert TITLE in text
        for _ in range(40):  # the journal is further down the preview
            if "reseated" in text:
                break
            await pilot.press("pagedown")
            await pilot.pause()
            text = screen_text(app)
        assert NOTE in text
        assert_never_eaten(text)
    assert app.return_code in (None, 0)


async def test_every_screen_opens_on_the_hostile_bundle_without_eating_a_bracket(hostile):
    """Screens are found by module (workbench/tui/screens): a new one is visited here without a test of its own."""
    app = Cockpit(SharedBundle(hostile.path, AUTHOR))
    async with app.run_test(size=(220, 60)) as pilot:
        await _cockpit(pilot, app)
        for spec in app.specs:
            await pilot.press(spec.key)
            await wait_for(pilot, lambda spec=spec: app.current_mode == spec.name)
            await pilot.pause(0.3)
            assert_never_eaten(screen_text(app))
    assert app.return_code in (None, 0)


@pytest.fixture(scope="module")
def hostile_serving(tmp_path_factory) -> Hostile:
    """The demo's inference incident with one pod's scrapes named ``vllm-[bold]-tq8zw[red]-<time>.prom``."""
    root = tmp_path_factory.mktemp("hostile-serving")
    evidence = root / "evidence"
    inference.write(evidence)
    pod = inference.PODS[2]
    for scrape in (evidence / "metrics").glob(f"{pod}-*.prom"):
        scrape.rename(scrape.parent / scrape.name.replace(pod, POD))
    path = root / "incident.duckdb"
    with Bundle.create(path, title=TITLE) as bundle:
        ingest_paths(bundle, [str(evidence)])
    with Bundle.open(path) as bundle:
        return Hostile(path, Analysis.from_json(analyze(bundle)))


async def test_latency_lists_a_server_named_with_brackets_verbatim(hostile_serving):
    app = Cockpit(SharedBundle(hostile_serving.path, AUTHOR), analysis=hostile_serving.analysis)
    async with app.run_test(size=(220, 60)) as pilot:
        await pilot.press("l")
        await wait_for(pilot, lambda: app.current_mode == "latency" and bool(app.screen.query(".lat-chart")),
                       seconds=30)
        await pilot.pause()
        assert POD in screen_text(app)
        app.screen.host = POD
        app.screen._paint_head()
        app.screen.repaint()
        await pilot.pause(0.5)
        assert POD in screen_text(app)
    assert app.return_code in (None, 0)
