"""Stopping the daemons an integration fixture started: by their own process handles, newest first."""

from __future__ import annotations

import subprocess


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
