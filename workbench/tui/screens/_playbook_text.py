"""What the Playbook screen writes: the walk's tree labels, the pane of the selected node and the head line.

Plain functions of the analysis and the journal state (``workbench.store.journal``), so the screen
(workbench/tui/screens/playbook.py) keeps to widgets and keys. Every verdict carries its mark (✓ ? ✗ ·),
so colour is never the only signal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS, VERDICT_MARKS
from workbench.analysis.findings import Analysis, Check, Step
from workbench.analysis.playbook_review import clear_needs_reason, unreviewed
from workbench.store import journal
from workbench.times import parse_iso
from workbench.tui.text import clip, short_time, verdict_style

STEP_MARKS = {"ok": ("✓", "green"), "attention": ("!", "yellow"), "todo": ("☐", "")}


@dataclass(frozen=True)
class Node:
    """What a tree node stands for: ``kind`` (stage0, step, layer, check, recover, root, actions,
    action, notes, note) and its key (layer name, check id, step id, action item id, note id)."""

    kind: str
    key: str = ""


def layer_label(analysis: Analysis, state: journal.JournalState, n: int, layer: str) -> Text:
    """A layer's tree label: its engine verdict, how many checks are reviewed, the responder's word."""
    engine = analysis.layer_verdicts.get(layer, "no_evidence")
    checks = analysis.checks_in(layer)
    waiting = len(unreviewed(analysis, state, layer))
    out = Text.assemble((f"{n} {LAYER_TITLES[layer]} ", "bold"), _mark(engine, word=True),
                        (f"  {len(checks) - waiting}/{len(checks)} reviewed", "dim"))
    out.append_text(_responder(engine, state.verdicts.get(layer), word=True))
    return out


def check_label(check: Check, state: journal.JournalState) -> Text:
    """A check's tree label: its verdict mark, rows, a failed query, the responder's word."""
    out = Text.assemble(_mark(check.verdict, word=False), " " + check.title)
    if check.rows:
        out.append(f" ({check.rows})", "dim")
    if check.error:
        out.append(" (query failed)", "red")
    out.append_text(_responder(check.verdict, state.check_verdicts.get(check.id), word=False))
    return out


def root_label(analysis: Analysis, state: journal.JournalState) -> Text:
    """The root cause node: the one the responders marked, else the engine's top hypothesis."""
    marked = state.root_cause
    if marked is not None:
        where = " ".join(x for x in (marked.body.get("host"), marked.body.get("gpu")) if x)
        return Text.assemble(("Root cause ", "bold"), (marked.body.get("cause", ""), "bold"), f" {where}",
                             (f" (by {marked.author})", "italic"))
    top = analysis.top
    if top is None:
        return Text.assemble(("Root cause ", "bold"), ("not marked (R)", "dim"))
    return Text.assemble(("Root cause ", "bold"), f"{top.cause} {top.where}", (" (engine; R to mark)", "dim"))


def layer_detail(analysis: Analysis, state: journal.JournalState, ref: Node) -> Text:
    layer = ref.key
    engine = analysis.layer_verdicts.get(layer, "no_evidence")
    out = Text.assemble((f"Layer {LAYERS.index(layer) + 1}: {LAYER_TITLES[layer]}\n", "bold"))
    out.append(f"{analysis.layer_focus.get(layer, '')}\n\n")
    out.append("engine: ")
    out.append(f"{VERDICT_MARKS[engine]} {engine.replace('_', ' ')}\n", verdict_style(engine))
    _history(out, state.verdict_history.get(layer, []), engine)
    out.append("\nchecks:\n", "bold")
    for check in analysis.checks_in(layer):
        out.append("  ")
        out.append_text(check_label(check, state))
        if check.id not in state.check_verdicts:
            out.append("  unreviewed", "italic")
        out.append("\n")
    why = clear_needs_reason(analysis, state, layer)
    if why:
        out.append(f"\nto call it clear: {why}\n", "dim")
    out.append("\nc confirm the engine · o override (with a reason) · n note", "dim")
    return out


def check_detail(analysis: Analysis, state: journal.JournalState, ref: Node) -> Text:
    check = next(c for c in analysis.checks if c.id == ref.key)
    out = Text.assemble((check.title, "bold"), (f"   {LAYER_TITLES[check.layer]} · {check.id} · {check.role}\n",
                                                 "dim"))
    out.append("question: ", "bold")
    out.append(check.question + "\n")
    out.append("why: ", "bold")
    out.append(check.why + "\n\n")
    out.append("engine: ")
    out.append(f"{VERDICT_MARKS[check.verdict]} {check.verdict.replace('_', ' ')}", verdict_style(check.verdict))
    out.append(f"  {check.rows} row(s), strongest {check.max_strength:.2f}; causes: {', '.join(check.causes)}\n")
    if check.error:
        out.append(f"the check's query failed: {check.error}\n", "red")
    _history(out, state.check_verdict_history.get(check.id, []), check.verdict)
    out.append("\nc confirm · o override · n note (pinned to the highlighted row) · tab: rows", "dim")
    return out


def step_detail(analysis: Analysis, _state: journal.JournalState, ref: Node) -> Text:
    step = find_step(analysis, ref.key)
    if step is None:
        return Text()
    out = Text.assemble((step.title + "\n", "bold"))
    out.append_text(step_label(step))
    out.append("\n\ndo: ", "bold")
    out.append(step.action + "\n")
    out.append("why: ", "bold")
    out.append(step.why + "\n")
    return out


