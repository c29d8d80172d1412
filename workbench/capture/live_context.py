"""The capture context a collector sees inside its forked child: commands run with what is left of the
collector's deadline, files copied verbatim, artifacts spooled to disk at once (redacted), so a collector
killed at its deadline keeps what it had. The parent reads the spool back (workbench/capture/live.py)."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from collectors.base import Artifact
from collectors.framework.redact import redact_argv, redact_bytes
from workbench.capture.processes import KILL_WAIT_S, children, kill_tree, reap_strays

DEFAULT_MAX_BYTES = 256 << 20
SPOOL_MARGIN_S = 2.0
"""Time kept back from a collector's deadline for spooling (and redacting) what its last command
printed, and for the little work it does besides commands: its commands must end this much before it
is killed. Half the budget when that is shorter (``--timeout-scale 0.1``)."""
MIN_COMMAND_S = 0.1
"""A command with less time than this left before its collector's deadline is not started."""


def spool_margin(budget: float) -> float:
    """How long before a collector's deadline (``budget`` seconds after its start) its commands must end."""
    return min(SPOOL_MARGIN_S, budget / 2)


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
        before = children()
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
            masked = redact_file(Path(artifact.path))
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


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact_bytes(value.encode("utf-8", "surrogateescape"))[0].decode("utf-8", "surrogateescape")
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def redact_file(path: Path) -> int:
    data = path.read_bytes()
    scrubbed, count = redact_bytes(data)
    if count:
        path.write_bytes(scrubbed)
    return count
