"""The recorder's settings, as parsed from the command line and handed to the long-running process."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from workbench.errors import InputError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_UNIT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``200MB``, ``1G``, ``512k`` or a number of bytes (binary units: 1 MB = 1 MiB)."""
    m = _SIZE.match(text)
    if not m:
        raise InputError(f"not a size: {text!r} (use e.g. 200MB, 1GB)")
    return int(float(m.group(1)) * _SIZE_UNIT[m.group(2).lower()])


@dataclass
class RecorderConfig:
    """Everything ``gpuwb record`` runs with; the folder layout under ``out`` is fixed here."""

    out: str
    kernel_log: str | None = None
    watch: list[str] = field(default_factory=list)
    prom: str | None = None
    window_s: float = 1800.0
    after_s: float = 120.0
    max_disk: int = 200 << 20
    nvml_interval_s: float = 10.0
    nvml_timeout_s: float = 30.0
    cooldown_s: float = 600.0
    poll_s: float = 1.0
    prom_interval_s: float = 60.0
    capture: bool = True
    capture_timeout_s: float = 900.0
    nvml: bool = True
    host: str | None = None
    """the node's name in bundles and metrics (a DaemonSet pod's own name is not the node's); None: this host's"""
    textfile_dir: str | None = None
    """where gpuwb.prom goes for node_exporter's textfile collector (workbench/capture/recorder/metrics.py)"""
    metrics_port: int | None = None
    """a loopback port serving the same page at /metrics"""
    metrics_hold_s: float = 60.0
    """a new series shows 0 this long before its count: at least the scrape interval"""

    @property
    def exporting(self) -> bool:
        """Whether the log-event counter is kept (lines are parsed only for it)."""
        return bool(self.textfile_dir) or self.metrics_port is not None

    @property
    def folder(self) -> Path:
        return Path(self.out)

    @property
    def ring_dir(self) -> Path:
        return self.folder / "ring"

    @property
    def trigger_dir(self) -> Path:
        return self.folder / "triggers"

    @property
    def status_path(self) -> Path:
        return self.folder / "status.json"

    @property
    def offsets_path(self) -> Path:
        """The followed files' offsets and the log-event counters (one file, one rename)."""
        return self.folder / "ring" / "offsets.json"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RecorderConfig:
        return cls(**json.loads(text))
