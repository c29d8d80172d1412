"""The Slurm isolation rules, applied to a real cluster: the emitted drain, job exclusion and rerun
reservation are run as the argv lists gpuwb writes (and the written slurm.sh with sh, and through
``gpuwb report --isolation DIR --apply slurm``), and sinfo and scontrol must show exactly what the rules
said, hostile incident text included."""

from __future__ import annotations

import re
import shlex
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.integration.slurm_cluster import SlurmCluster
from workbench.prevention import isolation
from workbench.prevention.isolation import Context, Place

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


def _renamed(raw: Path, names: dict[str, str]) -> None:
    """Every raw file with each old name (a whole host name or job id) replaced, host folders too."""
    pattern = re.compile("|".join(rf"(?<![A-Za-z0-9.]){re.escape(old)}(?![0-9])" for old in names))
    for path in sorted(raw.rglob("*"), reverse=True):
        if path.is_file():
            path.write_text(pattern.sub(lambda m: names[m.group(0)], path.read_text(errors="replace")))
        if path.name in names:
            path.rename(path.with_name(names[path.name]))


def test_a_reports_rules_drain_the_culprit_on_the_cluster_and_dry_run_only_prints(
        slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A drill's GPU that fell off the bus, on the test cluster's node and a real held job: ``report
    --apply slurm --dry-run`` prints the commands and changes nothing; ``--apply slurm`` drains the node
    with gpuwb's reason (sinfo says so) and keeps the job off it."""
    from workbench.prevention.drill import write

    c = slurm_cluster
    c.cmd(["scontrol", "update", f"NodeName={c.node}", "State=RESUME"], check=False)  # an earlier test drained it
    job = c.sbatch("rerun", "sleep 1", "--hold")
    drill = write("gpu_fell_off_bus", None, 1, tmp_path / "drill", ingest=False)
    failed_job = re.search(r"Job (\d+)", drill.truth.title)
    assert drill.truth.host and failed_job
    _renamed(drill.raw, {drill.truth.host: c.node, failed_job.group(1): job})
    bundle = tmp_path / "incident.duckdb"
    assert run_cli("ingest", bundle, drill.raw)[0] == 0
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    rules = tmp_path / "rules"
    report = ("report", bundle, "--no-verify", "-o", tmp_path / "r.md", "--isolation", rules, "--apply", "slurm")

    code, out, err = run_cli(*report, "--dry-run")
    assert code == 0 and out == "", err
    drain = next(shlex.split(line) for line in (rules / "slurm.sh").read_text().splitlines()
                 if line.startswith("scontrol update NodeName="))
    assert drain[2] == f"NodeName={c.node}" and shlex.join(drain) in err.splitlines()
    state = c.cmd(["sinfo", "-h", "-n", c.node, "-o", "%T"]).stdout.strip()
    assert "drain" not in state and not c.cmd(["sinfo", "-h", "-R", "-n", c.node]).stdout.strip(), \
        f"a dry run changes nothing ({state})"

    code, out, err = run_cli(*report)
    assert code == 0, err
    reason = drain[-1].removeprefix("Reason=")
    assert reason.startswith("gpuwb: gpu_fell_off_bus ") and reason.endswith(f" {drill.truth.gpu}")
    assert f"ran: {shlex.join(drain)}" in err.splitlines()
    drained = c.cmd(["sinfo", "-h", "-R", "-n", c.node, "-o", "%E|%N|%T"]).stdout.strip().splitlines()
    assert drained == [f"{reason}|{c.node}|drained"], "sinfo reports the node drained with gpuwb's reason"
    assert _show(c, "job", job)["ExcNodeList"] == c.node
