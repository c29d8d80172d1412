"""The GPU-sample and serving-series readers over bundles ingested from the scenarios' raw files, checked
against what those raw files say (nvidia-smi query CSV, nvidia-smi -q, the vLLM exposition pages)."""

from __future__ import annotations

import csv
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.conftest import run_cli
from workbench.query import samples
from workbench.store.bundle import Bundle

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _ingest(tmp: Path, name: str) -> Path:
    evidence = tmp / name
    shutil.copytree(SCENARIOS / name, evidence, ignore=shutil.ignore_patterns("expected.yaml"))
    bundle = tmp / f"{name}.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence)
    assert code == 0, err or out
    return bundle


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("samples")
    return {name: _ingest(tmp, name) for name in ("train_thermal_straggler", "train_ecc_xid94",
                                                  "infer_traffic_surge_kv_cache")}


def _query_csv(host: str) -> list[dict[str, str]]:
    path = SCENARIOS / "train_thermal_straggler" / host / "gpu-query.csv"
    with open(path, newline="") as f:
        return [{k.strip(): v.strip() for k, v in row.items()} for row in csv.DictReader(f)]


def _bus(raw: str) -> str:
    return raw.lower()[4:] if raw.lower().startswith("0000") and len(raw) > 12 else raw.lower()


def test_gpus_lists_every_gpu_the_query_csv_names_with_its_sample_count(bundles):
    want: dict[tuple[str, str], int] = {}
    for host in ("node05", "node06"):
        for row in _query_csv(host):
            key = (host, _bus(row["pci.bus_id"]))
            want[key] = want.get(key, 0) + 1
    with Bundle.open(bundles["train_thermal_straggler"]) as bundle:
        got = {(g.host, g.gpu): g.samples for g in samples.gpus(bundle)}
    assert got == want


def test_gpus_reads_inventory_and_remap_state_as_nvidia_smi_q_prints_them(bundles):
    text = (SCENARIOS / "train_ecc_xid94" / "node04" / "nvidia-smi-q.txt").read_text()
    with Bundle.open(bundles["train_ecc_xid94"]) as bundle:
        found = {g.gpu: g for g in samples.gpus(bundle) if g.host == "node04"}
    assert set(found) == {_bus(line.split()[1]) for line in text.splitlines() if line.startswith("GPU 0")}
    for gpu in found.values():
        block = text.split(f"GPU 0000{gpu.gpu.upper()}")[1].split("\nGPU ")[0]
        assert gpu.name == block.split("Product Name")[1].split(":", 1)[1].splitlines()[0].strip()
        assert gpu.inventory["uuid"] in block
        pending = block.split("Pending")[1].split(":", 1)[1].split()[0] == "Yes"
        assert gpu.worst["remap_pending"] is pending and gpu.latest["remap_pending"] is pending
        dram = int(block.split("DRAM Uncorrectable")[1].split(":", 1)[1].split()[0])
        assert gpu.worst["ecc_volatile_uncorrected"] == dram


def test_gpu_samples_in_time_order_match_the_csv(bundles):
    rows = [r for r in _query_csv("node05") if _bus(r["pci.bus_id"]) == "0000:2a:00.0"]
    with Bundle.open(bundles["train_thermal_straggler"]) as bundle:
        got = samples.gpu_samples(bundle, "node05", "0000:2a:00.0", max_points=1000)
    assert got.bucket_s is None and got.total == len(rows)
    assert got.column("ts") == sorted(got.column("ts"))
    assert got.column("temp_c") == [float(r["temperature.gpu"]) for r in rows]
    assert got.column("sm_clock_mhz") == [float(r["clocks.sm [MHz]"].split()[0]) for r in rows]
    throttled = [r["clocks_throttle_reasons.hw_thermal_slowdown"] == "Active" for r in rows]
    assert ["hw_thermal" in reasons for reasons in got.column("throttle_reasons")] == throttled
    assert any(throttled) and not all(throttled)


def test_downsampling_keeps_the_extremes_and_every_sample(bundles):
    with Bundle.open(bundles["train_thermal_straggler"]) as bundle:
        full = samples.gpu_samples(bundle, "node05", "0000:2a:00.0", max_points=1000)
        small = samples.gpu_samples(bundle, "node05", "0000:2a:00.0", max_points=5)
    assert len(small.rows) <= 5 and small.bucket_s is not None
    assert sum(small.column("samples")) == full.total == small.total
    assert max(small.column("temp_c")) == max(full.column("temp_c"))
    assert min(small.column("sm_clock_mhz")) == min(full.column("sm_clock_mhz"))
    assert {r for reasons in small.column("throttle_reasons") for r in reasons} == \
        {r for reasons in full.column("throttle_reasons") for r in reasons}
    assert small.column("ts") == sorted(small.column("ts"))


