"""The root-cause engine on small hand-built bundles: the cause outranks the noise, symptoms attach
to their cause, clocks are corrected, and a quiet bundle gets no root cause.

Rows are written directly (not parsed) so these tests pin the engine, not the parsers; the
scenario suite (tests/scenarios) covers the same chains from raw files."""

from __future__ import annotations

import io
import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from collectors.base import Event, GpuSample, SeriesPoint, Topology
from tests.conftest import run_cli
from workbench.analysis.clockskew import estimate_offsets
from workbench.analysis.engine import analyze
from workbench.analysis.hypotheses import LOW_SCORE, expand_hostlist
from workbench.analysis.workload import detect_workload
from workbench.store.bundle import Bundle

T0 = datetime(2025, 3, 1, 14, 0, 0)
DESIGN_KEYS = {"workload", "window", "first_anomaly", "hypotheses", "layers"}
HYPOTHESIS_KEYS = {"rank", "layer", "cause", "score", "host", "gpu", "ranks", "first_seen", "summary", "symptoms",
                   "evidence"}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def make_bundle(path: Path, rows: list, collector: str | None = "kernel") -> Path:
    bundle = Bundle.create(path, title="synthetic")
    sha, _, _ = bundle.add_artifact(io.BytesIO(path.name.encode()), kind="synthetic", source="synthetic",
                                    collector=collector)
    writer = bundle.writer(sha)
    for row in rows:
        writer.add(row)
    writer.flush()
    bundle.seal()
    bundle.close()
    return path


def run(path: Path, workload: str | None = None) -> dict:
    with Bundle.open(path) as bundle:
        return analyze(bundle, workload=workload)


