"""DCGM's failure vocabulary: every DCGM_FR_* message harvested from dcgm_errors.h is recognised as what it
is, whole (JSON, a health log) or as the first row of a dcgmi diag table cell, and a diagnostic's failure
names its cause instead of only "dcgmi diag memory: fail"."""

from __future__ import annotations

import json
import textwrap
from functools import cache
from pathlib import Path

import pytest
import yaml

from collectors.framework.framing.wrappers import peel
from collectors.framework.signatures import Signature, catalog
from tests.conftest import ingest_timeline, run_cli

ROOT = Path(__file__).resolve().parents[2]
HARVEST = yaml.safe_load((ROOT / "collectors/catalog/harvest/dcgm.yaml").read_text(encoding="utf-8"))
MESSAGES = HARVEST["messages"]
GENERIC = {None, "unrecognised_error", "nvidia_smi_error"}


def _first(line: str) -> Signature | None:
    found = catalog().match(peel(line).message)
    return found[0] if found else None


def _dcgm4_row(text: str) -> str:
    """DCGM 4 prints 45 characters of a message per table row (dcgmi/Diag.cpp DisplayVerboseInfo)."""
    return f"| Warning: GPU0             | {text[:45]:<45}  |"


def _dcgm3_row(text: str) -> str:
    """DCGM 3 prefixes the GPU and wraps the cell 46 wide, at words in some versions..."""
    return f"| Warning                   | {textwrap.wrap('GPU 0 ' + text, 46)[0]:<46} |"


def _dcgm3_cut_row(text: str) -> str:
    """... and in others wherever the 46th character falls (go-dcgm#52: "Rese|t GPU")."""
    return f"| Warning                   | {('GPU 0 ' + text)[:46]:<46} |"


@cache
def _families() -> dict[str, str]:
    return {sig.id: sig.family for sig in catalog().signatures}


def test_the_harvest_names_its_source_and_every_message_once() -> None:
    assert HARVEST["component"] == "dcgm" and len(HARVEST["source"]["commit"]) == 40
    texts = [m["text"] for m in MESSAGES]
    assert len(texts) == len(set(texts)) >= 110
    assert all(m["at"] and m["code"].startswith("DCGM_FR_") for m in MESSAGES)


@pytest.mark.parametrize("message", [m for m in MESSAGES if m.get("kind")], ids=lambda m: m["code"].split()[0])
def test_every_harvested_message_yields_its_kind(message: dict) -> None:
    sig = _first(message["text"])
    assert sig is not None and sig.kind == message["kind"], (message["text"], sig and sig.id)


def test_at_least_nine_in_ten_messages_are_known() -> None:
    known = [m for m in MESSAGES if (sig := _first(m["text"])) is not None and sig.kind not in GENERIC]
    assert len(known) / len(MESSAGES) >= 0.9


@pytest.mark.parametrize("row", [_dcgm4_row, _dcgm3_row, _dcgm3_cut_row], ids=["dcgm4", "dcgm3", "dcgm3-cut"])
def test_the_first_row_of_a_wrapped_table_cell_is_enough(row) -> None:
    """A table cuts the message where DCGM's next-step text and most numbers are; the first row must still
    say what it is. A message whose tail is another program's error (CUDA's "system not yet initialized")
    is read as that error whole, and as DCGM's own message from its first row."""
    wrong = []
    for m in MESSAGES:
        if not m.get("kind"):
            continue
        whole, head = _first(m["text"]), _first(row(m["text"]))
        want_dcgm = whole is not None and _families()[whole.id] != "dcgm" and whole.kind == m["kind"]
        ok = head is not None and (head.kind == m["kind"] or (want_dcgm and _families()[head.id] == "dcgm"))
        if not ok:
            wrong.append(row(m["text"]))
    assert len(wrong) <= 0.05 * len(MESSAGES), wrong


DIAG_TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 570.148.08                                     |
| GPU Device IDs Detected   | 2330, 2330                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
+-----  Hardware  ----------+------------------------------------------------+
| memory                    | Fail                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Fail                                     |
| Warning: GPU1             | {row1} |
|                           | {row2} |
+---------------------------+------------------------------------------------+
"""


def _diag(tmp_path: Path, message: str) -> Path:
    rows = [message[i:i + 45] for i in range(0, len(message), 45)]
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "dcgmi-diag.txt").write_text(DIAG_TABLE.format(row1=f"{rows[0]:<46}", row2=f"{rows[1]:<46}"))
    return evidence


@pytest.mark.parametrize(("message", "cause"), [
    ("Detected 2 volatile double-bit ECC error(s) in GPU 1. Drain the GPU and reset it or reboot the node.",
     "ecc_uncorrectable"),
    ("GPU 1 had uncorrectable memory errors and row remapping failed. Row remapping failure indicates "
     "unrecoverable memory errors.", "row_remap_failure"),
    ("Detected XID 79 for GPU 1 Please consult the documentation for details of this XID.", "gpu_fell_off_bus"),
])
def test_a_failed_diagnostic_names_its_cause(tmp_path: Path, message: str, cause: str) -> None:
    evidence = _diag(tmp_path, message)
    bundle = tmp_path / "b.duckdb"
    events = ingest_timeline(bundle, evidence)
    assert any(e["kind"] == "dcgm_diag" and e["attrs"]["result"] == "fail" for e in events)
    code, out, err = run_cli("analyze", bundle, "--json")
    assert code == 0, err
    hypotheses = json.loads(out)["hypotheses"]
    assert hypotheses and hypotheses[0]["cause"] == cause


DCGM_ENTRIES = yaml.safe_load((ROOT / "collectors/catalog/signatures/dcgm.yaml").read_text(encoding="utf-8"))
DCGM_WITH_CAUSE = [(e["id"], e["cause"], s["line"]) for e in DCGM_ENTRIES["signatures"]
                   if e.get("cause") and not e.get("not_alone") for s in e["samples"]]


@pytest.mark.parametrize(("sig_id", "cause", "line"), DCGM_WITH_CAUSE,
                         ids=[f"{i}-{n}" for n, (i, _, _) in enumerate(DCGM_WITH_CAUSE)])
def test_each_dcgm_message_alone_ranks_its_cause_first(tmp_path: Path, sig_id: str, cause: str, line: str) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "dcgm-health.log").write_text(line + "\n")
    bundle = tmp_path / "b.duckdb"
    assert run_cli("ingest", bundle, evidence)[0] == 0
    code, out, err = run_cli("analyze", bundle, "--json")
    assert code == 0, err
    hypotheses = json.loads(out)["hypotheses"]
    assert hypotheses and hypotheses[0]["cause"] == cause, (sig_id, line, [h["cause"] for h in hypotheses])
