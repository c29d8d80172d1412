"""What every family of kernel messages shares: the record a line becomes, the event it is written as,
the PCI address spelling, and which addresses this log has shown to be GPUs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from collectors.base import Event, normalize_pci
from collectors.framework.kernel_lines.prefix import Stamp

PCI = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
ERROR_WORDS = r"error|fail|timeout|timed out|halt|exception|fault|fallen|lost|unable|invalid|not responding"
"""Words that make a driver's line worth an event (matched case-insensitively); the block prefilter of
collectors/kernel/ asks for them too, so it must see this same list."""

pci_of = lru_cache(maxsize=4096)(normalize_pci)
"""normalize_pci, once per distinct spelling: a log names the same few devices on every line."""


@dataclass
class Record:
    """One kernel-log record (a line plus its indented continuation lines), its time and place."""

    message: str
    stamp: Stamp
    host: str | None
    line: int
    level: str | None = None
    following: Callable[[], str] = field(default=lambda: "")


class LineFamily:
    """The base of each family's reader (a mixin of :class:`collectors.framework.kernel_lines.Classifier`):
    the event builder, and the GPUs the NVIDIA lines named, which PCIe and machine-check lines ask about."""

    uuid_by_pci: dict[str, str]
    xid_gpus: set[str]

    def _event(self, rec: Record, kind: str, layer: str, level: str, gpu: str | None = None,
               **attrs: Any) -> Event:
        """An event of ``rec``; ``level`` is the event's severity (attrs may have their own ``severity``)."""
        return Event(kind=kind, message=rec.message, ts=rec.stamp.ts, ts_origin=rec.stamp.origin,
                     ts_approx=rec.stamp.approx, ts_raw=rec.stamp.raw, host=rec.host, layer=layer,
                     severity=level, gpu=gpu, attrs={k: v for k, v in attrs.items() if v is not None},
                     line=rec.line)

    def _gpu_of(self, dev: str | None) -> str | None:
        return dev if dev and (dev in self.uuid_by_pci or dev in self.xid_gpus) else None
