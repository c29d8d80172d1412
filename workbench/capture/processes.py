"""Nothing a collector starts outlives it: the process tree below a pid, found in /proc and killed whole.

Commands run in sessions of their own and may daemonize, which a process-group kill misses, so capture works
by ancestry instead: the capture process and each collector child are child subreapers (Linux
``prctl(PR_SET_CHILD_SUBREAPER)``, no privileges needed), an orphaned descendant is reparented to them rather
than to init, and a kill stops the whole tree found in /proc (stopped processes cannot fork) before it kills
it. This needs neither root nor a delegated cgroup. A process stuck in the kernel (state D) dies only when it
leaves it: the callers wait a bounded time and name it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

KILL_WAIT_S = 3.0
"""How long a kill waits for the processes it killed to be gone (one stuck in the kernel may never go)."""
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, value: int) -> int | None:
    """``prctl(2)``; None where there is none (not Linux) or it refused."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if option == PR_GET_CHILD_SUBREAPER:
            flag = ctypes.c_int(0)
            return int(flag.value) if libc.prctl(option, ctypes.byref(flag), 0, 0, 0) == 0 else None
        return 0 if libc.prctl(option, value, 0, 0, 0) == 0 else None
    except (OSError, AttributeError):
        return None


def become_subreaper(on: bool = True) -> bool | None:
    """Make this process a child subreaper (orphans of its descendants are reparented to it, not to
    init); returns what it was before, None where that cannot be set."""
    before = _prctl(PR_GET_CHILD_SUBREAPER, 0)
    if before is None or _prctl(PR_SET_CHILD_SUBREAPER, int(on)) is None:
        return None
    return bool(before)


def _process_table() -> dict[int, tuple[int, str]] | None:
    """pid -> (parent pid, state) of every process, from /proc; None where there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    table: dict[int, tuple[int, str]] = {}
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()  # the command name may hold spaces and ')'
            table[int(name)] = (int(fields[1]), fields[0].decode())
        except (OSError, IndexError, ValueError):
            continue  # it ended while we looked
    return table


def _descendants(root: int, table: dict[int, tuple[int, str]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def kill_tree(root: int, *, include_root: bool = True) -> set[int]:
    """SIGKILL ``root`` and every process below it, also those in sessions of their own. The tree is
    stopped first, walk after walk until no new process shows up (a stopped process cannot fork,
    and with subreapers an orphan stays in the tree), then killed. Returns the pids killed."""
    table = _process_table()
    if table is None:  # no /proc: the process group is all that can be reached
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root, signal.SIGKILL)
        return {root}
    stopped: set[int] = set()
    for _ in range(64):
        found = _descendants(root, table) | ({root} if include_root and root in table else set())
        new = {pid for pid in found - stopped if table[pid][1] != "Z"}
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped |= new
        table = _process_table() or {}
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return stopped


def children(table: dict[int, tuple[int, str]] | None = None) -> set[int]:
    """This process's children: /proc/self/task/*/children (one read per thread), else the table."""
    me = os.getpid()
    if table is None:
        try:
            found: set[int] = set()
            for task in os.listdir(f"/proc/{me}/task"):
                with open(f"/proc/{me}/task/{task}/children") as f:
                    found.update(int(pid) for pid in f.read().split())
            return found
        except (OSError, ValueError):
            table = _process_table() or {}
    return {pid for pid, (ppid, _) in table.items() if ppid == me}


def reap_strays(keep: set[int], wait_s: float = KILL_WAIT_S) -> list[int]:
    """Kill every child of this process not in ``keep`` (and all below it), reap them, and keep at it
    while killed descendants are reparented here. Returns the pids still there after ``wait_s`` (stuck
    in the kernel). Never waits on a pid in ``keep``: those are someone else's to reap."""
    strays = children() - keep
    if not strays:
        return []
    give_up = time.monotonic() + wait_s
    while True:
        for pid in strays:
            kill_tree(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        strays = children() - keep
        if not strays or time.monotonic() > give_up:
            return sorted(strays)
        time.sleep(0.01)
