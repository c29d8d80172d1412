"""What a responder reviews in the playbook: a check's evidence rows, and which checks still wait.

The Playbook screen shows the rows behind a check's verdict. They come from the same SQL, with the
same per-workload parameters and the same keeping of the strongest and earliest rows per place, as
the engine ran (:func:`workbench.analysis.playbook.evaluate_check`), so what the responder reads is what the
verdict was made of. The review rule lives here too: a layer is not called clear by accident while
one of its checks has no confirmation or override.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from workbench.analysis.findings import Analysis, Check
from workbench.analysis.playbook import Presence, evaluate_check, load_library, load_playbook, prepare
from workbench.errors import InputError
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.store.journal import JournalState


@dataclass(frozen=True)
class CheckRows:
    """A check's evidence as the engine kept it: rows strongest first, the exact count, any error."""

    check: str
    rows: list[dict[str, Any]]
    total: int
    error: str | None


def check_rows(bundle: Bundle, workload: str, check_id: str) -> CheckRows:
    """Run one check of ``workload``'s playbook (training, inference, mixed, unknown) over the bundle."""
    check = next((c for c in load_playbook(workload).checks() if c.id == check_id), None)
    if check is None:
        raise InputError(f"check {check_id!r} is not in the {workload} playbook")
    con = bundle.con
    try:
        prepare(con)
        presence = Presence.of(con)
    except duckdb.Error as exc:
        return CheckRows(check=check_id, rows=[], total=0, error=str(exc).splitlines()[0][:300])
    result = evaluate_check(con, check, presence)
    rows = sorted(result.rows, key=lambda r: (-float(r["strength"] or 0), r["ts"] is None, r["ts"] or 0))
    return CheckRows(check=check_id, rows=rows, total=result.total, error=result.error)


def unreviewed(analysis: Analysis, state: JournalState, layer: str) -> list[Check]:
    """The layer's checks no responder has confirmed or overridden yet, in playbook order."""
    return [c for c in analysis.checks_in(layer) if c.id not in state.check_verdicts]


def clear_needs_reason(analysis: Analysis, state: JournalState, layer: str) -> str | None:
    """Why calling ``layer`` clear needs the responder to say why, or None when it does not: a check
    not reviewed yet, or one a responder judged fault or suspect."""
    waiting = unreviewed(analysis, state, layer)
    if waiting:
        return f"{len(waiting)} check(s) of this layer not reviewed yet ({_names(waiting)}): say why it is clear anyway"
    flagged = [c for c in analysis.checks_in(layer)
               if state.check_verdicts[c.id].body.get("verdict") in ("fault", "suspect")]
    if flagged:
        return f"{len(flagged)} check(s) of this layer judged fault or suspect ({_names(flagged)}): say why it is clear"
    return None


def _names(checks: list[Check]) -> str:
    return ", ".join(c.title for c in checks[:3]) + (f" and {len(checks) - 3} more" if len(checks) > 3 else "")


def judge_check(bundle: Bundle, author: str, check: str, verdict: str, reason: str = "", *,
                at: datetime | None = None) -> int:
    """Confirm or override the engine's verdict on one check of the library, written to the journal with
    the check's layer; an id the library does not have is refused in one line."""
    known = load_library()[0].get(check)
    if known is None:
        raise InputError(f"unknown check {check!r}; see playbooks/checks/")
    return journal.set_check_verdict(bundle, author, check, known.layer, verdict, reason, at=at)
