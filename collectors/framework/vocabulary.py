"""The project's shared words, each declared once: layers, verdicts, severities, symptoms, event kinds.

Collectors may not import the workbench, so the vocabulary lives here and the workbench imports it
from here. The small vocabularies are constants; the event kinds (layer, attrs, meaning) are a
catalog, ``collectors/catalog/events.yaml``, read on first use so that importing a collector stays cheap.
``tests/test_vocabulary.py`` checks every event the parsers write against it, and that
``docs/events.md`` is what :func:`events_markdown` makes of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

LAYERS = ("business", "scheduling", "gpu", "network_storage", "hardware")
"""The walk of every analysis, from what users saw down to the metal."""

LAYER_TITLES = {"business": "Business", "scheduling": "Scheduling", "gpu": "GPU & driver",
                "network_storage": "Network & storage", "hardware": "Hardware"}

VERDICTS = ("fault", "suspect", "clear", "no_evidence")
"""A layer's or a check's verdict, worst first."""

VERDICT_MARKS = {"fault": "✗", "suspect": "?", "clear": "✓", "no_evidence": "·"}

SEVERITIES = ("debug", "info", "warning", "error", "critical")
"""An event's severity, mildest first."""

SYMPTOMS = {
    "nccl_timeout": ("failure", "a collective did not finish in time: every rank of the job waits on the slowest"),
    "job_failed": ("failure", "a job, rank or step ended in failure (Slurm state, torchrun report)"),
    "error_rate_spike": ("failure", "the share of failed requests stepped up"),
    "latency_spike": ("degradation", "request latency (p50/p95/p99, TTFT, TPOT) stepped up"),
    "throughput_drop": ("degradation", "tokens or samples per second fell"),
    "queue_backlog": ("degradation", "requests piled up waiting for a slot"),
    "straggler_rank": ("degradation", "one rank is slower than the others, or went silent"),
}
"""What users and the scheduler saw, with the impact it means (failure or degradation). A symptom is
attached to the cause that explains it and is never named as a cause itself; playbooks/checks/
says which events show which symptom."""

SYMPTOM_KINDS = tuple(SYMPTOMS)

FAILED_JOB_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "PREEMPTED", "BOOT_FAIL",
                     "DEADLINE")
"""Slurm end states in which a job failed: a job_state or step_killed event in one of them shows the
job_failed symptom (the symptoms query of playbooks/checks/ lists the same)."""

_CATALOG = Path(__file__).resolve().parents[1] / "catalog" / "events.yaml"


class VocabularyError(ValueError):
    """collectors/catalog/events.yaml is malformed: a programming error, named with its place."""


@dataclass(frozen=True)
class EventKind:
    """One kind of timeline event: where it sits, what it means, which attrs it may carry."""

    name: str
    layers: tuple[str, ...]
    meaning: str
    attrs: dict[str, str]
    """every attr it may carry, its own and its groups', name -> meaning"""
    own: dict[str, str]
    groups: tuple[str, ...]
    generic: bool = False
    """a catch-all ("any other NCCL WARN line"): the line was kept, but no entry knew what it means"""


def event_kinds() -> dict[str, EventKind]:
    """Every declared event kind by name, from collectors/catalog/events.yaml."""
    return _catalog()[0]


def attr_groups() -> dict[str, dict[str, str]]:
    """Attrs a whole family of events may carry (every NCCL line's pid, tid, ...), by group name."""
    return _catalog()[1]


@cache
def _catalog() -> tuple[dict[str, EventKind], dict[str, dict[str, str]]]:
    return parse_catalog(_CATALOG.read_text(encoding="utf-8"))


