"""Causal chains (workbench/analysis/chains.py): of two present causes the catalog's upstream one is the
root when it came first at the same place, the hypothesis says the chain in order, and the first
anomaly is the chain's first link. Each incident is a drill's evidence (native formats, seeded) with
the lines of the chain's other link added or edited, ingested and analysed as a responder would."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from workbench.analysis import chains
from workbench.analysis.engine import analyze
from workbench.analysis.findings import Hypothesis
from workbench.analysis.hypotheses import Candidate, SymptomGroup
from workbench.ingest.session import ingest_paths
from workbench.prevention.drill import generate, serving, training
from workbench.prevention.drill.incident import Drill
from workbench.store.bundle import Bundle

SEEDS = (1, 2)


def _run(d: Drill, tmp_path: Path, edit: Callable[[Path], None] | None = None) -> dict:
    """Write the drill's evidence (then ``edit`` the raw folder), ingest it and analyse the bundle."""
    module = training if d.workload == "training" else serving
    captured = module.capture(d)
    raw = tmp_path / "raw"
    d.write(raw, captured)
    if edit is not None:
        edit(raw)
        for path in raw.rglob("*"):
            if path.is_file():
                os.utime(path, (captured.timestamp(), captured.timestamp()))
    with Bundle.create(tmp_path / "bundle.duckdb", title="chain") as bundle:
        ingest_paths(bundle, [str(raw)])
    with Bundle.open(tmp_path / "bundle.duckdb") as bundle:
        return analyze(bundle)


def _ts(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)


def _causes(top: dict) -> list[str]:
    return [link["cause"] for link in top["chain"] if "cause" in link]


def _dpkg_upgrade(d: Drill, host: str, when: datetime) -> None:
    """apt upgrades the NVIDIA driver packages on ``host`` (dpkg.log), the kernel module stays loaded."""
    old, new = "550.90.07-0ubuntu0.22.04.1", "550.107.02-0ubuntu0.22.04.1"
    lines = []
    for i, pkg in enumerate(("nvidia-driver-550", "libnvidia-compute-550", "nvidia-utils-550")):
        at = when + timedelta(seconds=2 * i)
        lines += [f"{at:%Y-%m-%d %H:%M:%S} upgrade {pkg}:amd64 {old} {new}",
                  f"{at:%Y-%m-%d %H:%M:%S} status installed {pkg}:amd64 {new}"]
    d.add(f"{host}/dpkg.log", *lines)


def _fabric_manager_start(d: Drill) -> datetime:
    """When the culprit's Fabric Manager refused to start (the drill's journal line)."""
    line = next(x for x in d.files[f"{d.culprit}/journal-nvidia-fabricmanager.txt"] if "don't match" in x)
    stamp = datetime.strptime(f"{d.start.year} {line[:15]}", "%Y %b %d %H:%M:%S")
    return _utc(stamp)


# -- driver change -> Fabric Manager down -> CUDA 802 -> job failed -----------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_a_driver_upgrade_the_day_before_is_the_root_of_fabric_manager_down(tmp_path: Path, seed: int) -> None:
    d = generate("fabric_manager_down", "training", seed)
    down = _fabric_manager_start(d)
    upgrade = down - timedelta(hours=20, minutes=13)
    _dpkg_upgrade(d, d.culprit, upgrade)
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("driver_stack_mismatch", d.culprit), top["summary"]
    assert _causes(top)[:2] == ["driver_stack_mismatch", "fabric_manager_down"]
    assert _ts(top["chain"][0]["first_seen"]) == upgrade
    assert _ts(top["chain"][1]["first_seen"]) == down
    assert "fabric_manager_down" in top["consequences"]
    before, after = top["summary"].split(" led to ", 1)  # the upgrade's own line, then the chain in words
    assert "upgrade nvidia-driver-550" in before and d.culprit in before, top["summary"]
    assert after.startswith(f"NVIDIA Fabric Manager not running or not matching the driver on {d.culprit} at "), after
    first = result["first_anomaly"]
    assert (_ts(first["ts"]), first["host"], first["kind"]) == (upgrade, d.culprit, "change")
    fm = next(h for h in result["hypotheses"] if h["cause"] == "fabric_manager_down")
    assert fm["score"] < top["score"]
    typed = Hypothesis.from_json(top).chain  # what the report and the cockpit read
    naive = [(link.cause, link.first_seen and link.first_seen.replace(tzinfo=None)) for link in typed[:2]]
    assert naive == [("driver_stack_mismatch", upgrade.replace(tzinfo=None)),
                     ("fabric_manager_down", down.replace(tzinfo=None))]


