"""Responder work over a sealed bundle: notes, layer verdicts, root cause, action items, times.

Evidence is never edited. What responders say goes to the append-only ``journal`` table with
author and time; a change is a new row (a verdict override, an edited action item, a retracted
note), so the history stays visible and the postmortem shows the latest word and who said it.
The TUI and the report call these functions; no other module reads or writes the journal.

Journal kinds (``kind``, ``target``, ``body``):

    note        ""                          {text, ts?}      ts: the moment the note is about
    verdict     LAYER                       {verdict, reason}
    check_verdict  CHECK id (checks.yaml)   {verdict, reason, layer}   the responder's word on one
                                            check; the layer is the check's, for grouping
    root_cause  "incident"                  {cause, host, gpu, text}
    action      item id ("A1", ...)         {title, owner, priority, status, due, source}; later
                                            rows for the same id carry only the changed fields
    summary     "incident"                  {text}
    retro       well | wrong | lucky | factor   {text}
    time        detection | mitigation | recovery   {ts}
    field       title | severity | status   {value}
    retract     id of a note/retro row      {reason}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from collectors.framework.vocabulary import LAYERS, VERDICTS
from workbench.errors import InputError
from workbench.store.bundle import Bundle, BundleError
from workbench.times import iso

PRIORITIES = ("P0", "P1", "P2", "P3")
ACTION_STATUSES = ("open", "in_progress", "done", "dropped")
RETRO_KINDS = ("well", "wrong", "lucky", "factor")
TIME_KINDS = ("detection", "mitigation", "recovery")
FIELDS = ("title", "severity", "status")
SEVERITIES = ("SEV1", "SEV2", "SEV3", "SEV4")
STATUSES = ("investigating", "mitigated", "resolved", "postmortem_draft", "postmortem_final")
_ACTION_FIELDS = ("title", "owner", "priority", "status", "due", "source")


@dataclass(frozen=True)
class Entry:
    """One journal row as written: who, when, what."""

    id: int
    at: datetime
    author: str
    kind: str
    target: str
    body: dict[str, Any]


@dataclass
class ActionItem:
    """An action item as it stands now, merged from its rows, with who created and last changed it."""

    id: str
    title: str
    owner: str | None
    priority: str
    status: str
    due: str | None
    source: str | None
    created_by: str
    created_at: datetime
    changed_by: str
    changed_at: datetime


@dataclass
class JournalState:
    """The latest word on everything, resolved from the append-only rows."""

    entries: list[Entry] = field(default_factory=list)
    notes: list[Entry] = field(default_factory=list)
    verdicts: dict[str, Entry] = field(default_factory=dict)
    verdict_history: dict[str, list[Entry]] = field(default_factory=dict)
    check_verdicts: dict[str, Entry] = field(default_factory=dict)
    check_verdict_history: dict[str, list[Entry]] = field(default_factory=dict)
    root_cause: Entry | None = None
    actions: list[ActionItem] = field(default_factory=list)
    summary: Entry | None = None
    retro: dict[str, list[Entry]] = field(default_factory=dict)
    times: dict[str, Entry] = field(default_factory=dict)
    fields: dict[str, Entry] = field(default_factory=dict)
    responders: list[str] = field(default_factory=list)


def _require_writable(bundle: Bundle) -> None:
    if not bundle.writable:
        raise BundleError(f"bundle {bundle.path} is open read-only; responder work needs it open for writing")


def _author(author: str) -> str:
    author = (author or "").strip()
    if not author:
        raise InputError("an author is required for every journal entry")
    return author


def _choice(value: str, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise InputError(f"unknown {what} {value!r}; one of: {', '.join(allowed)}")
    return value


def _append(bundle: Bundle, author: str, kind: str, target: str, body: dict[str, Any],
            at: datetime | None) -> int:
    _require_writable(bundle)
    return bundle.append_journal(author=_author(author), kind=kind, target=target, body=body, at=at)


def add_note(bundle: Bundle, author: str, text: str, *, ts: datetime | None = None,
             at: datetime | None = None) -> int:
    """A responder's note; ``ts`` places it on the incident timeline (default: when it was written)."""
    if not text.strip():
        raise InputError("a note needs text")
    return _append(bundle, author, "note", "", {"text": text, "ts": iso(ts, "auto")}, at)