def root_detail(analysis: Analysis, state: journal.JournalState, _ref: Node) -> Text:
    out = Text.assemble(("Root cause\n", "bold"))
    marked = state.root_cause
    if marked is not None:
        body = marked.body
        out.append(f"marked by {marked.author} at {short_time(marked.at)}: {body.get('cause')} "
                   f"{body.get('host') or ''} {body.get('gpu') or ''}\n{body.get('text') or ''}\n\n")
    for h in analysis.hypotheses[:5]:
        out.append(f"{h.score:.2f} {h.layer}/{h.cause}  {h.where}\n", "bold" if h.rank == 1 else "")
        out.append(f"     {clip(h.summary, 140)}\n", "dim")
    out.append("\nR mark the root cause (prefilled from the top hypothesis)", "dim")
    return out


def action_detail(_analysis: Analysis, state: journal.JournalState, ref: Node) -> Text:
    item = next((a for a in state.actions if a.id == ref.key), None)
    if item is None:
        return Text()
    out = Text.assemble((f"{item.id} {item.title}\n", "bold"))
    out.append(f"owner {item.owner or 'unassigned'} · {item.priority} · {item.status.replace('_', ' ')}"
               f" · due {item.due or 'not set'}\n")
    out.append(f"created by {item.created_by} {short_time(item.created_at)}; last changed by {item.changed_by} "
               f"{short_time(item.changed_at)}\n\n")
    out.append("A edit (status too) · a add another", "dim")
    return out


def note_detail(_analysis: Analysis, state: journal.JournalState, ref: Node) -> Text:
    note = next((e for e in state.notes if str(e.id) == ref.key), None)
    if note is None:
        return Text()
    about = parse_iso(note.body.get("ts"))
    return Text.assemble((f"{note.author} at {short_time(note.at)}", "bold"),
                         (f" about {short_time(about, seconds=True)}" if about else "", "dim"),
                         "\n\n" + note.body.get("text", ""))


def section_detail(_analysis: Analysis, _state: journal.JournalState, ref: Node) -> Text:
    titles = {"stage0": "Stage 0: secure the scene before anything is touched",
              "recover": "Validate & recover: prove the fix before calling it done",
              "actions": "Action items: a to add one, A to edit the highlighted one",
              "notes": "Notes: n to add one (pinned to the highlighted evidence row, if any)"}
    return Text(titles.get(ref.kind, ""), "bold")


def head_line(analysis: Analysis, state: journal.JournalState) -> Text:
    """The line above the walk: workload, severity, status, checks reviewed and the times the responders set."""
    fields = state.fields
    severity = fields["severity"].body.get("value") if "severity" in fields else "severity not set"
    status = fields["status"].body.get("value") if "status" in fields else "status not set"
    total = len(analysis.checks)
    reviewed = sum(1 for c in analysis.checks if c.id in state.check_verdicts)
    times = [f"{which} {short_time(parse_iso(e.body.get('ts')))}" for which, e in state.times.items()]
    line = Text.assemble((analysis.playbook_title or "Playbook", "bold"),
                         f" · workload {analysis.workload} (w switches) · {severity} · {status.replace('_', ' ')}"
                         f" · {reviewed}/{total} checks reviewed")
    if times:
        line.append(" · " + " · ".join(times), "dim")
    return line


DETAILS: dict[str, Callable[[Analysis, journal.JournalState, Node], Text]] = {
    "layer": layer_detail, "check": check_detail, "step": step_detail, "root": root_detail,
    "action": action_detail, "note": note_detail}
"""The pane of a selected node by its kind; the other kinds (sections) get :func:`section_detail`."""


def _mark(verdict: str, *, word: bool) -> Text:
    """``✗`` or ``✗ fault``: the mark always, so colour is never the only signal."""
    return Text(VERDICT_MARKS[verdict] + (" " + verdict.replace("_", " ") if word else ""), verdict_style(verdict))


def _responder(engine: str, entry: journal.Entry | None, *, word: bool) -> Text:
    """After the engine's mark: `` → ✓ by alice: replaced riser, 10:02`` or `` confirmed by alice, 10:02``."""
    out = Text()
    if entry is None:
        return out
    mine = entry.body.get("verdict", engine)
    reason = entry.body.get("reason") or ""
    if mine == engine:
        out.append(f" confirmed by {entry.author}", "italic")
    else:
        out.append(" → ")
        out.append_text(_mark(mine, word=word))
        out.append(f" by {entry.author}", "italic")
    if reason:
        out.append(f": {clip(reason, 60)}", "italic")
    out.append(f", {entry.at.strftime('%H:%M')}", "dim")
    return out


def _history(out: Text, entries: list[journal.Entry], engine: str) -> None:
    for e in entries:
        verdict = e.body.get("verdict", engine)
        out.append(f"{short_time(e.at)} {e.author}: ")
        out.append(f"{VERDICT_MARKS[verdict]} {verdict.replace('_', ' ')}", verdict_style(verdict))
        out.append(" (confirmed)" if verdict == engine else " (override)", "italic")
        if e.body.get("reason"):
            out.append(f" — {e.body['reason']}")
        out.append("\n")


def step_label(step: Step) -> Text:
    mark, style = STEP_MARKS.get(step.status or "todo", ("☐", ""))
    return Text.assemble((mark, style), " ", step.title)


def action_label(item: journal.ActionItem) -> Text:
    done = item.status in ("done", "dropped")
    return Text.assemble((f"{item.id} ", "bold"), (f"[{item.priority}] ", ""), (clip(item.title, 50), "strike" if done
                                                                               else ""),
                         (f" · {item.owner or 'unassigned'} · {item.status.replace('_', ' ')}", "dim"))


def find_step(analysis: Analysis, key: str) -> Step | None:
    """A step by its node key, ``stage0/<id>`` or ``recover/<id>`` (the two lists may share ids)."""
    section, _, step_id = key.partition("/")
    return next((s for s in (analysis.stage0 if section == "stage0" else analysis.recover) if s.id == step_id),
                None)
