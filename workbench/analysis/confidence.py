"""How sure the engine is of its first hypothesis: the raw score, made to mean "right this often".

A hypothesis' raw score (strength x explanatory power, workbench/analysis/hypotheses.py) orders the
candidates but says nothing by itself: 0.24 and 0.46 may both be right every time, or half the time.
calibration.yaml holds what was observed on incidents with a known truth (the drills and the real
incidents): per bin of raw score, and per bin of margin over the runner-up, how many top-1 answers
there were and the share that was right, fitted monotone (a higher score is never less sure). The
calibrated confidence is the lower of the two readings: a strong answer with a close rival is as
unsure as its rival makes it.

Below the file's ``floor`` the cockpit and the report say "not sure", name the runner-up and say what
would tell the two apart: evidence_sources.yaml, per cause, the file to collect and the checks that
read it (data, so a responder adds what their site collects).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
CALIBRATION = HERE / "calibration.yaml"
EVIDENCE_SOURCES = HERE / "evidence_sources.yaml"
EDGES = tuple(round(i / 10, 1) for i in range(11))
"""Bin edges over 0..1 for the score and the margin: ten bins keep a few dozen samples per bin
meaningful; a finer table would mostly hold empty or single-sample bins."""
NEW_FLOOR = 0.6
"""The floor a new calibration file starts with (write_calibration keeps an existing file's)."""
NEW_SURE = 0.9
"""Calibrated confidence at and above which a new calibration file calls the answer "sure"."""
LEVELS = ("sure", "likely", "not sure")
HEADER = """\
# How often the engine's first hypothesis is right, per bin of its raw score and per bin of its margin
# over the runner-up (workbench/analysis/confidence.py reads it). Fitted, not written by hand:
#   python tests/perf/drill_bench.py --real --write-calibration workbench/analysis/calibration.yaml
# Per bin: n answers, right of them, calibrated = (right + 1) / (n + 2) made monotone over the bins
# (pool-adjacent-violators, weighted by n): a bin of 2 right of 2 reads 0.75, not 1.0.
# floor: below it the cockpit and the report say "not sure" and show the runner-up; sure: at and
# above it the answer is "sure"; between them "likely". Both are kept by a refit; change them here.
"""


class CalibrationError(ValueError):
    """calibration.yaml or evidence_sources.yaml does not have the shape this module reads."""


def isotonic(bins: list[tuple[int, int]]) -> list[float | None]:
    """Monotone non-decreasing share right per bin of (n, right): Laplace-smoothed rates pooled by
    adjacent violators, weighted by n. An empty bin takes its lower neighbour's value; one below every
    observation reads what nothing observed reads, (0 + 1) / (0 + 2) = 0.5 (or less, to stay monotone):
    a score never seen is not vouched for by the scores above it. None when every bin is empty."""
    blocks: list[list[float]] = []  # [weighted rate sum, weight, bins in block]
    for n, right in bins:
        if n == 0:
            continue
        blocks.append([(right + 1) / (n + 2) * n, float(n), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1] = [blocks[-1][0] + last[0], blocks[-1][1] + last[1], blocks[-1][2] + last[2]]
    fitted = [round(s / w, 3) for s, w, k in blocks for _ in range(int(k))]
    out: list[float | None] = []
    it = iter(fitted)
    previous = min(0.5, fitted[0]) if fitted else None
    for n, _ in bins:
        if n:
            previous = next(it)
        out.append(previous)
    return out


def _bin_of(x: float) -> int:
    return min(len(EDGES) - 2, max(0, int(x * 10)))


def _table(pairs: list[tuple[float, bool]]) -> list[dict[str, Any]]:
    counts = [[0, 0] for _ in EDGES[:-1]]
    for x, right in pairs:
        b = counts[_bin_of(x)]
        b[0] += 1
        b[1] += bool(right)
    fitted = isotonic([(n, r) for n, r in counts])
    return [{"lo": EDGES[i], "hi": EDGES[i + 1], "n": n, "right": r, "calibrated": fitted[i]}
            for i, (n, r) in enumerate(counts)]


def write_calibration(path: Path, pairs: list[tuple[float, bool]], source: str, *,
                      margins: list[tuple[float, bool]] | None = None) -> None:
    """Fit (raw top-1 score, right?) pairs, and optionally (margin over the runner-up, right?) pairs,
    into the bins of calibration.yaml at ``path``; ``source`` says what they were measured on. The floor
    and the "sure" threshold of an existing file are kept: a refit changes the evidence, not the policy."""
    old = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    old = old if isinstance(old, dict) else {}
    doc: dict[str, Any] = {
        "source": source,
        "floor": old.get("floor", NEW_FLOOR),
        "sure": old.get("sure", NEW_SURE),
        "samples": len(pairs),
        "right": sum(bool(r) for _, r in pairs),
        "score_bins": _table(pairs),
    }
    if margins:
        doc["margin_bins"] = _table(margins)
    path.write_text(HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=110),
                    encoding="utf-8")


@functools.cache
def load_calibration(path: Path = CALIBRATION) -> dict[str, Any]:
    """calibration.yaml, checked: a source, a floor below "sure", and monotone bins over 0..1."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    name = path.name
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), str):
        raise CalibrationError(f"{name}: a mapping with a 'source' line is required")
    floor, sure = doc.get("floor"), doc.get("sure")
    if not all(isinstance(v, (int, float)) for v in (floor, sure)) or not 0 < floor <= sure <= 1:
        raise CalibrationError(f"{name}: 0 < floor <= sure <= 1 is required")
    for key in ("score_bins", "margin_bins"):
        bins = doc.get(key)
        if bins is None and key == "margin_bins":
            continue
        if not isinstance(bins, list) or [b.get("lo") for b in bins] != list(EDGES[:-1]):
            raise CalibrationError(f"{name}: {key} must be the bins {EDGES[:-1]}")
        values = [b["calibrated"] for b in bins if b.get("calibrated") is not None]
        if values != sorted(values) or any(not 0 <= v <= 1 for v in values):
            raise CalibrationError(f"{name}: {key}' calibrated values must rise within 0..1")
    return doc


@functools.cache
def load_evidence_sources(path: Path = EVIDENCE_SOURCES) -> dict[str, list[dict[str, Any]]]:
    """evidence_sources.yaml: cause id -> [{collect: what to gather, checks: [check ids that read it]}]."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise CalibrationError(f"{path.name}: must map cause id -> list of sources")
    for cause, sources in doc.items():
        if not isinstance(sources, list) or not sources or not all(
                isinstance(s, dict) and isinstance(s.get("collect"), str) and isinstance(s.get("checks", []), list)
                for s in sources):
            raise CalibrationError(f"{path.name}: {cause}: a list of {{collect, checks}} is required")
    return doc


def _lookup(bins: list[dict[str, Any]] | None, x: float) -> float | None:
    if not bins:
        return None
    return bins[_bin_of(x)]["calibrated"]


def runner_up(hypotheses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The best hypothesis after the first that is another answer: another cause, or the same cause at
    another host (the same cause on the same host at another GPU is the same answer for the responder)."""
    if not hypotheses:
        return None
    top = hypotheses[0]
    for h in hypotheses[1:]:
        if h["cause"] != top["cause"] or h.get("host") != top.get("host"):
            return h
    return None


def tell_apart(top: dict[str, Any], other: dict[str, Any]) -> list[dict[str, Any]]:
    """What would confirm each of the two: per hypothesis its cause, host, what to collect and the
    checks that read it (evidence_sources.yaml); the same cause at two hosts asks for it on both."""
    sources = load_evidence_sources()
    return [{"cause": h["cause"], "host": h.get("host"),
             "collect": [s["collect"] for s in sources.get(h["cause"], [])],
             "checks": sorted({c for s in sources.get(h["cause"], []) for c in s.get("checks", [])})}
            for h in (top, other)]


def confidence(hypotheses: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The calibrated confidence of the first of ``hypotheses`` (analyze's ranked list): ``calibrated``
    (0..1), ``level`` (sure / likely / not sure), the ``floor``, ``raw`` and ``margin``; when not sure,
    the ``runner_up`` (cause, host, score) and ``tell_apart`` (what would confirm each). None without a
    hypothesis."""
    if not hypotheses:
        return None
    cal = load_calibration()
    top = hypotheses[0]
    other = runner_up(hypotheses)
    margin = top["score"] - (other["score"] if other else 0.0)
    readings = [v for v in (_lookup(cal["score_bins"], top["score"]), _lookup(cal.get("margin_bins"), margin))
                if v is not None]
    calibrated = round(min(readings), 3) if readings else 0.0
    level = "sure" if calibrated >= cal["sure"] else "likely" if calibrated >= cal["floor"] else "not sure"
    out: dict[str, Any] = {"calibrated": calibrated, "level": level, "floor": cal["floor"],
                           "raw": top["score"], "margin": round(margin, 3)}
    if level == "not sure":
        out["runner_up"] = ({"cause": other["cause"], "host": other.get("host"), "score": other["score"]}
                            if other else None)
        out["tell_apart"] = tell_apart(top, other) if other else tell_apart(top, top)[:1]
    return out
