"""Writes docs/events.md from collectors/catalog/events.yaml (tests/test_vocabulary.py checks it is current).

    python scripts/events_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.framework.vocabulary import events_markdown  # noqa: E402

if __name__ == "__main__":
    target = ROOT / "docs" / "events.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(events_markdown(), encoding="utf-8")
    print(target)
