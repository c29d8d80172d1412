"""Every registered parser, fed junk: no exception, bad lines counted as skipped.

Runs over the registry, so a collector added later is fuzzed without touching this file."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.base import (
    LAYERS,
    SEVERITIES,
    Event,
    GpuInventory,
    GpuSample,
    HostFact,
    ParseContext,
    SeriesPoint,
    Skipped,
    Topology,
)
from collectors.framework import registry

PARSERS = [(m, kind) for m in registry.all_collectors() if hasattr(m, "parse") for kind in m.KINDS]
IDS = [f"{m.NAME}:{kind}" for m, kind in PARSERS]


def _parse(module, kind: str, data: bytes) -> list:
    ctx = ParseContext(host="fuzz-host", reference_time=datetime(2026, 11, 29, tzinfo=timezone.utc),
                       mtime=datetime(2026, 11, 29, tzinfo=timezone.utc))
    return list(module.parse(kind, io.BytesIO(data), ctx))


@pytest.mark.parametrize(("module", "kind"), PARSERS, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=4096))
def test_random_bytes_never_raise(module, kind, data):
    _parse(module, kind, data)


JUNK = {
    "invalid_utf8": b"\xff\xfe\xfa NVRM: Xid (PCI:0000:19:00): \xc3\x28 79\n\x80\x81 NCCL WARN \xed\xa0\x80\n",
    "nul_bytes": b"\x00" * 100 + b"\n[  12.5] \x00NVRM: Xid\x00\n" + b"a,b\x00,c\n",
    "truncated": b"Mar 29 15:38:59 kernel: NVRM: Xid (PCI:0000:01:0",
    "only_newlines": b"\n" * 1000,
}


@pytest.mark.parametrize(("module", "kind"), PARSERS, ids=IDS)
@pytest.mark.parametrize("junk", sorted(JUNK))
def test_known_junk_never_raises(module, kind, junk):
    data = JUNK[junk]
    rows = _parse(module, kind, data)
    lines = data.count(b"\n") + 1
    for row in rows:
        assert isinstance(row, (Event, GpuSample, GpuInventory, Topology, SeriesPoint, HostFact, Skipped)), row
        if isinstance(row, Skipped):
            assert row.reason and (row.line is None or 1 <= row.line <= lines), row
        if isinstance(row, Event):
            assert row.kind and isinstance(row.message, str), row
            assert (row.layer or module.LAYER) in LAYERS and row.severity in SEVERITIES, row
            assert row.line is None or 1 <= row.line <= lines, row
    if junk == "only_newlines":
        assert not [r for r in rows if isinstance(r, Event)], "an event made out of blank lines"


@pytest.mark.parametrize(("module", "kind"), PARSERS, ids=IDS)
def test_ten_megabyte_line_is_cut_not_fatal(module, kind):
    rows = _parse(module, kind, b"x" * (10 << 20) + b"\nsecond line\n")
    skipped = [r for r in rows if isinstance(r, Skipped)]
    assert len(rows) - len(skipped) <= 2