def set_verdict(bundle: Bundle, author: str, layer: str, verdict: str, reason: str = "", *,
                at: datetime | None = None) -> int:
    """Confirm or override the engine's verdict on a layer; the report tells which it was."""
    _choice(layer, LAYERS, "layer")
    _choice(verdict, VERDICTS, "verdict")
    return _append(bundle, author, "verdict", layer, {"verdict": verdict, "reason": reason}, at)


def set_check_verdict(bundle: Bundle, author: str, check: str, layer: str, verdict: str, reason: str = "", *,
                      at: datetime | None = None) -> int:
    """Confirm or override the engine's verdict on one playbook check of ``layer``; reviewing every check
    of a layer is what lets a responder call the layer clear without having to say why. The caller has
    the check catalog (workbench.analysis.playbook_review.judge_check): the store does not."""
    _choice(verdict, VERDICTS, "verdict")
    _choice(layer, LAYERS, "layer")
    return _append(bundle, author, "check_verdict", check, {"verdict": verdict, "reason": reason, "layer": layer}, at)


def mark_root_cause(bundle: Bundle, author: str, cause: str, *, host: str | None = None, gpu: str | None = None,
                    text: str = "", at: datetime | None = None) -> int:
    """The cause the responders agree on; it leads the report over the engine's first hypothesis."""
    if not cause.strip():
        raise InputError("a root cause needs a cause id")
    return _append(bundle, author, "root_cause", "incident", {"cause": cause, "host": host, "gpu": gpu, "text": text},
                   at)


def add_action_item(bundle: Bundle, author: str, title: str, *, owner: str | None = None, priority: str = "P2",
                    due: str | None = None, source: str | None = None, at: datetime | None = None) -> str:
    """A follow-up; returns its id (``A1``, ``A2``, ...) for later updates."""
    if not title.strip():
        raise InputError("an action item needs a title")
    _choice(priority, PRIORITIES, "priority")
    _require_writable(bundle)
    count = bundle.con.execute("SELECT count(DISTINCT target) FROM journal WHERE kind = 'action'").fetchall()[0][0]
    item = f"A{count + 1}"
    _append(bundle, author, "action", item, {"title": title, "owner": owner, "priority": priority, "status": "open",
                                             "due": due, "source": source}, at)
    return item


def update_action_item(bundle: Bundle, author: str, item: str, *, at: datetime | None = None,
                       **changes: str | None) -> int:
    """Change an action item's title/owner/priority/status/due; a new row holds only the changes."""
    unknown = set(changes) - set(_ACTION_FIELDS)
    if unknown:
        raise InputError(f"unknown action item field(s): {', '.join(sorted(unknown))}")
    if "priority" in changes:
        _choice(str(changes["priority"]), PRIORITIES, "priority")
    if "status" in changes:
        _choice(str(changes["status"]), ACTION_STATUSES, "status")
    _require_writable(bundle)
    known = bundle.con.execute("SELECT count(*) FROM journal WHERE kind = 'action' AND target = ?",
                               [item]).fetchall()[0][0]
    if not known:
        raise InputError(f"no action item {item!r}")
    return _append(bundle, author, "action", item, dict(changes), at)


def set_summary(bundle: Bundle, author: str, text: str, *, at: datetime | None = None) -> int:
    """The responder's own summary; replaces the generated one in the report."""
    return _append(bundle, author, "summary", "incident", {"text": text}, at)


