"""The kernel parser's rows stay the same while its hot path is made faster.

Every kernel-log file of the corpus, plus the first lines of the ingest bench's quiet and noisy
mixes (tests/perf/kernel_log_mix.py), is parsed in-process and every row it yields (events with
kind, time, host, GPU, severity, attrs and line; host facts; GPU inventory; skipped lines) is
compared with tests/collectors/golden/kernel_events.json, written before the speed work.

A deliberate change of output regenerates the golden file and says why in its commit:
    python -m tests.collectors.test_kernel_events_stable --write
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from collectors import kernel
from collectors.base import ParseContext
from tests.conftest import CORPUS
from tests.perf.kernel_log_mix import sample

GOLDEN = Path(__file__).parent / "golden" / "kernel_events.json"
REFERENCE = datetime(2026, 12, 1, tzinfo=timezone.utc)
BOOT = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
MIX_LINES = 1500


def _inputs() -> dict[str, bytes]:
    found = {f"corpus/{p.name}": p.read_bytes() for p in sorted((CORPUS / "kernel").iterdir()) if p.is_file()}
    for mix in ("quiet", "noisy"):
        found[f"mix/{mix}"] = sample(mix, MIX_LINES).encode()
    return found


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def rows_of(name: str, data: bytes) -> dict[str, Any]:
    """The parse of one input as JSON-ready data: the kind sniffing chose and every row in order."""
    scores = kernel.sniff(name, data[:64 << 10].decode("utf-8", "replace"))
    kind = max(scores, key=scores.get) if scores else "dmesg"
    ctx = ParseContext(host="golden-host", boot_time=BOOT, reference_time=REFERENCE)
    rows = [{"row": type(row).__name__, **_plain(dataclasses.asdict(row))}
            for row in kernel.parse(kind, io.BytesIO(data), ctx)]
    return {"kind": kind, "rows": rows}


def current() -> dict[str, Any]:
    return {name: rows_of(name, data) for name, data in _inputs().items()}


GOLDEN_ROWS = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}


def test_golden_covers_every_input():
    assert sorted(GOLDEN_ROWS) == sorted(_inputs())


@pytest.mark.parametrize("name", sorted(_inputs()))
def test_rows_match_golden(name):
    got = rows_of(name, _inputs()[name])
    want = GOLDEN_ROWS[name]
    assert got["kind"] == want["kind"]
    assert len(got["rows"]) == len(want["rows"])
    for index, (g, w) in enumerate(zip(got["rows"], want["rows"], strict=True)):
        assert g == w, f"{name}: row {index} differs"


def test_noisy_mix_has_events_beyond_links():
    """The bench's noisy sample must reach the Xid handler, or it checks only the cheap path."""
    kinds = {row["kind"] for row in GOLDEN_ROWS["mix/noisy"]["rows"] if row["row"] == "Event"}
    assert "xid" in kinds


def _candidate_lines(prefilter: kernel._Prefilter, data: bytes) -> list[int]:
    newlines, hits = prefilter.scan(data)
    return sorted(set(prefilter.np.searchsorted(newlines, hits).tolist()))


@pytest.mark.parametrize("name", sorted(_inputs()))
def test_re2_prefilter_finds_the_numpy_prefilters_lines(name):
    """The RE2 pass over the keyword windows and the numpy anchor pass pick the same candidate lines."""
    data = _inputs()[name]
    fast, vectorised = kernel._Prefilter(), kernel._Prefilter()
    vectorised.windows = None
    assert fast.windows is not None
    lines = _candidate_lines(fast, data)
    assert lines and lines == _candidate_lines(vectorised, data)


def test_prefilter_gives_way_to_numpy_on_a_chatty_block():
    """Past RE2_BLOCK_HITS hits the numpy pass answers, with the same lines."""
    data = sample("noisy", 3 * kernel.RE2_BLOCK_HITS).encode()
    fast, vectorised = kernel._Prefilter(), kernel._Prefilter()
    vectorised.windows = None
    lines = _candidate_lines(fast, data)
    assert len(lines) > kernel.RE2_BLOCK_HITS
    assert lines == _candidate_lines(vectorised, data)


def _link_devices(text: str) -> list[tuple[str, str]]:
    rows = rows_of("dmesg", text.encode())["rows"]
    return [(row["kind"], row["attrs"]["device"]) for row in rows if row.get("kind") in ("link_up", "link_down")]


def test_container_plumbing_makes_no_link_events():
    """The one intended difference from the first golden file: veth pairs, CNI/Docker/flannel/Calico
    bridges and LXC interfaces come and go with every pod; physical NICs, bonds and IB ports keep theirs."""
    plumbing = "".join(f"[  {i}.000000] IPv6: ADDRCONF(NETDEV_CHANGE): {name}: link becomes ready\n"
                       for i, name in enumerate(("veth1a2b3c", "cni0", "docker0", "flannel.1", "cali46ac8f4d503",
                                                 "lxcbr0"), start=1))
    physical = ("[  10.000000] IPv6: ADDRCONF(NETDEV_CHANGE): ens1f0: link becomes ready\n"
                "[  11.000000] mlx5_core 0000:5d:00.0 ibp9s0: Link down\n"
                "[  12.000000] ixgbe 0000:3b:00.0 eno1: NIC Link is Up 10 Gbps, Flow Control: RX/TX\n"
                "[  13.000000] bond0: (slave ens1f1): link status definitely down\n")
    assert _link_devices(plumbing) == []
    assert _link_devices(plumbing + physical) == [("link_up", "ens1f0"), ("link_down", "ibp9s0"),
                                                  ("link_up", "eno1"), ("link_down", "bond0")]


if __name__ == "__main__":
    if "--write" not in sys.argv[1:]:
        raise SystemExit("usage: python -m tests.collectors.test_kernel_events_stable --write")
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps(current(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