def test_a_driver_upgrade_on_another_host_does_not_take_fabric_manager_downs_place(tmp_path: Path) -> None:
    d = generate("fabric_manager_down", "training", 1)
    other = next(h for h in d.hosts if h != d.culprit)
    down = _fabric_manager_start(d)
    _dpkg_upgrade(d, other, down - timedelta(hours=20))
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("fabric_manager_down", d.culprit), top["summary"]
    assert _causes(top)[0] == "fabric_manager_down"
    assert _ts(result["first_anomaly"]["ts"]) == down


def test_a_driver_upgrade_days_before_is_not_what_stopped_fabric_manager(tmp_path: Path) -> None:
    """A change lies dormant until the next restart, but not for days: beyond CHANGE_LATENCY_S no link."""
    d = generate("fabric_manager_down", "training", 1)
    down = _fabric_manager_start(d)
    _dpkg_upgrade(d, d.culprit, down - timedelta(days=3))
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert top["cause"] == "fabric_manager_down", top["summary"]
    assert all(h["cause"] != "driver_stack_mismatch" or "fabric_manager_down" not in h["consequences"]
               for h in result["hypotheses"])


# -- a container's own memory growth -> OOM kill -> restarts -> 5xx ------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_a_containers_oom_kill_is_the_root_of_the_restarts_that_look_like_missing_capacity(
        tmp_path: Path, seed: int) -> None:
    d = generate("host_oom_kill", "inference", seed)
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("host_oom_kill", d.culprit), top["summary"]
    causes = _causes(top)
    assert causes[0] == "host_oom_kill" and "insufficient_capacity" in causes[1:], top["chain"]
    capacity = [h for h in result["hypotheses"] if h["cause"] == "insufficient_capacity"]
    assert all(h["score"] < top["score"] for h in capacity)
    times = [_ts(link["first_seen"]) for link in top["chain"] if "cause" in link]
    assert times == sorted(times)
    first = result["first_anomaly"]
    assert first["host"] == d.culprit and first["kind"] in ("oom_invoked", "oom_kill")
    assert _ts(first["ts"]) == _ts(top["chain"][0]["first_seen"])
    assert "led to" in top["summary"] and "schedulable GPU capacity" in top["summary"], top["summary"]


# -- thermal throttle -> straggler -> NCCL timeout / time limit ----------------------------------------
_BUSY_AND_HOT = ((re.compile(r"((?:HW|HW Thermal|SW Thermal) Slowdown\s*:\s*)Not Active"), r"\1Active"),
                 (re.compile(r"(Idle\s*:\s*)Active"), r"\1Not Active"),
                 (re.compile(r"(Performance State\s*:\s*)P8"), r"\1P0"),
                 (re.compile(r"(\n\s+Gpu\s*:\s*)0 %"), r"\g<1>99 %"),
                 (re.compile(r"(GPU Current Temp\s*:\s*)\d+ C"), r"\g<1>93 C"))
"""nvidia-smi -q of a GPU still busy and hot when the responder took it (the job still crawling)."""


def _busy_and_hot(section: str) -> str:
    for pattern, repl in _BUSY_AND_HOT:
        section = pattern.sub(repl, section)
    return section


