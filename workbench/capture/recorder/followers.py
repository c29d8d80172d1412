"""The sources the recorder follows: a log file (with rotation), watched log globs, the journal and
/dev/kmsg. Every follower is polled; ``poll()`` returns the complete lines that arrived since the
last call, never blocks, and never raises for a file that vanished or cannot be read.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

MAX_READ_BYTES = 4 << 20
"""At most this much per follower per poll, so one chatty log cannot starve the others."""
MAX_PENDING_BYTES = 1 << 20
"""A partial line longer than this is cut and kept as a line (a binary file, a line without end)."""
REGLOB_S = 10.0


class FileFollower:
    """``tail -F`` of one file: starts at its end (or at ``offset`` of the same inode, on restart),
    and starts over at the beginning when the file is rotated (new inode) or truncated."""

    def __init__(self, path: str, source: str, *, inode: int | None = None, offset: int | None = None) -> None:
        self.path = path
        self.source = source
        self.inode = inode
        self.offset = offset
        self.pending = b""
        self.error = ""
        self._started = False

    def poll(self) -> list[str]:
        try:
            st = os.stat(self.path)
        except OSError as exc:
            self.error = exc.strerror or str(exc)
            if not self._started:  # not there yet: when it appears, all of it is new
                self._started, self.inode, self.offset = True, None, 0
            return []
        self.error = ""
        if not self._started:
            self._started = True
            if self.inode != st.st_ino or self.offset is None or self.offset > st.st_size:
                self.inode, self.offset = st.st_ino, st.st_size
        elif st.st_ino != self.inode or st.st_size < (self.offset or 0):
            self.inode, self.offset, self.pending = st.st_ino, 0, b""
        if st.st_size == self.offset:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset or 0)
                data = f.read(MAX_READ_BYTES)
        except OSError as exc:
            self.error = exc.strerror or str(exc)
            return []
        self.offset = (self.offset or 0) + len(data)
        return self._lines(data)

    def _lines(self, data: bytes) -> list[str]:
        data = self.pending + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self.pending = data
            if len(self.pending) > MAX_PENDING_BYTES:
                self.pending, data, cut = b"", data + b"\n", len(data)
            else:
                return []
        complete, self.pending = data[:cut], data[cut + 1:]
        return [line.decode("utf-8", "replace") for line in complete.split(b"\n")]

    def state(self) -> dict[str, Any]:
        """Where a restart continues: inode and the offset of the last complete line."""
        return {"inode": self.inode, "offset": (self.offset or 0) - len(self.pending)}


class GlobFollower:
    """Every file matching a glob, found again every few seconds (a trainer's new log appears
    mid-job). Files present at start are followed from their end; new ones from their start."""

    def __init__(self, pattern: str, states: dict[str, dict[str, Any]] | None = None) -> None:
        self.pattern = pattern
        self.source = f"watch:{pattern}"
        self.files: dict[str, FileFollower] = {}
        self._states = states or {}
        self._globbed = 0.0
        self._first = True
        self.error = ""

    def poll(self) -> list[tuple[str, str]]:
        """(source, line) pairs: the source names the file the line came from."""
        now = time.monotonic()
        if now - self._globbed >= REGLOB_S:
            self._globbed = now
            for path in sorted(glob.glob(self.pattern)):
                if path not in self.files and os.path.isfile(path):
                    saved = self._states.get(path, {})
                    follower = FileFollower(path, f"watch:{path}", inode=saved.get("inode"), offset=saved.get("offset"))
                    if not self._first and not saved:
                        follower.inode, follower.offset, follower._started = os.stat(path).st_ino, 0, True
                    self.files[path] = follower
            self._first = False
        out: list[tuple[str, str]] = []
        for follower in self.files.values():
            out.extend((follower.source, line) for line in follower.poll())
        return out


class CommandFollower:
    """The output of a long-running command (``journalctl -k -f``), read without blocking."""

    def __init__(self, argv: list[str], source: str) -> None:
        self.source = source
        self.argv = argv
        self.pending = b""
        self.error = ""
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)

    def poll(self) -> list[str]:
        assert self.proc.stdout is not None
        data = b""
        while len(data) < MAX_READ_BYTES:
            try:
                chunk = self.proc.stdout.read(1 << 16)
            except BlockingIOError:
                chunk = None
            if not chunk:
                break
            data += chunk
        if self.proc.poll() is not None and not data:
            self.error = f"{self.argv[0]} exited with status {self.proc.returncode}"
        if not data:
            return []
        data = self.pending + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self.pending = data
            return []
        complete, self.pending = data[:cut], data[cut + 1:]
        return [line.decode("utf-8", "replace") for line in complete.split(b"\n")]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class KmsgFollower:
    """/dev/kmsg from its current end: one record per read, ``EAGAIN`` when there is no more."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.source = "kernel:kmsg"
        self.error = ""
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self.fd, 0, os.SEEK_END)

    def poll(self) -> list[str]:
        lines = []
        for _ in range(10000):
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:  # EPIPE: records were overwritten before we read them
                self.error = exc.strerror or str(exc)
                continue
            if not record:
                break
            lines.append(record.decode("utf-8", "replace").rstrip("\n").split("\n")[0])
        return lines

    def close(self) -> None:
        os.close(self.fd)


def host_kernel_follower() -> tuple[Any, str]:
    """The host's kernel log: the journal, else /dev/kmsg. (follower or None, why not)."""
    if shutil.which("journalctl"):
        probe = subprocess.run(["journalctl", "-k", "-n", "1", "-q"], capture_output=True, timeout=10)
        if probe.returncode == 0 and probe.stdout.strip():  # a journal without kernel lines is not the kernel log
            return CommandFollower(["journalctl", "-k", "-f", "-n", "0", "-q", "-o", "short-iso-precise"],
                                   "kernel:journal"), ""
    if Path("/dev/kmsg").exists():
        try:
            return KmsgFollower(), ""
        except OSError as exc:
            return None, f"/dev/kmsg: {exc.strerror or exc}"
    return None, "no journal and no /dev/kmsg on this host; give --kernel-log FILE"
