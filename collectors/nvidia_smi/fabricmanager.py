"""``nv-fabricmanager --version``: the ``versions.fabricmanager`` host fact."""

from __future__ import annotations

import re
from collections.abc import Iterable

from collectors.base import HostFact, Row
from collectors.framework.text_blocks import TextParser

FM_VERSION = re.compile(r"Fabric Manager version is\s*:\s*(\d[\w.-]*)")


def open_version(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if m := FM_VERSION.search(line):
        return [HostFact("versions.fabricmanager", m.group(1), host=parser.host)]
    return None
