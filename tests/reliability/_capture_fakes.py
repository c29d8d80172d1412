"""Fake collectors for the capture fault tests, and ``gpuwb capture`` run with them in a process of its own.

``python -m tests.reliability._capture_fakes -o OUT [capture options]`` is ``gpuwb capture`` with the
collectors below in place of the real ones (``--only`` picks among them). They start the command
:data:`SPAWNER_NAME`, which a test puts on PATH (:func:`install_spawner`): it starts children in sessions
of their own and a daemon (double fork, setsid), as a command that daemonizes does, and writes every pid
it started to the file named by ``GPUWB_TEST_PIDS``. A test then checks that each of them is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

from collectors.base import Artifact

SPAWNER_NAME = "gpuwb-test-spawner"
SPAWNER = '''#!{python}
"""Starts 2 children in sessions of their own and a daemon, writes their pids (and its own), then hangs
or exits as argv[2] says. All of them hold the capture's stdout pipe."""
import os, sys, time

def note(pid):
    with open(sys.argv[1], "a") as f:
        f.write(f"{{pid}}\\n")

note(os.getpid())
for _ in range(2):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        os.execvp("sleep", ["sleep", "300"])
    note(pid)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, str(os.getpid()).encode())
        os.execvp("sleep", ["sleep", "300"])
    os._exit(0)
os.close(w)
daemon = int(os.read(r, 64))
os.waitpid(pid, 0)
note(daemon)
print("spawned", len(open(sys.argv[1]).read().split()), "processes", flush=True)
if sys.argv[2] == "hang":
    time.sleep(300)
'''


def install_spawner(folder: Path) -> dict[str, str]:
    """Write the spawner into ``folder``; returns the environment that puts it on PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / SPAWNER_NAME
    script.write_text(SPAWNER.format(python=sys.executable))
    script.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run a process (a zombie has ended; its parent has not reaped it yet)."""
    left = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state != b"Z":
            left.append(pid)
    return left


def read_pids(path: Path, count: int, wait_s: float = 20.0) -> list[int]:
    """The pids the spawner wrote, once ``count`` of them are there (bounded wait)."""
    give_up = time.monotonic() + wait_s
    while True:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        if len(pids) >= count or time.monotonic() > give_up:
            return pids
        time.sleep(0.05)


def kill(pids: list[int]) -> None:
    """Clean up after a failing test: the survivors must not outlive it either."""
    for pid in alive(pids):
        try:
            os.kill(pid, 9)
        except OSError:
            pass


# -- the fake collectors -------------------------------------------------------------------------
def fake_collector(name: str, capture, timeout: float = 5.0) -> types.ModuleType:
    """A collector module with only a capture (its parse yields nothing), for capture's own tests."""
    module = types.ModuleType(f"fake_{name}")
    module.NAME = name
    module.LAYER = "gpu"
    module.KINDS = (f"{name}_text",)
    module.TIMEOUT = timeout
    module.PRIORITY = 50
    module.capture = capture
    module.parse = lambda kind, stream, ctx: iter(())
    return module


def _quick(ctx) -> Iterator[Artifact]:
    yield Artifact(source="quick", kind="quick_text", data=b"captured before the stop\n")


def _spawns_and_hangs(ctx) -> Iterator[Artifact]:
    """A command that daemonizes and never ends, run through the context (its timeout far beyond the
    collector's)."""
    yield ctx.run([SPAWNER_NAME, os.environ["GPUWB_TEST_PIDS"], "hang"], kind="spawns_text", timeout=600)


def _starts_then_hangs(ctx) -> Iterator[Artifact]:
    """A collector that starts a process itself (not through the context) and then hangs in Python, as
    NVML does in the driver: only its deadline ends it."""
    subprocess.Popen([SPAWNER_NAME, os.environ["GPUWB_TEST_PIDS"], "hang"], stdout=subprocess.DEVNULL)
    yield Artifact(source="before-hang", kind="starts_text", data=b"got this before the hang\n")
    time.sleep(3600)


def _daemon_left_behind(ctx) -> Iterator[Artifact]:
    """A command that exits at once but leaves its daemons running."""
    yield ctx.run([SPAWNER_NAME, os.environ["GPUWB_TEST_PIDS"], "exit"], kind="leaves_text", timeout=30)


def _bulky(ctx) -> Iterator[Artifact]:
    """Incompressible bytes, as many as GPUWB_TEST_BYTES says: more than a small disk holds."""
    size = int(os.environ["GPUWB_TEST_BYTES"])
    blob = Path(os.environ["GPUWB_TEST_BLOB"]).read_bytes()[:size]
    yield Artifact(source="bulky", kind="bulky_text", data=blob)


def _slow_parse(kind, stream, ctx) -> Iterator[object]:
    """A parser that takes its time: storing is under way (GPUWB_TEST_MARK says so) while it runs."""
    Path(os.environ["GPUWB_TEST_MARK"]).write_text("storing")
    for _ in ctx.lines(stream):
        time.sleep(60)
    yield from ()


COLLECTORS = (
    fake_collector("quick", _quick, 10.0),
    fake_collector("spawns", _spawns_and_hangs, 60.0),
    fake_collector("starts", _starts_then_hangs, float(os.environ.get("GPUWB_TEST_TIMEOUT", "3"))),
    fake_collector("leaves", _daemon_left_behind, 30.0),
    fake_collector("bulky", _bulky, 30.0),
    fake_collector("slow", lambda ctx: iter([Artifact(source="slow", kind="slow_text", data=b"parsed slowly\n")]),
                   10.0),
)
COLLECTORS[-1].parse = _slow_parse


def main(argv: list[str]) -> int:
    from collectors.framework import registry
    from workbench.cli import main as cli

    registry.all_collectors = lambda: COLLECTORS  # type: ignore[assignment]
    only = [f"--only={name}" for name in os.environ.get("GPUWB_TEST_ONLY", "").split(",") if name]
    return cli(["capture", *argv, *only])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
