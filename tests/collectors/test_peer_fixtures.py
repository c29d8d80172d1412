"""The peers' kernel-message fixtures (tests/peer_fixtures/<peer>/lines.yaml): every line their tests classify
is recognised by the kernel collector with their meaning: the event kind that the fixture maps their event to,
and the Xid or SXid code, PCI id, link and fatality their test asserts. Their testdata logs yield the events
their tests count. A line the fixture marks ``context`` (a stack frame, the CPU/PID line of an oops) must say
why it makes no event of its own."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from collectors import kernel
from collectors.base import Event, ParseContext, normalize_pci

FIXTURES = Path(__file__).resolve().parents[1] / "peer_fixtures"
PEERS = sorted(p.parent.name for p in FIXTURES.glob("*/lines.yaml"))
COUNTS = ("fell_off_bus_events",)
"""``ours`` keys that are not attrs of the event."""


def _doc(peer: str) -> dict[str, Any]:
    return yaml.safe_load((FIXTURES / peer / "lines.yaml").read_text(encoding="utf-8"))


def _entries(with_key: str) -> list[tuple[str, dict[str, Any]]]:
    return [(peer, e) for peer in PEERS for e in _doc(peer)["lines"] if with_key in e]


def _events(data: bytes) -> list[Event]:
    return [r for r in kernel.parse("dmesg", io.BytesIO(data), ParseContext(host="node-1")) if isinstance(r, Event)]


def _same(want: Any, got: Any, key: str) -> bool:
    if key in ("pci", "device") and isinstance(want, str) and want.count(":") >= 2:
        return normalize_pci(want) == normalize_pci(str(got))
    return want == got


def _matches(event: Event, ours: dict[str, Any]) -> bool:
    for key, want in ours.items():
        if key in ("kind", "also", *COUNTS):
            continue
        got = event.severity if key == "severity" else event.attrs.get(key)
        if not _same(want, got, key):
            return False
    return True


def test_the_fixtures_are_there_and_name_their_source() -> None:
    assert PEERS == ["gpud", "nvsentinel"]
    for peer in PEERS:
        doc = _doc(peer)
        assert doc["repo"] and doc["lines"]
        commits = [doc.get("commit")] + [e.get("commit") for e in doc["lines"]]
        assert all(len(c) == 40 for c in commits if c) and any(commits)
        assert all(e.get("at") and e.get("peer") for e in doc["lines"])


@pytest.mark.parametrize(("peer", "entry"), _entries("ours"), ids=lambda v: v if isinstance(v, str) else None)
def test_every_line_they_classify_is_recognised_with_their_meaning(peer: str, entry: dict[str, Any]) -> None:
    ours = entry["ours"]
    events = _events(entry["line"].encode() + b"\n")
    kinds = [e.kind for e in events]
    assert any(e.kind == ours["kind"] and _matches(e, ours) for e in events), (
        f"{peer} {entry['at']}: {entry['peer']} -> wanted {ours}, got "
        f"{[(e.kind, e.severity, e.attrs) for e in events]}")
    if "also" in ours:
        assert ours["also"] in kinds
    if "fell_off_bus_events" in ours:
        assert kinds.count("gpu_fell_off_bus") == ours["fell_off_bus_events"]


def test_context_lines_say_why_and_stay_few() -> None:
    context = _entries("context")
    assert all(len(e["context"]) > 30 for _, e in context)
    assert len(context) <= 0.15 * (len(context) + len(_entries("ours")))


def test_each_peer_event_maps_to_one_kind() -> None:
    """One meaning per peer event name: a fixture cannot map the same event of theirs to two of our kinds."""
    seen: dict[tuple[str, str], set[str]] = {}
    for peer, entry in _entries("ours"):
        if event := entry["peer"].get("event"):
            seen.setdefault((peer, event), set()).add(entry["ours"]["kind"])
    ambiguous = {k: v for k, v in seen.items() if len(v) > 1 and k[1] != "xid"}
    assert not ambiguous


FILES = [(peer, f) for peer in PEERS for f in _doc(peer).get("files", [])]


@pytest.mark.parametrize(("peer", "entry"), FILES, ids=lambda v: v if isinstance(v, str) else v["file"])
def test_their_testdata_logs_yield_the_events_their_tests_count(peer: str, entry: dict[str, Any]) -> None:
    events = _events((FIXTURES / peer / entry["file"]).read_bytes())
    for kind, count in entry["ours"].items():
        assert sum(e.kind == kind for e in events) >= count, (entry["file"], kind)
    if xid := entry.get("xid"):
        found = [e for e in events if e.kind == "xid"]
        assert found
        assert all(e.attrs["xid"] == xid["code"] and e.gpu == xid["pci"] and e.attrs.get("uuid") == xid["uuid"]
                   for e in found)
