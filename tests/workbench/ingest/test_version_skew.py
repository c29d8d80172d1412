"""version_skew: hosts whose driver/CUDA/NCCL/PyTorch differs from the rest of their job."""

from __future__ import annotations

from pathlib import Path

from collectors.base import GpuInventory, HostFact, Topology
from tests.conftest import ingest_timeline
from workbench.ingest.derivations import version_skew
from workbench.store.bundle import Bundle

DPKG = "{day} 10:00:00 upgrade nvidia-driver-550:amd64 550.54.14-0ubuntu1 {version}-0ubuntu1\n" \
       "{day} 10:00:05 status installed nvidia-driver-550:amd64 {version}-0ubuntu1\n"


def _write_dpkg(root: Path, host: str, version: str, day: str) -> None:
    folder = root / host
    folder.mkdir(parents=True)
    (folder / "dpkg.log").write_text(DPKG.format(day=day, version=version))


def test_minority_driver_flagged_through_ingest(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    _write_dpkg(evidence, "node01", "550.90.07", "2026-11-27")
    _write_dpkg(evidence, "node02", "550.90.07", "2026-11-26")
    _write_dpkg(evidence, "node03", "550.127.05", "2026-11-28")
    events = ingest_timeline(tmp_path / "b.duckdb", evidence)
    skew = [e for e in events if e["kind"] == "version_skew"]
    assert len(skew) == 1
    event = skew[0]
    assert event["host"] == "node03" and event["layer"] == "gpu" and event["severity"] == "warning"
    assert event["attrs"]["what"] == "driver" and event["attrs"]["version"] == "550.127.05"
    assert event["attrs"]["majority_version"] == "550.90.07" and event["attrs"]["hosts"] == ["node03"]
    assert event["attrs"]["versions"] == {"node01": "550.90.07", "node02": "550.90.07", "node03": "550.127.05"}
    assert event["source"] == "version_skew" and event["ts_origin"] == "derived"


def _bundle(tmp_path: Path, rows: list) -> Bundle:
    bundle = Bundle.create(tmp_path / "v.duckdb")
    writer = bundle.writer(None)
    for row in rows:
        writer.add(row)
    writer.flush()
    return bundle


def test_tie_flags_every_host_without_majority(tmp_path: Path) -> None:
    with _bundle(tmp_path, [HostFact("versions.torch", "2.3.1", host="a"),
                            HostFact("versions.torch", "2.4.0", host="b")]) as bundle:
        events = list(version_skew.derive(bundle.con))
    assert sorted((e.host, e.attrs["version"], e.attrs["majority_version"]) for e in events) == [
        ("a", "2.3.1", None), ("b", "2.4.0", None)]
    assert "other hosts (2.4.0)" in next(e for e in events if e.host == "a").message


def test_gpu_inventory_wins_over_package_log_on_the_same_host(tmp_path: Path) -> None:
    rows = [HostFact("versions.driver", "550.54.14", host="c"), HostFact("versions.driver", "550.90.07", host="a"),
            HostFact("versions.driver", "550.90.07", host="b")]
    rows += [GpuInventory(gpu=f"0000:{i:02x}:00.0", host="c", driver="550.90.07", cuda="12.4") for i in range(8)]
    with _bundle(tmp_path, rows) as bundle:
        assert version_skew.host_versions(bundle.con)["c"] == {"driver": "550.90.07", "cuda": "12.4"}
        assert list(version_skew.derive(bundle.con)) == []


def test_hosts_are_compared_within_their_job(tmp_path: Path) -> None:
    rows = [HostFact("versions.nccl", v, host=h) for h, v in
            (("a1", "2.21.5"), ("a2", "2.21.5"), ("b1", "2.18.3"), ("b2", "2.18.3"), ("b3", "2.21.5"))]
    rows += [Topology(rank=i, host=h, job=job) for i, (h, job) in
             enumerate((("a1", "100"), ("a2", "100"), ("b1", "200"), ("b2", "200"), ("b3", "200")))]
    with _bundle(tmp_path, rows) as bundle:
        events = list(version_skew.derive(bundle.con))
    assert [(e.host, e.job, e.attrs["majority_version"]) for e in events] == [("b3", "200", "2.18.3")]
    assert events[0].attrs["versions"] == {"b1": "2.18.3", "b2": "2.18.3", "b3": "2.21.5"}


def test_non_core_packages_are_info_and_single_host_is_quiet(tmp_path: Path) -> None:
    rows = [HostFact("versions.accelerate", "0.30.1", host="a"), HostFact("versions.accelerate", "0.30.1", host="b"),
            HostFact("versions.accelerate", "0.29.0", host="c"), HostFact("versions.torch", "2.3.1", host="a")]
    with _bundle(tmp_path, rows) as bundle:
        events = list(version_skew.derive(bundle.con))
    assert [(e.host, e.attrs["what"], e.severity) for e in events] == [("c", "accelerate", "info")]


def test_tie_is_settled_by_which_host_changed_the_component(tmp_path: Path) -> None:
    from collectors.base import Event

    rows = [HostFact("versions.driver", "535.183.01", host="node09"),
            HostFact("versions.driver", "535.161.08", host="node10"),
            Event(kind="change", message="upgrade libnvidia-compute-535", host="node09",
                  attrs={"what": "libnvidia-compute-535", "version": "535.183.01-0ubuntu0.22.04.1"}),
            Event(kind="change", message="upgrade tzdata", host="node10",
                  attrs={"what": "tzdata", "version": "2025a-0ubuntu0.22.04"})]
    with _bundle(tmp_path, rows) as bundle:
        events = list(version_skew.derive(bundle.con))
    assert [(e.host, e.attrs["majority_version"], e.attrs["basis"]) for e in events] == [
        ("node09", "535.161.08", "recent change")]
    assert "on the hosts that did not change it" in events[0].message
