"""workbench/store/gpu_identity.py: a GPU named by UUID, index or serial ends up on its bus id, once, in the store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from collectors.base import Event, GpuInventory, GpuSample, Row, SeriesPoint
from workbench.ingest.derive import run_derivations
from workbench.store.bundle import Bundle
from workbench.store.gpu_identity import aliases, resolve

BUS = "0000:19:00.0"
OTHER = "0000:3b:00.0"
UUID = "GPU-8d3f2a61-5b7c-4e0a-9c21-7f44d0e10100"
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@contextmanager
def _bundle(tmp_path: Path, rows: list[Row]) -> Iterator[Bundle]:
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        writer = bundle.writer(None)
        writer.add_all(rows)
        writer.flush()
        yield bundle


def _inventory() -> list[Row]:
    return [GpuInventory(gpu=BUS, host="n1", index=0, uuid=UUID, serial="1654321012345", name="NVIDIA H100"),
            GpuInventory(gpu=OTHER, host="n1", index=1, uuid="GPU-00000000-1111-2222-3333-444444444444")]


def _keys(bundle: Bundle, table: str) -> list[tuple]:
    return bundle.con.execute(f"SELECT host, gpu FROM {table} ORDER BY ALL").fetchall()


def test_a_gpu_named_by_uuid_index_and_serial_is_one_bus_id(tmp_path):
    rows = _inventory() + [
        GpuSample(ts=T0, gpu=UUID.lower(), host="n1", util_gpu=99.0),            # nvidia-smi nvlink: UUID
        GpuSample(ts=T0, gpu="index:0", host="n1", util_gpu=98.0),               # dcgmi dmon: index
        GpuSample(ts=T0, gpu=BUS, host="n1", util_gpu=97.0),
        Event(kind="gpu_lost", message="GPU is lost", host="n1", attrs={"uuid": UUID}),
        Event(kind="xid", message="Xid 79", host="n1", gpu=BUS, attrs={"xid": 79}),
        Event(kind="nvml_reading", message="ecc", host="n1", attrs={"gpu_key": "index:1"}),
        Event(kind="k8s_event", message="XidCriticalError", host="n1", attrs={"gpu_uuid": UUID.upper()}),
        GpuInventory(gpu="1654321012345", host="n1", name="by serial"),
    ]
    with _bundle(tmp_path, rows) as bundle:
        changed = resolve(bundle.con)
        assert changed == {"gpu_sample": 2, "event": 3, "gpu_inventory": 1}
        assert {g for _, g in _keys(bundle, "gpu_sample")} == {BUS}
        assert bundle.con.execute("SELECT kind, gpu FROM event ORDER BY kind").fetchall() == [
            ("gpu_lost", BUS), ("k8s_event", BUS), ("nvml_reading", OTHER), ("xid", BUS)]
        assert {g for _, g in _keys(bundle, "gpu_inventory")} == {BUS, OTHER}
        # the evidence's own names stay where they were read
        assert bundle.con.execute("SELECT attrs->>'gpu_key' FROM event WHERE kind = 'nvml_reading'"
                                  ).fetchall() == [("index:1",)]
        named = aliases(bundle.con)
    assert named[("n1", BUS)].uuid == UUID and named[("n1", BUS)].index == 0
    assert named[("n1", BUS)].serial == "1654321012345" and named[("n1", BUS)].name == "NVIDIA H100"
    assert named[("n1", OTHER)].index == 1


def test_unknown_or_other_host_or_ambiguous_aliases_keep_their_key(tmp_path):
    stranger = "GPU-deadbeef-0000-0000-0000-000000000000"
    rows = _inventory() + [
        GpuInventory(gpu="0000:5d:00.0", host="n1", index=0),                # index 0 renumbered: two bus ids
        GpuSample(ts=T0, gpu=stranger, host="n1", util_gpu=1.0),
        GpuSample(ts=T0, gpu=UUID, host="n2", util_gpu=1.0),                 # that UUID is n1's, not n2's
        GpuSample(ts=T0, gpu="index:0", host="n1", util_gpu=1.0),
        GpuSample(ts=T0, gpu="N/A", host="n1", util_gpu=1.0),
        Event(kind="gpu_lost", message="lost", host="n1", attrs={"uuid": stranger}),
    ]
    with _bundle(tmp_path, rows) as bundle:
        assert resolve(bundle.con) == {}
        assert set(_keys(bundle, "gpu_sample")) == {("n1", "N/A"), ("n1", stranger), ("n1", "index:0"), ("n2", UUID)}
        assert bundle.con.execute("SELECT gpu FROM event").fetchall() == [(None,)]


def test_resolve_twice_changes_nothing(tmp_path):
    """A UUID-keyed inventory row (nvidia-smi nvlink -s) bound by its UUID lends its index: index:1 binds in
    the same pass, not only in the next one."""
    rows = [GpuInventory(gpu=BUS, host="n1", uuid=UUID, serial="1654321012345"),
            GpuInventory(gpu=UUID, host="n1", index=1, uuid=UUID),
            GpuSample(ts=T0, gpu="index:1", host="n1", util_gpu=5.0),
            Event(kind="gpu_lost", message="lost", host="n1", attrs={"uuid": UUID})]
    with _bundle(tmp_path, rows) as bundle:
        first = resolve(bundle.con)
        after = [_keys(bundle, t) for t in ("event", "gpu_sample", "gpu_inventory")]
        assert first == {"gpu_sample": 1, "event": 1, "gpu_inventory": 1}
        assert resolve(bundle.con) == {}
        assert [_keys(bundle, t) for t in ("event", "gpu_sample", "gpu_inventory")] == after
        assert {g for _, g in _keys(bundle, "gpu_sample")} == {BUS}


def test_run_derivations_resolves_before_deriving(tmp_path):
    rows = _inventory() + [GpuSample(ts=T0, gpu=UUID, host="n1", util_gpu=1.0)]
    with _bundle(tmp_path, rows) as bundle:
        run_derivations(bundle)
        assert {g for _, g in _keys(bundle, "gpu_sample")} == {BUS}


def test_a_gpu_counter_series_follows_its_sample_and_an_exporters_index_label_is_kept(tmp_path):
    rows = _inventory() + [
        SeriesPoint(ts=T0, name="gpu.ecc_volatile_uncorrected", value=2.0, host="n1",
                    labels={"gpu": UUID, "class": "error"}),
        SeriesPoint(ts=T0, name="DCGM_FI_DEV_XID_ERRORS", value=79.0, host="n1", labels={"gpu": "0", "UUID": UUID}),
        GpuSample(ts=T0, gpu=UUID, host="n1", util_gpu=1.0)]
    with _bundle(tmp_path, rows) as bundle:
        assert resolve(bundle.con) == {"gpu_sample": 1, "series": 1}
        assert bundle.con.execute("SELECT name, labels->>'gpu' FROM series ORDER BY name").fetchall() == [
            ("DCGM_FI_DEV_XID_ERRORS", "0"), ("gpu.ecc_volatile_uncorrected", BUS)]
        assert resolve(bundle.con) == {}
