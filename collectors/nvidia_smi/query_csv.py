"""``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``: one sample per row."""

from __future__ import annotations

import re
from collections.abc import Iterable

from collectors.base import Event, GpuInventory, GpuSample, Row, Skipped, normalize_pci
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, Clock, TextParser, integer, number, parse_local
from collectors.nvidia_smi.tree import NA, REASONS, yes
from collectors.nvml.shared import decode_reasons, gpu_key

_CSV_FIELD = lazy_regex(r"^[a-z_][a-z0-9_.]*(?: \[[^\]]+\])?$")
QUERY_CMD = re.compile(r"--query-gpu[= ]([\w.,]+).*?--format[= ](\S+)")
_ANNOTATION = lazy_regex(r"\s+(?:<=|<-|#)\s.*$")


def open_csv(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """A pasted ``--query-gpu`` command line or a header of query field names."""
    if (m := QUERY_CMD.search(line)) or is_csv_header(stripped):
        return parser.open(CsvBlock(parser, m), n, line)
    return None


def is_csv_header(line: str) -> bool:
    """A ``--query-gpu`` header: every column a query field name, at least two of them known, one of
    those specific to nvidia-smi (``timestamp, name, value`` from another tool does not qualify)."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 2 or not all(_CSV_FIELD.match(f) for f in fields):
        return False
    known = [_csv_name(f) for f in fields if _csv_name(f) in CSV_KNOWN]
    specific = [k for k in known if k not in CSV_GENERIC]
    return len(known) >= max(2, len(fields) // 2) and bool(specific)



def _csv_name(column: str) -> str:
    return re.sub(r"\s*\[[^\]]*\]$", "", column.strip())


CSV_KNOWN = {"index", "name", "gpu_name", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "serial", "gpu_serial",
             "vbios_version", "driver_version", "persistence_mode", "mig.mode.current", "pstate", "temperature.gpu",
             "utilization.gpu", "utilization.memory", "memory.total", "memory.used", "memory.free", "power.draw",
             "power.draw.instant", "power.draw.average", "power.limit", "enforced.power.limit", "clocks.sm",
             "clocks.current.sm", "clocks.mem", "clocks.current.memory", "clocks_throttle_reasons.active",
             "clocks_event_reasons.active", "ecc.errors.corrected.volatile.total",
             "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.aggregate.total",
             "ecc.errors.uncorrected.aggregate.total", "retired_pages.single_bit_ecc.count", "retired_pages.sbe",
             "retired_pages.double_bit.count", "retired_pages.dbe", "retired_pages.pending",
             "remapped_rows.correctable",
             "remapped_rows.uncorrectable", "remapped_rows.pending", "remapped_rows.failure", "pcie.link.gen.current",
             "pcie.link.gen.gpucurrent", "pcie.link.gen.max", "pcie.link.gen.gpumax", "pcie.link.gen.hostmax",
             "pcie.link.width.current", "pcie.link.width.max", "timestamp", "gpu_recovery_action", "fan.speed",
             "count", "ecc.mode.current", "pid", "process_name", "used_memory", "used_gpu_memory", "clocks.gr",
             "clocks.max.sm", "temperature.memory", "compute_mode"}
"""``--query-gpu`` fields read here (``nvidia-smi --help-query-gpu``); any other column is kept in extra."""
CSV_GENERIC = {"index", "name", "uuid", "serial", "timestamp", "count", "pid", "process_name", "used_memory",
               "compute_mode"}
"""Column names other tools' CSV files use too; alone they do not make a file nvidia-smi output."""


class CsvBlock(Block):
    """``--query-gpu=... --format=csv`` with or without header and units; a pasted command line
    gives the columns of headerless output. Human annotations after the values (``<= note``) go."""

    def __init__(self, parser: TextParser, command: re.Match[str] | None) -> None:
        super().__init__(parser)
        self.columns: list[str] | None = None
        self.noheader = False
        if command is not None:
            fmt = command.group(2).lower()
            self.noheader = "noheader" in fmt
            if self.noheader:
                self.columns = [c.strip() for c in command.group(1).split(",") if c.strip()]
        self.seen_inventory: set[str] = set()
        self.rows = 0

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = _ANNOTATION.sub("", line).strip()
        if QUERY_CMD.search(line):
            return [], self.rows == 0
        if not stripped:
            return [], False
        if self.columns is None:
            if is_csv_header(stripped):
                self.columns = [_csv_name(c) for c in stripped.split(",")]
                return [], True
            return [], False
        if is_csv_header(stripped):
            self.columns = [_csv_name(c) for c in stripped.split(",")]
            return [], True
        values = [v.strip() for v in stripped.split(",")]
        if len(values) != len(self.columns):
            return [], False
        self.rows += 1
        return self._row(n, dict(zip(self.columns, values))), True

    def _row(self, n: int, row: dict[str, str]) -> list[Row]:
        if "pid" in row and not any(k in row for k in ("utilization.gpu", "temperature.gpu", "pstate")):
            return [Skipped(n, "process query row (no GPU reading)")]
        out: list[Row] = []
        values = {k: None if v.lower() in NA else v for k, v in row.items()}
        clean = values.get

        errors = {k: v for k, v in row.items() if v.startswith("[") and v.strip("[]").lower() not in NA}
        index = integer(clean("index"))
        bus = clean("pci.bus_id") or clean("gpu_bus_id")
        uuid = clean("uuid") or clean("gpu_uuid")
        key = gpu_key(bus, index, uuid)
        stamp = clean("timestamp")
        ts = parse_local(stamp) if stamp else None
        clock = Clock(ts, "localtime", True, stamp) if ts else self.p.clock()
        mask = integer(clean("clocks_event_reasons.active") or clean("clocks_throttle_reasons.active"))
        reasons = decode_reasons(mask) if mask is not None else None
        for name, text in row.items():
            prefix, _, reason = name.partition(".")
            if prefix in ("clocks_throttle_reasons", "clocks_event_reasons") and reason in REASONS:
                reasons = reasons if reasons is not None else []
                if yes(text) and REASONS[reason] not in reasons:
                    reasons.append(REASONS[reason])
        max_gen = integer(clean("pcie.link.gen.max") or clean("pcie.link.gen.gpumax"))
        max_width = integer(clean("pcie.link.width.max"))
        name = clean("name") or clean("gpu_name")
        if key not in self.seen_inventory and (name or uuid or clean("driver_version") or clean("serial")):
            self.seen_inventory.add(key)
            out.append(GpuInventory(gpu=key, host=self.p.host, index=index, uuid=uuid, name=name,
                                    serial=clean("serial") or clean("gpu_serial"), vbios=clean("vbios_version"),
                                    driver=clean("driver_version"), persistence=clean("persistence_mode"),
                                    mig_mode=clean("mig.mode.current"),
                                    power_limit_w=number(clean("enforced.power.limit") or clean("power.limit")),
                                    pcie_max_gen=max_gen, pcie_max_width=max_width,
                                    memory_total_mib=number(clean("memory.total")),
                                    extra={"source": "nvidia-smi --query-gpu"}))
        other = [c for c in row if c not in CSV_KNOWN and not c.startswith(("clocks_throttle_reasons.",
                                                                               "clocks_event_reasons."))]
        sample = GpuSample(
            ts=clock.ts, gpu=key, host=self.p.host, uuid=uuid,
            util_gpu=number(clean("utilization.gpu")), util_mem=number(clean("utilization.memory")),
            mem_used_mib=number(clean("memory.used")), mem_total_mib=number(clean("memory.total")),
            temp_c=number(clean("temperature.gpu")),
            power_w=number(clean("power.draw") or clean("power.draw.instant") or clean("power.draw.average")),
            power_limit_w=number(clean("enforced.power.limit") or clean("power.limit")),
            sm_clock_mhz=number(clean("clocks.sm") or clean("clocks.current.sm")),
            mem_clock_mhz=number(clean("clocks.mem") or clean("clocks.current.memory")),
            throttle_reasons=reasons,
            ecc_volatile_corrected=integer(clean("ecc.errors.corrected.volatile.total")),
            ecc_volatile_uncorrected=integer(clean("ecc.errors.uncorrected.volatile.total")),
            ecc_aggregate_corrected=integer(clean("ecc.errors.corrected.aggregate.total")),
            ecc_aggregate_uncorrected=integer(clean("ecc.errors.uncorrected.aggregate.total")),
            retired_pages_sbe=integer(clean("retired_pages.single_bit_ecc.count") or clean("retired_pages.sbe")),
            retired_pages_dbe=integer(clean("retired_pages.double_bit.count") or clean("retired_pages.dbe")),
            retired_pending=yes(clean("retired_pages.pending")), remap_pending=yes(clean("remapped_rows.pending")),
            remap_failure=yes(clean("remapped_rows.failure")),
            pcie_gen=integer(clean("pcie.link.gen.current") or clean("pcie.link.gen.gpucurrent")),
            pcie_width=integer(clean("pcie.link.width.current")),
            extra={"source": "nvidia-smi --query-gpu", "index": index, "pstate": clean("pstate"),
                   "pcie_max_gen": max_gen, "pcie_max_width": max_width,
                   "pcie_host_max_gen": integer(clean("pcie.link.gen.hostmax")),
                   "remap_correctable": integer(clean("remapped_rows.correctable")),
                   "remap_uncorrectable": integer(clean("remapped_rows.uncorrectable")),
                   "recovery_action": clean("gpu_recovery_action"),
                   "other": {k: row[k] for k in other}},
            line=n)
        out.append(sample)
        out.extend(self.p.tracker.observe(sample, ts_origin=clock.origin, ts_approx=clock.approx, ts_raw=clock.raw))
        for column, text in errors.items():
            reason = text.strip("[] ")
            out.append(Event(kind="nvidia_smi_error", message=f"nvidia-smi {column} of GPU {index}: {reason}",
                             ts=clock.ts, ts_origin=clock.origin, ts_approx=clock.approx, host=self.p.host,
                             layer="gpu", severity="error", gpu=normalize_pci(bus),
                             attrs={"error": f"query {column}", "reason": reason, "pci": normalize_pci(bus)}, line=n))
        return out

