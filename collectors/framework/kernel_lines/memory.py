"""The kernel running out: the OOM killer (its invocation, its summary, the kill itself, held together
across lines) and the file table being full."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collectors.base import Event, Row
from collectors.framework.kernel_lines.record import LineFamily, Record
from collectors.framework.lazy_re import lazy_regex

_OOM_INVOKED = lazy_regex(r"^(?P<proc>.+?) invoked oom-killer: (?P<rest>.*)")
_OOM_INFO = lazy_regex(r"oom-kill:(?P<kv>.*)")
_OOM_KILLED = lazy_regex(r"(?:(?P<scope>Memory cgroup out of memory|Out of memory[^:]*):\s*)?"
                         r"Kill(?:ed)? process (?P<pid>\d+),? (?:UID (?P<uid>\d+), )?"
                         r"\((?P<proc>[^)]*)\)(?P<rest>.*)")
"""Kernels before 4.x say ``Killed process 123, UID 48, (httpd)`` or ``Kill process 123 (httpd) score 0 or
sacrifice child``."""
_KV_KB = lazy_regex(r"(total-vm|anon-rss|file-rss|shmem-rss|pgtables):(\d+)kB")
_FILE_MAX = lazy_regex(r"VFS: file-max limit (?P<limit>\d+) reached")


class MemoryLines(LineFamily):
    """OOM-killer and file-max lines; remembers the invoker and the ``oom-kill:`` summary until their kill."""

    oom_info: dict[str, Any]
    oom_invoker: str | None
    oom_summary: Event | None

    def _oom(self, rec: Record) -> Iterator[Row]:
        msg = rec.message
        if m := _OOM_INVOKED.search(msg):
            yield from self._unkilled()
            proc = m.group("proc").strip()
            self.oom_invoker = proc
            kv = dict(re.findall(r"(\w+)=([^,\s]+)", m.group("rest")))
            yield self._event(rec, "oom_invoked", "scheduling", "warning", process=proc,
                              gfp_mask=kv.get("gfp_mask"), order=_int(kv.get("order")),
                              oom_score_adj=_int(kv.get("oom_score_adj")))
            return
        if m := _OOM_KILLED.search(msg):
            pid = int(m.group("pid"))
            if self.oom_summary is not None and self.oom_summary.attrs.get("pid") != pid:
                yield from self._unkilled()  # the summary was of another kill, whose own line is missing
            self.oom_summary = None
            sizes = {k.replace("-", "_") + "_kb": int(v) for k, v in _KV_KB.findall(m.group("rest"))}
            info = self.oom_info if self.oom_info.get("pid") in (None, pid) else {}
            uid = re.search(r"UID:(\d+)", m.group("rest")) or (m if m.group("uid") else None)
            adj = re.search(r"oom_score_adj:(-?\d+)", m.group("rest"))
            constraint = info.get("constraint")
            if constraint is None and m.group("scope") and m.group("scope").startswith("Memory cgroup"):
                constraint = "CONSTRAINT_MEMCG"
            yield self._event(rec, "oom_kill", "scheduling", "error", pid=pid, process=m.group("proc"),
                              constraint=constraint, cgroup=info.get("task_memcg"), oom_cgroup=info.get("oom_memcg"),
                              global_oom=info.get("global_oom"),
                              uid=int(uid.group("uid") if uid is m else uid.group(1)) if uid else info.get("uid"),
                              oom_score_adj=int(adj.group(1)) if adj else None, invoker=self.oom_invoker,
                              causes=["host_oom_kill"], **sizes)
            self.oom_info = {}
            self.oom_invoker = None
            return
        if m := _OOM_INFO.search(msg):
            kv = m.group("kv")
            info: dict[str, Any] = {"global_oom": "global_oom" in kv.split(",")}
            for key in ("constraint", "task_memcg", "oom_memcg", "task", "cpuset"):
                if km := re.search(rf"(?:^|,){key}=([^,]*)", kv):
                    info[key] = km.group(1)
            for key in ("pid", "uid"):
                if km := re.search(rf"(?:^|,){key}=(\d+)", kv):
                    info[key] = int(km.group(1))
            yield from self._unkilled()
            self.oom_info = info
            if info.get("pid") is not None:
                # held until the kill line: a cut or rate-limited log may have none, and then this is the kill
                self.oom_summary = self._event(rec, "oom_kill", "scheduling", "error", pid=info["pid"],
                                               process=info.get("task"), constraint=info.get("constraint"),
                                               cgroup=info.get("task_memcg"), oom_cgroup=info.get("oom_memcg"),
                                               global_oom=info["global_oom"], uid=info.get("uid"),
                                               invoker=self.oom_invoker, causes=["host_oom_kill"])

    def _unkilled(self) -> Iterator[Row]:
        """The held oom-kill summary whose ``Killed process`` line never came (a new OOM began, or the log ended)."""
        if self.oom_summary is not None:
            held, self.oom_summary = self.oom_summary, None
            yield held

    def _file_table(self, rec: Record) -> Iterator[Row]:
        if m := _FILE_MAX.search(rec.message):
            yield self._event(rec, "file_table_full", "scheduling", "error", limit=int(m.group("limit")))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
