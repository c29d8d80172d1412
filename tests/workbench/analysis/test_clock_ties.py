"""Clock ties: node09's clock runs 40 s ahead, and each kind of shared moment finds that on its own;
rows of a reference clock (the controller, the API server) keep their times; ties that disagree give
no offset at all.

Bundles are written row by row (not parsed), one artifact per source so that each row's artifact kind
says which clock stamped it, as ingest does."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from collectors.base import Event, HostFact, Topology
from workbench.analysis.causes import load_causes
from workbench.analysis.clock_ties import REFERENCE_KINDS, reference_artifacts, ties
from workbench.analysis.clockskew import ClockOffsets, estimate_offsets, offset_of
from workbench.analysis.hypotheses import Engine, Place
from workbench.store.bundle import Bundle

T0 = datetime(2025, 3, 1, 14, 0, 0)
HOSTS = ("node07", "node08", "node09")
SKEW = {"node09": 40.0}


def at(seconds: float, host: str | None = None) -> datetime:
    """``seconds`` after T0 as ``host``'s clock stamps it (node09 runs SKEW ahead)."""
    return T0 + timedelta(seconds=seconds + SKEW.get(host or "", 0.0))


def build(path: Path, parts: list[tuple[str, str | None, list]], captured_at: datetime | None = None) -> Path:
    """One artifact per (kind, host, rows), in order."""
    bundle = Bundle.create(path, title="synthetic")
    for n, (kind, host, rows) in enumerate(parts):
        sha, _, _ = bundle.add_artifact(io.BytesIO(f"{path.name}/{n}/{kind}/{host}".encode()), kind=kind,
                                        source=f"{kind}-{n}", collector="synthetic", host=host,
                                        captured_at=captured_at)
        writer = bundle.writer(sha)
        for row in rows:
            writer.add(row)
        writer.flush()
    bundle.seal()
    bundle.close()
    return path


