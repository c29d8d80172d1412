"""Live evidence capture: every collector in its own process with a hard deadline.

A GPU that fell off the bus makes NVML calls hang inside the driver, where no thread can be
interrupted, so each collector runs in a forked child in its own session: at its deadline the child
and every process it started are killed and what it already spooled is kept. Each command a
collector runs gets at most what is left of that deadline, less a margin to spool its output, so a
command cut short keeps what it printed.

No process outlives the capture. Commands run in sessions of their own and may daemonize, which a
process-group kill misses, so capture works by ancestry instead: the capture process and each
collector child are child subreapers (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``, no privileges
needed), an orphaned descendant is reparented to them rather than to init, and a kill stops the
whole tree found in /proc (stopped processes cannot fork) before it kills it. This needs neither
root nor a delegated cgroup. A process stuck in the kernel (state D) dies only when it leaves it:
capture waits a bounded time and names it.

The bundle is written to a temporary file, checkpointed (DuckDB keeps rows in ``BUNDLE.wal`` until
then), read back sealed and only then renamed onto the output. Ctrl-C, SIGTERM and SIGHUP leave a
valid bundle, sealed and marked incomplete; a bundle that cannot be written (a full disk) keeps the
spooled evidence and the partial bundle where the error line says.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import multiprocessing
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import duckdb

from collectors.base import Artifact
from collectors.framework import registry
from collectors.framework.redact import redact_argv, redact_bytes
from workbench.errors import GpuwbError, as_interrupt, interrupt_for
from workbench.ingest.derive import run_derivations
from workbench.ingest.session import FileResult, Session
from workbench.store.bundle import Bundle, BundleError

DEFAULT_MAX_BYTES = 256 << 20
STATUSES = ("ok", "partial", "unavailable", "timeout", "denied", "error", "skipped")
SPOOL_MARGIN_S = 2.0
"""Time kept back from a collector's deadline for spooling (and redacting) what its last command
printed, and for the little work it does besides commands: its commands must end this much before it
is killed. Half the budget when that is shorter (``--timeout-scale 0.1``)."""
MIN_COMMAND_S = 0.1
"""A command with less time than this left before its collector's deadline is not started."""
KILL_WAIT_S = 3.0
"""How long a kill waits for the processes it killed to be gone (one stuck in the kernel may never go)."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def spool_margin(budget: float) -> float:
    """How long before a collector's deadline (``budget`` seconds after its start) its commands must end."""
    return min(SPOOL_MARGIN_S, budget / 2)


class CaptureWriteError(GpuwbError):
    """The bundle could not be written (a full disk): one line naming where the evidence was kept."""


class CaptureResult(tuple):  # type: ignore[type-arg]
    """``(path, outcomes, complete)`` as callers unpack it, plus ``stopped_by``: the signal that cut the
    capture short (SIGINT for Ctrl-C, SIGTERM, SIGHUP), None when it ran to the end."""

    stopped_by: int | None

    def __new__(cls, path: Path, outcomes: list[CollectorOutcome], complete: bool,
                stopped_by: int | None = None) -> CaptureResult:
        result = super().__new__(cls, (path, outcomes, complete))
        result.stopped_by = stopped_by
        return result

    @property
    def path(self) -> Path:
        return self[0]

    @property
    def outcomes(self) -> list[CollectorOutcome]:
        return self[1]


@dataclass
class CollectorOutcome:
    """What one collector achieved: the coverage table's row."""

    name: str
    status: str = "ok"
    reason: str = ""
    duration_s: float = 0.0
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    missing: list[dict[str, str]] = field(default_factory=list)
    results: list[FileResult] = field(default_factory=list)