@pytest.mark.parametrize("seed", SEEDS)
def test_a_throttle_seen_only_at_capture_starts_at_the_slow_ranks_first_slow_step(tmp_path: Path, seed: int) -> None:
    """The culprit host's GPU samples are lost; nvidia-smi -q at capture shows the slowdown: the first
    anomaly is the slow rank's first slow step (a timed line), not the snapshot's capture time."""
    d = generate("thermal_throttling", "training", seed)
    bus = d.gpu.upper()

    def edit(raw: Path) -> None:
        (raw / d.culprit / "gpu-query.csv").unlink()
        smi = raw / d.culprit / "nvidia-smi-q.txt"
        sections = re.split(r"(?m)^(?=GPU 0000)", smi.read_text())
        smi.write_text("".join(_busy_and_hot(s) if s.upper().startswith(f"GPU {bus}") else s for s in sections))

    result = _run(d, tmp_path, edit)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("thermal_throttling", d.culprit), top["summary"]
    straggler = next(s for s in result["symptoms"] if s["kind"] == "straggler_rank" and s["host"] == d.culprit)
    first = result["first_anomaly"]
    assert first["kind"] == "straggler_rank" and first["host"] == d.culprit, first
    assert _ts(first["ts"]) == _ts(straggler["first_seen"]) > _utc(d.fault)
    assert _ts(first["ts"]) < _ts(top["first_seen"])  # the snapshot's time is later
    kinds = [link.get("symptom") for link in top["chain"]]
    assert _causes(top)[0] == "thermal_throttling" and "straggler_rank" in kinds


@pytest.mark.parametrize("seed", SEEDS)
def test_a_sampled_throttle_is_the_first_link_before_the_straggler(tmp_path: Path, seed: int) -> None:
    d = generate("thermal_throttling", "training", seed)
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("thermal_throttling", d.culprit)
    first = result["first_anomaly"]
    assert first["host"] == d.culprit and first["kind"] in ("gpu_throttle", "gpu_sample"), first
    assert _ts(first["ts"]) == _ts(top["chain"][0]["first_seen"])
    symptom_times = [_ts(link["first_seen"]) for link in top["chain"] if "symptom" in link]
    assert symptom_times and min(symptom_times) >= _ts(first["ts"])


# -- traffic surge -> KV cache full -> preemption -> TTFT ----------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_a_traffic_surge_is_the_root_of_the_kv_cache_filling(tmp_path: Path, seed: int) -> None:
    d = generate("traffic_surge", "inference", seed)
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert top["cause"] == "traffic_surge", top["summary"]
    causes = _causes(top)
    assert causes[0] == "traffic_surge" and "kv_cache_pressure" in causes
    assert len(causes) == len(set(causes))  # one link per cause, however many replicas
    kv = next(link for link in top["chain"] if link.get("cause") == "kv_cache_pressure")
    assert _ts(kv["first_seen"]) > _ts(top["chain"][0]["first_seen"])
    assert _ts(result["first_anomaly"]["ts"]) == _ts(top["chain"][0]["first_seen"])
    assert result["first_anomaly"]["kind"] == "request_rate_surge"
    assert "KV cache" in top["summary"].split("led to", 1)[1]


# -- FailedScheduling that names cordoned nodes ---------------------------------------------------------
def test_failed_scheduling_that_names_cordoned_nodes_is_drained_nodes_not_missing_capacity(tmp_path: Path) -> None:
    d = generate("insufficient_capacity", "inference", 1)

    def edit(raw: Path) -> None:
        for path in raw.rglob("*.json"):
            text = path.read_text()
            if "FailedScheduling" not in text:
                continue
            doc = json.loads(text)
            for item in doc.get("items", []):
                if item.get("reason") == "FailedScheduling":
                    item["message"] = re.sub(r"(\d+) Insufficient nvidia\.com/gpu",
                                             r"\1 node(s) had untolerated taint {node.kubernetes.io/unschedulable: }",
                                             item["message"])
            path.write_text(json.dumps(doc))

    result = _run(d, tmp_path, edit)
    top = result["hypotheses"][0]
    assert top["cause"] == "node_drained", [(h["cause"], h["score"]) for h in result["hypotheses"][:3]]


def test_failed_scheduling_short_of_gpus_stays_missing_capacity(tmp_path: Path) -> None:
    result = _run(generate("insufficient_capacity", "inference", 1), tmp_path)
    assert result["hypotheses"][0]["cause"] == "insufficient_capacity"


