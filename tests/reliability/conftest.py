"""Fixtures for the fault tests: a file system that fills up, a bundle's command run as a user would.

A full disk is a real one: a small tmpfs mounted for the test (CI and the development machines run as
root; a machine where mounting is refused fails the test with that reason rather than skipping it, since
a skipped fault test hides the fault)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``small_fs(bytes)`` mounts a tmpfs of that size and returns its folder; all are unmounted after."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"cannot mount a small tmpfs for the full-disk test: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def gpuwb(*args: str, timeout: float = 120, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``gpuwb ARGS`` in a child process of this checkout, as a user runs it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.update(kwargs.pop("env", {}) or {})  # type: ignore[arg-type]
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **kwargs)  # type: ignore[call-overload]