def add_retro(bundle: Bundle, author: str, category: str, text: str, *, at: datetime | None = None) -> int:
    """What went well / wrong, where we got lucky, or a contributing factor."""
    _choice(category, RETRO_KINDS, "retrospective category")
    if not text.strip():
        raise InputError("a retrospective entry needs text")
    return _append(bundle, author, "retro", category, {"text": text}, at)


def set_time(bundle: Bundle, author: str, which: str, ts: datetime, *, at: datetime | None = None) -> int:
    """When the incident was detected, mitigated or recovered (UTC)."""
    _choice(which, TIME_KINDS, "incident time")
    return _append(bundle, author, "time", which, {"ts": iso(ts, "auto")}, at)


def set_field(bundle: Bundle, author: str, name: str, value: str, *, at: datetime | None = None) -> int:
    """Title, severity (SEV1..SEV4) or status of the incident; evidence metadata stays untouched."""
    _choice(name, FIELDS, "field")
    if name == "severity":
        _choice(value, SEVERITIES, "severity")
    if name == "status":
        _choice(value, STATUSES, "status")
    return _append(bundle, author, "field", name, {"value": value}, at)


def retract(bundle: Bundle, author: str, entry_id: int, reason: str = "", *, at: datetime | None = None) -> int:
    """Withdraw a note or retrospective entry; the original row stays in the history."""
    _require_writable(bundle)
    rows = bundle.con.execute("SELECT kind FROM journal WHERE id = ?", [entry_id]).fetchall()
    if not rows or rows[0][0] not in ("note", "retro"):
        raise InputError(f"no note or retrospective entry with id {entry_id}")
    return _append(bundle, author, "retract", str(entry_id), {"reason": reason}, at)


def entries(bundle: Bundle) -> list[Entry]:
    """Every journal row, in the order written."""
    rows = bundle.con.execute("SELECT id, at_ts, author, kind, target, body FROM journal ORDER BY id").fetchall()
    return [Entry(id=r[0], at=r[1], author=r[2], kind=r[3], target=r[4] or "", body=json.loads(r[5]) if r[5] else {})
            for r in rows]


def state(bundle: Bundle) -> JournalState:
    """Resolve the append-only rows into the latest state of each item."""
    out = JournalState(entries=entries(bundle))
    retracted = {int(e.target) for e in out.entries if e.kind == "retract" and e.target.isdigit()}
    actions: dict[str, ActionItem] = {}
    for e in out.entries:
        if e.author not in out.responders:
            out.responders.append(e.author)
        if e.id in retracted:
            continue
        if e.kind == "note":
            out.notes.append(e)
        elif e.kind == "verdict":
            out.verdicts[e.target] = e
            out.verdict_history.setdefault(e.target, []).append(e)
        elif e.kind == "check_verdict":
            out.check_verdicts[e.target] = e
            out.check_verdict_history.setdefault(e.target, []).append(e)
        elif e.kind == "root_cause":
            out.root_cause = e
        elif e.kind == "summary":
            out.summary = e if e.body.get("text", "").strip() else None
        elif e.kind == "retro":
            out.retro.setdefault(e.target, []).append(e)
        elif e.kind == "time":
            out.times[e.target] = e
        elif e.kind == "field":
            out.fields[e.target] = e
        elif e.kind == "action":
            _merge_action(actions, e)
    out.actions = list(actions.values())
    return out


def _merge_action(actions: dict[str, ActionItem], e: Entry) -> None:
    item = actions.get(e.target)
    if item is None:
        actions[e.target] = ActionItem(
            id=e.target, title=e.body.get("title", ""), owner=e.body.get("owner"),
            priority=e.body.get("priority") or "P2", status=e.body.get("status") or "open", due=e.body.get("due"),
            source=e.body.get("source"), created_by=e.author, created_at=e.at, changed_by=e.author, changed_at=e.at)
        return
    for name in _ACTION_FIELDS:
        if name in e.body:
            setattr(item, name, e.body[name])
    item.changed_by = e.author
    item.changed_at = e.at
