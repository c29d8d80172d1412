"""docs/catalog.md: the harvested vocabulary of every component against what gpuwb knows, current and
at or above the floor for each component."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("catalog_doc", ROOT / "scripts" / "catalog_doc.py")
catalog_doc = importlib.util.module_from_spec(_spec)
sys.modules["catalog_doc"] = catalog_doc  # dataclasses look their module up
_spec.loader.exec_module(catalog_doc)

COMPONENTS = catalog_doc.components()


@pytest.fixture(scope="module")
def measured() -> list:
    return [catalog_doc.measure(c) for c in COMPONENTS]


def test_the_page_is_current(measured) -> None:
    assert (ROOT / "docs" / "catalog.md").read_text(encoding="utf-8") == catalog_doc.catalog_markdown(measured), \
        "docs/catalog.md is stale: run python scripts/catalog_doc.py"


def test_every_component_knows_most_of_its_vocabulary(measured) -> None:
    low = {c.name: f"{c.known}/{len(c.messages)}" for c in measured if c.share < catalog_doc.FLOOR}
    assert low == {}, f"below {catalog_doc.FLOOR:.0%}: {low} (python scripts/catalog_doc.py --misses NAME)"


def test_a_generic_line_is_not_counted_as_known(tmp_path, monkeypatch) -> None:
    """A bare NCCL WARN is kept as nccl_warn, a catch-all: the harvest must not count it."""
    (tmp_path / "probe.yaml").write_text(
        "component: probe\nsource: {repo: NVIDIA/nccl}\nfile: nccl.log\nmessages:\n"
        "  - text: 'gpu-node-1:1234:1301 [0] NCCL WARN something nobody has catalogued 12345'\n"
        "  - text: \"gpu-node-1:1234:1301 [0] NCCL WARN Cuda failure 'out of memory'\"\n", encoding="utf-8")
    component = catalog_doc.measure(catalog_doc.load(tmp_path / "probe.yaml"))
    assert [m.known for m in component.messages] == [False, True]
    assert component.messages[0].found == ["nccl_warn"]


def test_a_harvest_file_without_its_source_is_refused(tmp_path) -> None:
    (tmp_path / "probe.yaml").write_text("component: probe\nmessages: [{text: x}]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="source"):
        catalog_doc.load(tmp_path / "probe.yaml")
