"""InfiniBand / RDMA ports: state, rate and error counters from ibstat, ibstatus, perfquery,
``/sys/class/infiniband`` and ``rdma link``.

A training job that dies in NCCL often died in the fabric: a port that went Down or is Polling for
a peer, a link that flapped (LinkDownedCounter), symbol errors from a bad cable. Every source here
is a point-in-time snapshot, so the events are about states and differences between samples of
the same port: a sample that shows a port not Active, a port that changed state between samples,
error counters that are non-zero or that rose. Live capture reads sysfs twice, a second apart, so
a counter still rising during the incident shows up from one capture alone; two captures (or two
handed-over files) of the same host are compared by ``workbench/ingest/derivations/counter_deltas.py``
through the ``series`` rows written here (``ib.<counter>``, labels device/port/class).

Artifact kinds: ``ibstat``, ``ibstatus``, ``perfquery`` (plain or ``-x``), ``ib_sysfs`` (lines
``/sys/class/infiniband/DEV/ports/N/FILE:VALUE`` as ``grep -r . /sys/class/infiniband/*/ports``
prints them; capture writes one ``# ib_sysfs sample N at ISO`` line before each sample) and
``rdma_link`` (``rdma link show``; successive outputs may be separated by ``---``).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from collectors.base import Artifact, CaptureContext, Event, HostFact, ParseContext, Row, SeriesPoint, Skipped
from collectors.framework.framing.times import parse_iso
from collectors.framework.lazy_re import lazy_regex

NAME = "infiniband"
LAYER = "network_storage"
KINDS = ("ibstat", "ibstatus", "perfquery", "ib_sysfs", "rdma_link")
TIMEOUT = 30.0

SYSFS_ROOT = "/sys/class/infiniband"
MAX_PORTS = 64
MAX_OBSERVATIONS = 200_000
"""Bound on remembered per-port samples, so a hostile file cannot grow memory without limit."""

ERROR_COUNTERS = frozenset({
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors", "port_xmit_discards", "port_xmit_constraint_errors",
    "port_rcv_constraint_errors", "local_link_integrity_errors", "excessive_buffer_overrun_errors", "vl15_dropped",
})
"""The IBA PortCounters error group (perfquery prints them between CounterSelect2 and PortXmitWait)."""

_HW_ERROR = lazy_regex(r"(?:_err|_error|_errors|timeout|discard|_drop|out_of_buffer|out_of_sequence)")
"""mlx5 ``hw_counters`` whose rise means lost or retried RDMA traffic (local_ack_timeout_err, ...)."""

CONGESTION_COUNTERS = frozenset({"port_xmit_wait"})

_ALIASES = {"port_xmit_pkts": "port_xmit_packets", "port_rcv_pkts": "port_rcv_packets",
            "port_unicast_xmit_pkts": "unicast_xmit_packets", "port_unicast_rcv_pkts": "unicast_rcv_packets",
            "port_multicast_xmit_pkts": "multicast_xmit_packets",
            "port_multicast_rcv_pkts": "multicast_rcv_packets"}
_NOT_COUNTERS = {"port_select", "counter_select", "counter_select2", "cap_mask", "cap_mask2"}

_IBSTAT_CA = lazy_regex(r"^CA '([^']+)'\s*$")
_IBSTAT_PORT = lazy_regex(r"^\s+Port (\d+):\s*$")
_IBSTAT_FIELD = lazy_regex(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_IBSTATUS_HEAD = lazy_regex(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_PERF_HEAD = lazy_regex(r"^#\s*Port (extended )?counters:\s*Lid (\d+) port (\d+)", re.IGNORECASE)
_PERF_FIELD = lazy_regex(r"^([A-Za-z][A-Za-z0-9]*):\.*\s*(\S+)\s*$")
_PERF_ARGV = lazy_regex(r"-C\s+(\S+).*?-P\s+(\d+)")
_SYSFS_LINE = lazy_regex(r"^(?:\S*/)?infiniband/([^/\s]+)/ports/(\d+)/(\S+?):(.*)$")
_SAMPLE_HEAD = lazy_regex(r"^#\s*ib_sysfs sample (\d+) at (\S+)")
_RDMA_LINK = lazy_regex(r"^(?:\d+/\d+:\s+)?link\s+(\S+?)/(\d+)\s+(.*)$")
_CAMEL = lazy_regex(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


# -- live capture -------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """ibstat (or ibstatus), two sysfs samples a second apart, perfquery -x per IB port, rdma link."""
    ports = _sysfs_ports(SYSFS_ROOT)
    if not ports:
        ctx.missing(SYSFS_ROOT, "unavailable: no InfiniBand/RDMA devices on this host")
        return
    if ctx.which("ibstat"):
        yield ctx.run(["ibstat"], kind="ibstat", timeout=10)
    elif ctx.which("ibstatus"):
        yield ctx.run(["ibstatus"], kind="ibstatus", timeout=10)
    else:
        ctx.missing("ibstat", "unavailable: infiniband-diags not installed (sysfs is read instead)")
    first = _sysfs_sample(ports, 1)
    time.sleep(1.0)
    yield Artifact(source=f"{SYSFS_ROOT} (2 samples)", kind="ib_sysfs",
                   data=(first + _sysfs_sample(ports, 2)).encode())
    if ctx.which("perfquery"):
        for device, port, link_layer in ports:
            if link_layer.lower() == "infiniband":
                yield ctx.run(["perfquery", "-x", "-C", device, "-P", port], kind="perfquery", timeout=5)
    else:
        ctx.missing("perfquery", "unavailable: infiniband-diags not installed")
    if ctx.which("rdma"):
        yield ctx.run(["rdma", "link", "show"], kind="rdma_link", timeout=5)


def _sysfs_ports(root: str) -> list[tuple[str, str, str]]:
    found = []
    base = Path(root)
    if not base.is_dir():
        return []
    for device in sorted(base.iterdir()):
        ports_dir = device / "ports"
        if not ports_dir.is_dir():
            continue
        for port in sorted(ports_dir.iterdir(), key=lambda p: p.name):
            found.append((device.name, port.name, _read_small(port / "link_layer") or ""))
            if len(found) >= MAX_PORTS:
                return found
    return found


def _read_small(path: Path) -> str | None:
    try:
        with open(path, errors="replace") as f:
            return f.read(4096).strip()
    except OSError:
        return None


def _sysfs_sample(ports: list[tuple[str, str, str]], number: int) -> str:
    """One sample in ``grep -r .`` form: path:value, one line per readable file."""
    out = [f"# ib_sysfs sample {number} at {datetime.now(timezone.utc).isoformat()}"]
    for device, port, _ in ports:
        pdir = Path(SYSFS_ROOT) / device / "ports" / port
        names = ["state", "phys_state", "rate", "link_layer", "lid", "sm_lid"]
        paths = [pdir / n for n in names]
        for sub in ("counters", "hw_counters"):
            sdir = pdir / sub
            if sdir.is_dir():
                paths += sorted(sdir.iterdir())
        for path in paths:
            value = _read_small(path)
            if value is not None and os.path.isfile(path):
                out.append(f"{path}:{value.splitlines()[0] if value else ''}")
    return "\n".join(out) + "\n"


# -- sniffing -----------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    # a plain substring test before each pattern that needs it: 512 rank logs are sniffed by every collector
    if "CA '" in head and re.search(r"^CA '[^']+'\s*$", head, re.MULTILINE) \
            and re.search(r"^\s+Port \d+:", head, re.MULTILINE):
        return {"ibstat": 95}
    if "Infiniband device '" in head and re.search(r"^Infiniband device '[^']+' port \d+ status:", head, re.MULTILINE):
        return {"ibstatus": 95}
    if re.search(r"^#\s*Port (extended )?counters:\s*Lid \d+ port \d+", head, re.MULTILINE | re.IGNORECASE):
        return {"perfquery": 95}
    if ":..." in head and re.search(r"^(SymbolErrorCounter|PortXmitWait|LinkDownedCounter):\.{3,}", head, re.MULTILINE):
        return {"perfquery": 85}
    if "infiniband/" in head \
            and len(re.findall(r"^(?:\S*/)?infiniband/[^/\s]+/ports/\d+/\S+?:", head, re.MULTILINE)) >= 2:
        return {"ib_sysfs": 90}
    if "state " in head and re.search(r"^(?:\d+/\d+:\s+)?link \S+/\d+ .*\bstate [A-Z_]+", head, re.MULTILINE):
        return {"rdma_link": 90}
    return {}


# -- parsing ------------------------------------------------------------------------------------

@dataclass
class _State:
    sample: int
    ts: datetime | None
    device: str
    port: str
    state: str
    phys: str
    line: int | None
    attrs: dict = field(default_factory=dict)


@dataclass
class _Counter:
    sample: int
    ts: datetime | None
    device: str
    port: str
    name: str
    value: int
    line: int | None


class _Observations:
    """Per-port samples of one artifact, turned into events once the whole artifact is read."""

    def __init__(self, ctx: ParseContext) -> None:
        self.snapshot, self.origin = ctx.snapshot_time()
        self.states: list[_State] = []
        self.counters: list[_Counter] = []
        self.full = False

    def _room(self) -> bool:
        if len(self.states) + len(self.counters) >= MAX_OBSERVATIONS:
            self.full = True
            return False
        return True

    def state(self, obs: _State) -> None:
        if self._room():
            self.states.append(obs)

    def counter(self, obs: _Counter) -> None:
        if self._room():
            self.counters.append(obs)

    def finish(self) -> Iterator[Row]:
        if self.full:
            yield Skipped(None, f"more than {MAX_OBSERVATIONS} port samples; the rest were not kept")
        yield from self._state_events()
        yield from self._counter_rows()

    def _event(self, kind: str, message: str, obs: _State | _Counter, severity: str, attrs: dict) -> Event:
        ts = obs.ts or self.snapshot
        origin = self.origin if obs.ts is None or obs.ts == self.snapshot else "iso"
        return Event(kind=kind, message=message, ts=ts, ts_origin=origin if ts else "none",
                     ts_approx=origin == "mtime", severity=severity, attrs=attrs, line=obs.line)

    def _state_events(self) -> Iterator[Row]:
        by_port: dict[tuple[str, str], list[_State]] = {}
        for obs in self.states:
            by_port.setdefault((obs.device, obs.port), []).append(obs)
        for (device, port), seen in by_port.items():
            previous: bool | None = None
            combos: list[str] = []
            any_down = False
            for obs in seen:
                active = _is_active(obs.state, obs.phys)
                any_down = any_down or not active
                combo = f"{obs.state}/{obs.phys}" if obs.phys else obs.state
                if not combos or combos[-1] != combo:
                    combos.append(combo)
                attrs = {"device": device, "port": _int_or(port), "state": obs.state, "phys_state": obs.phys,
                         **obs.attrs}
                if not active and previous in (None, True):
                    detail = ", ".join(f"{k} {v}" for k, v in obs.attrs.items() if k in ("rate", "link_layer") and v)
                    yield self._event("link_down", f"{device} port {port}: state {obs.state}"
                                      + (f", physical state {obs.phys}" if obs.phys else "")
                                      + (f" ({detail})" if detail else ""), obs, "error", attrs)
                elif active and previous is False:
                    yield self._event("link_up", f"{device} port {port}: back to {combo}", obs, "info", attrs)
                previous = active
            last = seen[-1]
            if len(combos) > 2 and any_down:
                yield self._event("link_flap", f"{device} port {port} changed state {len(combos) - 1} times: "
                                  + " -> ".join(combos), last, "error",
                                  {"device": device, "port": _int_or(port), "states": combos,
                                   "transitions": len(combos) - 1})
            host_key = f"ib.{device}/{port}"
            yield HostFact(f"{host_key}.state", last.state + (f"/{last.phys}" if last.phys else ""))
            for key in ("rate", "link_layer"):
                if last.attrs.get(key):
                    yield HostFact(f"{host_key}.{key}", str(last.attrs[key]))

    def _counter_rows(self) -> Iterator[Row]:
        by_port: dict[tuple[str, str], dict[int, dict[str, _Counter]]] = {}
        for obs in self.counters:
            by_port.setdefault((obs.device, obs.port), {}).setdefault(obs.sample, {})[obs.name] = obs
        for (device, port), samples in by_port.items():
            order = sorted(samples)
            for number in order:
                for obs in samples[number].values():
                    ts = obs.ts or self.snapshot
                    if ts is not None and not obs.name.startswith("_"):
                        labels = {"device": device, "port": port, "class": counter_class(obs.name)}
                        yield SeriesPoint(ts=ts, name=f"ib.{obs.name}", value=float(obs.value), labels=labels)
            last = samples[order[-1]]
            errors = {n: o.value for n, o in last.items() if counter_class(n) == "error" and o.value > 0}
            anchor = next(iter(last.values()))
            lid = last.get("_lid")
            if errors:
                text = ", ".join(f"{n}={v}" for n, v in sorted(errors.items()))
                yield self._event("ib_counter_errors", f"{device} port {port}: error counters {text}", anchor,
                                  "warning", {"device": device, "port": _int_or(port), "counters": errors,
                                              **({"lid": lid.value} if lid else {})})
            if len(order) > 1:
                first = samples[order[0]]
                rises = {n: o.value - first[n].value for n, o in last.items()
                         if n in first and counter_class(n) == "error" and o.value > first[n].value}
                if rises:
                    start, end = first[next(iter(first))].ts, anchor.ts
                    seconds = (end - start).total_seconds() if start and end else None
                    text = ", ".join(f"{n} +{v}" for n, v in sorted(rises.items()))
                    yield self._event("counter_rising", f"{device} port {port}: {text}"
                                      + (f" in {seconds:.1f} s" if seconds is not None else " between samples"),
                                      anchor, "warning", {"device": device, "port": _int_or(port),
                                                          "counters": rises, "seconds": seconds})


def counter_class(name: str) -> str:
    """error / congestion / traffic: only rising error counters are evidence of a fabric fault."""
    if name in ERROR_COUNTERS:
        return "error"
    if name in CONGESTION_COUNTERS or "cnp" in name or "ecn" in name:
        return "congestion"
    if name.startswith("_"):
        return "id"
    if name.startswith("hw.") and _HW_ERROR.search(name):
        return "error"
    return "traffic"


def canonical_counter(name: str) -> str:
    """perfquery's ``SymbolErrorCounter`` and sysfs's ``symbol_error`` are one counter."""
    snake = _CAMEL.sub("_", name).lower()
    if snake.endswith("_counter"):
        snake = snake[: -len("_counter")]
    return _ALIASES.get(snake, snake)


def _is_active(state: str, phys: str) -> bool:
    s = re.sub(r"[^A-Z]", "", state.upper())
    p = re.sub(r"[^A-Z]", "", phys.upper())
    return s in ("ACTIVE", "ACTIVEDEFER") and p in ("", "LINKUP")


def _strip_code(value: str) -> str:
    """``1: DOWN`` -> ``DOWN``; ``3: Disabled`` -> ``Disabled``."""
    return re.sub(r"^\s*\d+\s*:\s*", "", value).strip()


def _int_or(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _int_value(text: str) -> int | None:
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    obs = _Observations(ctx)
    parser = {"ibstat": _parse_ibstat, "ibstatus": _parse_ibstatus, "perfquery": _parse_perfquery,
              "ib_sysfs": _parse_sysfs, "rdma_link": _parse_rdma}.get(kind)
    if parser is None:
        yield Skipped(None, f"infiniband collector cannot parse kind {kind}")
        return
    yield from parser(stream, ctx, obs)
    yield from obs.finish()


class _Samples:
    """Numbers samples: a port seen again starts the next sample (outputs run twice, concatenated)."""

    def __init__(self) -> None:
        self.number = 1
        self.seen: set[tuple[str, str]] = set()

    def see(self, key: tuple[str, str]) -> int:
        if key in self.seen:
            self.number += 1
            self.seen = set()
        self.seen.add(key)
        return self.number

    def next(self) -> None:
        if self.seen:
            self.number += 1
            self.seen = set()

    def mark(self, key: tuple[str, str]) -> None:
        """Something of ``key`` was read in the current sample (without starting a new one)."""
        self.seen.add(key)


def _parse_ibstat(stream: BinaryIO, ctx: ParseContext, obs: _Observations) -> Iterator[Row]:
    samples = _Samples()
    device: str | None = None
    port: str | None = None
    fields: dict[str, str] = {}
    start = 0

    def flush() -> None:
        if device and port and ("state" in fields or "physical state" in fields):
            number = samples.see((device, port))
            attrs = {k: v for k, v in (("rate", fields.get("rate")), ("link_layer", fields.get("link layer")),
                                       ("lid", fields.get("base lid")), ("sm_lid", fields.get("sm lid"))) if v}
            obs.state(_State(number, None, device, port, fields.get("state", ""), fields.get("physical state", ""),
                             start, attrs))

    for n, line in ctx.lines(stream):
        if m := _IBSTAT_CA.match(line):
            flush()
            device, port, fields = m.group(1), None, {}
        elif m := _IBSTAT_PORT.match(line):
            flush()
            port, fields, start = m.group(1), {}, n
        elif port and (m := _IBSTAT_FIELD.match(line)):
            fields[m.group(1).strip().lower()] = m.group(2)
        elif line.strip() and not _IBSTAT_FIELD.match(line):
            yield Skipped(n, "not an ibstat line")
    flush()


def _parse_ibstatus(stream: BinaryIO, ctx: ParseContext, obs: _Observations) -> Iterator[Row]:
    samples = _Samples()
    current: tuple[str, str, int] | None = None
    fields: dict[str, str] = {}

    def flush() -> None:
        if current and ("state" in fields or "phys state" in fields):
            device, port, start = current
            attrs = {k: v for k, v in (("rate", fields.get("rate")), ("link_layer", fields.get("link_layer")),
                                       ("lid", fields.get("base lid")), ("sm_lid", fields.get("sm lid"))) if v}
            obs.state(_State(samples.see((device, port)), None, device, port, _strip_code(fields.get("state", "")),
                             _strip_code(fields.get("phys state", "")), start, attrs))

    for n, line in ctx.lines(stream):
        if m := _IBSTATUS_HEAD.match(line):
            flush()
            current, fields = (m.group(1), m.group(2), n), {}
        elif current and ":" in line and line[:1].isspace():
            key, _, value = line.strip().partition(":")
            fields[key.strip().lower()] = value.strip()
        elif line.strip():
            yield Skipped(n, "not an ibstatus line")
    flush()


def _parse_perfquery(stream: BinaryIO, ctx: ParseContext, obs: _Observations) -> Iterator[Row]:
    samples = _Samples()
    argv = _PERF_ARGV.search(ctx.source_name or "")
    device = argv.group(1) if argv else None
    lid: str | None = None
    port: str | None = argv.group(2) if argv else None
    number = 0
    for n, line in ctx.lines(stream):
        if m := _PERF_HEAD.match(line):
            lid, port = m.group(2), m.group(3)
            number = samples.see((device or f"lid {lid}", port))
            obs.counter(_Counter(number, None, device or f"lid {lid}", port, "_lid", int(lid), n))
            continue
        if line.startswith("#") or not line.strip():
            continue
        m = _PERF_FIELD.match(line)
        if not m:
            yield Skipped(n, "not a perfquery counter line")
            continue
        name = canonical_counter(m.group(1))
        value = _int_value(m.group(2))
        if name == "port_select" and port is None and value is not None:
            port = str(value)
        if name in _NOT_COUNTERS or value is None:
            continue
        if number == 0:
            number = samples.see((device or "local", port or "1"))
        key_device = device or (f"lid {lid}" if lid else "local")
        obs.counter(_Counter(number, None, key_device, port or "1", name, value, n))


def _parse_sysfs(stream: BinaryIO, ctx: ParseContext, obs: _Observations) -> Iterator[Row]:
    samples = _Samples()
    sample_ts: datetime | None = None
    ports: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}

    def flush() -> None:
        for (device, port), files in ports.items():
            if "state" in files or "phys_state" in files:
                state, line = files.get("state", ("", 0))
                phys = files.get("phys_state", ("", 0))[0]
                attrs = {k: files[k][0] for k in ("rate", "link_layer", "lid", "sm_lid") if k in files}
                obs.state(_State(samples.number, sample_ts, device, port, _strip_code(state), _strip_code(phys),
                                 line, attrs))
        ports.clear()

    for n, line in ctx.lines(stream):
        if m := _SAMPLE_HEAD.match(line):
            flush()
            samples.next()
            sample_ts = parse_iso(m.group(2))
            continue
        if not line.strip() or line.startswith("#"):
            continue
        m = _SYSFS_LINE.match(line)
        if not m:
            yield Skipped(n, "not an /sys/class/infiniband line")
            continue
        device, port, rel, value = m.groups()
        if (device, port) in ports and rel in ports[(device, port)] and rel in ("state", "phys_state"):
            flush()
            samples.next()
        files = ports.setdefault((device, port), {})
        files[rel] = (value.strip(), n)
        samples.mark((device, port))
        if rel.startswith(("counters/", "hw_counters/")):
            number = _int_value(value)
            if number is None:
                yield Skipped(n, "counter value is not a number")
                continue
            sub, _, cname = rel.partition("/")
            name = canonical_counter(cname) if sub == "counters" else "hw." + cname.lower()
            obs.counter(_Counter(samples.number, sample_ts, device, port, name, number, n))
    flush()


def _parse_rdma(stream: BinaryIO, ctx: ParseContext, obs: _Observations) -> Iterator[Row]:
    samples = _Samples()
    for n, line in ctx.lines(stream):
        if line.strip() == "---":
            samples.next()
            continue
        m = _RDMA_LINK.match(line.strip())
        if not m:
            if line.strip():
                yield Skipped(n, "not an 'rdma link' line")
            continue
        device, port, rest = m.groups()
        words = rest.split()
        pairs = {words[i]: words[i + 1] for i in range(0, len(words) - 1, 2)}
        attrs = {k: pairs[k] for k in ("lid", "sm_lid", "netdev", "subnet_prefix") if k in pairs}
        obs.state(_State(samples.see((device, port)), None, device, port, pairs.get("state", ""),
                         pairs.get("physical_state", ""), n, attrs))
