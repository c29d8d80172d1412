"""IPMI SEL (ipmitool elist/list, FreeIPMI ipmi-sel) and lm-sensors readings."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors import ipmi
from collectors.base import Event, HostFact, ParseContext, SeriesPoint, Skipped
from tests.conftest import ingest_timeline

MTIME = datetime(2026, 11, 28, 10, 0, tzinfo=timezone.utc)

# ``ipmitool sel elist``: the sensor type prefixes the sensor name, the last column is the direction.
SEL_ELIST = """   1 | 11/15/2026 | 18:50:40 | Power Unit Pwr Unit Status | Power off/down | Asserted
   2 | 11/15/2026 | 18:50:44 | Power Unit Pwr Unit Status | Power off/down | Deasserted
   3 | 11/15/2026 | 18:52:23 | Fan Processor 1 Fan | Lower Non-critical going low  | Asserted
   4 | 11/28/2026 | 09:12:29 | Power Supply PS2 Status | Failure detected () | Asserted
   5 | 11/28/2026 | 09:12:31 | Power Supply PS2 Status | Power Supply AC lost | Asserted
   6 | 11/28/2026 | 09:15:02 | Memory #0x87 | Uncorrectable ECC | Asserted
   7 | 11/28/2026 | 09:20:40 | Temperature GPU3 Temp | Upper Critical going high | Asserted | Reading 95 > \
Threshold 90 degrees C
   8 | Pre-Init  |0000000012| System Event #0x83 | Timestamp Clock Sync | Asserted
   9 | 11/28/2026 | 09:30:00 | Power Supply PS2 Status | Presence detected | Deasserted
"""

# FreeIPMI ``ipmi-sel --output-event-state`` (check_ipmi_sensor issue #26 layout).
FREEIPMI = """ID   | Date        | Time     | Name                                              | Type              | \
State    | Event
1    | PostInit    | PostInit | Sensor #0                                         | OS Boot           | Nominal  | \
C: boot completed
4    | Jul-20-2017 | 10:29:49 | Power Supply PS2 Status                           | Power Supply      | Critical | \
Power Supply Failure detected
6    | Jul-20-2017 | 10:37:20 | Sensor #0                                         | OS Critical Stop  | Warning  | \
OS Graceful Shutdown
"""

SENSORS = """coretemp-isa-0000
Adapter: ISA adapter
Package id 0:  +101.0°C  (high = +80.0°C, crit = +100.0°C)
Core 0:        +40.0°C  (high = +80.0°C, crit = +100.0°C)

nvme-pci-0100
Adapter: PCI adapter
Composite:    +38.9°C  (low  = -273.1°C, high = +84.8°C)
                       (crit = +84.8°C)

