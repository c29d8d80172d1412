"""Writes docs/causes.md from rules/causes/, one file per cause (tests/test_docs.py checks it is current).

    python scripts/causes_doc.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.framework.vocabulary import LAYER_TITLES, LAYERS  # noqa: E402
from workbench.analysis.causes import load_causes  # noqa: E402

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\"'])\.\s+(?=[A-Z(\"])")
"""A full stop after a word and before a capital: where a description's first sentence ends
(not inside "e.g." or an ellipsis)."""


def first_sentence(text: str) -> str:
    """A description's first sentence, on one line, ending with its full stop."""
    flat = " ".join(text.split())
    cut = _SENTENCE_END.search(flat)
    return flat[:cut.start() + 1] if cut else flat


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _ids(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def causes_markdown() -> str:
    """docs/causes.md: every cause id of the catalog, by layer, with its one-line meaning."""
    causes = load_causes()
    lines = ["# Causes", "",
             "Generated from `rules/causes/*.yaml` by `scripts/causes_doc.py`; edit the YAML, not this file.",
             "These are the ids `gpuwb analyze --json` puts in a hypothesis' `cause` (see [cli.md](cli.md)).",
             "*Scope* says where one occurrence lives (`gpu`: a host and PCI bus id, `host`, `global`: the whole",
             "job or service); evidence is grouped into one hypothesis per scope key. *Leads to* names causes",
             "it often triggers downstream (listed as its consequences when both are found in order at the",
             "same place); *absorbs* names causes that are part of its own picture there. The symptom kinds",
             "are in [events.md](events.md#symptoms). The catalog's description, remediation and action items",
             "are in the YAML and in every postmortem.", "",
             f"{len(causes)} causes.", ""]
    for layer in LAYERS:
        ids = [cid for cid, entry in causes.items() if entry["layer"] == layer]
        lines += [f"## {LAYER_TITLES[layer]} (`{layer}`)", "",
                  "| cause | title | scope | meaning | symptoms | leads to | absorbs |",
                  "|---|---|---|---|---|---|---|"]
        for cid in ids:
            entry = causes[cid]
            cells = [f"`{cid}`", _cell(entry["title"]), entry["scope"], _cell(first_sentence(entry["description"])),
                     _ids(entry["symptoms"]), _ids(entry["leads_to"]), _ids(entry["absorbs"])]
            lines.append(f"| {' | '.join(cells)} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    target = ROOT / "docs" / "causes.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(causes_markdown(), encoding="utf-8")
    print(target)
