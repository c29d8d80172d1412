"""Live evidence capture: every collector in its own process with a hard deadline.

A GPU that fell off the bus makes NVML calls hang inside the driver, where no thread can be
interrupted, so each collector runs in a forked child in its own session: at its deadline the
whole process group is killed and what it already spooled is kept. The bundle is written to a
temporary file and renamed at the end; Ctrl-C still leaves a valid bundle, marked incomplete.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

from collectors import registry
from collectors._redact import redact_bytes
from collectors.base import Artifact
from workbench.bundle import Bundle
from workbench.derive import run_derivations
from workbench.ingest import FileResult, Session

DEFAULT_MAX_BYTES = 256 << 20
STATUSES = ("ok", "partial", "unavailable", "timeout", "denied", "error", "skipped")


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
    spooled to disk at once, so a collector killed at its deadline keeps what it had."""

    def __init__(self, spool: Path, host: str, since: datetime | None, options: dict[str, Any],
                 redact: bool) -> None:
        self.spool = spool
        self.host = host
        self.since = since
        self.options = options
        self.redact = redact
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

    def run(self, argv: list[str], *, kind: str, timeout: float | None = None,
            max_bytes: int | None = None) -> Artifact:
        """Run a command (never through a shell), capturing stdout verbatim up to ``max_bytes``."""
        cap = max_bytes or DEFAULT_MAX_BYTES
        path = self._new_path()
        started = time.monotonic()
        info: dict[str, Any] = {"argv": argv, "started_at": datetime.now(timezone.utc)}
        exe = shutil.which(argv[0])
        if exe is None:
            info.update(exit_code=None, error="command not found")
            path.write_bytes(b"")
            return Artifact(source=" ".join(argv), kind=kind, path=str(path), host=self.host, info=info)
        env = dict(os.environ, LC_ALL="C", LANG="C")
        truncated = timed_out = False
        with open(path, "wb") as out:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
            deadline = started + timeout if timeout else None
            written = 0
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            while True:
                if deadline and time.monotonic() > deadline:
                    timed_out = True
                    break
                chunk = None
                try:
                    chunk = proc.stdout.read(1 << 20)
                except BlockingIOError:
                    chunk = None
                if chunk:
                    room = cap - written
                    out.write(chunk[:room])
                    written += min(len(chunk), room)
                    if written >= cap:
                        truncated = True
                        break
                    continue
                if chunk == b"" and proc.poll() is not None:
                    break
                time.sleep(0.01)
            if timed_out or truncated:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                _, err = proc.communicate(timeout=2)
            except subprocess.TimeoutExpired:
                err = b""
        info.update(exit_code=proc.returncode, duration_s=round(time.monotonic() - started, 3),
                    truncated=truncated, timed_out=timed_out, bytes=written,
                    stderr=(err or b"")[:2000].decode("utf-8", "replace"))
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
           redact: bool) -> None:
    os.setsid()
    module = registry.by_name(module_name)
    ctx = LiveContext(Path(spool), host, since, options, redact)
    try:
        for artifact in module.capture(ctx):
            ctx.emit(artifact)
    except PermissionError as exc:
        ctx._note({"error": f"denied: {exc}", "status": "denied"})
    except Exception as exc:
        ctx._note({"error": f"{type(exc).__name__}: {exc}",
                   "traceback": traceback.format_exc(limit=5)})
    os._exit(0)


