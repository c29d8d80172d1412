"""ProcessGroupNCCL's watchdog: collective timeouts (``Watchdog caught collective operation timeout:
WorkNCCL(...)``, blocking wait), its progress and ``last enqueued / completed`` lines, dump signals, the heartbeat
monitor, a stuck watchdog, collective mismatches (TORCH_DISTRIBUTED_DEBUG=DETAIL) and the watchdog thread's death."""

from __future__ import annotations

import re
from typing import Any

from collectors.framework.lazy_re import lazy_regex
from collectors.framework.torch_dist.finding import Finding, int_or_none
from collectors.framework.torch_dist.rank_prefix import pg_info

_WATCHDOG = lazy_regex(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\)"
                       r"(?: ran for (?P<ran>\d+) milliseconds)?")
_WORK_FIELD = lazy_regex(r"(\w+(?:\(ms\))?)=([^,]+)")
_PROGRESS = lazy_regex(r"(?:detected by watchdog at work(?: sequence id)?|Timeout at NCCL work|"
                       r"at work sequence id)[: ]+(?P<seq>\d+)")
_LAST_WORK = lazy_regex(r"[Ll]ast (?P<what>enqueued|started|completed)(?: NCCL)? work: (?P<seq>-?\d+)")
_BLOCKING = lazy_regex(r"Work WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\) timed out in blocking wait")
_DUMP_SIGNAL = lazy_regex(r"Received a (?:dump signal|global timeout)(?: due to a collective timeout)? from "
                          r"(?:this local rank|another rank|\s*rank (?P<src>-?\d+))")
"""The heartbeat monitor learning of a failure: its own rank's (``this local rank``) or the rank that
wrote the dump flag in the TCPStore first (2.4+ names it; 2.3 said ``a global timeout from another rank``)."""
_TERMINATING = lazy_regex(r"Terminating the process after attempting to dump debug info, due to (?P<why>.+?)\.?\s*$")
_HEARTBEAT = lazy_regex(r"Heartbeat monitor timed out!.*?(?:workMetaList_\.size\(\)\s*=\s*(?P<n>\d+))?$")
_STUCK = lazy_regex(r"watchdog got stuck for (?P<s>\d+) seconds")
_MISMATCH = lazy_regex(r"Detected mismatch between collectives on ranks\. Rank (?P<r1>\d+) is running collective: "
                       r"CollectiveFingerPrint\((?P<f1>.*?)\)+, but Rank (?P<r2>\d+) is running collective: "
                       r"CollectiveFingerPrint\((?P<f2>.*)\)")
_FP_FIELD = lazy_regex(r"(SequenceNumber|OpType|TensorShape|TensorDtypes)=(\[[^\]]*\]|[^,)]+)")
_WATCHDOG_DIED = lazy_regex(r"(?:Process group watchdog thread terminated with exception|"
                            r"NCCL watchdog thread terminated with exception): (?P<what>.*)")


def watchdog_died(msg: str) -> re.Match[str] | None:
    """``Process group watchdog thread terminated with exception: ...`` (its ``what`` group is the error)."""
    return _WATCHDOG_DIED.search(msg)


def watchdog_timeout(msg: str) -> Finding | None:
    """A collective that timed out, as the watchdog or a blocking wait reports its ``WorkNCCL(...)``."""
    m = _WATCHDOG.search(msg)
    reason = "watchdog_timeout"
    if not m:
        if not (m := _BLOCKING.search(msg)):
            return None
        reason = "blocking_wait"
    fields = dict(_WORK_FIELD.findall(m.group("fields")))
    attrs: dict[str, Any] = {"reason": reason, "seq": int_or_none(fields.get("SeqNum")),
                             "op": (fields.get("OpType") or "").strip() or None,
                             "timeout_ms": int_or_none(fields.get("Timeout(ms)")),
                             "elapsed_ms": int_or_none(m.groupdict().get("ran"))}
    for key, name in (("NumelIn", "numel_in"), ("NumelOut", "numel_out")):
        if key in fields:
            attrs[name] = int_or_none(fields[key])
    pg, rank = pg_info(msg)
    attrs.update(pg)
    attrs.update(_last_work(msg))
    return Finding("nccl_timeout", "error", attrs, rank=rank)


def _last_work(msg: str) -> dict[str, int]:
    return {f"last_{m.group('what')}": int(m.group("seq")) for m in _LAST_WORK.finditer(msg)}


def watchdog_other(msg: str) -> Finding | None:
    """The watchdog's other reports: progress, dump signal, monitor terminate, heartbeat, stuck, mismatch."""
    if (m := _PROGRESS.search(msg)) or "last enqueued" in msg and _LAST_WORK.search(msg):
        attrs: dict[str, Any] = {"reason": "watchdog_progress"}
        if m:
            attrs["seq"] = int(m.group("seq"))
        attrs.update(_last_work(msg))
        pg, rank = pg_info(msg)
        attrs.update(pg)
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _DUMP_SIGNAL.search(msg):
        pg, rank = pg_info(msg)
        attrs = {"reason": "dump_signal", **_last_work(msg), **pg}
        if m.group("src") is not None:
            attrs["src_rank"] = int(m.group("src"))
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _TERMINATING.search(msg):
        pg, rank = pg_info(msg)
        return Finding("nccl_timeout", "critical", {"reason": "monitor_terminate", "error": m.group("why"), **pg},
                       rank=rank)
    if m := _HEARTBEAT.search(msg):
        pg, rank = pg_info(msg)
        attrs = {"reason": "heartbeat_monitor", "seq": None, "op": None, "timeout_ms": None, "elapsed_ms": None,
                 "pending_works": int_or_none(m.group("n")), **pg}
        return Finding("nccl_timeout", "error", attrs, rank=rank)
    if m := _STUCK.search(msg):
        pg, rank = pg_info(msg)
        seconds = int(m.group("s"))
        attrs = {"reason": "watchdog_stuck", "seq": None, "op": None, "timeout_ms": seconds * 1000,
                 "elapsed_ms": seconds * 1000, **pg}
        return Finding("nccl_timeout", "critical", attrs, rank=rank)
    if m := _MISMATCH.search(msg):
        mine = dict(_FP_FIELD.findall(m.group("f1")))
        theirs = dict(_FP_FIELD.findall(m.group("f2")))
        attrs = {"reason": "collective_mismatch", "seq": int_or_none(mine.get("SequenceNumber")),
                 "op": mine.get("OpType"), "timeout_ms": None, "elapsed_ms": None,
                 "peer_rank": int(m.group("r2")), "peer_seq": int_or_none(theirs.get("SequenceNumber")),
                 "peer_op": theirs.get("OpType")}
        for key in ("TensorShape", "TensorDtypes"):
            if key in mine:
                attrs[key.lower()] = mine[key]
            if key in theirs:
                attrs["peer_" + key.lower()] = theirs[key]
        return Finding("nccl_timeout", "error", attrs, rank=int(m.group("r1")))
    return None
