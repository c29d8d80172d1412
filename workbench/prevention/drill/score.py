"""Score a drill: the responders' journal against the truth the drill kept in answer.json.

What counts is what a postmortem would say: the root cause marked (``journal.mark_root_cause``), its
place (host, and GPU for a cause that lives on one), the layer verdicts set (the truth's layer is a
fault, every other layer is not), and how long after the drill's bundle was made the mark came.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.base import normalize_pci
from collectors.framework.vocabulary import LAYERS
from workbench.errors import InputError
from workbench.store import journal
from workbench.store.bundle import Bundle
from workbench.times import iso, parse_iso

ANSWER_KEYS = ("cause", "layer", "host", "gpu", "injected_at", "detected_at")


@dataclass
class Scorecard:
    """How the responders did; ``passed`` needs the right cause at the right place."""

    truth: dict[str, Any]
    marked: dict[str, Any] | None
    cause_right: bool
    place_right: bool | None
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    time_to_mark_s: float | None = None
    started_at: datetime | None = None

    @property
    def passed(self) -> bool:
        return self.cause_right and self.place_right is not False

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "cause_right": self.cause_right, "place_right": self.place_right,
                "truth": {k: self.truth.get(k) for k in ANSWER_KEYS}, "marked": self.marked,
                "layers": self.layers, "layers_right": sum(1 for v in self.layers.values() if v["right"] is True),
                "layers_judged": sum(1 for v in self.layers.values() if v["right"] is not None),
                "time_to_mark_s": self.time_to_mark_s,
                "started_at": iso(self.started_at, "auto")}


def load_answer(folder: Path) -> dict[str, Any]:
    """The truth of a drill folder (``DIR/answer.json``), or a one-line error."""
    path = folder / "answer.json" if folder.is_dir() else folder
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"no drill answer at {path}; give the folder gpuwb drill -o wrote") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the drill answer {path}: {exc}") from None
    if not isinstance(data, dict) or not all(k in data for k in ANSWER_KEYS):
        raise InputError(f"{path} is not a drill answer (needs {', '.join(ANSWER_KEYS)})")
    return data


def score(bundle: Bundle, truth: dict[str, Any]) -> Scorecard:
    """Compare the bundle's journal with ``truth``."""
    state = journal.state(bundle)
    created = bundle.meta().get("created_at")
    started = parse_iso(created)
    mark = state.root_cause
    marked = None
    cause_right, place_right, took = False, None, None
    if mark is not None:
        marked = {"cause": mark.body.get("cause"), "host": mark.body.get("host"), "gpu": mark.body.get("gpu"),
                  "author": mark.author, "at": iso(mark.at, "auto")}
        cause_right = mark.body.get("cause") == truth["cause"]
        place_right = _place_right(mark.body, truth)
        took = round((mark.at - started).total_seconds(), 1) if started else None
    elif truth.get("host"):
        place_right = False
    layers = {}
    for layer in LAYERS:
        entry = state.verdicts.get(layer)
        expected = "fault" if layer == truth["layer"] else "not fault"
        verdict = entry.body.get("verdict") if entry else None
        right = None if verdict is None else (verdict == "fault") == (layer == truth["layer"])
        layers[layer] = {"verdict": verdict, "expected": expected, "right": right}
    return Scorecard(truth=truth, marked=marked, cause_right=cause_right, place_right=place_right, layers=layers,
                     time_to_mark_s=took, started_at=started)


def _place_right(body: dict[str, Any], truth: dict[str, Any]) -> bool | None:
    """None when the cause has no single place (a job-wide or fleet-wide cause)."""
    if not truth.get("host"):
        return None
    if (body.get("host") or "") != truth["host"]:
        return False
    if truth.get("gpu"):
        return normalize_pci(body.get("gpu") or "") == truth["gpu"]
    return True


def render(card: Scorecard) -> str:
    """The scorecard as a responder reads it."""
    t, m = card.truth, card.marked
    mark = "nothing" if m is None else f"{m['cause']} at {_where(m['host'], m['gpu'], '-')}"
    out = [f"Drill scorecard: {'PASS' if card.passed else 'FAIL'}",
           f"  root cause   {_word(card.cause_right)}: marked {mark}; truth {t['cause']} ({t['layer']})",
           f"  place        {_word(card.place_right)}: truth {_where(t['host'], t.get('gpu'), 'job/fleet-wide')}"]
    for layer, v in card.layers.items():
        verdict = v["verdict"] or "-"
        out.append(f"  layer {layer:<16} {_word(v['right']):<11} verdict {verdict}, expected {v['expected']}")
    took = "-" if card.time_to_mark_s is None else f"{card.time_to_mark_s:.0f} s"
    out.append(f"  time to mark {took} (from the bundle's creation to the root-cause mark)")
    return "\n".join(out) + "\n"


def _where(host: str | None, gpu: str | None, nowhere: str) -> str:
    return f"{host or nowhere}{' ' + gpu if gpu else ''}"


def _word(value: bool | None) -> str:
    return "n/a" if value is None else "right" if value else "wrong"
