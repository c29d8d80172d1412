"""The flight recorder's analysis (``fr_trace``): ``Not all ranks joining collective`` reports, which ranks never
joined collective N of a process group."""

from __future__ import annotations

import re

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Continuation, Finding, int_or_none

_FR_START = lazy_regex(r"Not all ranks joining collective(?::? sequence number:? (?P<seq>\d+)|\s+(?P<seq2>\d+))?")
_FR_FIELD = lazy_regex(r"^(?P<key>internal record id|group info|collective|missing ranks|input sizes|output sizes|"
                       r"world size|expected ranks|collective state|sequence number)\s*:\s*(?P<value>.*)$")


def flight_recorder(msg: str) -> tuple[Finding, Continuation] | None:
    """The report's first line, and the reader of its fields."""
    if not ("Not all ranks" in msg and (m := _FR_START.search(msg))):
        return None
    seq = m.group("seq") or m.group("seq2")
    finding = Finding("nccl_flight_recorder", "error", {"seq": int(seq) if seq else None}, layer="network_storage")
    return finding, _FlightRecorder(finding)


class _FlightRecorder(Continuation):
    """An ``fr_trace`` report: which ranks never joined collective N of a process group."""

    budget = 14

    def __init__(self, finding: Finding) -> None:
        self.finding = finding

    def feed(self, text: str, lineno: int) -> bool:
        m = _FR_FIELD.match(text.strip())
        if not m:
            return False
        key, value = m.group("key"), m.group("value").strip()
        attrs = self.finding.attrs
        if key in ("missing ranks", "expected ranks"):
            attrs[key.replace(" ", "_")] = sorted(int(x) for x in re.findall(r"-?\d+", value))[:4096]
        elif key in ("world size", "sequence number", "internal record id"):
            attrs[{"world size": "world_size", "sequence number": "seq", "internal record id": "record_id"}[key]] = \
                int_or_none(value)
        elif key == "group info":
            pg_id, _, name = value.partition(":")
            attrs["pg"] = name or pg_id
            if pg_id.isdigit():
                attrs["pg_id"] = int(pg_id)
        elif key == "collective":
            attrs["op"] = value
        elif key == "collective state":
            attrs["state"] = value
        else:
            attrs[key.replace(" ", "_")] = value[:200]
        return True

    def finish(self) -> list[Finding]:
        return [self.finding]
