"""Where a drill's first abnormal line is, read back from the lines the scaffold wrote.

A generator knows when its fault began, but for a cause whose first sign is a line the scaffold
writes later from a draw of its own (the first DeepSpeed timer line of a throttled rank: the step
timers start at a drawn second and print every few hundred steps), only the written lines tell
when that sign appeared. The truth's ``first_anomaly_at`` must be the time of a line the responder
can find, not the instant the physics changed.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from workbench.prevention.drill.incident import Drill

_TIMER = re.compile(r"^(?:\d+: )?\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(?P<ms>\d{3})\] \[INFO\] \[[^\]]+\] "
                    r"\[Rank (?P<rank>\d+)\] rank=\d+ time \(ms\) \| forward: (?P<fwd>[\d.]+)")
SLOW = 1.1
"""A forward pass this much longer than usual is abnormal (the timers' own jitter is 1 %)."""


def first_slow_step(d: Drill, rank: int, normal_forward_ms: float) -> datetime | None:
    """The stamp of ``rank``'s first DeepSpeed timer line whose forward pass is ``SLOW`` times its
    usual ``normal_forward_ms``, in whichever file holds that rank's output (its own log or the
    job's ``srun -l`` file); None before the rank logs are written or when no step is slow."""
    for rel, lines in d.files.items():
        if not (rel.endswith(f"/rank{rank}.log") or rel.startswith("slurm/slurm-")):
            continue
        for line in lines:
            m = _TIMER.match(line)
            if m and int(m.group("rank")) == rank and float(m.group("fwd")) > SLOW * normal_forward_ms:
                when = datetime.strptime(m.group("ts"), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
                return when.replace(microsecond=int(m.group("ms")) * 1000)
    return None
