"""Fabric Manager's vocabulary: every line its peers' fixtures assert a meaning for is read with that meaning,
the harvested messages are known, and Fabric Manager down after a driver upgrade names its cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import catalog
from tests.conftest import ingest_timeline, run_cli

ROOT = Path(__file__).resolve().parents[2]
GPUD = yaml.safe_load((ROOT / "tests/peer_fixtures/fabric_manager/gpud.yaml").read_text(encoding="utf-8"))
HARVEST = yaml.safe_load((ROOT / "collectors/catalog/harvest/fabric_manager.yaml").read_text(encoding="utf-8"))
FM_KINDS = {"fabric_manager_error", "fabric_manager_service", "sxid", "nvlink_error"}


def _read(line: str) -> tuple[str | None, str | None]:
    found = catalog().match(peel(line).message)
    if found is None:
        return None, None
    sig, attrs = found
    return sig.kind, (attrs.get("causes") or [None])[0]


@pytest.mark.parametrize("fixture", GPUD["fixtures"], ids=lambda f: f["line"][:60])
def test_every_gpud_fixture_line_means_what_gpud_says(fixture: dict) -> None:
    kind, cause = _read(fixture["line"])
    want_kind = None if fixture["kind"] == "none" else fixture["kind"]
    want_cause = None if fixture["cause"] == "none" else fixture["cause"]
    assert (kind, cause) == (want_kind, want_cause), fixture["meaning"]


def test_the_peer_fixtures_name_their_source() -> None:
    assert GPUD["repo"] == "leptonai/gpud" and len(GPUD["commit"]) == 40
    assert all(f["path"].startswith("components/") and f["gpud"] for f in GPUD["fixtures"])


def test_nine_in_ten_harvested_messages_are_known_as_their_kind() -> None:
    messages = HARVEST["messages"]
    wrong = [m["text"] for m in messages if _read(m["text"])[0] != m["kind"]]
    assert len(wrong) <= 0.1 * len(messages), wrong
    assert {m["kind"] for m in messages} <= FM_KINDS


@pytest.mark.parametrize("line", [
    "fabric manager NVIDIA GPU driver interface version 535.104.05 don't match with driver version 535.86.10. "
    "Please update with matching NVIDIA driver package.",
    "fabric manager NVIDIA GPU driver interface version 550.127.05 doesn't match with driver version 550.120. "
    "Please update with the matching NVIDIA driver package.",
    "fabric manager NVIDIA GPU driver interface version 570.86.15 don’t match with driver version 570.124.06.",
])
def test_every_spelling_of_the_version_mismatch_gives_both_versions(line: str) -> None:
    found = catalog().match(line)
    assert found is not None and found[0].id == "fabric_manager_version_mismatch"
    assert found[1]["driver_interface_version"].count(".") == 2 and found[1]["causes"] == ["fabric_manager_down"]


def test_a_service_that_failed_alone_points_at_no_cause(tmp_path: Path) -> None:
    """A failed nvidia-fabricmanager unit is also what a machine without NVSwitch shows (the start script
    exits 1 after NV_WARN_NOTHING_TO_DO): the line before it says which, not the unit's failure."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "journal.txt").write_text(
        "Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4756]: request to query NVSwitch device "
        "information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]\n"
        "Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4753]: \"/usr/bin/nv-fabricmanager -c "
        "/usr/share/nvidia/nvswitch/fabricmanager.cfg\" failed! Exit code: 1\n"
        "Sep 18 03:19:01 ubuntu2404 systemd[1]: nvidia-fabricmanager.service: Control process exited, "
        "code=exited, status=1/FAILURE\n")
    bundle = tmp_path / "b.duckdb"
    events = ingest_timeline(bundle, evidence)
    assert [e["kind"] for e in events if e["kind"].startswith("fabric_manager")] == [
        "fabric_manager_error", "fabric_manager_service", "fabric_manager_service"]
    code, out, _ = run_cli("analyze", bundle, "--json")
    assert code == 0
    assert "fabric_manager_down" not in [h["cause"] for h in json.loads(out)["hypotheses"]]


def test_fabric_manager_down_after_a_driver_upgrade_is_the_cause(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "journal.txt").write_text(
        "Nov 05 13:55:26 node1 systemd[1]: Starting NVIDIA fabric manager service...\n"
        "Nov 05 13:55:26 node1 nv-fabricmanager[104230]: fabric manager NVIDIA GPU driver interface version "
        "550.127.05 doesn't match with driver version 550.120. Please update with the matching NVIDIA driver "
        "package.\n"
        "Nov 05 13:55:26 node1 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, "
        "status=1/FAILURE\n")
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, evidence)[0] == 0
    code, out, _ = run_cli("analyze", bundle, "--json")
    assert code == 0
    assert json.loads(out)["hypotheses"][0]["cause"] == "fabric_manager_down"
