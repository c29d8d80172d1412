"""Which storage output a file's head is (iostat, diskstats, df, nfsstat, mountstats, a checkpoint listing), or
a training log whose head shows a checkpoint write failure."""

from __future__ import annotations

import re

from collectors.storage.write_failures import mentions_checkpoint, names_write_failure


def sniff(name: str, head: str) -> dict[str, int]:
    lines = head.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    # a plain substring test before each pattern that needs it: 512 rank logs are sniffed by every collector
    if "Device" in head and re.search(r"^Device:?\s+.*(?:await|r/s|rrqm/s|tps)", head, re.MULTILINE):
        return {"iostat": 90}
    if first.startswith("# diskstats sample") or (
            len(re.findall(r"^\s*\d+\s+\d+\s+\S+(?:\s+\d+){10,}\s*$", head, re.MULTILINE)) >= 2):
        return {"diskstats": 90}
    if re.match(r"^Filesystem\s+(?:Type\s+)?(?:1024-blocks|1K-blocks|\d+[KMG]?-blocks|Size|Inodes)\s", first):
        return {"df": 95}
    if "Client rpc stats:" in head and re.search(r"^Client rpc stats:", head, re.MULTILINE):
        return {"nfsstat": 90}
    if " mounted on " in head and re.search(r"^device \S+ mounted on \S+ with fstype \S+", head, re.MULTILINE):
        return {"mountstats": 90}
    if first.startswith("# checkpoint listing of") or (
            " /" in head and len(re.findall(r"^\d{9,11}(?:\.\d+)? \d+ (?:[fdl] )?/", head, re.MULTILINE)) >= 2):
        return {"checkpoint_listing": 90}
    if re.search(r"^[-dl][rwxsStT-]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+\d+\s+\d{4}-\d\d-\d\d \d\d:\d\d", head,
                 re.MULTILINE) and mentions_checkpoint(head):
        return {"checkpoint_listing": 70}
    if ("PytorchStreamWriter" in head or "write(): fd " in head or "unexpected pos " in head) and re.search(
            r"PytorchStreamWriter failed writing|write\(\): fd \d+ failed with|unexpected pos \d+ vs \d+", head):
        return {"checkpoint_log": 80}
    if "Traceback" in head and names_write_failure(head) and mentions_checkpoint(head):
        return {"checkpoint_log": 70}
    return {}