def test_gpu_samples_between_since_and_until(bundles):
    with Bundle.open(bundles["train_thermal_straggler"]) as bundle:
        full = samples.gpu_samples(bundle, "node05", "0000:2a:00.0", max_points=1000)
        middle = full.rows[len(full.rows) // 3]["ts"], full.rows[2 * len(full.rows) // 3]["ts"]
        part = samples.gpu_samples(bundle, "node05", "0000:2a:00.0", since=middle[0], until=middle[1])
        none = samples.gpu_samples(bundle, "node05", "ff:ff.0")
    assert part.rows and all(middle[0] <= ts <= middle[1] for ts in part.column("ts"))
    assert part.total == sum(1 for ts in full.column("ts") if middle[0] <= ts <= middle[1])
    assert none.rows == [] and none.total == 0


def test_series_names_lists_the_serving_curves_of_each_replica(bundles):
    with Bundle.open(bundles["infer_traffic_surge_kv_cache"]) as bundle:
        names = samples.series_names(bundle)
    hosts = {c.host for c in names}
    metrics = [c.metric for c in names]
    assert len(hosts) >= 2
    for host in hosts:
        mine = {c.title for c in names if c.host == host}
        assert {"kv_cache_usage", "queue_depth", "request_rate", "p99 ttft"} <= mine
    order = [samples.SERVING_ORDER.index(m) for m in metrics if m in samples.SERVING_ORDER]
    assert order == sorted(order)
    assert all(c.count > 0 and c.first <= c.last and not c.points for c in names)


def test_series_points_downsample_within_bounds_and_keep_the_peak(bundles):
    with Bundle.open(bundles["infer_traffic_surge_kv_cache"]) as bundle:
        full = samples.series_points(bundle, "ttft", max_points=10_000)
        small = samples.series_points(bundle, "ttft", max_points=8)
        host = full[0].host
        start = full[0].points[0][0] + timedelta(minutes=2)
        cut = samples.series_points(bundle, "ttft", host=host, since=start, max_points=10_000)
        mean = samples.series_points(bundle, "ttft", stat="mean", host=host)
    assert {c.stat for c in full} == {"p99"}
    for f, s in zip(full, small):
        assert (f.host, f.labels) == (s.host, s.labels)
        assert len(s.points) <= 8 < len(f.points)
        assert max(v for _, v in s.points) == max(v for _, v in f.points)
    assert [c.host for c in cut] == [host]
    assert cut[0].points and all(ts >= start for ts, _ in cut[0].points)
    assert [c.stat for c in mean] == ["mean"]


def test_anomaly_onsets_sit_on_their_curves(bundles):
    with Bundle.open(bundles["infer_traffic_surge_kv_cache"]) as bundle:
        found = samples.anomalies(bundle)
        assert {"kv_cache_saturation", "request_rate_surge"} <= {a.kind for a in found}
        for a in found:
            curve = next(c for c in samples.series_points(bundle, a.metric, stat=a.stat, host=a.host,
                                                          max_points=10_000) if dict(c.labels) == dict(a.labels))
            times = [ts for ts, _ in curve.points]
            assert a.onset in times and a.end in times and a.onset <= a.end
            if a.kind == "kv_cache_saturation":
                first_full = next(ts for ts, v in curve.points if v >= 0.9)
                assert a.onset == first_full


def test_downsample_buckets_by_time():
    t0 = datetime(2025, 1, 1)
    points = [(t0 + timedelta(seconds=i), float(i % 7)) for i in range(100)]
    out = samples.downsample(points, 10)
    assert len(out) == 10 and [ts for ts, _ in out] == sorted(ts for ts, _ in out)
    assert max(v for _, v in out) == 6.0
    dips = samples.downsample([(ts, 10.0 - (i == 42) * 9) for i, (ts, _) in enumerate(points)], 10, lowest=True)
    assert len(dips) == 10 and min(v for _, v in dips) == 1.0  # a throughput dip survives
    assert samples.downsample(points[:3], 10) == points[:3]
