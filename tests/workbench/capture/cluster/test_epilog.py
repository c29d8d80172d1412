"""scripts/slurm-epilog-gpuwb.sh, run as slurmd runs it (Slurm's variables only, settings beside it),
with a stand-in gpuwb: it captures only after a failed job, names files only from safe values, cuts a
capture off at its limit, and never fails (a failing Epilog drains the node)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from workbench.capture.cluster.coverage import judge

FAKE_GPUWB = """#!/bin/sh
printf '%s\\n' "$@" > "$FAKE_ARGS"
case "$FAKE_MODE" in
  ok) while [ "$1" != -o ]; do shift; done; : > "$2" ;;
  hang) sleep 60 ;;
  fail) echo "gpuwb: error: something broke" >&2; exit 3 ;;
esac
"""


@pytest.fixture
def epilog(tmp_path: Path) -> Path:
    etc = tmp_path / "etc"
    etc.mkdir()
    script = etc / "slurm-epilog-gpuwb.sh"
    shutil.copy(ROOT / "scripts" / "slurm-epilog-gpuwb.sh", script)
    fake = tmp_path / "gpuwb"
    fake.write_text(FAKE_GPUWB)
    fake.chmod(0o755)
    (etc / "gpuwb-epilog.conf").write_text(f"GPUWB={fake}\nGPUWB_DIR={tmp_path / 'spool'}\nGPUWB_TIMEOUT=1\n")
    return script


def run_epilog(script: Path, mode: str, *, exit_code: str = "768", node: str = "gpu-node-01",
               job: str = "42") -> subprocess.CompletedProcess:
    env = {"SLURM_JOB_ID": job, "SLURM_JOB_EXIT_CODE": exit_code, "SLURMD_NODENAME": node,
           "SLURM_SCRIPT_CONTEXT": "epilog_slurmd", "FAKE_MODE": mode, "FAKE_ARGS": str(script.parent / "args")}
    return subprocess.run(["/bin/sh", str(script)], env=env, capture_output=True, text=True, timeout=60)


def test_a_failed_job_is_captured_on_the_node(epilog):
    proc = run_epilog(epilog, "ok")
    assert proc.returncode == 0, proc.stderr
    args = (epilog.parent / "args").read_text().splitlines()
    nodes = epilog.parent.parent / "spool" / "job-42" / "nodes"
    assert args[:6] == ["capture", "--safe", "--since", "2h", "--slurm-job", "42"]
    assert args[args.index("-o") + 1] == str(nodes / "gpu-node-01.duckdb")
    assert "exit 768" in args[args.index("--title") + 1]
    assert (nodes / "gpu-node-01.duckdb").exists() and (nodes / "gpu-node-01.log").exists()


def test_a_job_that_exited_0_is_left_alone(epilog):
    assert run_epilog(epilog, "ok", exit_code="0").returncode == 0
    assert not (epilog.parent / "args").exists() and not (epilog.parent.parent / "spool").exists()


@pytest.mark.parametrize("node, job", [("../../etc", "42"), ("gpu-node-01", "42;id"), ("", "42"), (".hidden", "1")])
def test_names_from_the_environment_never_make_paths(epilog, node, job):
    assert run_epilog(epilog, "ok", node=node, job=job).returncode == 0
    assert not (epilog.parent / "args").exists()


def test_a_hung_capture_is_cut_off_and_collect_calls_it_a_timeout(epilog):
    began = time.monotonic()
    proc = run_epilog(epilog, "hang")
    assert proc.returncode == 0 and time.monotonic() - began < 15
    log = epilog.parent.parent / "spool" / "job-42" / "nodes" / "gpu-node-01.log"
    assert log.read_text().splitlines()[-1] == "gpuwb-epilog: cut off after 1 s"
    r = judge("gpu-node-01", bundle=log.with_suffix(".duckdb"), log=log)
    assert (r.status, r.reason) == ("timeout", "gpuwb-epilog: cut off after 1 s")


def test_a_failing_capture_never_fails_the_epilog(epilog):
    proc = run_epilog(epilog, "fail")
    assert proc.returncode == 0
    log = epilog.parent.parent / "spool" / "job-42" / "nodes" / "gpu-node-01.log"
    assert log.read_text().splitlines() == ["gpuwb: error: something broke", "gpuwb-epilog: capture exited 3"]
    r = judge("gpu-node-01", bundle=log.with_suffix(".duckdb"), log=log)
    assert (r.status, r.reason) == ("failed", "gpuwb-epilog: capture exited 3")