nct6798-isa-0290
Adapter: ISA adapter
in0:                   872.00 mV (min =  +0.00 V, max =  +1.74 V)
fan2:                     0 RPM  (min =  300 RPM)  ALARM
"""


def _rows(kind: str, text: str) -> list:
    ctx = ParseContext(host="gpu07", mtime=MTIME)
    return list(ipmi.parse(kind, io.BytesIO(text.encode()), ctx))


def _events(rows: list, *kinds: str) -> list[Event]:
    return [r for r in rows if isinstance(r, Event) and r.kind in kinds]


def test_psu_failure_is_hw_sel_psu_and_boot_noise_is_ipmi_sel() -> None:
    rows = _rows("ipmi_sel", SEL_ELIST)
    assert not [r for r in rows if isinstance(r, Skipped)]
    faults = _events(rows, "hw_sel")
    summary = [(e.attrs["record"], e.attrs["category"], e.severity) for e in faults]
    assert summary == [("3", "fan", "warning"), ("4", "psu", "error"), ("5", "psu", "error"),
                       ("6", "memory", "error"), ("7", "temperature", "error"), ("9", "psu", "error")]
    psu = faults[1]
    assert psu.attrs["sensor_type"] == "Power Supply" and psu.attrs["sensor"] == "PS2 Status"
    assert psu.attrs["direction"] == "asserted" and psu.attrs["event"] == "Failure detected ()"
    assert psu.ts == datetime(2026, 11, 28, 9, 12, 29, tzinfo=timezone.utc)
    assert psu.ts_origin == "bmc" and psu.ts_approx
    assert faults[4].attrs["detail"] == "Reading 95 > Threshold 90 degrees C"
    info = _events(rows, "ipmi_sel")
    assert [e.attrs["record"] for e in info] == ["1", "2", "8"]
    assert info[2].ts is None and info[2].attrs["category"] == "other"


def test_freeipmi_layout_uses_its_state_column() -> None:
    assert ipmi.sniff("sel.txt", FREEIPMI) == {"ipmi_sel": 95}
    rows = _rows("ipmi_sel", FREEIPMI)
    faults = _events(rows, "hw_sel")
    assert [(e.attrs["category"], e.severity, e.attrs["state"]) for e in faults] == [
        ("psu", "error", "Critical"), ("other", "warning", "Warning")]
    assert faults[0].ts == datetime(2017, 7, 20, 10, 29, 49, tzinfo=timezone.utc)
    assert _events(rows, "ipmi_sel")[0].ts is None


@pytest.mark.parametrize(("name", "expected"), [
    ("Power Supply PS2 Status", ("Power Supply", "PS2 Status")),
    ("Drive Slot / Bay HDD3", ("Drive Slot / Bay", "HDD3")),
    ("Temperature", ("Temperature", "")),
    ("Vendor OEM thing", ("Unknown", "Vendor OEM thing"))])
def test_split_sensor(name: str, expected: tuple[str, str]) -> None:
    assert ipmi.split_sensor(name) == expected


def test_sensors_temperatures_and_alarms() -> None:
    rows = _rows("sensors", SENSORS)
    alarms = _events(rows, "sensor_alarm")
    assert [(e.attrs["chip"], e.attrs["sensor"], e.severity) for e in alarms] == [
        ("coretemp-isa-0000", "Package id 0", "error"), ("nct6798-isa-0290", "fan2", "warning")]
    assert alarms[0].attrs["crit"] == 100.0 and alarms[0].attrs["value"] == 101.0
    facts = {r.key: r.value for r in rows if isinstance(r, HostFact)}
    assert facts["sensors.nvme-pci-0100.Composite"] == "+38.9 C"
    temps = {p.labels["sensor"]: p.value for p in rows if isinstance(p, SeriesPoint) and p.name == "sensors.temp_c"}
    assert temps == {"Package id 0": 101.0, "Core 0": 40.0, "Composite": 38.9}


def test_sel_through_ingest(tmp_path: Path) -> None:
    path = tmp_path / "evidence" / "gpu07" / "ipmitool-sel-elist.txt"
    path.parent.mkdir(parents=True)
    path.write_text(SEL_ELIST)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "evidence")
    psu = [e for e in events if e["kind"] == "hw_sel" and e["attrs"]["category"] == "psu"]
    assert len(psu) == 3 and all(e["layer"] == "hardware" and e["host"] == "gpu07" for e in psu)


def test_capture_without_bmc_says_why(monkeypatch) -> None:
    notes: list[tuple[str, str]] = []
    monkeypatch.setattr(ipmi.os.path, "exists", lambda p: False)

    class Ctx:
        host, since, options = "h", None, {}

        def which(self, name):
            return "/usr/bin/ipmitool" if name == "ipmitool" else None

        def missing(self, what, reason):
            notes.append((what, reason))

    assert list(ipmi.capture(Ctx())) == []
    assert notes[0][1].startswith("unavailable: no local BMC") and notes[1][0] == "sensors"


REAL_LINES = (SEL_ELIST + FREEIPMI + SENSORS).splitlines()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(REAL_LINES), st.text(max_size=80)), max_size=40),
       st.sampled_from(ipmi.KINDS))
def test_mixed_real_and_junk_lines_never_raise(lines: list[str], kind: str) -> None:
    rows = _rows(kind, "\n".join(lines).encode("utf-8", "surrogatepass").decode("utf-8", "replace"))
    assert all(isinstance(r, (Event, HostFact, SeriesPoint, Skipped)) for r in rows)
