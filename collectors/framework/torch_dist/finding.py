"""What every rank-log reader returns (a ``Finding``, and a ``Continuation`` for messages that go on over
the next lines), and the small parsing they share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from collectors.framework.lazy_re import lazy_regex


@dataclass
class Finding:
    """An event read from one line, not yet placed in time or on a host: the reader does that."""

    kind: str
    severity: str
    attrs: dict[str, Any] = field(default_factory=dict)
    layer: str | None = None
    rank: int | None = None
    host: str | None = None
    line: int | None = None
    message: str | None = None


class Continuation(ABC):
    """Lines that belong to a finding already begun. The reader feeds it each next line: ``feed``
    returns False for a line that does not belong (the reader then reads that line on its own and
    calls ``finish``); each line taken costs one of ``budget``, and at zero the reader finishes it."""

    budget = 8

    @abstractmethod
    def feed(self, text: str, lineno: int) -> bool:
        """Take one more line, or say it is not part of this finding."""

    @abstractmethod
    def finish(self) -> list[Finding]:
        """The findings, complete with what the following lines added."""


def int_or_none(text: str | None) -> int | None:
    """An int of ``text`` (spaces around it allowed), None for anything else."""
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return None


_EXCEPTION = lazy_regex(r"(?P<exc>(?:[A-Za-z_][\w]*(?:\.|::))*[A-Z]\w*(?:Error|Exception))\s*:")


def exception_named(text: str) -> str | None:
    """The exception type named in ``text`` (``torch.distributed.DistBackendError:``, ``c10::Error:``), the
    part of a line before the error it raised."""
    return e.group("exc") if (e := _EXCEPTION.search(text)) else None