class LiveContext:
    """The capture context a collector sees inside its child process; everything it captures is
    spooled to disk at once, so a collector killed at its deadline keeps what it had.

    ``deadline`` (a ``time.monotonic()`` value) is when the collector's commands must have ended:
    :meth:`run` gives each command at most what is left of it, whatever timeout the collector asked for."""

    def __init__(self, spool: Path, host: str, since: datetime | None, options: dict[str, Any],
                 redact: bool, *, deadline: float | None = None) -> None:
        self.spool = spool
        self.host = host
        self.since = since
        self.options = options
        self.redact = redact
        self.deadline = deadline
        self._n = 0
        self._manifest = open(spool / "manifest.jsonl", "a", buffering=1)

    def _new_path(self) -> Path:
        self._n += 1
        return self.spool / f"{self._n:04d}.bin"

    def _note(self, record: dict[str, Any]) -> None:
        """Provenance is scrubbed like the bytes: a URL given as ``--prom https://user:pw@host`` ends up
        in a source name, an ``info`` field and the coverage reasons too."""
        self._manifest.write(json.dumps(_scrub(record) if self.redact else record, default=str) + "\n")

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def missing(self, what: str, reason: str) -> None:
        self._note({"missing": what, "reason": reason})

    def time_left(self, timeout: float | None) -> float | None:
        """The limit a command started now gets: ``timeout`` clamped to what is left before the
        collector's deadline (None: neither limits it)."""
        if self.deadline is None:
            return timeout
        left = self.deadline - time.monotonic()
        return left if timeout is None else min(timeout, left)

    def run(self, argv: list[str], *, kind: str, timeout: float | None = None,
            max_bytes: int | None = None) -> Artifact:
        """Run a command (never through a shell), capturing stdout verbatim up to ``max_bytes`` and
        the start of stderr. At its limit (see :meth:`time_left`) or its byte cap the command and
        everything it started are killed; what it printed is kept either way. Whatever it left
        running after it ended (a daemon) is killed too."""
        cap = max_bytes or DEFAULT_MAX_BYTES
        path = self._new_path()
        started = time.monotonic()
        # the argv judged as one command line (``--password x`` across two words), not word by word as _note would
        shown = redact_argv(argv) if self.redact else argv
        info: dict[str, Any] = {"argv": shown, "started_at": datetime.now(timezone.utc)}
        exe = self.which(argv[0])
        limit = self.time_left(timeout)
        if exe is None or (limit is not None and limit < MIN_COMMAND_S):
            if exe is None:
                info.update(exit_code=None, error="command not found")
            else:
                info.update(exit_code=None, timed_out=True, bytes=0,
                            error="not started: no time left before the collector's deadline")
            path.write_bytes(b"")
            return Artifact(source=" ".join(argv), kind=kind, path=str(path), host=self.host, info=info)
        if limit is not None and (timeout is None or limit < timeout):
            info["timeout_s"] = round(limit, 3)  # clamped: the collector asked for more than it had left
        env = dict(os.environ, LC_ALL="C", LANG="C")
        before = _children()
        with open(path, "wb", buffering=0) as out:  # unbuffered: a collector killed mid-command keeps it all
            proc = subprocess.Popen(argv, executable=exe, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            try:
                # should the collector be killed while this runs (an interrupt), the parent stores what it printed
                self._note({"running": {"source": " ".join(argv), "kind": kind, "path": str(path), "argv": shown,
                                        "started_at": info["started_at"]}})
                written, err, truncated, timed_out = _pump(proc, out, cap, None if limit is None else started + limit)
            finally:
                if proc.poll() is None:
                    kill_tree(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=KILL_WAIT_S)
                for pipe in (proc.stdout, proc.stderr):
                    if pipe is not None:
                        pipe.close()
                reap_strays(before)  # what the command left behind, reparented to this subreaper
        info.update(exit_code=proc.returncode, duration_s=round(time.monotonic() - started, 3),
                    truncated=truncated, timed_out=timed_out, bytes=written,
                    stderr=err.decode("utf-8", "replace"))
        self._note({"ran": str(path)})
        return Artifact(source=" ".join(argv), kind=kind, path=str(path), host=self.host, info=info)

    def read_file(self, path: str, *, kind: str, max_bytes: int | None = None,
                  tail: bool = False) -> Artifact | None:
        """Copy a file verbatim (up to ``max_bytes``: its start, or with ``tail`` its end, where an
        incident sits in a long log); None and a coverage note when unreadable."""
        cap = max_bytes or DEFAULT_MAX_BYTES
        dest = self._new_path()
        offset = 0
        try:
            st = os.stat(path)
            with open(path, "rb") as src, open(dest, "wb") as out:
                if tail and st.st_size > cap:
                    offset = st.st_size - cap
                    src.seek(offset)
                written = 0
                while written < cap:
                    block = src.read(min(1 << 20, cap - written))
                    if not block:
                        break
                    out.write(block)
                    written += len(block)
                truncated = bool(src.read(1))
        except PermissionError:
            self.missing(path, "denied: permission denied")
            return None
        except OSError as exc:
            self.missing(path, f"unavailable: {exc.strerror or exc}")
            return None
        info = {"path": path, "mtime": datetime.fromtimestamp(st.st_mtime, tz=timezone.utc),
                "truncated": truncated or offset > 0, "bytes": written, "offset": offset, "size": st.st_size}
        return Artifact(source=path, kind=kind, path=str(dest), host=self.host, info=info)

    def emit(self, artifact: Artifact) -> None:
        """Spool one artifact yielded by the collector (data in memory or a spooled file)."""
        if artifact.path is None:
            path = self._new_path()
            path.write_bytes(artifact.data or b"")
            artifact.path = str(path)
        if self.redact:
            masked = _redact_file(Path(artifact.path))
            if masked:
                artifact.info["redacted_values"] = masked
        self._note({"artifact": {"source": artifact.source, "kind": artifact.kind, "path": artifact.path,
                                 "host": artifact.host or self.host,
                                 "captured_at": artifact.captured_at or datetime.now(timezone.utc),
                                 "info": artifact.info}})


    def close(self) -> None:
        self._manifest.close()


def _pump(proc: subprocess.Popen[bytes], out: Any, cap: int,
          deadline: float | None) -> tuple[int, bytes, bool, bool]:
    """Copy the command's stdout to ``out`` (up to ``cap`` bytes) and keep the first 2000 bytes of
    its stderr, reading both so that neither pipe fills and blocks it. Ends at the deadline, at the
    cap, or soon after the command exits (a descendant still holding the pipes does not hold us).
    Returns (bytes written, stderr, truncated, timed out)."""
    written = 0
    err = b""
    truncated = timed_out = False
    ended_at: float | None = None
    with selectors.DefaultSelector() as sel:
        assert proc.stdout is not None and proc.stderr is not None
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        while sel.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                timed_out = True
                break
            if ended_at is not None and now - ended_at > 0.5:
                break
            wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - now))
            events = sel.select(timeout=wait)
            for key, _ in events:
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.data == "err":
                    err += chunk[:max(0, 2000 - len(err))]
                else:
                    room = cap - written
                    out.write(chunk[:room])
                    written += min(len(chunk), room)
                    truncated = written >= cap
            if truncated:
                break
            if ended_at is None and proc.poll() is not None:
                ended_at = time.monotonic()
            elif ended_at is not None and not events:
                break
        if not sel.get_map() and not timed_out and not truncated:
            # both pipes closed: wait for the exit status, still within the deadline
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                timed_out = True
    return written, err, truncated, timed_out


