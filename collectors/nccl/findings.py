"""Findings become events: each takes its rank, host, GPU and time; a watchdog timeout and its progress line,
an NCCL WARN and its error chain become one event; step-time findings are thinned past STEP_BUDGET per
rank; an undated event waits for a dated line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from collectors.base import Event, Row, to_utc
from collectors.framework.torch_dist import Finding
from collectors.nccl.state import HOLD_LINES, MAX_PROCS, Held, ReaderState
from collectors.nccl.times import Prefix, Stamp, iso_stamp
from collectors.nccl.warn import meaning_of, net_details

STEP_BUDGET = 2000
"""Step-time events kept per rank at full resolution; past that every second step number, then every
fourth, and so on: a week of per-step logging stays a few thousand rows per rank, and ranks that log the
same steps keep the same ones (a rank at a coarser stride keeps a subset of a finer one's)."""
_MAX_MESSAGE = 2000
_MAX_WAITING = 20_000
_MAX_HELD = 4096


class FindingEvents(ReaderState):
    """Turns the findings of every line reader into events, in order."""

    def _event(self, finding: Finding, lineno: int, text: str, pre: Prefix, *, host: str | None = None,
               pid: int | None = None, tid: int | None = None, dev: int | None = None,
               neighbour: Stamp | None = None) -> Event | None:
        attrs = finding.attrs
        if isinstance(attrs.get("last_error"), str) and finding.kind in ("nccl_net_error", "nccl_error", "cuda_error"):
            # PyTorch's "Last error:" is the WARN NCCL printed: it means what the bare WARN means
            said = meaning_of(attrs["last_error"])
            if said is not None:
                finding.kind, finding.layer = said.kind, said.layer
                for key, value in said.attrs.items():
                    if key != "text":
                        attrs.setdefault(key, value)
        if finding.kind == "nccl_net_error" and "last_error" in attrs:
            cause = net_details(attrs["last_error"])
            if "error" in cause and "error" in attrs:
                attrs["nccl_message"] = attrs.pop("error")
            for key, value in cause.items():
                attrs.setdefault(key, value)
        if finding.kind in ("nccl_net_error", "nccl_error") and "nccl_version" not in attrs:
            version = (self.procs[(host, pid)].version if (host, pid) in self.procs else None) or self.file_version
            if version:
                attrs["nccl_version"] = version
        rank = pre.rank if pre.rank is not None else finding.rank
        proc = self.procs.get((host, pid)) if host is not None and pid is not None else None
        if rank is None and proc is not None:
            rank = proc.rank
        if rank is None and host is None:
            rank = self._sole_rank()
        home = self.rank_home.get(rank) if rank is not None else None
        gpu = proc.devs.get(dev) if proc is not None and dev is not None else None
        if gpu is None and home is not None and (host is None or home[1] == host):
            gpu = home[2]
        where = finding.host or host or pre.host or (home[1] if home else None)
        for key, value in (("pid", pid), ("tid", tid), ("cuda_dev", dev), ("local_rank", pre.local_rank),
                           ("mpi_rank", pre.mpi_rank), ("launcher_task", None if pre.from_launcher else pre.task)):
            if value is not None:
                attrs.setdefault(key, value)
        if pre.src and "file" not in attrs:
            attrs["file"] = pre.src.rsplit("/", 1)[-1]
        if finding.kind == "cuda_error" and self._repeated(attrs.get("error"), rank, lineno):
            return None
        if finding.kind == "rank_failed":
            self.places.failure(finding, where)
        event = Event(kind=finding.kind, message=(finding.message or text).strip()[:_MAX_MESSAGE],
                      severity=finding.severity, layer=finding.layer, host=where, rank=rank, gpu=gpu,
                      attrs=attrs, line=lineno)
        own = pre.stamp
        table_time = attrs.get("time") or attrs.get("root_cause_time")
        if finding.kind in ("rank_failed", "job_failed") and isinstance(table_time, str):
            if table := iso_stamp(table_time):
                own = Stamp(table.ts, "torchelastic", table.raw)
        if own is not None:
            event.ts, event.ts_origin, event.ts_raw, event.ts_approx = own.ts, own.origin, own.raw, own.approx
        elif (neighbour or self.last) is not None:
            self._neighbour(event, neighbour or self.last)
        return event

    def _repeated(self, error: Any, rank: int | None, lineno: int) -> bool:
        """PyTorch prints one CUDA error twice (the Python exception, then C++ ``what():``): keep one."""
        for seen, seen_rank, seen_line in self.recent_cuda:
            if seen == error and (seen_rank == rank or seen_rank is None or rank is None) and lineno - seen_line < 40:
                return True
        self.recent_cuda.append((error, rank, lineno))
        return False

    def _sole_rank(self) -> int | None:
        """The rank of a one-rank log (its NCCL init lines name one rank, else its one environment dump
        does): the owner of its unprefixed lines (tracebacks, trainer output)."""
        if self.sole[0] != len(self.procs):
            ranks = {proc.rank for proc in self.procs.values() if proc.rank is not None}
            self.sole = (len(self.procs), next(iter(ranks)) if len(ranks) == 1 else None)
        return self.sole[1] if self.sole[1] is not None or self.procs else self.places.declared_rank()

    def _step(self, finding: Finding, pre: Prefix) -> bool:
        """Give a step-time finding its rank's step and ordinal, or drop it: a progress marker (DeepSpeed
        prints ``step=N`` apart from its timers) only moves the rank's step mark, and past STEP_BUDGET
        steps only every n-th step number is kept."""
        rank = pre.rank if pre.rank is not None else finding.rank
        if rank is None:
            rank = self._sole_rank()
        attrs = finding.attrs
        key = (rank, attrs.get("framework"))
        if attrs.pop("progress", False):
            if key in self.step_marks or len(self.step_marks) < MAX_PROCS:
                self.step_marks[key] = attrs["step"]
            return False
        if attrs.get("step") is None and key in self.step_marks:
            attrs["step"] = self.step_marks[key]
        if key not in self.step_count and len(self.step_count) >= MAX_PROCS:
            return True
        self.step_count[key] += 1
        attrs["index"] = self.step_count[key]
        number = attrs["step"] if isinstance(attrs.get("step"), int) else attrs["index"]
        stride = self.step_stride.setdefault(key, [1, 0])
        if number % stride[0]:
            return False
        stride[1] += 1
        if stride[1] >= STEP_BUDGET:
            stride[0], stride[1] = stride[0] * 2, 0
        return True

    def _emit(self, finding: Finding, lineno: int, text: str, pre: Prefix,
              neighbour: Stamp | None = None) -> Iterator[Row]:
        if finding.kind == "step_time" and not self._step(finding, pre):
            return
        event = self._event(finding, lineno, text, pre, neighbour=neighbour)
        if event is None:
            return
        if event.kind == "nccl_timeout":
            yield from self._timeout(event, lineno)
            return
        yield from self._out(event)

    def _timeout(self, event: Event, lineno: int) -> Iterator[Row]:
        """The watchdog's timeout line and its ``last enqueued / last completed`` line are one event."""
        attrs = event.attrs
        key = attrs.get("pg_rank", event.rank)
        if attrs.get("reason") == "watchdog_progress":
            held = self.timeouts.pop(key, None)
            if held is not None and (held.event.attrs.get("seq") in (None, attrs.get("seq"))
                                     or attrs.get("seq") is None):
                for name, value in attrs.items():
                    if name != "reason":
                        held.event.attrs.setdefault(name, value)
                yield from self._out(held.event)
                return
            if held is not None:
                yield from self._out(held.event)
            yield from self._out(event)
            return
        if attrs.get("reason") == "watchdog_timeout":
            yield from self._hold(self.timeouts, key, event, lineno)
            return
        yield from self._out(event)

    def _hold(self, table: dict[Any, Held], key: Any, event: Event, lineno: int) -> Iterator[Row]:
        previous = table.pop(key, None)
        if previous is not None:
            yield from self._out(previous.event)
        if len(table) >= _MAX_HELD:
            oldest = next(iter(table))
            yield from self._out(table.pop(oldest).event)
        table[key] = Held(event, lineno)

    def _release_stale(self, lineno: int) -> Iterator[Row]:
        for table in (self.chains, self.timeouts):
            for key in [k for k, held in table.items() if lineno - held.line > HOLD_LINES]:
                yield from self._out(table.pop(key).event)

    def _out(self, event: Event) -> Iterator[Row]:
        if event.ts is None and event.ts_origin == "none":
            if self.last is not None:
                self._neighbour(event, self.last)
            else:
                self.waiting.append(event)
                if len(self.waiting) > _MAX_WAITING:
                    yield from self._anchor(self.waiting[:_MAX_WAITING // 2])
                    self.waiting = self.waiting[_MAX_WAITING // 2:]
                return
        yield event

    def _anchor(self, events: list[Event]) -> Iterator[Row]:
        """No dated line anywhere: the file's mtime is the only clock left (the end of the log)."""
        when, origin = (self.ctx.mtime, "mtime") if self.ctx.mtime else (self.ctx.captured_at, "captured")
        for event in events:
            if when is not None:
                event.ts, event.ts_origin = to_utc(when), origin
            event.ts_approx = True
            yield event


def summary_text(finding: Finding) -> str | None:
    """A message for findings gathered from a table rather than read off one line."""
    a = finding.attrs
    if finding.kind == "rank_failed":
        return (f"torchrun: rank {a.get('rank')} (local_rank {a.get('local_rank')}) on {finding.host} exited with "
                f"{a.get('exitcode')}" + (f" ({a['signal']})" if a.get("signal") else "")
                + (f" at {a['time']}" if a.get("time") else "") + (" [root cause]" if a.get("root_cause") else ""))
    if finding.kind == "job_failed":
        who = (f": root cause rank {a['root_cause_rank']} on {a.get('root_cause_host')} exit code {a.get('exitcode')}"
               + (f" ({a['signal']})" if a.get("signal") else "")) if "root_cause_rank" in a else ""
        return f"torchrun: {a.get('script') or 'job'} failed ({a.get('exception') or 'worker failure'}){who}"
    return None
