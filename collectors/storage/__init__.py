"""Storage evidence: disk latency (``iostat -x``, ``/proc/diskstats``), ``df``, NFS client statistics
(``nfsstat -c``, ``/proc/self/mountstats``), the checkpoint directory, and checkpoint-write failures
in training logs.

A training job that "hangs" at a checkpoint is usually waiting on storage: a full volume, an NFS
server that retransmits, a disk whose requests take seconds. The signals are chosen to survive
the classic false alarms: ``%util`` is 100 on any busy NVMe (it serves requests in parallel), so
latency is judged by ``await`` against the same device's baseline (the since-boot first report of
iostat, the since-boot average of diskstats, or the calmest other report), never by ``%util``.

Artifact kinds
- ``iostat`` (iostat.py): ``iostat -x`` (old and new sysstat layouts, with or without ``-t``; several reports,
  also pasted together with ``---``).
- ``diskstats`` (diskstats.py): ``/proc/diskstats``; capture samples it twice, a second apart, each sample after a
  ``# diskstats sample N at ISO`` line.
- ``df`` (df.py): ``df -P`` / ``df -PT`` / ``df -h`` / ``df -i``.
- ``nfsstat``: ``nfsstat -c``. ``mountstats``: ``/proc/self/mountstats`` (nfs.py).
- ``checkpoint_listing`` (checkpoint_dir.py): what ``--checkpoint-dir DIR`` writes: ``# checkpoint listing
  of DIR at ISO`` then one ``MTIME_EPOCH SIZE TYPE PATH`` line per entry (the shape of
  ``find DIR -printf '%T@ %s %y %p\\n'``, which responders can run by hand, with or without the
  type column); ``ls -l --time-style=full-iso`` listings are read too.
- ``checkpoint_log`` (write_failures.py): a training log whose head shows a checkpoint write failure.
  ``write_failures.write_failure`` is public so that the training-log collector can flag the same
  lines in logs it owns.

live_capture.py runs and reads all of them; sniff.py tells them apart; events.py holds what the readers
share (a snapshot's event, the await test).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from collectors.base import ParseContext, Row, Skipped
from collectors.storage.checkpoint_dir import parse_listing
from collectors.storage.df import parse_df
from collectors.storage.diskstats import parse_diskstats
from collectors.storage.iostat import parse_iostat
from collectors.storage.live_capture import add_capture_arguments, capture
from collectors.storage.nfs import parse_mountstats, parse_nfsstat
from collectors.storage.sniff import sniff
from collectors.storage.write_failures import parse_log

NAME = "storage"
LAYER = "network_storage"
KINDS = ("iostat", "diskstats", "df", "nfsstat", "mountstats", "checkpoint_listing", "checkpoint_log")
TIMEOUT = 30.0

__all__ = ["KINDS", "LAYER", "NAME", "TIMEOUT", "add_capture_arguments", "capture", "parse", "sniff"]


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = {"iostat": parse_iostat, "diskstats": parse_diskstats, "df": parse_df, "nfsstat": parse_nfsstat,
              "mountstats": parse_mountstats, "checkpoint_listing": parse_listing,
              "checkpoint_log": parse_log}.get(kind)
    if parser is None:
        yield Skipped(None, f"storage collector cannot parse kind {kind}")
        return
    yield from parser(stream, ctx)