def topology(hosts: tuple[str, ...] = ("node07", "node08"), per_host: int = 2) -> list[Topology]:
    rows = []
    for r in range(len(hosts) * per_host):
        rows.append(Topology(rank=r, host=hosts[r // per_host], nranks=len(hosts) * per_host, comm_id="c1",
                             cuda_dev=r % per_host, gpu=f"0000:{0x19 + r % per_host:02x}:00.0", job="4242"))
    return rows


def timeouts(ranks: dict[int, str], when: float, skew: dict[str, float] | None = None) -> list[Event]:
    skew = skew or {}
    return [Event(kind="nccl_timeout", message=f"[Rank {r}] Watchdog caught collective operation timeout",
                  ts=at(when + skew.get(h, 0.0)), host=h, rank=r, layer="network_storage",
                  attrs={"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "elapsed_ms": 600020},
                  line=200 + r) for r, h in ranks.items()]


def xid79_rows() -> list:
    rows: list = topology()
    rows.append(Event(kind="pcie_aer", message="pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received",
                      ts=at(0), host="node07", layer="hardware",
                      attrs={"severity": "uncorrected_fatal", "device": "0000:17:01.0"}, line=10))
    rows.append(Event(kind="xid", message="NVRM: Xid (PCI:0000:19:00): 79, pid=0, GPU has fallen off the bus.",
                      ts=at(1), host="node07", gpu="0000:19:00.0", layer="hardware", attrs={"xid": 79}, line=11))
    rows.append(Event(kind="xid", message="NVRM: Xid (PCI:0000:3b:00): 13, Graphics SM Warp Exception",
                      ts=at(-7200), host="node08", gpu="0000:3b:00.0", layer="gpu", attrs={"xid": 13}, line=12))
    rows += [Event(kind="pcie_aer", message="AER: Corrected error received: 0000:5d:00.0", ts=at(-36000 + i * 1200),
                   host="node08", layer="hardware", attrs={"severity": "corrected", "device": "0000:5d:00.0"},
                   line=100 + i) for i in range(30)]
    rows += timeouts({1: "node07", 2: "node08", 3: "node08"}, 601)
    rows.append(Event(kind="job_state", message="job 4242 NODE_FAIL", ts=at(700), layer="scheduling",
                      attrs={"job": "4242", "state": "NODE_FAIL", "nodes": "node[07-08]"}, line=300))
    return rows


def test_pcie_then_xid79_outranks_earlier_xid13_and_chronic_aer(tmp_path: Path) -> None:
    result = run(make_bundle(tmp_path / "b.duckdb", xid79_rows()))
    top = result["hypotheses"][0]
    assert (top["layer"], top["cause"], top["host"], top["gpu"]) == \
        ("hardware", "gpu_fell_off_bus", "node07", "0000:19:00.0")
    assert top["ranks"] == [0]
    assert set(top["symptoms"]) >= {"nccl_timeout", "job_failed"}
    assert top["absorbed"] == ["pcie_link_degraded"]
    assert result["first_anomaly"]["kind"] == "pcie_aer" and result["first_anomaly"]["host"] == "node07"
    others = {h["cause"]: h["score"] for h in result["hypotheses"][1:]}
    assert others["app_gpu_fault"] < LOW_SCORE
    assert others.get("pcie_link_degraded", 0.0) < 0.1
    assert result["layers"]["hardware"]["verdict"] == "fault"
    assert result["layers"]["gpu"]["verdict"] in ("suspect", "clear")
    assert top["evidence"][0]["line"] == 10 and len(top["evidence"][0]["artifact"]) == 64


def test_json_shape_is_design_contract(tmp_path: Path) -> None:
    path = make_bundle(tmp_path / "b.duckdb", xid79_rows())
    code, out, err = run_cli("analyze", path, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert DESIGN_KEYS <= set(doc)
    assert (doc["workload"], doc["impact"]) == ("training", "failure")
    assert set(doc["layers"]) == {"business", "scheduling", "gpu", "network_storage", "hardware"}
    for layer in doc["layers"].values():
        assert layer["verdict"] in ("fault", "suspect", "clear", "no_evidence")
        assert all(set(f) == {"check", "title", "rows"} for f in layer["findings"])
    for n, hyp in enumerate(doc["hypotheses"], start=1):
        assert HYPOTHESIS_KEYS <= set(hyp) and hyp["rank"] == n and 0 <= hyp["score"] <= 1
        for ev in hyp["evidence"]:
            assert set(ev) == {"source", "ts", "host", "text", "artifact", "line"}
    assert set(doc["first_anomaly"]) == {"ts", "host", "layer", "kind", "text"}
    assert doc["window"]["start"].endswith("Z")


def test_text_output_lists_verdicts_and_evidence(tmp_path: Path) -> None:
    code, out, _ = run_cli("analyze", make_bundle(tmp_path / "b.duckdb", xid79_rows()))
    assert code == 0
    assert "hardware/gpu_fell_off_bus" in out and "FAULT" in out and "fallen off the bus" in out
    assert "First anomaly:" in out


def test_workload_override(tmp_path: Path) -> None:
    doc = run(make_bundle(tmp_path / "b.duckdb", xid79_rows()), workload="inference")
    assert doc["workload"] == "inference" and doc["playbook"]["workload"] == "inference"
    code, _, err = run_cli("analyze", tmp_path / "b.duckdb", "--workload", "batch")
    assert code == 2 and "invalid choice" in err


def test_clock_offset_from_collective_timeouts(tmp_path: Path) -> None:
    """node09's clock runs 40 s ahead: its link_down looks later than node07's NCCL error unless
    the offset learned from the shared collective timeout is applied."""
    rows: list = topology(("node07", "node08", "node09"))
    skew = {"node09": 40.0}
    rows.append(Event(kind="link_down", message="mlx5_core 0000:3b:00.0: Port 1 link down", ts=at(0 + 40),
                      host="node09", layer="network_storage", attrs={"device": "mlx5_0", "port": 1}, line=1))
    rows.append(Event(kind="nccl_net_error", message="NET/IB : Got completion from peer with status=12",
                      ts=at(8), host="node07", rank=0, layer="network_storage", attrs={"status": 12}, line=2))
    rows += timeouts({0: "node07", 1: "node07", 2: "node08", 3: "node08", 4: "node09", 5: "node09"}, 601, skew)
    path = make_bundle(tmp_path / "b.duckdb", rows)
    with Bundle.open(path) as bundle:
        offsets = estimate_offsets(bundle.con)
    assert offsets == {"node09": pytest.approx(40.0, abs=0.5)}
    doc = run(path)
    assert doc["clock_offsets"]["node09"] == pytest.approx(40.0, abs=0.5)
    top = doc["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("network_fabric_errors", "node09")
    assert doc["first_anomaly"]["kind"] == "link_down"
    assert doc["first_anomaly"]["ts"].startswith("2025-03-01T14:00:00")


def quiet_rows() -> list:
    rows: list = topology()
    for i in range(20):
        rows.append(Event(kind="pcie_aer", message="AER: Corrected error received", ts=at(i * 600), host="node07",
                          layer="hardware", attrs={"severity": "corrected", "device": "0000:17:01.0"}, line=i))
        rows.append(GpuSample(ts=at(i * 600), gpu="0000:3b:00.0", host="node08", util_gpu=0.0, temp_c=34.0,
                              throttle_reasons=["sw_power_cap"], line=i))
    rows.append(Event(kind="gpu_throttle", message="clocks held back: sw_power_cap", ts=at(10), host="node08",
                      gpu="0000:3b:00.0", layer="hardware",
                      attrs={"reasons": ["sw_power_cap"], "util_gpu": 0, "idle": True}, line=99))
    rows.append(Event(kind="job_state", message="job 4242 COMPLETED", ts=at(7200), layer="scheduling",
                      attrs={"job": "4242", "state": "COMPLETED"}, line=300))
    return rows


def test_quiet_bundle_gets_no_root_cause(tmp_path: Path) -> None:
    doc = run(make_bundle(tmp_path / "b.duckdb", quiet_rows()))
    assert all(h["score"] < LOW_SCORE for h in doc["hypotheses"])
    assert {v["verdict"] for v in doc["layers"].values()} <= {"clear", "no_evidence"}
    assert doc["first_anomaly"] is None


def test_empty_bundle(tmp_path: Path) -> None:
    doc = run(make_bundle(tmp_path / "b.duckdb", [], collector=None))
    assert doc["workload"] == "unknown" and doc["hypotheses"] == [] and doc["first_anomaly"] is None
    assert all(v["verdict"] == "no_evidence" for v in doc["layers"].values())
    assert not any(c["error"] for c in doc["checks"])


def test_thermal_straggler_beats_idle_throttle(tmp_path: Path) -> None:
    rows: list = topology(("node05", "node06"), per_host=2)
    for i in range(10):
        rows.append(GpuSample(ts=at(i * 30), gpu="0000:1a:00.0", host="node05", util_gpu=99.0, temp_c=92.0,
                              throttle_reasons=["hw_thermal", "sw_thermal"], line=i))
        rows.append(GpuSample(ts=at(i * 30), gpu="0000:3b:00.0", host="node06", util_gpu=0.0, temp_c=31.0,
                              throttle_reasons=["hw_slowdown", "sw_thermal"], line=100 + i))
    rows.append(Event(kind="straggler_rank", message="rank 1 is 38% slower than the median", ts=at(120),
                      host="node05", rank=1, layer="gpu", line=500))
    doc = run(make_bundle(tmp_path / "b.duckdb", rows))
    top = doc["hypotheses"][0]
    assert (top["cause"], top["host"], top["gpu"], top["ranks"]) == \
        ("thermal_throttling", "node05", "0000:1a:00.0", [1])
    assert top["symptoms"] == ["straggler_rank"]
    idle = [h for h in doc["hypotheses"] if h["host"] == "node06"]
    assert all(h["score"] < 0.1 for h in idle)


def surge_rows() -> list:
    rows: list = []
    base = {"model_name": "llama-3-70b"}
    for i in range(40):
        for pod in ("vllm-0", "vllm-1"):
            rows.append(SeriesPoint(ts=at(i * 15), name="vllm:num_requests_running", value=10 + (30 if i > 20 else 0),
                                    host=pod, labels=base))
    rows.append(Event(kind="request_rate_surge", message="request rate 4.1x baseline", ts=at(300), layer="business",
                      attrs={"baseline": 20, "peak": 82}, line=1))
    rows.append(Event(kind="kv_cache_saturation", message="KV cache 99% full", ts=at(340), host="vllm-0", layer="gpu",
                      line=2))
    rows.append(Event(kind="queue_backlog", message="queue 140 waiting", ts=at(350), host="vllm-0",
                      layer="business", line=3))
    rows.append(Event(kind="latency_spike", message="p99 TTFT 9.8s vs 0.6s", ts=at(360), host="vllm-0",
                      layer="business", line=4))
    rows.append(Event(kind="k8s_event", message="Container vllm OOMKilled", ts=at(420), layer="scheduling",
                      attrs={"reason": "OOMKilled", "object": "Pod/vllm-0", "node": "gpu-node-3"}, line=5))
    rows.append(Event(kind="change", message="deploy vllm-config 0.4.1", ts=at(-86400 * 3), layer="business",
                      attrs={"what": "vllm-config", "version": "0.4.1", "via": "records"}, line=6))
    return rows


def test_traffic_surge_explains_kv_cache_and_oom(tmp_path: Path) -> None:
    doc = run(make_bundle(tmp_path / "b.duckdb", surge_rows(), collector="prometheus"))
    assert (doc["workload"], doc["impact"]) == ("inference", "degradation")
    top = doc["hypotheses"][0]
    assert (top["layer"], top["cause"]) == ("business", "traffic_surge")
    assert {"latency_spike", "queue_backlog"} <= set(top["symptoms"])
    assert {"kv_cache_pressure", "host_oom_kill"} <= set(top["consequences"])
    assert doc["first_anomaly"]["kind"] == "request_rate_surge"
    old_change = [h for h in doc["hypotheses"] if h["cause"] == "bad_change"]
    assert all(h["score"] < LOW_SCORE for h in old_change)


def test_workload_detection(tmp_path: Path) -> None:
    cases = {"training": xid79_rows(), "inference": surge_rows(), "unknown": [],
             "mixed": xid79_rows() + surge_rows()}
    for expected, rows in cases.items():
        path = make_bundle(tmp_path / f"{expected}.duckdb", rows)
        with Bundle.open(path) as bundle:
            assert detect_workload(bundle.con)[0] == expected


def test_stage0_reports_checkpoint_state(tmp_path: Path) -> None:
    rows = xid79_rows() + [
        Event(kind="checkpoint_last_good", message="/ckpt/step_42000/model.pt", ts=at(-1800), host="node07", line=1),
        Event(kind="checkpoint_partial", message="/ckpt/step_43000/model.pt.tmp (0 bytes)", ts=at(-5), host="node07",
              line=2)]
    doc = run(make_bundle(tmp_path / "b.duckdb", rows))
    step = next(s for s in doc["stage0"] if s["id"] == "last_checkpoint")
    assert step["status"] == "attention" and any("step_43000" in e["text"] for e in step["evidence"])
    assert doc["recover"][0]["id"] == "remediate"


@pytest.mark.parametrize(("text", "names"), [
    ("node[07-09]", {"node07", "node08", "node09"}),
    ("gpu[1,3],cpu5", {"gpu1", "gpu3", "cpu5"}),
    ('["a", "b"]', {"a", "b"}),
    ("", set()),
])
def test_expand_hostlist(text: str, names: set[str]) -> None:
    assert expand_hostlist(text) == names


def test_an_old_deploy_is_not_this_incident(tmp_path: Path) -> None:
    """Two releases of the same model: the one a minute before the errors is the cause, the one two
    days earlier is a separate, stale candidate."""
    rows = [
        Event(kind="change", message="deploy model llm 1 -> 2", ts=at(-2 * 86400), layer="business",
              attrs={"what": "model llm", "version": "2", "via": "records"}, line=1),
        Event(kind="change", message="deploy model llm 2 -> 3", ts=at(-60), layer="business",
              attrs={"what": "model llm", "version": "3", "via": "records"}, line=2),
        Event(kind="error_rate_spike", message="error ratio 0.21 vs 0.0004", ts=at(30), host="triton-0",
              layer="business", line=3),
    ]
    doc = run(make_bundle(tmp_path / "b.duckdb", rows, collector="changes"))
    top, *rest = doc["hypotheses"]
    assert (top["cause"], top["first_seen"]) == ("bad_change", "2025-03-01T13:59:00.000Z")
    assert top["symptoms"] == ["error_rate_spike"]
    assert doc["first_anomaly"]["text"] == "deploy model llm 2 -> 3"
    assert [h["score"] < LOW_SCORE for h in rest] == [True]


def test_fatal_aer_on_another_host_stays_apart(tmp_path: Path) -> None:
    rows = [r for r in xid79_rows() if not (isinstance(r, Event) and r.kind == "pcie_aer")]
    rows.append(Event(kind="pcie_aer", message="pcieport 0000:17:01.0: AER: Uncorrected (Fatal) error received",
                      ts=at(0), host="node08", layer="hardware",
                      attrs={"severity": "uncorrected_fatal", "device": "0000:17:01.0"}, line=10))
    doc = run(make_bundle(tmp_path / "b.duckdb", rows))
    top = doc["hypotheses"][0]
    assert (top["cause"], top["host"], top["absorbed"]) == ("gpu_fell_off_bus", "node07", [])
    assert doc["first_anomaly"]["kind"] == "xid"
    assert any(h["cause"] == "pcie_link_degraded" and h["host"] == "node08" for h in doc["hypotheses"])


def test_job_state_logged_by_several_hosts_anchors_their_clocks(tmp_path: Path) -> None:
    rows = [Event(kind="job_state", message="job 4242 FAILED", ts=at(100 + skew), host=host, layer="scheduling",
                  attrs={"job": "4242", "state": "FAILED"}, line=n)
            for n, (host, skew) in enumerate((("node01", 0.0), ("node02", 0.2), ("node03", -25.0)))]
    path = make_bundle(tmp_path / "b.duckdb", rows, collector="slurm")
    with Bundle.open(path) as bundle:
        assert estimate_offsets(bundle.con) == {"node03": pytest.approx(-25.0, abs=0.5)}


def test_fabric_errors_are_pinned_on_the_peer_the_reporters_share(tmp_path: Path) -> None:
    """Three hosts report IB completion errors against one address; that host, not a reporter, is the
    hypothesis. Its address comes from its ranks' NCCL init lines (topology extra.oob)."""
    from workbench.ingest.derive import run_derivations

    hosts = ("node01", "node02", "node03", "node04")
    rows: list = [Topology(rank=r, host=hosts[r // 2], nranks=8, comm_id="c1", cuda_dev=r % 2,
                           gpu=f"0000:{0x19 + r % 2:02x}:00.0", job="4242",
                           extra={"oob": f"ibp12s0:10.10.3.{11 + r // 2}<0>", "net": "IB"}) for r in range(8)]
    for n, rank in enumerate((0, 2, 3, 5)):
        rows.append(Event(kind="nccl_net_error", ts=at(4 + n), host=hosts[rank // 2], rank=rank,
                          layer="network_storage", line=300 + n,
                          message="NET/IB : Got completion from peer 10.10.3.14<40312> with status=12",
                          attrs={"status": 12, "peer": "10.10.3.14<40312>", "peer_ip": "10.10.3.14"}))
    rows += timeouts({r: hosts[r // 2] for r in range(8)}, 601)
    path = tmp_path / "b.duckdb"
    bundle = Bundle.create(path, title="synthetic")
    sha, _, _ = bundle.add_artifact(io.BytesIO(b"ranks"), kind="nccl_log", source="synthetic", collector="nccl")
    writer = bundle.writer(sha)
    for row in rows:
        writer.add(row)
    writer.flush()
    assert run_derivations(bundle)["fabric_peers"] == 1
    bundle.seal()
    bundle.close()
    result = run(path)
    top = result["hypotheses"][0]
    assert (top["cause"], top["host"], top["ranks"]) == ("network_fabric_errors", "node04", [6, 7])
    assert "nccl_timeout" in top["symptoms"] and top["score"] >= LOW_SCORE
    assert not [h for h in result["hypotheses"][1:] if h["host"] in hosts[:3] and h["score"] >= LOW_SCORE]
    first = result["first_anomaly"]
    assert first["host"] == "node04" and first["ts"].startswith("2025-03-01T14:00:04")
    assert top["evidence"][0]["line"] == 300, "the evidence points at the first report's raw line"
