"""The analysis result as typed objects: what the CLI, the report and the cockpit read.

``gpuwb analyze --json`` is a contract other tools parse, so the JSON shape stays the source of
truth: :func:`Analysis.from_json` reads it and :meth:`Analysis.to_json` gives it back unchanged.
Screens and renderers use the attributes, so a renamed key breaks here, in one place, instead of
as a ``KeyError`` in three.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from collectors.base import LAYERS
from workbench.times import parse_iso


@dataclass(frozen=True)
class EvidenceLine:
    """A quoted line behind a hypothesis or symptom, with where it lives in the bundle."""

    source: str | None
    ts: datetime | None
    host: str | None
    text: str
    artifact: str | None
    line: int | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> EvidenceLine:
        return cls(source=d.get("source"), ts=parse_iso(d.get("ts")), host=d.get("host"), text=d.get("text") or "",
                   artifact=d.get("artifact"), line=d.get("line"))


@dataclass(frozen=True)
class ChainLink:
    """One step of a hypothesis's causal chain: a cause (the root first, then what it led to) or a
    symptom it explains (``count``: its lines)."""

    cause: str | None
    symptom: str | None
    host: str | None
    first_seen: datetime | None
    count: int = 0

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ChainLink:
        return cls(cause=d.get("cause"), symptom=d.get("symptom"), host=d.get("host"),
                   first_seen=parse_iso(d.get("first_seen")), count=int(d.get("count") or 0))


@dataclass(frozen=True)
class Hypothesis:
    """One ranked candidate root cause."""

    rank: int
    layer: str
    cause: str
    score: float
    host: str | None
    gpu: str | None
    ranks: tuple[int, ...]
    first_seen: datetime | None
    summary: str
    symptoms: tuple[str, ...]
    evidence: tuple[EvidenceLine, ...]
    consequences: tuple[str, ...]
    absorbed: tuple[str, ...]
    explains: dict[str, Any]
    symptom_evidence: tuple[EvidenceLine, ...]
    more_places: int = 0
    """Other places with this cause left out of the list (a fleet's hosts with the same noise)."""
    chain: tuple[ChainLink, ...] = ()
    """The causal chain from the root to what the users saw (workbench/analysis/chains.py)."""

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Hypothesis:
        return cls(rank=d["rank"], layer=d["layer"], cause=d["cause"], score=float(d["score"]), host=d.get("host"),
                   gpu=d.get("gpu"), ranks=tuple(d.get("ranks") or ()), first_seen=parse_iso(d.get("first_seen")),
                   summary=d.get("summary") or "", symptoms=tuple(d.get("symptoms") or ()),
                   evidence=tuple(EvidenceLine.from_json(e) for e in d.get("evidence") or ()),
                   consequences=tuple(d.get("consequences") or ()), absorbed=tuple(d.get("absorbed") or ()),
                   explains=dict(d.get("explains") or {}),
                   symptom_evidence=tuple(EvidenceLine.from_json(e) for e in d.get("symptom_evidence") or ()),
                   more_places=int(d.get("more_places") or 0),
                   chain=tuple(ChainLink.from_json(link) for link in d.get("chain") or ()))

    @property
    def where(self) -> str:
        """Host, GPU and ranks in the order a responder reads them: ``node03 0000:5d:00.0 r19``."""
        parts = [self.host or "whole job/service"]
        if self.more_places:
            parts.append(f"(+{self.more_places} more)")
        if self.gpu:
            parts.append(self.gpu)
        if self.ranks:
            shown = ",".join(str(r) for r in self.ranks[:4]) + ("…" if len(self.ranks) > 4 else "")
            parts.append(f"r{shown}")
        return " ".join(parts)


@dataclass(frozen=True)
class Check:
    """A playbook check as the engine evaluated it."""

    id: str
    layer: str
    title: str
    question: str
    why: str
    causes: tuple[str, ...]
    role: str
    verdict: str
    rows: int
    max_strength: float
    error: str | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Check:
        return cls(id=d["id"], layer=d["layer"], title=d.get("title") or d["id"], question=d.get("question") or "",
                   why=d.get("why") or "", causes=tuple(d.get("causes") or ()), role=d.get("role") or "",
                   verdict=d.get("verdict") or "no_evidence", rows=int(d.get("rows") or 0),
                   max_strength=float(d.get("max_strength") or 0.0), error=d.get("error"))


@dataclass(frozen=True)
class Step:
    """A stage-0 or recovery step; ``status`` is ok, attention or todo when the bundle says something."""

    id: str
    title: str
    action: str
    why: str
    status: str | None
    evidence: tuple[dict[str, Any], ...]

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Step:
        return cls(id=d["id"], title=d.get("title") or d["id"], action=d.get("action") or "", why=d.get("why") or "",
                   status=d.get("status"), evidence=tuple(d.get("evidence") or ()))


@dataclass(frozen=True)
class Symptom:
    """A group of symptom events (one kind at one place) and the cause that explains it."""

    kind: str
    host: str | None
    count: int
    first_seen: datetime | None
    text: str
    explained_by: str | None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Symptom:
        return cls(kind=d["kind"], host=d.get("host"), count=int(d.get("count") or 0),
                   first_seen=parse_iso(d.get("first_seen")), text=d.get("text") or "",
                   explained_by=d.get("explained_by"))


@dataclass(frozen=True)
class FirstAnomaly:
    ts: datetime | None
    host: str | None
    layer: str | None
    kind: str | None
    text: str

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FirstAnomaly:
        return cls(ts=parse_iso(d.get("ts")), host=d.get("host"), layer=d.get("layer"), kind=d.get("kind"),
                   text=d.get("text") or "")


@dataclass(frozen=True)
class TellApart:
    """What would confirm one of two close hypotheses: what to collect, and the checks that read it."""

    cause: str
    host: str | None
    collect: tuple[str, ...]
    checks: tuple[str, ...]

    @property
    def line(self) -> str:
        """``cause on host: collect A; B (checks x, y)``: one entry as the cockpit and the report say it."""
        where = f" on {self.host}" if self.host else ""
        checks = f" (checks {', '.join(self.checks)})" if self.checks else ""
        return f"{self.cause}{where}: {'; '.join(self.collect) or 'no evidence source listed'}{checks}"


@dataclass(frozen=True)
class Confidence:
    """How sure the first hypothesis is (workbench/analysis/confidence.py): calibrated on incidents
    with a known truth; below the floor, the runner-up and what would tell the two apart."""

    calibrated: float
    level: str
    floor: float
    runner_up_cause: str | None = None
    runner_up_host: str | None = None
    runner_up_score: float | None = None
    tell_apart: tuple[TellApart, ...] = ()

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Confidence:
        other = d.get("runner_up") or {}
        return cls(calibrated=float(d["calibrated"]), level=d["level"], floor=float(d["floor"]),
                   runner_up_cause=other.get("cause"), runner_up_host=other.get("host"),
                   runner_up_score=other.get("score"),
                   tell_apart=tuple(TellApart(t["cause"], t.get("host"), tuple(t.get("collect") or ()),
                                              tuple(t.get("checks") or ())) for t in d.get("tell_apart") or ()))

    @property
    def sure_enough(self) -> bool:
        """At or above the floor: the first hypothesis may be called the answer."""
        return self.level != "not sure"

    @property
    def label(self) -> str:
        """``likely 0.83``: the level and the calibrated share right."""
        return f"{self.level} {self.calibrated:.2f}"

    def rival(self) -> str | None:
        """The runner-up as a responder says it: ``cause on host``, None without one."""
        if self.runner_up_cause is None:
            return None
        return self.runner_up_cause + (f" on {self.runner_up_host}" if self.runner_up_host else "")


@dataclass(frozen=True)
class LayerFinding:
    """A check the layer's verdict rests on, with how many evidence rows it found."""

    check: str
    title: str
    rows: int


@dataclass(frozen=True)
class Analysis:
    """One bundle's analysis: workload, window, verdict per layer, ranked hypotheses, the playbook."""

    workload: str
    impact: str
    window: tuple[datetime | None, datetime | None]
    first_anomaly: FirstAnomaly | None
    hypotheses: tuple[Hypothesis, ...]
    layer_verdicts: dict[str, str]
    playbook_title: str
    checks: tuple[Check, ...]
    stage0: tuple[Step, ...]
    recover: tuple[Step, ...]
    symptoms: tuple[Symptom, ...]
    layer_focus: dict[str, str]
    layer_findings: dict[str, tuple[LayerFinding, ...]] = field(default_factory=dict)
    clock_offsets: dict[str, float] = field(default_factory=dict)
    confidence: Confidence | None = None
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Analysis:
        window = d.get("window") or {}
        layers = d.get("layers") or {}
        return cls(workload=d.get("workload") or "unknown", impact=d.get("impact") or "none",
                   window=(parse_iso(window.get("start")), parse_iso(window.get("end"))),
                   first_anomaly=FirstAnomaly.from_json(d["first_anomaly"]) if d.get("first_anomaly") else None,
                   hypotheses=tuple(Hypothesis.from_json(h) for h in d.get("hypotheses") or ()),
                   layer_verdicts={layer: (layers.get(layer) or {}).get("verdict", "no_evidence") for layer in LAYERS},
                   playbook_title=(d.get("playbook") or {}).get("title") or "",
                   checks=tuple(Check.from_json(c) for c in d.get("checks") or ()),
                   stage0=tuple(Step.from_json(s) for s in d.get("stage0") or ()),
                   recover=tuple(Step.from_json(s) for s in d.get("recover") or ()),
                   symptoms=tuple(Symptom.from_json(s) for s in d.get("symptoms") or ()),
                   layer_focus=dict(d.get("layer_focus") or {}),
                   layer_findings={layer: tuple(LayerFinding(f["check"], f.get("title") or f["check"], int(f["rows"]))
                                                for f in (info or {}).get("findings") or ())
                                   for layer, info in layers.items()},
                   clock_offsets=dict(d.get("clock_offsets") or {}),
                   confidence=Confidence.from_json(d["confidence"]) if d.get("confidence") else None, raw=d)

    def to_json(self) -> dict[str, Any]:
        """The ``gpuwb analyze --json`` object this was read from, unchanged."""
        return self.raw

    @property
    def top(self) -> Hypothesis | None:
        return self.hypotheses[0] if self.hypotheses else None

    def checks_in(self, layer: str) -> list[Check]:
        return [c for c in self.checks if c.layer == layer]

    def check(self, check_id: str) -> Check | None:
        return next((c for c in self.checks if c.id == check_id), None)


def run(bundle: Any, workload: str | None = None) -> Analysis:
    """Analyze a bundle into the typed result (the engine lives in :mod:`workbench.analysis.engine`)."""
    from workbench.analysis.engine import analyze

    return Analysis.from_json(analyze(bundle, workload=workload))