def parse_catalog(text: str) -> tuple[dict[str, EventKind], dict[str, dict[str, str]]]:
    """(kinds, attr groups) of an events.yaml text; a malformed entry raises VocabularyError naming it."""
    import yaml

    doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    glossary: dict[str, str] = doc.get("attrs") or {}

    def meanings(where: str, attrs: dict[str, Any]) -> dict[str, str]:
        out = {}
        for attr, meaning in attrs.items():
            meaning = meaning or glossary.get(attr)
            if not meaning:
                raise VocabularyError(f"events.yaml: {where}: attr {attr!r} has no meaning here or under attrs")
            out[attr] = " ".join(str(meaning).split())
        return out

    groups = {name: meanings(name, attrs) for name, attrs in (doc.get("attr_groups") or {}).items()}
    kinds: dict[str, EventKind] = {}
    for name, entry in doc["kinds"].items():
        if not entry.get("meaning") or not entry.get("layer"):
            raise VocabularyError(f"events.yaml: {name}: needs a layer and a meaning")
        layers = entry["layer"] if isinstance(entry["layer"], list) else [entry["layer"]]
        bad = [layer for layer in layers if layer not in LAYERS]
        if bad:
            raise VocabularyError(f"events.yaml: {name}: layer {bad[0]!r} is not one of {', '.join(LAYERS)}")
        unknown = [g for g in entry.get("groups", []) if g not in groups]
        if unknown:
            raise VocabularyError(f"events.yaml: {name}: attr group {unknown[0]!r} is not under attr_groups")
        own = meanings(name, entry.get("attrs") or {})
        merged: dict[str, str] = {}
        for group in entry.get("groups", []):
            merged.update(groups[group])
        merged.update(own)
        kinds[name] = EventKind(name, tuple(layers), " ".join(str(entry["meaning"]).split()), merged, own,
                                tuple(entry.get("groups", [])), bool(entry.get("generic")))
    return kinds, groups


def problems(kind: str, layer: str | None, attrs: dict[str, Any] | None) -> list[str]:
    """What an event says that the vocabulary does not declare; empty when it is all declared."""
    declared = event_kinds().get(kind)
    if declared is None:
        return [f"kind {kind!r} is not declared in collectors/catalog/events.yaml"]
    out = []
    if layer not in declared.layers:
        out.append(f"{kind}: layer {layer!r} is not one of {', '.join(declared.layers)}")
    out.extend(f"{kind}: attr {name!r} is not declared" for name in attrs or {} if name not in declared.attrs)
    return out


def events_markdown() -> str:
    """docs/events.md: the event kinds table, generated from the declaration (scripts/events_doc.py)."""
    lines = ["# Event kinds", "",
             "Generated from `collectors/catalog/events.yaml` by `scripts/events_doc.py`; edit the YAML, "
             "not this file.",
             "Every timeline event (`gpuwb timeline --json`) has one of these kinds; `attrs` holds at most",
             "the attributes listed for its kind, each only when the evidence gives it.", "",
             "Layers: " + ", ".join(f"`{layer}` ({LAYER_TITLES[layer]})" for layer in LAYERS) + ".", "",
             "| kind | layer | meaning | attrs |", "|---|---|---|---|"]
    for kind in sorted(event_kinds().values(), key=lambda k: (LAYERS.index(k.layers[0]), k.name)):
        attrs = [f"`{name}`: {_cell(meaning)}" for name, meaning in sorted(kind.own.items())]
        attrs += [f"the [{group}](#{group}) attrs" for group in kind.groups]
        cells = [f"`{kind.name}`", ", ".join(kind.layers), _cell(kind.meaning), "<br>".join(attrs) or "—"]
        lines.append(f"| {' | '.join(cells)} |")
    lines += ["", "## Attr groups", "", "Attrs a whole family of events may carry."]
    for group, attrs in attr_groups().items():
        lines += ["", f"### {group}", "", "| attr | meaning |", "|---|---|"]
        lines += [f"| `{name}` | {_cell(meaning)} |" for name, meaning in attrs.items()]
    lines += ["", "## Symptoms", "",
              "Symptom kinds appear in an analysis' `symptoms`, never as a cause.", "",
              "| symptom | impact | meaning |", "|---|---|---|"]
    lines += [f"| `{name}` | {impact} | {_cell(meaning)} |" for name, (impact, meaning) in SYMPTOMS.items()]
    lines += ["", "## Verdicts", "", "| verdict | mark |", "|---|---|"]
    lines += [f"| `{verdict}` | {VERDICT_MARKS[verdict]} |" for verdict in VERDICTS]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
