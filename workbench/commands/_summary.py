"""Shared printing of a bundle's summary (a helper of the commands, not a command)."""

from __future__ import annotations

from pathlib import Path

from workbench.query.events import summary
from workbench.store.bundle import Bundle
from workbench.table import format_table, printable


def print_summary(path: Path | str) -> None:
    with Bundle.open(path) as bundle:
        info = summary(bundle)
    meta = info["meta"]
    count, size = info["artifacts"]
    start, end = info["window"]
    print(printable(f"Bundle {path}: {meta.get('title') or '(untitled)'} [incident {meta.get('incident_id')}]"))
    print(f"  {count} artifacts, {size / 1e6:.1f} MB raw; root digest {info['seal']['root_digest'][:16]}…"
          if info["seal"] else f"  {count} artifacts, not sealed")
    print(printable(f"  hosts: {', '.join(info['hosts']) or '-'}; events {start or '-'} .. {end or '-'}"))
    print("  rows: " + ", ".join(f"{t} {n}" for t, n in info["tables"].items()))
    if info["events_by_kind"]:
        print(format_table(["event kind", "count"], info["events_by_kind"][:20]))
