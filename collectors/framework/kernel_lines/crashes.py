"""The kernel's own health: boots (its version), hung tasks, soft and hard lockups, RCU stalls, panics,
oopses, and the segfaults and traps of user processes."""

from __future__ import annotations

import re
from collections.abc import Iterator

from collectors.base import HostFact, Row
from collectors.framework.kernel_lines.record import LineFamily, Record
from collectors.framework.lazy_re import lazy_regex

_HUNG = lazy_regex(r"(?:INFO: )?task (?P<proc>.+?):(?P<pid>\d+) blocked for more than (?P<secs>\d+) seconds")
_SOFT_LOCKUP = lazy_regex(r"BUG: soft lockup - CPU#(?P<cpu>\d+) stuck for (?P<secs>\d+)s! "
                          r"\[(?P<proc>.+?):(?P<pid>\d+)\]")
_HARD_LOCKUP = lazy_regex(r"(?:Watchdog detected|NMI watchdog:) hard LOCKUP on cpu (?P<cpu>\d+)")
_RCU = lazy_regex(r"rcu: INFO: (?P<flavor>rcu_\w+) (?:self-)?detected stalls?")
_PANIC = lazy_regex(r"Kernel panic - not syncing: (?P<why>.*)")
_OOPS = lazy_regex(r"BUG: (?P<why>unable to handle (?:kernel )?(?:NULL pointer dereference|paging request|page fault)"
                   r"[^\n]*|kernel NULL pointer dereference[^\n]*)|kernel BUG at (?P<at>\S+)|"
                   r"Oops: (?P<code>[0-9a-fx]+)")
_SEGFAULT = lazy_regex(r"^(?:traps: )?(?:(?P<proc>.+?)\[(?P<pid>\d+)\]:? )?"
                       r"(?P<what>segfault|general protection fault|trap [^ ]+)"
                       r"(?: at (?P<addr>[0-9a-fA-F]+))?.*?\bip[: ](?P<ip>[0-9a-fA-F]+)(?:.*?\berror[: ](?P<err>\w+))?"
                       r"(?:.*? in (?P<lib>[^\[\s]+))?")
_LINUX = lazy_regex(r"^Linux version (?P<ver>\S+)")
_GPU_LIBS = ("nccl", "cuda", "cudnn", "cublas", "nvidia", "libnv", "torch", "triton")
_STORAGE_TRACE = ("nfs", "rpc_", "io_schedule", "ext4", "xfs", "jbd2", "lustre", "ptlrpc", "blk_", "filemap",
                  "wait_on_page", "fsync", "folio_wait")
_GPU_TRACE = ("[nvidia", "nvidia_", "nv_", "_nv0", "uvm_")


class CrashLines(LineFamily):
    """Stall, crash, segfault and boot lines; remembers the last oops (one oops is said in several lines) and
    whether the kernel version was already written as a host fact."""

    last_oops: int
    kernel_seen: bool

    def _stall(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _HUNG.search(msg):
            trace = rec.following().lower()
            layer = "network_storage" if any(t in trace for t in _STORAGE_TRACE) else \
                "gpu" if any(t in trace for t in _GPU_TRACE) else "hardware"
            yield self._event(rec, "hung_task", layer, "warning", process=m.group("proc"), pid=int(m.group("pid")),
                              seconds=int(m.group("secs")))
        elif m := _SOFT_LOCKUP.search(msg):
            yield self._event(rec, "soft_lockup", "hardware", "error", cpu=int(m.group("cpu")),
                              seconds=int(m.group("secs")), process=m.group("proc"), pid=int(m.group("pid")))
        elif m := _HARD_LOCKUP.search(msg):
            yield self._event(rec, "soft_lockup", "hardware", "critical", cpu=int(m.group("cpu")), hard=True)
        elif m := _RCU.search(msg):
            yield self._event(rec, "rcu_stall", "hardware", "error", flavor=m.group("flavor"))
        elif m := _PANIC.search(msg):
            yield self._event(rec, "kernel_panic", "hardware", "critical", reason=m.group("why").strip())
        elif m := _OOPS.search(msg):
            last, self.last_oops = self.last_oops, rec.line
            if rec.line - last <= 8:  # "BUG: unable to handle ..." then "Oops: 0002 [#1]": one oops
                return
            gpu = bool(re.search(r"\[nvidia|nvidia_|_nv\d|uvm_", rec.following()[:1500]))
            yield self._event(rec, "kernel_oops", "gpu" if gpu else "hardware", "critical",
                              reason=(m.group("why") or m.group("at") or f"Oops {m.group('code')}").strip())

    def _segfault(self, rec: Record) -> Iterator[Row]:
        m = _SEGFAULT.search(rec.message)
        if not m:
            return
        lib = m.group("lib")
        gpu_lib = bool(lib) and any(t in lib.lower() for t in _GPU_LIBS)
        if not m.group("pid") and "segfault at" not in rec.message:
            return
        yield self._event(rec, "segfault", "gpu" if gpu_lib else "business", "error",
                          pid=int(m.group("pid")) if m.group("pid") else None,
                          process=(m.group("proc") or "").strip() or None, type=m.group("what"),
                          address=m.group("addr"),
                          ip=m.group("ip"), error=m.group("err"), lib=lib)

    def _boot(self, rec: Record) -> Iterator[Row]:
        if m := _LINUX.search(rec.message):
            if not self.kernel_seen:
                self.kernel_seen = True
                yield HostFact("kernel", m.group("ver"), host=rec.host)
            yield self._event(rec, "boot", "hardware", "info", kernel=m.group("ver"))
