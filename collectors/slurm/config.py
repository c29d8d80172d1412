"""``scontrol show config``: the Slurm version and cluster name as host facts, and the settings live
capture reads (where the daemons log, whether job history is a jobcomp file)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import HostFact, ParseContext, Row, Skipped


def config_settings(text: str) -> dict[str, str]:
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            settings[key.strip()] = value.strip()
    return settings


def parse_config(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    for n, line in ctx.lines(stream):
        key, sep, value = line.partition("=")
        if sep and key.strip() == "SLURM_VERSION":
            yield HostFact("versions.slurm", value.strip())
        elif sep and key.strip() == "ClusterName":
            yield HostFact("slurm.cluster", value.strip())
        elif line.strip() and not sep and not line.startswith("Configuration data"):
            yield Skipped(n, "not a scontrol show config line")
