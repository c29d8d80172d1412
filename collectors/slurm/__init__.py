"""Slurm: when jobs and nodes changed state, and why, from the scheduler's own records.

Live, it asks the controller (``sacct``, ``scontrol show job/node``, ``sinfo -R``, ``sacctmgr show
event``) and copies the tail of slurmctld/slurmd logs. Offline, one line-oriented parser reads all
of those text formats, and job stdout/stderr (``slurmstepd``/``srun`` messages), in any mix: real
hand-overs paste several outputs into one file, sometimes wrapped by Ansible as JSON strings.

Decisions:
- Job events are transitions, each dated when it happened: PENDING at submit, RUNNING at start,
  the terminal state at end. A snapshot without those times (squeue, sinfo) is dated by the time
  printed above it, else the file's mtime, marked approximate.
- ``sacct --json`` of Slurm 22.05 reports every exit code as 0, so capture falls back to
  ``sacct -P`` there, and the JSON parser drops exit codes it cannot trust.
- Node states collapse to one word a playbook can test (DRAIN for drained and draining, DOWN,
  FAIL, ...); Slurm's spelling stays in ``state_raw`` and suffix flags (``*``, ``@``) in ``flags``.
- Slurm prints local time without an offset; capture runs the commands with TZ=UTC, and offline
  text is read as UTC.

Event kinds emitted here: job_state, node_state, step_killed and oom_kill (a cgroup OOM kill reported
by slurmstepd); their attrs are declared in collectors/catalog/events.yaml.

One module per output, and one for what they share:

    live_capture.py live capture (the commands, their order, TZ=UTC, the sacct --json fallback)
    sniff.py        which of the outputs below a file's head is
    config.py       ``scontrol show config`` (versions.slurm, slurm.cluster)
    json_output.py  ``sacct --json``, ``squeue --json``, ``scontrol show node --json``, ``sinfo --json``
    text.py         the text reader: each line to the part below it belongs to
    lines.py        the state those parts share (undated events wait for the next dated line)
    records.py      ``scontrol show job/node`` records, the jobcomp/filetxt file
    tables.py       sinfo, squeue, sacct (-P), sacctmgr show event tables
    daemon_logs.py  slurmctld/slurmd/slurmstepd logs and job output (srun, seff, Killed lines)
    messages.py     daemon error/fatal lines by family, pending reasons by class
    states.py       Slurm's state spellings, times and durations
    events.py       job_state, step_killed and node_state events
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import ParseContext, Row
from collectors.slurm.config import parse_config
from collectors.slurm.json_output import parse_json
from collectors.slurm.live_capture import add_capture_arguments, capture
from collectors.slurm.sniff import sniff
from collectors.slurm.text import TextParser

NAME = "slurm"
LAYER = "scheduling"
TEXT_KINDS = ("sacct", "scontrol_job", "scontrol_node", "sinfo", "squeue", "sacctmgr_event", "slurm_log")
JSON_KINDS = ("sacct_json", "slurm_json")
KINDS = TEXT_KINDS + JSON_KINDS + ("slurm_config",)
TIMEOUT = 90.0
PRIORITY = 40

__all__ = ["KINDS", "LAYER", "NAME", "PRIORITY", "TIMEOUT", "add_capture_arguments", "capture", "parse", "sniff"]


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind in JSON_KINDS:
        yield from parse_json(stream, ctx)
    elif kind == "slurm_config":
        yield from parse_config(stream, ctx)
    else:
        yield from TextParser(kind, ctx).run(stream)
