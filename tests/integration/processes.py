"""The daemons an integration fixture starts: each a child of the test process with its output in a log
file, waited for with a bound, stopped by its own process handle, newest first."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    """A TCP port nobody listens on now, on any address (slurmctld and slurmd bind all of them; the others
    loopback only)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def spawn(procs: list[tuple[str, subprocess.Popen]], log: Path, name: str, argv: list[str]) -> None:
    """Start ``argv`` with stdout and stderr in ``LOG/NAME.log``; noted in ``procs`` to be stopped by PID."""
    out = open(log / f"{name}.log", "wb")
    try:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    finally:
        out.close()
    procs.append((name, proc))


def wait_until(procs: list[tuple[str, subprocess.Popen]], log: Path, name: str, ready: Callable[[], bool],
               timeout: float, error: type[Exception], what: str = "ready", poll: float = 0.05) -> None:
    """Poll ``ready`` until it holds; a daemon that exits meanwhile, or the timeout, raises ``error`` with the
    log tail of the daemon concerned."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc_name, proc in procs:
            if proc.poll() is not None:
                raise error(f"{proc_name} exited with {proc.returncode}:\n{log_tail(log / f'{proc_name}.log')}")
        if ready():
            return
        time.sleep(poll)
    raise error(f"{name}: not {what} after {timeout:.0f} s:\n{log_tail(log / f'{name}.log')}")


def http_get(url: str) -> bytes | None:
    """The body of a loopback URL, None while nothing answers there."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy
    try:
        with opener.open(url, timeout=2) as response:
            return response.read()
    except OSError:
        return None


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} unreadable)"


def stop_children(procs: list[tuple[str, subprocess.Popen]], grace: float = 10.0) -> None:
    """TERM each still-running child in reverse start order, KILL it if it outlives ``grace`` seconds."""
    for _name, proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
    procs.clear()
