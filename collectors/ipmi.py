"""The BMC's System Event Log (``ipmitool sel elist``/``sel list``, FreeIPMI ``ipmi-sel``) and
``sensors`` (lm-sensors) readings.

A node that rebooted, a GPU that fell off the bus or a throttling fleet is sometimes explained by
what only the BMC saw: a power supply that lost AC, a fan below its threshold, a DIMM's ECC errors,
a CPU IERR. Every SEL entry becomes an event; the ones that report a fault become kind ``hw_sel``
(the rest ``ipmi_sel``), both with the same attrs, so the playbook can ask for faults without
re-reading the text.

``category`` (one place, here): ``psu`` (Power Supply), ``fan`` (Fan, Cooling Device),
``temperature``, ``memory`` (ECC, DIMM), ``power`` (Power Unit, Voltage, Current, Battery),
``processor`` (IERR, thermal trip, MCE), ``pcie`` (Critical Interrupt: PCI PERR/SERR, bus errors),
``other``. SEL times are the BMC's clock, often not UTC and never synchronised with the host's, so
they are kept as printed and marked approximate (``ts_origin`` ``bmc``).

Artifact kinds: ``ipmi_sel``, ``sensors``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, Event, HostFact, ParseContext, Row, SeriesPoint, Skipped
from collectors.framework.lazy_re import lazy_regex

NAME = "ipmi"
LAYER = "hardware"
KINDS = ("ipmi_sel", "sensors")
TIMEOUT = 45.0
"""ipmitool sel elist (30 s: a slow BMC) then sensors (10 s), and the spool margin."""

SENSOR_TYPES = (
    "Temperature", "Voltage", "Current", "Fan", "Physical Security", "Platform Security", "Processor",
    "Power Supply", "Power Unit", "Cooling Device", "Other", "Memory", "Drive Slot / Bay", "Drive Slot",
    "POST Memory Resize", "System Firmware Progress", "System Firmwares", "Event Logging Disabled", "Watchdog1",
    "Watchdog2", "System Event", "Critical Interrupt", "Button", "Module / Board", "Microcontroller",
    "Add-in Card", "Chassis", "Chip Set", "Other FRU", "Cable / Interconnect", "Terminator",
    "System Boot Initiated", "Boot Error", "OS Boot", "OS Critical Stop", "Slot / Connector",
    "System ACPI Power State", "Platform Alert", "Entity Presence", "Monitor ASIC", "LAN",
    "Management Subsys Health", "Battery", "Session Audit", "Version Change", "FRU State", "Unknown",
)
_TYPES_LONGEST = sorted(SENSOR_TYPES, key=len, reverse=True)
CATEGORIES = {"Power Supply": "psu", "Fan": "fan", "Cooling Device": "fan", "Temperature": "temperature",
              "Memory": "memory", "Power Unit": "power", "Voltage": "power", "Current": "power",
              "Battery": "power", "Processor": "processor", "Critical Interrupt": "pcie"}

_FAULT = lazy_regex(r"fail|lost|critical|non-recoverable|uncorrectable|\bierr\b|thermal trip|machine check|perr|serr"
                    r"|fatal|predictive|redundancy lost|non-redundant|removed|disabled|throttl|correctable ecc"
                    r"|correctable error|out.of.range|config(?:uration)? error|going (?:low|high)|limit reached",
                    re.IGNORECASE)
_SEVERE = lazy_regex(r"fail|lost|uncorrectable|non-recoverable|\bierr\b|thermal trip|fatal|perr|serr|machine check"
                     r"|(?<!non-)critical going|transition to critical|removed", re.IGNORECASE)
_IPMITOOL_DATE = lazy_regex(r"^(\d\d)/(\d\d)/(\d{4})$")
_FREEIPMI_DATE = lazy_regex(r"^([A-Z][a-z]{2})-(\d\d)-(\d{4})$")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("ipmitool"):
        ctx.missing("ipmitool", "unavailable: ipmitool not installed")
    elif not any(os.path.exists(p) for p in ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")):
        ctx.missing("ipmitool sel elist", "unavailable: no local BMC interface (/dev/ipmi0)")
    else:
        yield ctx.run(["ipmitool", "sel", "elist"], kind="ipmi_sel", timeout=30)
    if ctx.which("sensors"):
        yield ctx.run(["sensors"], kind="sensors", timeout=10)
    else:
        ctx.missing("sensors", "unavailable: lm-sensors not installed")


def sniff(name: str, head: str) -> dict[str, int]:
    if "|" in head and re.search(r"^\s*[0-9a-fA-F]+\s*\|\s*(?:\d\d/\d\d/\d{4}|Pre-Init)\s*\|[^|]*\|[^|]+\|", head,
                                 re.MULTILINE):
        return {"ipmi_sel": 95}
    if "|" in head and re.search(r"^ID\s*\|\s*Date\s*\|\s*Time\s*\|\s*Name\s*\|\s*Type", head, re.MULTILINE):
        return {"ipmi_sel": 95}
    if "Adapter: " in head and re.search(r"^Adapter: .+$", head, re.MULTILINE) and re.search(
            r"^[^:\n]+:\s+[+-]?[\d.]+\s*(?:°|Â°)?C\b", head, re.MULTILINE):
        return {"sensors": 90}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    if kind == "sensors":
        yield from _parse_sensors(stream, ctx)
    elif kind == "ipmi_sel":
        yield from _parse_sel(stream, ctx)
    else:
        yield Skipped(None, f"ipmi collector cannot parse kind {kind}")


def split_sensor(name: str) -> tuple[str, str]:
    """``Power Supply PS2 Status`` -> (``Power Supply``, ``PS2 Status``); ipmitool prefixes the type."""
    for sensor_type in _TYPES_LONGEST:
        if name == sensor_type or name.startswith(sensor_type + " "):
            return sensor_type, name[len(sensor_type):].strip()
    return "Unknown", name


def _sel_time(date: str, clock: str) -> datetime | None:
    try:
        if m := _IPMITOOL_DATE.match(date):
            month, day, year = int(m.group(1)), int(m.group(2)), int(m.group(3))
        elif m := _FREEIPMI_DATE.match(date):
            month = datetime.strptime(m.group(1), "%b").month
            day, year = int(m.group(2)), int(m.group(3))
        else:
            return None
        hh, mm, ss = (int(x) for x in clock.split(":"))
        return datetime(year, month, day, hh, mm, ss, tzinfo=timezone.utc)
    except ValueError:
        return None


def _parse_sel(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    freeipmi: list[str] | None = None
    for n, line in ctx.lines(stream):
        if not line.strip() or line.startswith("#"):
            continue
        cols = [c.strip() for c in line.split("|")]
        if cols[0] == "ID" and len(cols) >= 5:
            freeipmi = [c.lower() for c in cols]
            continue
        if len(cols) < 4:
            yield Skipped(n, "not a SEL line")
            continue
        if freeipmi:
            row = dict(zip(freeipmi, cols))
            sensor_type = row.get("type") or split_sensor(row.get("name", ""))[0]
            sensor = row.get("name", "")
            event_text = row.get("event", "")
            direction = None
            state = row.get("state")
            detail = None
            date, clock = row.get("date", ""), row.get("time", "")
        else:
            if len(cols) < 5:
                yield Skipped(n, "not a SEL line")
                continue
            record, date, clock, name, event_text = cols[:5]
            sensor_type, sensor = split_sensor(name)
            direction = cols[5].lower() if len(cols) > 5 and cols[5] else None
            detail = " | ".join(c for c in cols[6:] if c) or None
            state = None
        record = cols[0]
        ts = _sel_time(date, clock)
        category = CATEGORIES.get(sensor_type, "other")
        fault = _is_fault(event_text, direction, state)
        severity = _severity(event_text, state) if fault else "info"
        attrs = {"category": category, "sensor_type": sensor_type, "sensor": sensor, "event": event_text,
                 "direction": direction, "state": state, "detail": detail, "record": record}
        text = f"{sensor_type} {sensor}: {event_text}".strip() + (f" ({direction})" if direction else "") + (
            f" [{state}]" if state else "") + (f" {detail}" if detail else "")
        yield Event(kind="hw_sel" if fault else "ipmi_sel", message=text, ts=ts,
                    ts_origin="bmc" if ts else "none", ts_approx=ts is not None, ts_raw=f"{date} {clock}",
                    severity=severity, attrs=attrs, line=n)


def _is_fault(event_text: str, direction: str | None, state: str | None) -> bool:
    if state:
        return state.lower() in ("critical", "warning")
    if direction == "deasserted":
        return bool(re.search(r"presence detected|fully redundant|device present", event_text, re.IGNORECASE))
    return bool(_FAULT.search(event_text))


def _severity(event_text: str, state: str | None) -> str:
    if state:
        return "error" if state.lower() == "critical" else "warning"
    return "error" if _SEVERE.search(event_text) or "presence" in event_text.lower() else "warning"


_CHIP = lazy_regex(r"^([A-Za-z0-9_.-]+-[A-Za-z0-9_]+-[0-9a-fA-F]+)\s*$")
_READING = lazy_regex(r"^([^:]+):\s+([+-]?\d+(?:\.\d+)?)\s*(?:°|Â°)?\s*(C|F|RPM|V|mV|W|A|J)\b(.*)$")
_LIMIT = lazy_regex(r"(high|crit|max|min|low|hyst|emerg)\s*=\s*([+-]?\d+(?:\.\d+)?)")


def _parse_sensors(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    ts, origin = ctx.snapshot_time()
    chip = "unknown"
    last: tuple[str, float, str, dict[str, float], int] | None = None
    for n, line in ctx.lines(stream):
        stripped = line.strip()
        if not stripped:
            continue
        if m := _CHIP.match(line):
            yield from _reading_rows(chip, last, ts, origin)
            chip, last = m.group(1), None
            continue
        if stripped.startswith("Adapter:"):
            continue
        if m := _READING.match(line):
            yield from _reading_rows(chip, last, ts, origin)
            label, value, unit, rest = m.group(1).strip(), float(m.group(2)), m.group(3), m.group(4)
            limits = {k: float(v) for k, v in _LIMIT.findall(rest)}
            if "ALARM" in rest:
                limits["alarm"] = 1.0
            last = (label, value, unit, limits, n)
            continue
        if last is not None and stripped.startswith("(") and _LIMIT.search(stripped):
            last[3].update({k: float(v) for k, v in _LIMIT.findall(stripped)})
            if "ALARM" in stripped:
                last[3]["alarm"] = 1.0
            continue
        if re.match(r"^[^:]+:\s+(N/A|\S+)", stripped):
            continue
        yield Skipped(n, "not a sensors line")
    yield from _reading_rows(chip, last, ts, origin)


def _reading_rows(chip: str, reading: tuple[str, float, str, dict[str, float], int] | None,
                  ts: datetime | None, origin: str) -> Iterator[Row]:
    if reading is None:
        return
    label, value, unit, limits, n = reading
    quantity = {"C": "temp_c", "F": "temp_f", "RPM": "fan_rpm", "V": "volts", "mV": "millivolts", "W": "watts",
                "A": "amps", "J": "joules"}[unit]
    if ts is not None:
        yield SeriesPoint(ts=ts, name=f"sensors.{quantity}", value=value, labels={"chip": chip, "sensor": label})
    if unit in ("C", "F"):
        yield HostFact(f"sensors.{chip}.{label}", f"{value:+.1f} {unit}")
    crit = limits.get("crit")
    over = unit in ("C", "F") and crit is not None and crit > 0 and value >= crit
    if over or limits.get("alarm"):
        yield Event(kind="sensor_alarm", ts=ts, ts_origin=origin if ts else "none", ts_approx=origin == "mtime",
                    severity="error" if over else "warning", line=n,
                    message=f"{chip} {label}: {value:g} {unit}" + (f" (crit {crit:g})" if crit is not None else "")
                    + (" ALARM" if limits.get("alarm") else ""),
                    attrs={"chip": chip, "sensor": label, "value": value, "unit": unit, "high": limits.get("high"),
                           "crit": crit})
