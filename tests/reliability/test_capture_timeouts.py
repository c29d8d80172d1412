"""A collector's commands never outlive its deadline: each gets at most what is left of it.

Before, a collector's TIMEOUT and the timeouts it gave its commands were set apart (the kernel's 20 s
against journalctl's 8 s + 8 s + 4 s + 5 s + 5 s), and a command still running at the deadline was killed
with its collector: what it had printed was lost. Now the context clamps each command to the deadline,
less the margin the collector needs to spool its output."""

from __future__ import annotations

import json
import shutil
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from collectors.base import Artifact
from collectors.framework import registry
from tests.reliability._capture_fakes import alive, kill, read_pids
from workbench.capture.live import capture
from workbench.capture.live_context import LiveContext, spool_margin
from workbench.cli import build_parser
from workbench.store.bundle import Bundle


class _Recording:
    """A context in which every command exists, succeeds at once and prints three lines: which commands a
    collector runs, and with which timeouts."""

    def __init__(self) -> None:
        self.host = "node01"
        self.since = None
        self.deadline = None
        self.options: dict[str, Any] = vars(build_parser(only="capture").parse_args(["capture"]))
        self.commands: list[tuple[str, float | None]] = []

    def which(self, name: str) -> str:
        return f"/usr/bin/{name}"

    def run(self, argv: list[str], *, kind: str, timeout: float | None = None,
            max_bytes: int | None = None) -> Artifact:
        self.commands.append((" ".join(argv), timeout))
        return Artifact(source=" ".join(argv), kind=kind, data=b"0 one\n1 two\n2 three\n",
                        info={"argv": argv, "exit_code": 0})

    def read_file(self, path: str, *, kind: str, max_bytes: int | None = None, tail: bool = False) -> None:
        return None

    def missing(self, what: str, reason: str) -> None:
        pass


@lru_cache(maxsize=1)
def _declared() -> dict[str, tuple[float, list[tuple[str, float | None]]]]:
    """Collector -> (TIMEOUT, the commands it runs when each succeeds)."""
    found = {}
    for module in registry.all_collectors():
        if hasattr(module, "capture"):
            ctx = _Recording()
            for _ in module.capture(ctx):
                pass
            found[module.NAME] = (float(module.TIMEOUT), ctx.commands)
    return found


@pytest.mark.parametrize("name", sorted(_declared()))
def test_each_command_fits_its_collectors_deadline(name: str) -> None:
    """Each command asks for no more than its collector has once the spool margin is kept back: the
    first one gets all of what it asked for. Later ones get what is left (the clamp, tested below)."""
    budget, commands = _declared()[name]
    room = budget - spool_margin(budget)
    assert [c for c in commands if c[1] is not None and c[1] > room] == []


def test_the_kernel_collectors_commands_fit_its_deadline_in_a_row() -> None:
    """journalctl, its list of boots and the two boots before: the evidence the kernel collector is for,
    in one fixed sequence (no loop over devices), so it fits whole, not only by the clamp."""
    budget, commands = _declared()["kernel"]
    assert len(commands) == 4  # journalctl -k, --list-boots, -b -1, -b -2
    assert sum(t for _, t in commands if t) <= budget - spool_margin(budget)


def test_a_command_gets_only_what_is_left_of_the_deadline(tmp_path: Path) -> None:
    script = tmp_path / "prints-then-hangs"
    script.write_text("#!/bin/sh\necho printed before it hung\nexec sleep 300\n")
    script.chmod(0o755)
    ctx = LiveContext(tmp_path, "node01", None, {}, False, deadline=time.monotonic() + 1.0)
    began = time.monotonic()
    art = ctx.run([str(script)], kind="x", timeout=60)
    assert time.monotonic() - began < 3
    assert art.info["timed_out"] is True and art.info["timeout_s"] <= 1.0
    assert Path(art.path).read_bytes() == b"printed before it hung\n"  # what it printed is kept
    late = ctx.run([str(script)], kind="x", timeout=60)
    assert late.info["exit_code"] is None and late.info["error"].startswith("not started: no time left")
    ctx.close()


def test_every_collector_ends_its_commands_before_its_deadline(tmp_path: Path, monkeypatch) -> None:
    """Every collector that runs commands, each command printing a line and then hanging, with 6 s each:
    none is cut off at its deadline (each command was ended in time by the clamp), and every command that
    was ended keeps what it printed. Files are not read here: copying and redacting a big log is not what
    this measures."""
    hang = tmp_path / "hangs"
    pids = tmp_path / "pids"
    hang.write_text(f'#!/bin/sh\necho $$ >> {pids}\necho "$0 $*: printed before it hung"\n'
                    f'exec {shutil.which("sleep")} 300\n')
    hang.chmod(0o755)
    path = tmp_path / "bin"  # the only commands there are: every one the collectors run, each one hanging
    path.mkdir()
    for name in {command.split()[0] for _, commands in _declared().values() for command, _ in commands}:
        (path / name).symlink_to(hang)
    monkeypatch.setenv("PATH", str(path))
    monkeypatch.setattr(LiveContext, "read_file", lambda self, path, **kw: self.missing(path, "not read here"))
    names = sorted(name for name, (_, commands) in _declared().items() if commands)
    assert {"kernel", "k8s", "slurm", "nvidia_smi", "pci", "storage"} <= set(names)
    began = time.monotonic()
    try:
        out, outcomes, complete = capture(tmp_path / "b.duckdb", only=names,
                                          options={f"timeout_{n}": 6.0 for n in names})
        started = read_pids(pids, 0, wait_s=0)
        assert len(started) >= len(names) and alive(started) == []
    finally:
        kill(read_pids(pids, 0, wait_s=0))
    assert time.monotonic() - began < 30
    assert complete
    assert {o.name: o.status for o in outcomes if o.status == "timeout"} == {}
    with Bundle.open(out) as bundle:
        ran = [(c, json.loads(info), size) for c, info, size in bundle.con.execute(
            "SELECT collector, info, size FROM artifact").fetchall()]
    ended = [(c, info, size) for c, info, size in ran if info.get("timed_out") and info.get("argv")]
    assert {c for c, _, _ in ended} >= {"kernel", "pci", "storage"}
    assert [(c, info["argv"]) for c, info, size in ended if size == 0 and "error" not in info] == []
