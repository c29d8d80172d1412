"""nvidia-smi's and DCGM's rows stay what they were before ``collectors/nvidia_smi.py`` became a package of
one module per format and DCGM a collector of its own.

Every evidence file of tests/corpus/nvml, tests/data and tests/real_incidents that the two collectors (or
the nvidia-bug-report parser, which hands its nvidia-smi section to the same dispatcher) read is sniffed
and parsed as ingest does, and each row (events, samples, inventory, host facts, skipped lines) is
compared with tests/collectors/golden/nvidia_smi_rows.json, written by the single-module parser.

A deliberate change of output regenerates the golden file and says why in its commit:
    python -m tests.collectors.test_nvidia_smi_rows_unchanged --write
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collectors.base import ParseContext
from collectors.framework import registry
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "golden" / "nvidia_smi_rows.json"
READERS = ("nvidia_smi", "dcgm", "bugreport")
MTIME = datetime(2024, 1, 1)
"""A fixed file time: outputs without a clock of their own take it, as they take the file's mtime."""


def _rows(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    score_kind_module = registry.sniff_scored(path.name, data[:65536].decode("utf-8", "replace"))
    assert score_kind_module is not None, path
    _score, kind, module = score_kind_module
    assert module.NAME in READERS, (path, module.NAME)
    rows = module.parse(kind, io.BytesIO(data), ParseContext(host="h", mtime=MTIME))
    return {"kind": kind, "rows": json.loads(json.dumps([(type(r).__name__, dataclasses.asdict(r)) for r in rows],
                                                       default=str))}


GOLDEN_ROWS: dict[str, Any] = json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(GOLDEN_ROWS))
def test_rows_are_unchanged(name: str) -> None:
    got = _rows(ROOT / name)
    want = GOLDEN_ROWS[name]
    assert got["kind"] == want["kind"]
    assert len(got["rows"]) == len(want["rows"])
    for n, (g, w) in enumerate(zip(got["rows"], want["rows"])):
        assert g == w, f"row {n} of {name}"


def test_the_golden_set_covers_every_format() -> None:
    kinds = {v["kind"] for v in GOLDEN_ROWS.values()}
    assert {"nvidia_smi_q", "nvidia_smi_xml", "nvidia_smi_table", "nvidia_smi_csv", "nvidia_smi_nvlink",
            "nvidia_smi_topo", "fabricmanager_version", "nvidia_smi", "dcgm_diag", "dcgm_log",
            "nvidia_bug_report"} <= kinds


if __name__ == "__main__" and "--write" in sys.argv:
    GOLDEN.write_text(json.dumps({name: _rows(ROOT / name) for name in sorted(GOLDEN_ROWS)}, sort_keys=True,
                                 indent=0, separators=(",", ":")) + "\n")