# -- processes: nothing a collector starts outlives it -------------------------------------------
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


def _children(table: dict[int, tuple[int, str]] | None = None) -> set[int]:
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
    strays = _children() - keep
    if not strays:
        return []
    give_up = time.monotonic() + wait_s
    while True:
        for pid in strays:
            kill_tree(pid)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        strays = _children() - keep
        if not strays or time.monotonic() > give_up:
            return sorted(strays)
        time.sleep(0.01)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP wait while a fork or a kill is under way: a second Ctrl-C must not
    leave a tree half-killed, and a child must not run the parent's handlers before it sets its own."""
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _stop_signal(exc: BaseException) -> int | None:
    """The stop signal ``exc`` stands for (an interrupt, or DuckDB's interrupted query: see
    :func:`workbench.errors.as_interrupt`), else None."""
    interrupt = as_interrupt(exc)
    return None if interrupt is None else int(getattr(interrupt, "signum", signal.SIGINT))


def _stopped_text(signum: int) -> str:
    return "interrupted" if signum == signal.SIGINT else f"terminated by {signal.Signals(signum).name}"


def _say(text: str) -> None:
    """A line on stderr that may find no terminal (SIGHUP: it was closed): never fatal."""
    with contextlib.suppress(OSError, ValueError):
        print(text, file=sys.stderr, flush=True)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact_bytes(value.encode("utf-8", "surrogateescape"))[0].decode("utf-8", "surrogateescape")
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def _redact_file(path: Path) -> int:
    data = path.read_bytes()
    scrubbed, count = redact_bytes(data)
    if count:
        path.write_bytes(scrubbed)
    return count