def placement(per_host: int = 2) -> list[Topology]:
    return [Topology(rank=r, host=HOSTS[r // per_host], nranks=len(HOSTS) * per_host, comm_id="c1",
                     cuda_dev=r % per_host, job="4242") for r in range(len(HOSTS) * per_host)]


def steps(numbers: tuple[int, ...], skew: dict[str, float] | None = None) -> list[Event]:
    """Every rank of a synchronous job logs the end of each step within a fraction of a second."""
    skew = SKEW if skew is None else skew
    rows = []
    for step in numbers:
        for rank in range(len(HOSTS) * 2):
            host = HOSTS[rank // 2]
            rows.append(Event(kind="step_time", message=f"[Rank {rank}] step={step}", rank=rank, job="4242",
                              ts=T0 + timedelta(seconds=step * 1.2 + 0.05 * rank + skew.get(host, 0.0)),
                              layer="application", attrs={"framework": "deepspeed", "measure": "compute",
                                                          "step": step, "seconds": 1.2}, line=step * 10 + rank))
    return rows


def offsets_of(path: Path) -> dict[str, float]:
    with Bundle.open(path) as bundle:
        return dict(estimate_offsets(bundle.con))


def test_training_steps_every_rank_logs_tie_the_hosts(tmp_path: Path) -> None:
    path = build(tmp_path / "b.duckdb", [("nccl_log", None, placement() + steps((100, 200, 300)))])
    assert offsets_of(path) == {"node09": pytest.approx(40.0, abs=0.5)}


def test_one_step_alone_is_not_enough(tmp_path: Path) -> None:
    """A step end is only as exact as a step's time: one such moment alone sets no offset."""
    path = build(tmp_path / "b.duckdb", [("nccl_log", None, placement() + steps((100,)))])
    assert offsets_of(path) == {}


def job_states(host: str | None, states: tuple[str, ...]) -> list[Event]:
    return [Event(kind="job_state", message=f"job 4242 {state}", ts=at(60 * n, host), host=host or "node07",
                  job="4242", layer="scheduling", attrs={"job": "4242", "state": state}, line=n)
            for n, state in enumerate(states)]


def test_node_daemon_job_states_against_the_controller(tmp_path: Path) -> None:
    """slurmctld's log (no host: collected centrally) is the reference; node09's slurmd logs the same
    state changes 40 s late by its own clock. The controller's line names node07 (its first node):
    that host gets no offset from it."""
    path = build(tmp_path / "b.duckdb", [("slurm_log", None, job_states(None, ("RUNNING", "COMPLETED"))),
                                         ("slurm_log", "node09", job_states("node09", ("RUNNING", "COMPLETED")))])
    assert offsets_of(path) == {"node09": pytest.approx(40.0, abs=0.5)}


def test_controller_and_accounting_records_do_not_tie_a_host_to_itself(tmp_path: Path) -> None:
    """sacct's End and slurmctld's NODE_FAIL are both reference records of one job on node07, minutes
    apart: not a host's clock against another's (the old estimator split them into ±320 s)."""
    ctld = [Event(kind="job_state", message="job 4242 NODE_FAIL", ts=at(0), host="node07", job="4242",
                  layer="scheduling", attrs={"job": "4242", "state": "NODE_FAIL"}, line=1)]
    acct = [Event(kind="job_state", message="job 4242 NODE_FAIL", ts=at(640), host="node09", job="4242",
                  layer="scheduling", attrs={"job": "4242", "state": "NODE_FAIL"}, line=1)]
    path = build(tmp_path / "b.duckdb", [("slurm_log", None, ctld), ("sacct", None, acct)])
    assert offsets_of(path) == {}


def k8s(host: str, reasons: tuple[str, ...], clock: str | None) -> list[Event]:
    return [Event(kind="k8s_event", message=f"{reason} pod vllm-0", ts=at(90 * n, clock), host=host,
                  layer="scheduling", attrs={"object": "Pod/vllm-0", "namespace": "serving", "container": "vllm",
                                             "reason": reason, "node": host}, line=n)
            for n, reason in enumerate(reasons)]


def test_kubelet_lines_against_the_api_server_events(tmp_path: Path) -> None:
    reasons = ("Pulled", "Started", "Killing")
    path = build(tmp_path / "b.duckdb", [("k8s_events_json", None, k8s("node09", reasons, None)),
                                         ("kubelet_log", "node09", k8s("node09", reasons, "node09"))])
    assert offsets_of(path) == {"node09": pytest.approx(40.0, abs=0.5)}


def test_hosts_date_in_one_capture(tmp_path: Path) -> None:
    """One collector stamped every host's ``date`` file at one moment: each host's ``date`` against it."""
    captured = at(3600)
    parts = [("date", host, [HostFact("date", at(3600, host).isoformat(), host=host)]) for host in HOSTS]
    path = build(tmp_path / "b.duckdb", parts, captured_at=captured)
    assert offsets_of(path) == {"node09": pytest.approx(40.0, abs=0.6)}


def test_a_lone_date_is_no_tie(tmp_path: Path) -> None:
    """One host's ``date`` file alone: its time may be its own clock's or a later copy's."""
    path = build(tmp_path / "b.duckdb", [("date", "node09", [HostFact("date", at(3600, "node09").isoformat(),
                                                                       host="node09")])], captured_at=at(3600))
    with Bundle.open(path) as bundle:
        assert ties(bundle.con) == []
    assert offsets_of(path) == {}


def test_a_reference_clock_row_about_the_skewed_host_keeps_its_time(tmp_path: Path) -> None:
    drained = Event(kind="node_state", message="node node09 DRAIN: maintenance", ts=at(500), host="node09",
                    layer="scheduling", attrs={"node": "node09", "state": "DRAIN"}, line=1)
    xid = Event(kind="xid", message="NVRM: Xid (PCI:0000:19:00): 79", ts=at(400, "node09"), host="node09",
                gpu="0000:19:00.0", layer="hardware", attrs={"xid": 79}, line=1)
    path = build(tmp_path / "b.duckdb", [("nccl_log", None, placement() + steps((100, 200, 300))),
                                         ("sinfo", None, [drained]), ("dmesg", "node09", [xid])])
    with Bundle.open(path) as bundle:
        offsets = estimate_offsets(bundle.con)
        engine = Engine(Place.of(bundle.con), offsets, load_causes(), 3600.0, 5.0)
        rows = {kind: {"ts": ts, "host": host, "artifact": artifact, "rank": None, "gpu": None}
                for kind, ts, host, artifact in bundle.con.execute(
                    "SELECT kind, ts, host, artifact FROM event WHERE kind IN ('node_state', 'xid')").fetchall()}
    assert offsets == {"node09": pytest.approx(40.0, abs=0.5)}
    assert engine.locate(rows["node_state"])["at"] == at(500)
    assert abs((engine.locate(rows["xid"])["at"] - at(400)).total_seconds()) < 0.5


def test_reference_kinds_are_artifact_kinds_and_a_hosts_daemon_log_is_its_own_clock(tmp_path: Path) -> None:
    path = build(tmp_path / "b.duckdb", [("slurm_log", None, []), ("slurm_log", "node09", []), ("sacct", None, []),
                                         ("dmesg", "node09", [])])
    with Bundle.open(path) as bundle:
        kinds = dict(bundle.con.execute("SELECT sha256, coalesce(host, '') || ':' || kind FROM artifact").fetchall())
        found = sorted(kinds[sha] for sha in reference_artifacts(bundle.con))
    assert found == [":sacct", ":slurm_log"]
    assert "sacct" in REFERENCE_KINDS and "dmesg" not in REFERENCE_KINDS
    # a plain mapping (a caller without reference information) still applies the host's offset
    assert offset_of({"node09": 40.0}, {"host": "node09", "artifact": "x"}) == 40.0
    assert offset_of(ClockOffsets({"node09": 40.0}, ["x"]), {"host": "node09", "artifact": "x"}) == 0.0


def test_ties_that_disagree_invent_no_offset(tmp_path: Path) -> None:
    """node09's steps say +40 s, its slurmd says -20 s against the controller: no offset for node09."""
    path = build(tmp_path / "b.duckdb", [
        ("nccl_log", None, placement() + steps((100, 200, 300))),
        ("slurm_log", None, job_states(None, ("RUNNING", "COMPLETED", "CANCELLED"))),
        ("slurm_log", "node09", [Event(kind="job_state", message=f"job 4242 {state}", ts=at(60 * n - 20),
                                       host="node09", job="4242", layer="scheduling",
                                       attrs={"job": "4242", "state": state}, line=n)
                                 for n, state in enumerate(("RUNNING", "COMPLETED", "CANCELLED"))]),
    ])
    assert "node09" not in offsets_of(path)


def test_two_hosts_that_disagree_with_no_third_clock_get_no_offset(tmp_path: Path) -> None:
    rows = [Topology(rank=r, host=HOSTS[1 + r // 2], nranks=4, comm_id="c1", cuda_dev=r % 2, job="4242")
            for r in range(4)]
    rows += [Event(kind="step_time", message=f"[Rank {r}] step={s}", rank=r, job="4242", layer="application",
                   ts=T0 + timedelta(seconds=s * 1.2 + SKEW.get(HOSTS[1 + r // 2], 0.0)),
                   attrs={"framework": "deepspeed", "measure": "compute", "step": s}, line=s * 10 + r)
             for s in (100, 200, 300) for r in range(4)]
    path = build(tmp_path / "b.duckdb", [("nccl_log", None, rows)])
    assert offsets_of(path) == {}


def oom_parts(kills: tuple[float, ...]) -> list[tuple[str, str | None, list]]:
    """The API server saw vllm-0 end OOMKilled at 300 s; node09's kernel logged its kills by its own clock."""
    ended = Event(kind="k8s_event", message="OOMKilled Pod/vllm-0", ts=at(300), host="node09", layer="scheduling",
                  attrs={"object": "Pod/vllm-0", "namespace": "serving", "container": "vllm", "reason": "OOMKilled",
                         "node": "node09", "exit_code": 137}, line=1)
    kernel = [Event(kind="oom_kill", message="Memory cgroup out of memory: Killed process 6679 (python3)",
                    ts=at(when, "node09"), host="node09", layer="host",
                    attrs={"pid": 6679 + n, "cgroup": "/kubepods.slice/kubepods-pod8d1a.slice/cri-containerd.scope"},
                    line=n + 1) for n, when in enumerate(kills)]
    return [("k8s_pods_json", None, [ended]), ("dmesg_ctime", "node09", kernel)]


def test_container_oom_end_against_the_kernels_kill_on_its_node(tmp_path: Path) -> None:
    path = build(tmp_path / "b.duckdb", oom_parts((299.6,)))
    assert offsets_of(path) == {"node09": pytest.approx(40.0, abs=0.5)}


def test_two_kernel_kills_near_one_container_end_are_no_tie(tmp_path: Path) -> None:
    """Which of two kills ended the container cannot be told from the times: no offset."""
    path = build(tmp_path / "b.duckdb", oom_parts((299.6, 250.0)))
    assert offsets_of(path) == {}
