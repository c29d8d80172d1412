"""NVML samples every ``--nvml-interval`` from a child process the recorder can abandon.

A GPU that fell off the bus makes NVML calls hang inside the driver, where no thread can be
interrupted; so the sampling runs in a forked child in its own session that writes one JSON document
(the capture's ``gpuwb.nvml/1`` format, one reading) per line to a pipe. When no document arrives
within the interval plus ``timeout_s``, the child's process group is killed, the hang is noted once,
and a new child is tried after ``retry_s``. No NVML at all (no driver, no library) is noted once and
not retried in a loop.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from typing import Any

Loader = Callable[[], Any]
RETRY_AFTER_HANG_S = 300.0


def _child(write_fd: int, interval: float, loader: Loader, host: str) -> None:
    os.setsid()
    from collectors.nvml.adapter import NvmlAdapter
    from collectors.nvml.recording import record

    def send(doc: dict[str, Any]) -> None:
        os.write(write_fd, (json.dumps(doc, default=str, separators=(",", ":")) + "\n").encode())

    try:
        adapter = NvmlAdapter(loader())
    except ImportError:
        send({"unavailable": "pynvml (nvidia-ml-py) is not installed"})
        os._exit(0)
    reason = adapter.init()
    if reason:
        send({"unavailable": reason})
        os._exit(0)
    try:
        while True:
            began = time.monotonic()
            doc = record(adapter, samples=1, interval=0.0, host=host)
            send(doc)
            time.sleep(max(0.0, interval - (time.monotonic() - began)))
    except BaseException as exc:  # the parent notes it and decides whether to try again
        send({"error": f"{type(exc).__name__}: {exc}"})
    os._exit(0)


class NvmlSampler:
    """Owns the sampling child; ``poll()`` returns the documents that arrived and notes state changes."""

    def __init__(self, interval: float, *, timeout_s: float = 30.0, loader: Loader | None = None,
                 host: str = "") -> None:
        self.interval = interval
        self.timeout_s = timeout_s
        self.loader = loader
        self.host = host
        self.state = "starting"
        self.reason = ""
        self.samples = 0
        self._proc: Any = None
        self._fd: int | None = None
        self._pending = b""
        self._last_heard = 0.0
        self._retry_at = 0.0

    def _start(self) -> None:
        from collectors.nvml.adapter import load_nvml

        read_fd, write_fd = os.pipe()
        ctx = multiprocessing.get_context("fork")
        self._proc = ctx.Process(target=_child, args=(write_fd, self.interval, self.loader or load_nvml, self.host),
                                 daemon=True)
        self._proc.start()
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self._fd = read_fd
        self._pending = b""
        self._last_heard = time.monotonic()

    def poll(self) -> tuple[list[dict[str, Any]], list[str]]:
        """(NVML documents, notes for the ring). Notes are written only when the state changes."""
        notes: list[str] = []
        if self.state == "unavailable":
            return [], notes
        now = time.monotonic()
        if self._proc is None:
            if now < self._retry_at:
                return [], notes
            self._start()
        docs = []
        for doc in self._read():
            self._last_heard = now
            if "unavailable" in doc:
                self._set("unavailable", str(doc["unavailable"]).removeprefix("unavailable: "), notes)
                self._stop()
                return [], notes
            if "error" in doc:
                self._set("error", str(doc["error"]), notes)
                self._stop()
                self._retry_at = now + RETRY_AFTER_HANG_S
                return docs, notes
            self.samples += 1
            self._set("sampling", "", notes)
            docs.append(doc)
        if now - self._last_heard > self.interval + self.timeout_s:
            self._set("timeout", f"no NVML answer for {now - self._last_heard:.0f} s (a GPU off the bus hangs NVML); "
                      f"child killed, retry in {RETRY_AFTER_HANG_S:.0f} s", notes)
            self._stop()
            self._retry_at = now + RETRY_AFTER_HANG_S
        return docs, notes

    def _set(self, state: str, reason: str, notes: list[str]) -> None:
        if state != self.state:
            notes.append(f"nvml {state}" + (f": {reason}" if reason else ""))
        self.state, self.reason = state, reason

    def _read(self) -> list[dict[str, Any]]:
        if self._fd is None:
            return []
        data = b""
        while True:
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                break
            data += chunk
        data = self._pending + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._pending = data
            return []
        complete, self._pending = data[:cut], data[cut + 1:]
        docs = []
        for line in complete.split(b"\n"):
            try:
                docs.append(json.loads(line))
            except ValueError:
                continue
        return docs

    def _stop(self) -> None:
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self._proc.kill()
            self._proc.join(timeout=1)  # a child stuck in the driver may never be reaped; don't wait for it
            self._proc = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        self._stop()
