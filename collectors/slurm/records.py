"""``Key=value`` records: ``scontrol show job`` / ``show node`` (one line or many, ``-o`` or not) and the
jobcomp/filetxt job completion file."""

from __future__ import annotations

from collections.abc import Iterator

from collectors.addresses import usable
from collectors.base import HostFact, Row, Skipped
from collectors.framework.hostlist import expand_hostlist
from collectors.framework.lazy_re import lazy_regex
from collectors.slurm.events import job_events, node_event
from collectors.slurm.lines import LineState
from collectors.slurm.states import clean, parse_duration, parse_time

_KV_START = lazy_regex(r"^\s*[A-Za-z][\w/:.]*=")
_KV_SPLIT = lazy_regex(r"(?:^|\s)([A-Za-z][\w/:.]*)=")
_REASON_TAIL = lazy_regex(r"^(?P<reason>.*?)\s*\[(?P<user>[^@\]]+)@(?P<ts>[^\]]+)\]\s*$")


class RecordLines(LineState):
    """Reads the key=value record the driver gathered over one or more lines."""

    # -- key=value records: scontrol show job/node (one line or many), jobcomp/filetxt
    def _flush_record(self) -> Iterator[Row]:
        if not self.record:
            return
        lines, self.record = self.record, []
        first = lines[0][0]
        kv = _kv(" ".join(text for _, text in lines))
        if "NodeName" in kv and "State" in kv and "JobState" not in kv:
            rows: list[Row] = []
            reason, user, when = kv.get("Reason"), None, None
            m = _REASON_TAIL.match(reason or "")
            if m:
                reason, user, when = m.group("reason"), m.group("user"), parse_time(m.group("ts"))
            for node in expand_hostlist(kv["NodeName"]) or [kv["NodeName"]]:
                event = node_event(node, kv.get("State"), reason=reason, user=user, ts=when or self._snapshot(),
                                   approx=when is None, origin="iso" if when else self._snapshot_origin(), line=first,
                                   partition=kv.get("Partitions"), only_unhealthy=True)
                if event is not None:
                    rows.append(event)
            yield from self._dated(rows)
            yield from node_addresses(kv)
            return
        if "JobState" in kv or "JobId" in kv and "State" in kv:
            job = clean(kv.get("JobId"))
            if kv.get("ArrayJobId") and kv.get("ArrayTaskId") and clean(kv.get("ArrayTaskId")):
                job = f"{kv['ArrayJobId']}_{kv['ArrayTaskId']}"
            user = kv.get("UserId", "").split("(")[0] or None
            rows = list(job_events(
                job, kv.get("JobState") or kv.get("State"), line=first, exit_code=kv.get("ExitCode"),
                derived=kv.get("DerivedExitCode"), nodes=kv.get("NodeList"), reason=kv.get("Reason"),
                elapsed=parse_duration(kv.get("RunTime")), submit=parse_time(kv.get("SubmitTime")),
                start=parse_time(kv.get("StartTime")), end=parse_time(kv.get("EndTime")), snapshot=self._snapshot(),
                snapshot_origin=self._snapshot_origin(), name=kv.get("JobName") or kv.get("Name"),
                partition=kv.get("Partition"), user=user, tres=kv.get("TRES") or kv.get("Tres"),
                batch_host=kv.get("BatchHost")))
            if job:
                self.current_job = job
            yield from self._dated(rows)
            return
        if not any(k in kv for k in ("PartitionName", "ReservationName", "Cluster", "SLURM_VERSION")):
            yield Skipped(first, "key=value record that is neither a job nor a node")


def node_addresses(kv: dict[str, str]) -> Iterator[HostFact]:
    """``NodeName=node14 NodeAddr=10.1.2.14``: the address Slurm reaches the node at, as the node's
    ``net.addr.<ip>`` fact (collectors/addresses.py's key), so a peer's error naming it names the node.
    A list of nodes pairs with a list of addresses one to one, or not at all."""
    nodes = expand_hostlist(kv.get("NodeName")) or [kv.get("NodeName", "")]
    addresses = [a for a in (kv.get("NodeAddr") or "").split(",") if a]
    if len(addresses) != len(nodes):
        return
    for node, address in zip(nodes, addresses):
        if node and (ip := usable(address)) is not None:
            yield HostFact(f"net.addr.{ip}", "NodeAddr", host=node)


def _kv(text: str) -> dict[str, str]:
    """``Key=value Key2=value with spaces`` -> dict; a value runs until the next `` Key=``."""
    out: dict[str, str] = {}
    matches = list(_KV_SPLIT.finditer(text))
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        out.setdefault(m.group(1), text[m.end():end].strip())
    return out


def kv_start(line: str) -> bool:
    """A line that begins with ``Key=``: a record's first line, or (indented) one that continues it."""
    return _KV_START.match(line) is not None


def opens_record(line: str) -> bool:
    """A line that begins a record: ``Key=value`` pairs, two at least."""
    return _KV_START.match(line) is not None and len(_KV_SPLIT.findall(line)) >= 2