def capture(output: str | os.PathLike[str], *, since: datetime | None = None,
            options: dict[str, Any] | None = None, only: list[str] | None = None,
            skip: list[str] | None = None, title: str = "", redact: bool = True,
            timeout_scale: float = 1.0,
            progress: Callable[[CollectorOutcome], None] | None = None) -> tuple[Path, list[CollectorOutcome], bool]:
    """Capture this host into ``output``. Returns (path, outcomes, complete)."""
    output = Path(output)
    options = dict(options or {})
    host = socket.gethostname()
    modules = [m for m in registry.all_collectors() if hasattr(m, "capture")
               and (not only or m.NAME in only) and m.NAME not in (skip or [])]
    partial = output.with_name(f".{output.name}.partial-{os.getpid()}")
    spool_root = Path(tempfile.mkdtemp(prefix="gpuwb-capture-"))
    started_at = datetime.now(timezone.utc)
    outcomes: dict[str, CollectorOutcome] = {}
    complete = True
    try:
        try:
            _run_children(modules, spool_root, host, since, options, redact, timeout_scale, outcomes, progress)
        except KeyboardInterrupt:
            complete = False
            print("gpuwb: interrupted; saving what was captured so far", file=sys.stderr)
        if partial.exists():
            partial.unlink()
        with Bundle.create(partial, title=title or f"capture of {host}",
                           meta={"captured_on": host, "capture_started": started_at.isoformat(),
                                 "since": since.isoformat() if since else ""}) as bundle:
            # owner-only: a capture run as root copies root-only evidence (dmesg under dmesg_restrict,
            # other users' command lines), which must not become world-readable in the working folder
            os.chmod(partial, 0o600)
            session = Session(bundle)
            for module in modules:
                outcome = outcomes.setdefault(module.NAME, CollectorOutcome(module.NAME, "error", "not started"))
                _store(bundle, session, module, spool_root / module.NAME, host, outcome)
                bundle.record_capture(module.NAME, host=host, status=outcome.status, reason=outcome.reason,
                                      started_at=started_at, duration_s=outcome.duration_s,
                                      artifacts=len(outcome.results),
                                      detail={"missing": outcome.missing})
            session.finish()
            session.close()
            run_derivations(bundle)
            bundle.set_meta("complete", "true" if complete else "false")
            bundle.seal(complete=complete)
        os.replace(partial, output)
    except KeyboardInterrupt:
        partial.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(spool_root, ignore_errors=True)
        Path(str(partial) + ".wal").unlink(missing_ok=True)
    return output, [outcomes[m.NAME] for m in modules], complete


def _run_children(modules: list[ModuleType], spool_root: Path, host: str, since: datetime | None,
                  options: dict[str, Any], redact: bool, timeout_scale: float,
                  outcomes: dict[str, CollectorOutcome],
                  progress: Callable[[CollectorOutcome], None] | None) -> None:
    ctx = multiprocessing.get_context("fork")
    running: dict[str, tuple[Any, float, float]] = {}
    try:
        for module in modules:
            spool = spool_root / module.NAME
            spool.mkdir()
            proc = ctx.Process(target=_child, args=(module.NAME, str(spool), host, since, options, redact),
                               daemon=False)
            proc.start()
            budget = float(options.get(f"timeout_{module.NAME}") or getattr(module, "TIMEOUT", 30.0))
            running[module.NAME] = (proc, time.monotonic(), time.monotonic() + budget * timeout_scale)
        while running:
            for name, (proc, began, deadline) in list(running.items()):
                if not proc.is_alive():
                    proc.join()
                    outcome = CollectorOutcome(name, duration_s=round(time.monotonic() - began, 3))
                    outcomes[name] = outcome
                    del running[name]
                elif time.monotonic() > deadline:
                    _kill(proc)
                    outcome = CollectorOutcome(name, "timeout", f"timeout: cut off after {deadline - began:.0f} s",
                                               duration_s=round(time.monotonic() - began, 3))
                    outcomes[name] = outcome
                    del running[name]
                else:
                    continue
                if progress:
                    progress(outcome)
            time.sleep(0.02)
    except KeyboardInterrupt:
        for name, (proc, began, _) in running.items():
            _kill(proc)
            outcomes[name] = CollectorOutcome(name, "timeout", "interrupted by the user",
                                              duration_s=round(time.monotonic() - began, 3))
        raise


def _kill(proc: Any) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.join(timeout=5)


def _store(bundle: Bundle, session: Session, module: ModuleType, spool: Path, host: str,
           outcome: CollectorOutcome) -> None:
    manifest = spool / "manifest.jsonl"
    errors: list[str] = []
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
