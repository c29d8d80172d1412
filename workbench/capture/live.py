"""Live evidence capture: every collector in its own process with a hard deadline.

A GPU that fell off the bus makes NVML calls hang inside the driver, where no thread can be
interrupted, so each collector runs in a forked child in its own session: at its deadline the child
and every process it started are killed and what it already spooled is kept. Each command a
collector runs gets at most what is left of that deadline, less a margin to spool its output, so a
command cut short keeps what it printed (workbench/capture/live_context.py: what a collector calls).

No process outlives the capture: the capture process and each collector child are child subreapers,
and a kill takes the whole tree below a process (workbench/capture/processes.py).

The bundle is written to a temporary file, checkpointed (DuckDB keeps rows in ``BUNDLE.wal`` until
then), read back sealed and only then renamed onto the output. Ctrl-C, SIGTERM and SIGHUP leave a
valid bundle, sealed and marked incomplete; a bundle that cannot be written (a full disk) keeps the
spooled evidence and the partial bundle where the error line says.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import shutil
import signal
import socket
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

from collectors.framework import registry
from workbench.capture.live_context import LiveContext, redact_file, spool_margin
from workbench.capture.processes import KILL_WAIT_S, become_subreaper, children, kill_tree, reap_strays
from workbench.errors import GpuwbError, as_interrupt, interrupt_for
from workbench.ingest.derive import run_derivations
from workbench.ingest.session import FileResult, Session
from workbench.store.bundle import Bundle, BundleError

STATUSES = ("ok", "partial", "unavailable", "timeout", "denied", "error", "skipped")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


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
    keep = children()  # the caller's own children, not ours to kill
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
        masked = redact_file(path)
        if masked:
            info["redacted_values"] = masked
    return session.store_and_parse(lambda: open(path, "rb"), name=command["source"], kind=command["kind"],
                                   module=module, host=host, source=command["source"], info=info, path=path)
