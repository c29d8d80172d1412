"""The Slurm isolation rules, applied to a real cluster: the emitted drain, job exclusion and rerun
reservation are run as the argv lists gpuwb writes (and the written slurm.sh with sh), and sinfo and
scontrol must show exactly what the rules said, hostile incident text included."""

from __future__ import annotations

import shlex
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from tests.integration.slurm_cluster import SlurmCluster
from workbench import isolation
from workbench.isolation import Context, Place

pytestmark = pytest.mark.integration

AT = datetime(2026, 3, 15, 8, 0, 0)


def _slurm_argvs(rules: dict) -> list[list[str]]:
    return [c["argv"] for c in rules["commands"] if c["family"] == "slurm"]


def _show(cluster: SlurmCluster, *what: str) -> dict[str, str]:
    """``scontrol show ... -o`` as key=value pairs (values without spaces in these fields)."""
    line = cluster.cmd(["scontrol", "show", *what, "-o"]).stdout
    return dict(token.split("=", 1) for token in line.split() if "=" in token)


def test_drain_and_job_exclusion_land_with_the_reason(slurm_cluster: SlurmCluster):
    c = slurm_cluster
    job = c.sbatch("rerun", "sleep 1", "--hold")
    incident = "INC-7 \"$(touch /tmp/gpuwb-pwned)\" `id`\nrm"
    rules = isolation.rules_for([Place("gpu_fell_off_bus", host=c.node, gpu="0000:5d:00.0")],
                                Context(incident, AT, job=job, user="root", job_nodes=(c.node,)))
    argvs = _slurm_argvs(rules)
    assert [a[:3] for a in argvs] == [["scontrol", "update", f"NodeName={c.node}"],
                                      ["scontrol", "update", f"JobId={job}"]]
    assert any("rerun_reservation left out: no healthy node" in n["text"] for n in rules["notes"])
    for argv in argvs:
        c.cmd(argv)

    reason = next(a for a in argvs[0] if a.startswith("Reason="))[len("Reason="):]
    assert reason.startswith("gpuwb: gpu_fell_off_bus INC-7") and reason.endswith(" 0000:5d:00.0")
    drained = c.cmd(["sinfo", "-h", "-R", "-n", c.node, "-o", "%E|%N|%T"]).stdout.strip().splitlines()
    assert drained == [f"{reason}|{c.node}|drained"], "the reason arrives exactly as emitted"
    node = c.cmd(["scontrol", "show", "node", "-o", c.node]).stdout
    assert "DRAIN" in node and f"Reason={reason} [" in node
    assert _show(c, "job", job)["ExcNodeList"] == c.node
    assert not Path("/tmp/gpuwb-pwned").exists()


def test_rerun_reservation_from_the_written_script(slurm_cluster: SlurmCluster, tmp_path):
    c = slurm_cluster
    rules = isolation.rules_for([Place("gpu_contention", host=c.node, gpu="0000:18:00.0")],
                                Context("INC-8", AT, job="1", user="root", job_nodes=(c.node,)))
    (reserve,) = _slurm_argvs(rules)
    assert reserve[:3] == ["scontrol", "create", "reservation"]
    folder = tmp_path / "rules"
    isolation.write(rules, folder)
    script = folder / "slurm.sh"
    assert shlex.join(reserve) in script.read_text().splitlines()
    run = subprocess.run(["sh", str(script)], env=c.env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr

    shown = _show(c, "reservation", "gpuwb-INC-8-rerun")
    assert shown["ReservationName"] == "gpuwb-INC-8-rerun"
    assert shown["Nodes"] == c.node and shown["Users"] == "root"
    assert shown["Duration"] == "2-00:00:00" and "IGNORE_JOBS" in shown["Flags"]