def _child(module_name: str, spool: str, host: str, since: datetime | None, options: dict[str, Any],
           redact: bool, deadline: float) -> None:
    # The parent's Python handlers came with the fork (the CLI's SIGTERM handler raises Terminated):
    # here a stop signal just ends the child, and the parent, which got it too, decides what is kept.
    # They were blocked across the fork; a command inherits the mask, so unblock once they are reset.
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    os.setsid()
    become_subreaper()
    ctx: LiveContext | None = None
    try:
        module = registry.by_name(module_name)
        ctx = LiveContext(Path(spool), host, since, options, redact, deadline=deadline)
        try:
            for artifact in module.capture(ctx):
                ctx.emit(artifact)
        except PermissionError as exc:
            ctx._note({"error": f"denied: {exc}", "status": "denied"})
        except Exception as exc:
            ctx._note({"error": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=5)})
    finally:
        if ctx is not None:
            ctx.close()
        reap_strays(set())  # this child is a subreaper: all that its commands left running is here
        os._exit(0)


def capture(output: str | os.PathLike[str], *, since: datetime | None = None,
            options: dict[str, Any] | None = None, only: list[str] | None = None,
            skip: list[str] | None = None, title: str = "", redact: bool = True,
            timeout_scale: float = 1.0,
            progress: Callable[[CollectorOutcome], None] | None = None) -> CaptureResult:
    """Capture this host into ``output``. Returns (path, outcomes, complete), with ``stopped_by``.

    Ctrl-C, SIGTERM or SIGHUP while collectors run: they are killed, and what they spooled is written,
    sealed and marked incomplete. The same signal while storing: the open group is rolled back and
    what is stored is sealed, incomplete. A second one while sealing: nothing is written and the
    interrupt is raised. A bundle that cannot be written raises :class:`CaptureWriteError`, keeping
    the spool and the partial bundle; the output is then left untouched."""
    output = Path(output)
    options = dict(options or {})
    host = socket.gethostname()
    modules = [m for m in registry.all_collectors() if hasattr(m, "capture")
               and (not only or m.NAME in only) and m.NAME not in (skip or [])]
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    wal = Path(f"{partial}.wal")
    spool_root = Path(tempfile.mkdtemp(prefix="gpuwb-capture-"))
    started_at = datetime.now(timezone.utc)
    outcomes: dict[str, CollectorOutcome] = {}
    stopped: int | None = None
    keep_evidence = False
    try:
        try:
            _run_children(modules, spool_root, host, since, options, redact, timeout_scale, outcomes, progress)
        except KeyboardInterrupt as exc:
            stopped = _stop_signal(exc)
            _say(f"gpuwb: {_stopped_text(stopped or signal.SIGINT)}; saving what was captured so far")
        for stale in (partial, wal):
            stale.unlink(missing_ok=True)
        meta = {"captured_on": host, "capture_started": started_at.isoformat(),
                "since": since.isoformat() if since else ""}
        stopped = _write(partial, modules, outcomes, spool_root, host, redact, started_at,
                         title or f"capture of {host}", meta, stopped)
        _install(partial, output)
    except BaseException as exc:
        signum = _stop_signal(exc)
        if signum is not None:  # stopped again while the bundle was being finished: out now
            partial.unlink(missing_ok=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
            raise interrupt_for(signum) from None
        keep_evidence = True
        line = _kept_line(output, partial, wal, spool_root, exc)
        if isinstance(exc, (OSError, duckdb.Error, BundleError, _NotDurable)):
            raise CaptureWriteError(line) from None
        _say(f"gpuwb: {line}")  # a bug: the CLI reports it; the evidence is not lost with it
        raise
    finally:
        if not keep_evidence:
            shutil.rmtree(spool_root, ignore_errors=True)
            wal.unlink(missing_ok=True)
    return CaptureResult(output, [outcomes[m.NAME] for m in modules], stopped is None, stopped)


class _NotDurable(Exception):
    """The bundle did not read back complete after its checkpoint."""


def _write(partial: Path, modules: list[ModuleType], outcomes: dict[str, CollectorOutcome], spool_root: Path,
           host: str, redact: bool, started_at: datetime, title: str, meta: dict[str, str],
           stopped: int | None) -> int | None:
    """Store the spool into a new bundle at ``partial``, seal it and check that it is on disk whole.
    A stop signal while storing ends the storing, not the bundle. Returns the signal that stopped the
    capture, if any."""
    bundle = Bundle.create(partial, title=title, meta=meta)
    try:
        # owner-only: a capture run as root copies root-only evidence (dmesg under dmesg_restrict,
        # other users' command lines), which must not become world-readable in the working folder
        os.chmod(partial, 0o600)
        recorded: set[str] = set()
        session = Session(bundle)
        try:
            for module in modules:
                outcome = outcomes.setdefault(module.NAME, CollectorOutcome(module.NAME, "error", "not started"))
                _store(bundle, session, module, spool_root / module.NAME, host, outcome, redact)
                bundle.record_capture(module.NAME, host=host, status=outcome.status, reason=outcome.reason,
                                      started_at=started_at, duration_s=outcome.duration_s,
                                      artifacts=len(outcome.results), detail={"missing": outcome.missing})
                session.finish()  # one commit per collector: a stop while storing loses only the one at hand
                recorded.add(module.NAME)
            run_derivations(bundle)
        except BaseException as exc:
            signum = _stop_signal(exc)
            if signum is None:
                raise
            stopped = stopped or signum
            _say(f"gpuwb: {_stopped_text(signum)} while storing; sealing what is stored")
            session.abandon()
            for module in modules:
                if module.NAME not in recorded:
                    outcome = outcomes.setdefault(module.NAME, CollectorOutcome(module.NAME))
                    outcome.status, outcome.reason = "error", f"not stored: capture {_stopped_text(signum)}"
                    bundle.record_capture(module.NAME, host=host, status=outcome.status, reason=outcome.reason,
                                          started_at=started_at, duration_s=outcome.duration_s, artifacts=0,
                                          detail={"missing": outcome.missing})
        finally:
            session.close()
        bundle.set_meta("complete", "true" if stopped is None else "false")
        digest = bundle.seal(complete=stopped is None)
    except BaseException:
        with contextlib.suppress(Exception):
            bundle.close()
        raise
    bundle.close()  # checkpoints: a failure (a full disk) raises BundleWriteError, the partial and its log kept
    _check_durable(partial, digest)
    return stopped


def _check_durable(partial: Path, digest: str) -> None:
    """The bundle holds everything by itself (no log left beside it), reads back with the seal just
    written, and is on disk (fsync): only such a file may be renamed onto the output."""
    wal = Path(f"{partial}.wal")
    if wal.exists() and wal.stat().st_size > 0:
        raise _NotDurable(f"its log {wal.name} could not be checkpointed into it")
    with Bundle.open(partial) as bundle:
        seal = bundle.last_seal()
    if seal is None or seal["root_digest"] != digest:
        raise _NotDurable("it does not read back with its seal")
    fd = os.open(partial, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _install(partial: Path, output: Path) -> None:
    """Rename the checked bundle onto the output and make the rename itself durable."""
    os.replace(partial, output)
    with contextlib.suppress(OSError):  # a file system that cannot fsync a folder still has the file
        fd = os.open(output.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _kept_line(output: Path, partial: Path, wal: Path, spool: Path, exc: BaseException) -> str:
    """What happened and where the evidence is, in one line."""
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OSError) and exc.strerror:
        reason = exc.strerror
    line = (f"capture not saved: {output} could not be written ({reason}); nothing was deleted: the raw evidence "
            f"is in {spool} (`gpuwb ingest NEW.duckdb {spool}` on a disk with room makes a bundle of it)")
    if partial.exists():
        if wal.exists():
            line += (f"; the partial bundle is {partial} and its log {wal} (copied together to a disk with room, "
                     "they open as one bundle)")
        else:
            line += f"; the partial bundle is {partial}"
    return line


def _run_children(modules: list[ModuleType], spool_root: Path, host: str, since: datetime | None,
                  options: dict[str, Any], redact: bool, timeout_scale: float,
                  outcomes: dict[str, CollectorOutcome],
                  progress: Callable[[CollectorOutcome], None] | None) -> None:
    """Every collector in a forked child with its deadline. This process is a subreaper meanwhile, so
    whatever a collector started comes back to it when the collector dies, and is killed; on return
    (also by an interrupt) no process any collector started is left. Children this process had before
    are left alone; one that another thread of it started meanwhile would be taken for a stray."""
    ctx = multiprocessing.get_context("fork")
    running: dict[str, tuple[Any, float, float]] = {}
    started: list[Any] = []
    keep = _children()  # the caller's own children, not ours to kill
    was_subreaper = become_subreaper()
    try:
        for module in modules:
            spool = spool_root / module.NAME
            spool.mkdir()
            budget = float(options.get(f"timeout_{module.NAME}") or getattr(module, "TIMEOUT", 30.0)) * timeout_scale
            began = time.monotonic()
            deadline = began + budget
            margin = spool_margin(budget)
            proc = ctx.Process(target=_child, args=(module.NAME, str(spool), host, since, options, redact,
                                                    deadline - margin), daemon=False)
            with _signals_held():
                proc.start()
                running[module.NAME] = (proc, began, deadline)
                started.append(proc)
                keep.add(proc.pid)
        while running:
            for name, (proc, began, deadline) in list(running.items()):
                if not proc.is_alive():
                    proc.join()
                    outcome = CollectorOutcome(name, duration_s=round(time.monotonic() - began, 3))
                elif time.monotonic() > deadline:
                    with _signals_held():
                        _kill(proc)
                    outcome = CollectorOutcome(name, "timeout", f"timeout: cut off after {deadline - began:.0f} s",
                                               duration_s=round(time.monotonic() - began, 3))
                else:
                    continue
                outcomes[name] = outcome
                del running[name]
                with _signals_held():
                    reap_strays(keep)  # what a collector that crashed or was killed had started
                if progress:
                    progress(outcome)
            time.sleep(0.02)
    except KeyboardInterrupt as exc:
        reason = _stopped_text(_stop_signal(exc) or signal.SIGINT)
        for name, (_, began, _) in running.items():
            outcomes[name] = CollectorOutcome(name, "timeout", reason, duration_s=round(time.monotonic() - began, 3))
        raise
    finally:
        with _signals_held():
            for proc, _, _ in running.values():
                _kill(proc)
            stuck = sorted(reap_strays(keep) + [p.pid for p in started if p.is_alive()])
            if was_subreaper is not None:
                become_subreaper(was_subreaper)
        if stuck:
            _say(f"gpuwb: warning: {len(stuck)} process(es) started by collectors did not die, stuck in the "
                 f"kernel (pids {', '.join(map(str, stuck))})")


def _kill(proc: Any) -> None:
    """The collector child and everything below it; then reap the child (bounded: one stuck in the
    kernel is left, and named by the sweep)."""
    kill_tree(proc.pid)
    proc.join(timeout=KILL_WAIT_S)


def _store(bundle: Bundle, session: Session, module: ModuleType, spool: Path, host: str,
           outcome: CollectorOutcome, redact: bool) -> None:
    manifest = spool / "manifest.jsonl"
    errors: list[str] = []
    in_flight: dict[str, dict[str, Any]] = {}  # commands started, not ended: what a killed collector ran
    if manifest.exists():
        for line in manifest.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if "missing" in record:
                outcome.missing.append({"what": record["missing"], "reason": record["reason"]})
            elif "error" in record:
                errors.append(record["error"])
            elif "running" in record:
                in_flight[record["running"]["path"]] = record["running"]
            elif "ran" in record:
                in_flight.pop(record["ran"], None)
            elif "artifact" in record:
                art = record["artifact"]
                path = Path(art["path"])
                if not path.exists():
                    continue
                captured = datetime.fromisoformat(art["captured_at"]) if art.get("captured_at") else None
                result = session.store_and_parse(
                    lambda p=path: open(p, "rb"), name=art["source"], kind=art["kind"], module=module,
                    host=art.get("host") or host, source=art["source"], captured_at=captured, info=art["info"],
                    path=path)
                outcome.results.append(result)
    if outcome.status == "timeout":
        for command in in_flight.values():
            result = _store_cut_command(session, module, host, command, redact)
            if result is not None:
                outcome.results.append(result)
        if outcome.results:
            outcome.reason += f"; kept {len(outcome.results)} artifact(s) captured before the cut"
        return
    if errors:
        denied = [e for e in errors if e.startswith("denied")]
        outcome.status = "denied" if denied and not outcome.results else ("partial" if outcome.results else "error")
        outcome.reason = errors[0]
    elif not outcome.results:
        outcome.status = "unavailable"
        reasons = [m["reason"] for m in outcome.missing]
        if reasons and all(r.startswith("denied") for r in reasons):
            outcome.status = "denied"
        outcome.reason = "; ".join(dict.fromkeys(reasons)) or "nothing to collect on this host"
    elif outcome.missing:
        outcome.status = "partial"
        outcome.reason = "; ".join(f"{m['what']}: {m['reason']}" for m in outcome.missing[:3])


def _store_cut_command(session: Session, module: ModuleType, host: str, command: dict[str, Any],
                       redact: bool) -> FileResult | None:
    """What a command had printed when its collector was killed (at its deadline or by an interrupt),
    redacted here since the collector could not: evidence, marked cut."""
    path = Path(command["path"])
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if not size:
        return None
    info: dict[str, Any] = {"argv": command["argv"], "started_at": command["started_at"], "exit_code": None,
                            "timed_out": True, "bytes": size, "cut": "its collector was stopped while it ran"}
    if redact:
        masked = _redact_file(path)
        if masked:
            info["redacted_values"] = masked
    return session.store_and_parse(lambda: open(path, "rb"), name=command["source"], kind=command["kind"],
                                   module=module, host=host, source=command["source"], info=info, path=path)