# -- hot GPU -> slow steps for hours -> the job's time limit ----------------------------------------------
@pytest.mark.parametrize("cause", ["thermal_throttling", "power_throttling"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_throttle_hours_before_the_time_limit_is_its_root(tmp_path: Path, cause: str, seed: int) -> None:
    """At the hardest level the throttle's last sample lies an hour or more before the TIMEOUT, on
    another host than the one the scheduler's line names: the time limit accrued over the whole run,
    so a throttle anywhere in the job's run is what paced it."""
    d = generate(cause, "training", seed, "hardest")
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == (cause, d.culprit), [(h["cause"], h["host"]) for h in result["hypotheses"]]
    assert _causes(top)[:2] == [cause, "job_time_limit"]
    first = result["first_anomaly"]
    lag = _ts(first["ts"]) - _utc(d.truth("unused").first_anomaly_at)
    # the first throttle sample (one scrape interval), not the TIMEOUT hours later
    assert first["host"] == d.culprit and abs(lag.total_seconds()) <= 30.0, first


# -- a lasting state: Fabric Manager down hours before the failure still explains it -------------------
@pytest.mark.parametrize("seed", SEEDS)
def test_fabric_manager_down_hours_before_the_failure_still_explains_it(tmp_path: Path, seed: int) -> None:
    """At the hard level Fabric Manager's error lies an hour or more before the job fails: it has been
    down all along (a lasting state), so the failure it explains scores as one it caused now."""
    d = generate("fabric_manager_down", "training", seed, "hard")
    result = _run(d, tmp_path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("fabric_manager_down", d.culprit)
    assert top["explains"]["symptom_groups"] >= 1, top["explains"]
    assert "job_failed" in [link.get("symptom") for link in top["chain"]]
    assert top["score"] >= 0.5


# -- a bad deploy: the rollout is the first anomaly, not an error blip days before it ---------------------
def test_the_first_anomaly_of_a_bad_deploy_is_the_rollout_not_an_error_days_before() -> None:
    """Errors three days before a rollout were another episode: the chain opens at the change, so
    the first anomaly is the rollout, then the errors after it, never the old blip."""
    rollout = datetime(2026, 4, 14, 5, 24, 31)
    change = {"kind": "change", "strength": 0.9, "at": rollout, "host": None, "gpu": None, "origin": None,
              "text": "deploy model llama v18 -> v19 by ci-bot", "cause": "bad_change"}
    top = Candidate(cause="bad_change", layer="business", scope="global", host=None, gpu=None, rows=[change])

    def spike(host: str, at: datetime) -> dict:
        return {"kind": "error_rate_spike", "strength": 1.0, "at": at, "host": host, "gpu": None, "origin": None,
                "text": "error ratio 0.29 (baseline 0)"}

    blip = spike("vllm-old11", rollout - timedelta(days=3))
    after = spike("vllm-4dtpn", rollout + timedelta(seconds=41))
    groups = [SymptomGroup(kind="error_rate_spike", host=r["host"], nodes=frozenset(), rows=[r], first=r["at"],
                           count=1, explained_by=top) for r in (blip, after)]
    rows = chains.first_anomaly_rows(top, groups, horizon_s=900.0)
    assert blip not in rows and after in rows
    assert min(rows, key=lambda r: r["at"]) is change


# -- the first anomaly is the first abnormal line, wherever the loud one is ------------------------------
@pytest.mark.parametrize(("cause", "workload"), [
    ("driver_stack_mismatch", "training"),  # the dpkg upgrade hours before CUDA fails
    ("gpu_fell_off_bus", "training"),  # the first non-fatal AER minutes before the fatal one and Xid 79
    ("ecc_uncorrectable", "training"),  # Xid 94, not the traceback stamped with the step line before it
    ("pod_eviction", "inference"),  # the kubelet's eviction threshold before the eviction
    ("fabric_manager_down", "inference"),  # Fabric Manager refusing to start before the pod's CUDA 802
    ("numeric_instability", "training"),  # the loss jumping half again two logs before it turns NaN
])
def test_the_first_anomaly_is_the_drills_first_abnormal_line(tmp_path: Path, cause: str, workload: str) -> None:
    d = generate(cause, workload, 1)
    truth = d.truth("unused")
    result = _run(d, tmp_path)
    assert result["hypotheses"][0]["cause"] == cause
    first = _ts(result["first_anomaly"]["ts"])
    want = _utc(truth.first_anomaly_at)
    assert abs((first - want).total_seconds()) <= 1.0, (result["first_anomaly"], want)
    if cause != "ecc_uncorrectable":
        assert want < _utc(d.fault)  # the loud line came later
