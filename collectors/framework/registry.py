"""Finds collector modules, so adding a source is adding one module and touching no other."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from types import ModuleType
from typing import Any

from collectors.base import Artifact
from collectors.framework.plugins import discover

_NOT_COLLECTORS = ("base", "framework", "catalog")


@lru_cache(maxsize=1)
def all_collectors() -> tuple[ModuleType, ...]:
    """Every module or package of ``collectors`` that declares NAME (found by :func:`plugins.discover`: a
    package's own modules are its parts, not collectors), sorted by PRIORITY then NAME."""
    found = discover("collectors", attr="NAME", kind=str, exclude=_NOT_COLLECTORS)
    return tuple(sorted(found, key=lambda m: (getattr(m, "PRIORITY", 50), m.NAME)))


def by_name(name: str) -> ModuleType:
    for module in all_collectors():
        if module.NAME == name:
            return module
    raise KeyError(name)


def collector_for_kind(kind: str) -> ModuleType | None:
    for module in all_collectors():
        if kind in getattr(module, "KINDS", ()):
            return module
    return None


def known_kinds() -> list[str]:
    return sorted({k for m in all_collectors() for k in getattr(m, "KINDS", ())})


def sniff(name: str, head: str, min_score: int = 1) -> tuple[str, ModuleType] | None:
    """The kind whose collector is most confident about this file's first bytes, if any scores
    at least ``min_score``."""
    best = sniff_scored(name, head)
    if best is None or best[0] < min_score:
        return None
    return best[1], best[2]


def sniff_scored(name: str, head: str) -> tuple[int, str, ModuleType] | None:
    """(score, kind, collector) of the most confident sniffer, or None when none recognises the head."""
    best: tuple[int, str, ModuleType] | None = None
    for module in all_collectors():
        sniffer = getattr(module, "sniff", None)
        if sniffer is None:
            continue
        for kind, score in (sniffer(name, head) or {}).items():
            if score > 0 and (best is None or score > best[0]):
                best = (score, kind, module)
    return best


def sniff_unwrapped(name: str, head: str) -> tuple[int, str, ModuleType] | None:
    """What the head is once the wrappers no collector reads are peeled off (a dmesg pasted in a Markdown
    quote, an NCCL log through CRI or kubectl --timestamps, ``dmesg -H``): :func:`sniff_scored` on the
    unwrapped lines, or None when there was nothing to peel or still no verdict."""
    from collectors.framework.framing import unframed_lines  # deferred: only files no sniffer took get here

    lines = head.splitlines()[:400]
    unwrapped = list(unframed_lines(lines))
    if unwrapped == lines:
        return None
    return sniff_scored(name, "\n".join(unwrapped))


def structured_kinds() -> frozenset[str]:
    """Every kind a collector declares in its STRUCTURED_KINDS (read as a structure, not as lines)."""
    return frozenset(k for m in all_collectors() for k in getattr(m, "STRUCTURED_KINDS", ()))


@dataclass(frozen=True)
class Step:
    """One thing a collector's live capture runs or reads: ``what`` is the command line, or ``read PATH``."""

    collector: str
    what: str
    kind: str


@dataclass(frozen=True)
class Plan:
    """What one collector's capture does: its steps, and how they are known (``declared`` in COMMANDS, found
    by a ``dry run`` of capture, or ``in-process`` for a collector that talks to the GPU without commands)."""

    collector: str
    steps: tuple[Step, ...]
    how: str
    touches_gpu: bool
    kinds: tuple[str, ...]


class _DryRun:
    """A CaptureContext that runs nothing: every command is found and succeeds with no output, no file
    exists, so capture walks the path it takes on a host with every tool installed."""

    host = "dry-run"

    def __init__(self) -> None:
        self.since: datetime | None = datetime.now(timezone.utc)
        self.options: dict[str, Any] = {}
        self.seen: list[tuple[str, str]] = []

    def run(self, argv: list[str], *, kind: str, timeout: float | None = None,
            max_bytes: int | None = None) -> Artifact:
        self.seen.append((" ".join(argv), kind))
        return Artifact(source=" ".join(argv), kind=kind, data=b"", info={"exit_code": 0})

    def read_file(self, path: str, *, kind: str, max_bytes: int | None = None, tail: bool = False) -> None:
        self.seen.append((f"read {path}", kind))

    def which(self, name: str) -> str:
        return f"/usr/bin/{name}"

    def missing(self, what: str, reason: str) -> None:
        """Nothing is missing in a dry run."""


MAX_DRY_STEPS = 200


def capture_plan(module: ModuleType) -> Plan:
    """The commands and files ``module``'s live capture uses, for ``gpuwb capture --list`` and the registry
    test that no two collectors run the same command. A collector that touches the GPU is never dry-run:
    it declares COMMANDS, or is listed as in-process."""
    touches = bool(getattr(module, "TOUCHES_GPU", False))
    kinds = tuple(getattr(module, "KINDS", ()))
    declared = getattr(module, "COMMANDS", None)
    if declared is not None:
        steps = tuple(Step(module.NAME, what, kind) for what, kind in declared)
        return Plan(module.NAME, steps, "declared", touches, kinds)
    if not hasattr(module, "capture"):
        return Plan(module.NAME, (), "no live capture", touches, kinds)
    if touches:
        return Plan(module.NAME, (), "in-process", touches, kinds)
    ctx = _DryRun()
    try:
        for _ in zip(range(MAX_DRY_STEPS), module.capture(ctx)):
            pass
    except Exception as exc:  # noqa: BLE001 - a listing must not fail on one collector's dry run
        return Plan(module.NAME, tuple(Step(module.NAME, w, k) for w, k in ctx.seen),
                    f"dry run stopped: {type(exc).__name__}", touches, kinds)
    unique = dict.fromkeys(ctx.seen)
    return Plan(module.NAME, tuple(Step(module.NAME, w, k) for w, k in unique), "dry run", touches, kinds)
