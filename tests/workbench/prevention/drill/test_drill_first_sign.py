"""The truth's first anomaly is a line the responder can find: for every generator and two seeds,
``answer.json``'s ``first_anomaly_at`` is the time of a row of the evidence (an event within a second,
a metric or GPU sample within one scrape interval) or, for a line no parser turns into an event, a
stamp written in the raw files. A generator that set ``first_sign`` to an instant no line shows
would score the engine against a time nobody could have named.

Every generator the second pass of the catalog added (the serving drills of the hardware,
network and storage causes, ...) must also analyse back to its own cause, top-1.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from workbench.analysis.engine import analyze
from workbench.prevention.drill import serving, write
from workbench.prevention.drill.registry import faults
from workbench.store.bundle import Bundle

SEEDS = (1, 2)
EVENT_S = 1.0
"""How far an evidence row may be from the truth's first anomaly (a stamp's own resolution)."""
SCRAPE_S = serving.SCRAPE_S
"""How far a metric or GPU sample may be: a sign seen only in samples is seen at the next one."""
STAMPS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y/%m/%d %H:%M:%S", "%m-%d %H:%M:%S", "%b %d %H:%M:%S",
          "%m/%d/%Y | %H:%M:%S")
"""How the raw files stamp their lines (logs, ISO, nvidia-smi, vLLM, syslog, ipmitool sel)."""

NEW = {("bad_change", "training"), ("gpu_contention", "training"), ("gpu_runtime_misconfigured", "training"),
       ("driver_stack_mismatch", "inference"), ("fabric_manager_down", "inference"), ("gpu_hang", "inference"),
       ("numeric_instability", "inference"), ("disk_full", "inference"), ("network_fabric_errors", "inference"),
       ("network_misconfigured", "inference"), ("storage_stall", "inference"), ("host_hardware_error", "inference"),
       ("nvlink_error", "inference"), ("nvswitch_fault", "inference"), ("pcie_link_degraded", "inference"),
       ("power_throttling", "inference"), ("psu_or_fan_failure", "inference"), ("row_remap_failure", "inference"),
       ("thermal_throttling", "inference"), ("node_drained", "inference"), ("shm_exhausted", "inference")}
"""The (cause, workload) pairs whose generators the second pass added; those that exist must analyse back."""


def _naive(when: datetime) -> datetime:
    return when.astimezone(timezone.utc).replace(tzinfo=None)


def _in_raw(raw: Path, when: datetime) -> bool:
    """Whether some raw file holds a stamp of ``when`` (to the second, either side)."""
    wanted = {(when + timedelta(seconds=s)).strftime(fmt) for s in (-1, 0, 1) for fmt in STAMPS}
    wanted |= {f"[{w:%a %b} {w.day:2d} {w:%H:%M:%S %Y}]" for w in (when + timedelta(seconds=s) for s in (-1, 0, 1))}
    for path in raw.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if any(stamp in text for stamp in wanted):
                return True
    return False


def _nearest(bundle: Bundle, table: str, when: datetime) -> float | None:
    row = bundle.con.execute(f"SELECT min(abs(epoch(ts) - epoch(?::TIMESTAMP))) FROM {table} WHERE ts IS NOT NULL",
                             [_naive(when)]).fetchone()
    return None if row is None or row[0] is None else float(row[0])


@pytest.mark.parametrize("cause,workload", sorted(faults()))
def test_the_first_anomaly_is_a_line_of_the_evidence(cause: str, workload: str, tmp_path: Path) -> None:
    for seed in SEEDS:
        written = write(cause, workload, seed, tmp_path / f"s{seed}")
        first = written.truth.first_anomaly_at
        assert first is not None and first <= written.truth.detected_at + timedelta(seconds=SCRAPE_S), (seed, first)
        with Bundle.open(written.bundle) as bundle:
            event = _nearest(bundle, "event", first)
            sample = min((d for d in (_nearest(bundle, "series", first), _nearest(bundle, "gpu_sample", first))
                          if d is not None), default=None)
            top = analyze(bundle)["hypotheses"] if (cause, workload) in NEW else None
        found = (event is not None and event <= EVENT_S) or (sample is not None and sample <= SCRAPE_S) \
            or _in_raw(written.raw, first)
        assert found, f"{cause}/{workload}/seed {seed}: no line at {first} (nearest event {event} s, sample {sample} s)"
        if top is not None:
            assert top and top[0]["cause"] == cause, (seed, [(h["cause"], h["score"]) for h in top[:3]])
