"""The Xid catalog (collectors/catalog/xid.yaml): complete for the Xids responders meet, and every entry usable."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.base import LAYERS, SEVERITIES
from collectors.framework import xid_catalog as xid_catalog
from collectors.framework.xid_catalog import CatalogError, catalog, lookup, parse_catalog

RULES = Path(__file__).resolve().parents[2] / "rules"
REQUIRED_XIDS = [8, 13, 31, 32, 38, 43, 45, 48, 56, 57, 61, 62, 63, 64, 68, 69, 73, 74, 79, 92, 94, 95, 109, 110,
                 119, 120, 121, 122, 123, 140, 143, *range(144, 151), 154, 155]


def test_every_required_xid_is_catalogued():
    missing = [code for code in REQUIRED_XIDS if code not in catalog()]
    assert not missing
    assert len(catalog()) > len(REQUIRED_XIDS)


def test_every_entry_is_complete_and_valid():
    causes = {path.stem for path in (RULES / "causes").glob("*.yaml")}
    for code, info in catalog().items():
        assert info.name and info.meaning, code
        assert info.layer in LAYERS and info.severity in SEVERITIES, code
        assert info.action in xid_catalog.actions(), code
        assert set(info.causes) <= causes, (code, info.causes)


@pytest.mark.parametrize(("code", "layer", "cause"), [
    (79, "hardware", "gpu_fell_off_bus"), (13, "gpu", "app_gpu_fault"), (31, "gpu", "app_gpu_fault"),
    (43, "gpu", "app_gpu_fault"), (74, "hardware", "nvlink_error"), (48, "gpu", "ecc_uncorrectable"),
    (94, "gpu", "ecc_uncorrectable"), (95, "gpu", "ecc_uncorrectable"), (63, "hardware", "row_remap_failure"),
    (64, "hardware", "row_remap_failure"), (119, "gpu", "gpu_hang"), (120, "gpu", "gpu_hang"),
    *[(code, "hardware", "nvlink_error") for code in range(144, 151)],
])
def test_layers_and_causes_of_well_known_xids(code, layer, cause):
    info = lookup(code)
    assert info.layer == layer and cause in info.causes


def test_followers_are_marked():
    followers = {code for code, info in catalog().items() if info.follower}
    assert {45, 154} <= followers
    assert 79 not in followers and 48 not in followers


def test_severity_and_action_of_the_worst_ones():
    assert lookup(79).severity == "critical" and lookup(79).action == "RESTART_BM"
    assert lookup(95).severity == "critical" and lookup(43).severity == "warning"
    assert lookup(48).action == "WORKFLOW_XID_48" and lookup(154).action == "XID_154_EVAL"


def test_unknown_xid_gets_a_usable_default():
    info = lookup(4242)
    assert info.layer == "gpu" and info.action in xid_catalog.actions() and not info.follower


@pytest.mark.parametrize(("entry", "message"), [
    ("{name: x, meaning: y, layer: gpu, severity: error, action: RESET_GPU, follower: false}", "missing causes"),
    ("{name: x, meaning: y, layer: cloud, severity: error, action: RESET_GPU, follower: false, causes: []}",
     "unknown layer"),
    ("{name: x, meaning: y, layer: gpu, severity: bad, action: RESET_GPU, follower: false, causes: []}",
     "unknown severity"),
    ("{name: x, meaning: y, layer: gpu, severity: error, action: PRAY, follower: false, causes: []}",
     "not described"),
])
def test_broken_entries_are_rejected(entry, message):
    text = f"actions:\n  RESET_GPU: reset it\nxids:\n  1: {entry}\n"
    with pytest.raises(CatalogError, match=message):
        parse_catalog(text)
