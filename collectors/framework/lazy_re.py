"""Module-level regexes compiled the first time they are used, not when their module is imported.

Every ingest imports every collector (each one's sniffer looks at the file's head), so a collector's
hundred patterns were compiled in every run, for a file only one parser reads: ~450 module-level
``re.compile`` calls were most of the fixed cost of an ingest of a small file (issue 23 item 7). A
:class:`LazyPattern` stands where the pattern stood; on first use it compiles and puts the compiled
``re.Pattern`` in its place in the module's globals, so the module's functions, the per-line hot paths,
see a plain ``re.Pattern`` from then on (no proxy in the loop). Only patterns a module uses as
``NAME.method(...)`` or ``NAME.pattern`` are declared this way (``NAME = lazy_regex(...)``, as long as
``re.compile``), not ones passed to other modules or put in tables.
"""

from __future__ import annotations

import re
import sys
from typing import Any


class LazyPattern:
    """``re.compile(pattern, flags)`` deferred to the first attribute asked of it (``.pattern`` excepted:
    it is the source text, known without compiling)."""

    def __init__(self, pattern: str | bytes, flags: int | re.RegexFlag, owner: dict[str, Any]) -> None:
        self.pattern = pattern
        self._flags = flags
        self._owner = owner
        self._compiled: re.Pattern | None = None

    def compiled(self) -> re.Pattern:
        """The compiled pattern; the first call also replaces this stand-in in its module's globals."""
        if self._compiled is None:
            self._compiled = re.compile(self.pattern, self._flags)
            for name, value in list(self._owner.items()):
                if value is self:
                    self._owner[name] = self._compiled
        return self._compiled

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.compiled(), name)

    def __repr__(self) -> str:
        return f"LazyPattern({self.pattern!r})"


def lazy_regex(pattern: str | bytes, flags: int | re.RegexFlag = 0) -> Any:
    """``re.compile`` deferred: a :class:`LazyPattern` of ``pattern`` owned by the calling module (typed
    Any: it stands for an ``re.Pattern`` and is one after its first use)."""
    return LazyPattern(pattern, flags, sys._getframe(1).f_globals)
