"""InfiniBand collector: ibstat/ibstatus/perfquery/sysfs/rdma link in their real layouts."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import infiniband
from collectors.base import Artifact, Event, HostFact, ParseContext, SeriesPoint, Skipped
from tests.conftest import ingest_timeline

MTIME = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)

# ibstat layout as infiniband-diags prints it (rdma-core PR #847: a ConnectX-3 with one port
# administratively disabled and one active).
IBSTAT = """CA 'mlx4_0'
\tCA type: MT4099
\tNumber of ports: 2
\tFirmware version: 2.42.5000
\tHardware version: 1
\tNode GUID: 0xf4521403007be0e0
\tSystem image GUID: 0xf4521403007be0e3
\tPort 1:
\t\tState: Down
\t\tPhysical state: Disabled
\t\tRate: 10
\t\tBase lid: 38
\t\tLMC: 0
\t\tSM lid: 13
\t\tCapability mask: 0x02594868
\t\tPort GUID: 0xf4521403007be0e1
\t\tLink layer: InfiniBand
\tPort 2:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 56
\t\tBase lid: 39
\t\tLMC: 0
\t\tSM lid: 13
\t\tCapability mask: 0x02594868
\t\tPort GUID: 0xf4521403007be0e2
\t\tLink layer: InfiniBand
"""

SYSFS = """# ib_sysfs sample 1 at 2026-11-28T10:00:00+00:00
/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE
/sys/class/infiniband/mlx5_0/ports/1/phys_state:5: LinkUp
/sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)
/sys/class/infiniband/mlx5_0/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:0
/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed:1
/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait:100
/sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err:3
# ib_sysfs sample 2 at 2026-11-28T10:00:01+00:00
/sys/class/infiniband/mlx5_0/ports/1/state:1: DOWN
/sys/class/infiniband/mlx5_0/ports/1/phys_state:2: Polling
/sys/class/infiniband/mlx5_0/ports/1/rate:400 Gb/sec (4X NDR)
/sys/class/infiniband/mlx5_0/ports/1/link_layer:InfiniBand
/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:25
/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed:2
/sys/class/infiniband/mlx5_0/ports/1/counters/port_xmit_wait:5000
/sys/class/infiniband/mlx5_0/ports/1/hw_counters/local_ack_timeout_err:3
"""

PERFQUERY = """# Port counters: Lid 13305 port 1 (CapMask: 0x1400)
PortSelect:......................1
CounterSelect:...................0x0000
SymbolErrorCounter:..............65535
LinkErrorRecoveryCounter:........255
LinkDownedCounter:...............12
PortRcvErrors:...................0
PortRcvRemotePhysicalErrors:.....0
PortRcvSwitchRelayErrors:........0
PortXmitDiscards:................4
PortXmitConstraintErrors:........0
PortRcvConstraintErrors:.........0
CounterSelect2:..................0x00
LocalLinkIntegrityErrors:........0
ExcessiveBufferOverrunErrors:....0
VL15Dropped:.....................0
PortXmitData:....................4294967295
PortRcvData:.....................4294967295
PortXmitPkts:....................4294967295
PortRcvPkts:.....................4294967295
PortXmitWait:....................1234
"""


def _rows(kind: str, text: str | bytes, source: str = "") -> list:
    data = text.encode() if isinstance(text, str) else text
    ctx = ParseContext(host="node01", mtime=MTIME, source_name=source)
    return list(infiniband.parse(kind, io.BytesIO(data), ctx))


def _events(rows: list, kind: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind == kind]


def test_ibstat_down_port_is_link_down_and_active_port_is_not() -> None:
    rows = _rows("ibstat", IBSTAT)
    downs = _events(rows, "link_down")
    assert [(e.attrs["device"], e.attrs["port"], e.attrs["state"], e.attrs["phys_state"]) for e in downs] == [
        ("mlx4_0", 1, "Down", "Disabled")]
    assert downs[0].attrs["rate"] == "10" and downs[0].attrs["sm_lid"] == "13"
    assert downs[0].ts == MTIME and downs[0].ts_approx and downs[0].ts_origin == "mtime"
    facts = {r.key: r.value for r in rows if isinstance(r, HostFact)}
    assert facts["ib.mlx4_0/2.state"] == "Active/LinkUp" and facts["ib.mlx4_0/2.rate"] == "56"
    assert not [r for r in rows if isinstance(r, Skipped)]


def test_ibstat_sniffed_and_port_down_in_timeline(tmp_path: Path) -> None:
    assert infiniband.sniff("ibstat.txt", IBSTAT) == {"ibstat": 95}
    path = tmp_path / "evidence" / "node01" / "ibstat.txt"
    path.parent.mkdir(parents=True)
    path.write_text(IBSTAT)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    down = [e for e in events if e["kind"] == "link_down"]
    assert len(down) == 1 and down[0]["host"] == "node01" and down[0]["layer"] == "network_storage"
    assert down[0]["attrs"] == {"device": "mlx4_0", "port": 1, "state": "Down", "phys_state": "Disabled",
                                "rate": "10", "link_layer": "InfiniBand", "lid": "38", "sm_lid": "13"}


def test_sysfs_two_samples_give_counter_rise_and_state_change_at_sample_times() -> None:
    rows = _rows("ib_sysfs", SYSFS)
    rising = _events(rows, "counter_rising")
    assert len(rising) == 1
    assert rising[0].attrs["counters"] == {"symbol_error": 25, "link_downed": 1}
    assert rising[0].attrs["seconds"] == 1.0
    errors = _events(rows, "ib_counter_errors")
    assert errors[0].attrs["counters"] == {"symbol_error": 25, "link_downed": 2, "hw.local_ack_timeout_err": 3}
    down = _events(rows, "link_down")
    assert down[0].ts == datetime(2026, 11, 28, 10, 0, 1, tzinfo=timezone.utc) and not down[0].ts_approx
    assert (down[0].attrs["state"], down[0].attrs["phys_state"]) == ("DOWN", "Polling")
    assert _events(rows, "link_flap") == [], "one transition is a link going down, not a flap"
    series = {(p.name, p.ts.second): p.value for p in rows if isinstance(p, SeriesPoint)}
    assert series[("ib.port_xmit_wait", 1)] == 5000.0
    wait = [p for p in rows if isinstance(p, SeriesPoint) and p.name == "ib.port_xmit_wait"]
    assert wait[0].labels == {"device": "mlx5_0", "port": "1", "class": "congestion"}


def test_perfquery_names_map_to_sysfs_names_and_errors_are_reported() -> None:
    rows = _rows("perfquery", PERFQUERY, source="perfquery -x -C mlx5_3 -P 1")
    errors = _events(rows, "ib_counter_errors")
    assert len(errors) == 1
    assert errors[0].attrs["device"] == "mlx5_3" and errors[0].attrs["lid"] == 13305
    assert errors[0].attrs["counters"] == {"symbol_error": 65535, "link_error_recovery": 255, "link_downed": 12,
                                           "port_xmit_discards": 4}
    names = {p.name for p in rows if isinstance(p, SeriesPoint)}
    assert {"ib.port_xmit_packets", "ib.vl15_dropped", "ib.port_xmit_wait"} <= names


def test_rdma_link_roce_active_port_gives_no_event() -> None:
    rows = _rows("rdma_link", "link mlx5_0/1 state ACTIVE physical_state LINK_UP netdev ens1f0np0\n"
                              "link mlx5_1/1 state DOWN physical_state DISABLED netdev ens1f1np1\n")
    downs = _events(rows, "link_down")
    assert [(e.attrs["device"], e.attrs["netdev"]) for e in downs] == [("mlx5_1", "ens1f1np1")]
    assert not _events(rows, "link_flap") and not _events(rows, "link_up")


def test_init_state_without_subnet_manager_is_not_active() -> None:
    text = "Infiniband device 'mlx5_0' port 1 status:\n\tstate:\t\t 2: INIT\n\tphys state:\t 5: LinkUp\n"
    downs = _events(_rows("ibstatus", text), "link_down")
    assert downs and downs[0].attrs["state"] == "INIT"


def test_capture_reads_sysfs_twice_and_notes_missing_tools(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "infiniband"
    port = root / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (port / "counters" / "symbol_error").write_text("7\n")
    monkeypatch.setattr(infiniband, "SYSFS_ROOT", str(root))
    monkeypatch.setattr(infiniband.time, "sleep", lambda s: None)

    class Ctx:
        host, since, options = "node01", None, {}
        missing_notes: list[tuple[str, str]] = []

        def which(self, name):
            return None

        def missing(self, what, reason):
            self.missing_notes.append((what, reason))

    ctx = Ctx()
    artifacts = list(infiniband.capture(ctx))
    assert [a.kind for a in artifacts] == ["ib_sysfs"]
    assert isinstance(artifacts[0], Artifact)
    rows = _rows("ib_sysfs", artifacts[0].data)
    errors = _events(rows, "ib_counter_errors")
    assert errors[0].attrs["counters"] == {"symbol_error": 7}
    assert not _events(rows, "counter_rising")
    assert any(what == "ibstat" for what, _ in ctx.missing_notes)


def test_capture_without_devices_says_why(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(infiniband, "SYSFS_ROOT", str(tmp_path / "absent"))
    notes: list[str] = []

    class Ctx:
        host, since, options = "h", None, {}

        def which(self, name):
            return "/usr/bin/" + name

        def missing(self, what, reason):
            notes.append(reason)

    assert list(infiniband.capture(Ctx())) == []
    assert notes and notes[0].startswith("unavailable")


REAL_LINES = (IBSTAT + SYSFS + PERFQUERY).splitlines() + [
    "link mlx5_7/1 subnet_prefix fe80:0000:0000:0000 lid 3403 sm_lid 1 lmc 0 state DOWN physical_state POLLING",
    "---", "Infiniband device 'mlx5_11' port 1 status:", "\tstate:\t\t 1: DOWN"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40),
       st.sampled_from(infiniband.KINDS))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str], kind: str) -> None:
    rows = _rows(kind, "\n".join(lines).encode("utf-8", "surrogatepass"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)
