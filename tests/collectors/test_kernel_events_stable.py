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
from collectors.kernel import prefilter
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


def _candidate_lines(prefilter: prefilter.Prefilter, data: bytes) -> list[int]:
    return sorted({data.count(b"\n", 0, hit) for hit in prefilter.scan(data)})


def _numpy_rows(monkeypatch, name: str, data: bytes) -> dict[str, Any]:
    """The parse with every block answered by the numpy pass (the plain keywords, none narrowed)."""
    with monkeypatch.context() as patched:
        patched.setattr(prefilter, "RE2_BLOCK_HITS", -1)
        return rows_of(name, data)


@pytest.mark.parametrize("name", sorted(_inputs()))
def test_re2_prefilter_keeps_fewer_lines_and_the_same_rows(monkeypatch, name):
    """The RE2 pass keeps a subset of the numpy pass's candidate lines (the narrowed keywords' chatty
    lines dropped) and the parse makes the same rows from either."""
    data = _inputs()[name]
    fast, vectorised = prefilter.Prefilter(), prefilter.Prefilter()
    vectorised.windows = None
    assert fast.windows is not None
    lines = _candidate_lines(fast, data)
    assert lines and set(lines) <= set(_candidate_lines(vectorised, data))
    assert rows_of(name, data) == _numpy_rows(monkeypatch, name, data)


def test_narrowed_keywords_drop_the_noisy_nodes_chatter():
    """On the Kubernetes node's log the firmware tracer, nvidia-uvm and veth lines are no candidates."""
    data = sample("noisy", 20000).encode()
    fast, vectorised = prefilter.Prefilter(), prefilter.Prefilter()
    vectorised.windows = None
    kept, plain = _candidate_lines(fast, data), _candidate_lines(vectorised, data)
    assert len(plain) > 5000
    assert 0 < len(kept) < len(plain) / 50


EDGES = (
    "[    1.000000] nvidia-uvm: Loaded the UVM driver, major device number 7.\n"
    "[    2.000000] nvidia-peermem: nv_get_p2p_free_callback:127 ERROR detected invalid context\n"
    "[    3.000000] nvidia-modeset: probe of the display\n"
    "    failed with error -5\n"
    "[    4.000000] traps: python3[123] trap invalid opcode ip:7f00 sp:7ffd error:0 in libnvidia-ml.so.1[7f00+1000]\n"
    "[    5.000000] mlx5_core 0000:3b:00.0: mlx5_cmd_out_err:838:(pid 1): CREATE_MKEY(0x200) op_mod(0x0) failed\n"
    "[    6.000000] mlx5_core 0000:3b:00.0: mlx5_fw_tracer_handle_traces:720:(pid 9): FW tracer event\n"
    "[    7.000000] IPv6: ADDRCONF(NETDEV_CHANGE): ens1f0np0: link becomes ready\n"
    "[    8.000000] IPv6: ADDRCONF(NETDEV_CHANGE): veth1a2b: link becomes ready\n"
    "[    9.000000] ib_core: port 1 error, link becomes ready later\n"
    "[   10.000000] nvidia-uvm: NCCL WARN Call to ibv_create_qp returned nothing\n"
)


def test_narrowed_keywords_keep_every_line_that_makes_a_row(monkeypatch):
    """Each way a line holding only a narrowed keyword still makes a row: an error word (after it, before
    it, or on an indented continuation line), a trap in a GPU library, a physical interface becoming
    ready, a signature anchor; the chatter around them (tracer, uvm load, veth) is dropped."""
    data = EDGES.encode()
    fast = prefilter.Prefilter(_anchors())
    kept = [i + 1 for i in _candidate_lines(fast, data)]
    assert kept == [2, 3, 5, 6, 8, 10, 11]
    got = rows_of("dmesg", data)
    assert got == _numpy_rows(monkeypatch, "dmesg", data)
    events = [(row["line"], row["kind"]) for row in got["rows"] if row["row"] == "Event"]
    assert events == [(2, "nvidia_module"), (3, "nvidia_module"), (5, "segfault"), (6, "rdma_error"),
                      (8, "link_up"), (10, "rdma_error"), (11, "nccl_warn")]


def _anchors() -> set[str]:
    from collectors.framework.signatures import catalog

    return {a for sig in catalog().signatures for a in sig.anchors}


def test_prefilter_gives_way_to_numpy_on_a_chatty_block():
    """Past RE2_BLOCK_HITS hits the numpy pass answers, with the same lines."""
    data = "".join(f"[{i:>5}.000000] mlx5_core 0000:3b:00.0: mlx5_cmd_out_err:838:(pid {i}): QUERY failed\n"
                   for i in range(3 * prefilter.RE2_BLOCK_HITS)).encode()
    fast, vectorised = prefilter.Prefilter(), prefilter.Prefilter()
    vectorised.windows = None
    lines = _candidate_lines(fast, data)
    assert len(lines) > prefilter.RE2_BLOCK_HITS
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
