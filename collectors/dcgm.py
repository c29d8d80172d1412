"""DCGM: ``dcgmi diag`` (text tables of DCGM 2.x-4.x), ``dcgmi dmon``, ``dcgmi health -c`` (table or ``-j``
JSON) and the nvvs / nv-hostengine logs, pasted alone or among nvidia-smi outputs.

Its blocks are read by the line dispatcher nvidia-smi uses (``collectors.framework.text_blocks``): a file
sniffed as DCGM is read with every nvidia-smi format too, and a file sniffed as nvidia-smi with DCGM's, so
whatever order a responder pasted them in, each block is read by its own reader. Live capture asks the
host engine for one short ``dmon`` window and the health report (TOUCHES_GPU: it talks to the GPUs through
nv-hostengine, so ``gpuwb capture --safe`` skips it); ``dcgmi diag`` is never run (it stresses the GPUs).
Outputs without a clock of their own take the capture time or the file's mtime.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from collectors.base import Artifact, CaptureContext, Event, GpuSample, HostFact, ParseContext, Row, Skipped
from collectors.framework.json_items import no_lone_surrogates
from collectors.framework.lazy_re import lazy_regex
from collectors.framework.text_blocks import Block, TextParser, integer, number, parse_local
from collectors.nvml.shared import gpu_key, xid_catalog_attrs

NAME = "dcgm"
LAYER = "gpu"
KINDS = ("dcgm_diag", "dcgm_dmon", "dcgm_health", "dcgm_log")
STRUCTURED_KINDS = ("dcgm_dmon",)
"""A table of numbers: the signature matcher does not read its lines."""
TIMEOUT = 30.0
TOUCHES_GPU = True
COMMAND_TIMEOUT = 12.0
DMON_FIELDS = "150,155,203,204,100,101,230"
"""Temperature, power, GPU and memory utilisation, SM and memory clocks, last Xid (DCGM field ids)."""
COMMANDS = (("dcgmi dmon -e " + DMON_FIELDS + " -c 3", "dcgm_dmon"), ("dcgmi health -c -j", "dcgm_health"))
"""What live capture runs, in order, with the kind each output is stored as (``gpuwb capture --list``)."""

DCGM_BLANKS = {9223372036854775792: "blank", 9223372036854775793: "not_found", 9223372036854775794: "not_supported",
               9223372036854775795: "not_permissioned", 2147483632: "blank", 2147483633: "not_found",
               2147483634: "not_supported", 2147483635: "not_permissioned"}
"""DCGM_INT64_BLANK / DCGM_INT32_BLANK and the sentinels after them: not values, reasons."""

DMON_COLUMNS = {"TMPTR": "temp_c", "POWER": "power_w", "GPUTL": "util_gpu", "MCUTL": "util_mem",
                "SMCLK": "sm_clock_mhz", "MMCLK": "mem_clock_mhz", "FBUSD": "mem_used_mib", "FBTTL": "mem_total_mib",
                "PCILG": "pcie_gen", "PCILW": "pcie_width"}

_DIAG_ROW = lazy_regex(r"^\|\s*(.*?)\s*\|\s*(.*?)\s*\|\s*$")
_DIAG_CATEGORY = lazy_regex(r"^[|+]-+\s+(\w[\w ]*?)\s+-+\+")
_DIAG_RESULT = lazy_regex(r"^(?:GPU(\d+):\s*)?(Pass|Fail|Warn|Skip|Warning)\b(?:\s*-\s*(.*))?$", re.IGNORECASE)
_POD = lazy_regex(r"Executing in Pod (\S+) on Host (\S+)")
_DMON_HEAD = lazy_regex(r"^#\s*Entity\s+(.+?)\s*$")
_DMON_ROW = lazy_regex(r"^(GPU|GPU-I|GPU-CI|Switch|Link|CPU|Core)\s+(\d+)\s+(.*?)\s*$")
_DCGM_LOG = lazy_regex(r"^(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)\s+(ERROR|WARN|WARNING|INFO|DEBUG|VERB\w*|"
                       r"FATAL|CRIT\w*)\s+\[(\d+):(\d+)\]\s+(.*?)\s*$")
_DCGM_WHERE = lazy_regex(r"\s*\[([^\]\s]+:\d+)\]\s*(?:\[([^\]]+)\])?\s*$")


# -- live capture --------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """Only where the host engine's client is installed; a host without DCGM is no gap worth a line."""
    if ctx.which("dcgmi") is None:
        ctx.missing("dcgmi", "unavailable: command not found")
        return
    for command, kind in COMMANDS:
        yield ctx.run(command.split(), kind=kind, timeout=COMMAND_TIMEOUT)


# -- sniff ---------------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    """Confident only for DCGM's own outputs; the scores sit below nvidia-smi's for its formats, so a
    file that opens with nvidia-smi output and has DCGM's later is nvidia-smi's (read with both)."""
    lines = [ln for ln in head.splitlines()[:400] if ln.strip()]
    if "| Diagnostic" in head and ("| Result" in head or "DCGM Version" in head):
        return {"dcgm_diag": 90}
    if '"DCGM GPU Diagnostic"' in head or '"DCGM Diagnostic"' in head:
        return {"dcgm_diag": 90}
    if sum(1 for ln in lines[:200] if _DCGM_LOG.match(ln) and _DCGM_WHERE.search(ln)) >= 1:
        return {"dcgm_log": 85}
    if "Entity" in head and any(_DMON_HEAD.match(ln) for ln in lines[:40]):
        return {"dcgm_dmon": 85}
    if "Health Monitor Report" in head:
        return {"dcgm_health": 85}
    return {}


# -- parse ---------------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    from collectors.nvidia_smi import TextParser as PastedParser  # deferred: nvidia_smi imports this module

    parser = PastedParser(ctx)
    for n, line in ctx.lines(stream):
        yield from parser.feed(n, line)
    yield from parser.close()


def open_pod(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """``Executing in Pod P on Host H`` (dcgmi run through kubectl): the host of the DCGM blocks after it."""
    if m := _POD.search(line):
        parser.dcgm_pod, parser.dcgm_host = m.group(1), m.group(2)
        return ()
    return None


def open_diag(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if stripped.startswith("Successfully ran diagnostic") or _DIAG_CATEGORY.match(stripped) or \
            (stripped.startswith("|") and re.match(r"^\|\s*Diagnostic\s*\|\s*Result", stripped)):
        return parser.open(DiagBlock(parser), n, line)
    return None


def open_health(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if "Health Monitor Report" in line and stripped.startswith("|"):
        return parser.open(HealthBlock(parser), n, line)
    return None


def open_dmon(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    if _DMON_HEAD.match(stripped):
        return parser.open(DmonBlock(parser), n, line)
    return None


def open_log(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """One nvvs / nv-hostengine log line; only warnings and errors are events."""
    m = _DCGM_LOG.match(stripped)
    if m is None:
        return None
    stamp, level, _pid, _tid, text = m.groups()
    level = level.upper()
    if level not in ("WARN", "WARNING", "ERROR", "FATAL") and not level.startswith("CRIT"):
        return ()
    where = _DCGM_WHERE.search(text)
    message = text[:where.start()].strip() if where else text
    gpu = re.search(r"\b(?:gpuId|GPU|gpu)\s*(\d+)\b", message)
    field_id = re.search(r"\b(DCGM_FI_\w+)", message)
    val = re.search(r"\bvalue\s+(-?\d+)", message)
    value_int = int(val.group(1)) if val else None
    attrs = {"level": "WARN" if level == "WARNING" else level, "gpu_index": int(gpu.group(1)) if gpu else None,
             "field": field_id.group(1) if field_id else None, "value": value_int,
             "blank": DCGM_BLANKS.get(value_int) if value_int is not None else None,
             "where": where.group(1) if where else None, "function": where.group(2) if where else None}
    return [Event(kind="dcgm_log", message=message, ts=parse_local(stamp), ts_origin="localtime", ts_approx=True,
                  ts_raw=stamp, host=parser.dcgm_host or parser.host, source="dcgm", layer="gpu",
                  severity="warning" if attrs["level"] == "WARN" else "error", attrs=attrs, line=n)]


def open_json(parser: TextParser, n: int, line: str, stripped: str) -> Iterable[Row] | None:
    """A JSON document (``dcgmi health -c -j``, ``dcgmi diag -j``)."""
    if stripped.startswith("{"):
        return parser.open(JsonBlock(parser), n, line)
    return None


OPENERS = (open_pod, open_diag, open_health, open_dmon, open_log, open_json)
"""DCGM's formats, in the order the dispatcher tries them."""


class DiagBlock(Block):
    """``dcgmi diag`` tables, DCGM 2.x/3.x (``Pass - All``, ``Fail - GPU: 0, 1``, ``Warning`` rows) and
    4.x (lower-case plugin names, ``GPU0: Pass`` sub-rows)."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.meta: dict[str, str] = {}
        self.meta_line: int | None = None
        self.category: str | None = None
        self.tests: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None
        self.in_warning = False

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if stripped.startswith("Successfully ran diagnostic"):
            return [], True
        if not stripped.startswith(("|", "+")):
            return [], False
        if m := _DIAG_CATEGORY.match(stripped):
            self.category = m.group(1).strip()
            self.current, self.in_warning = None, False
            return [], True
        m = _DIAG_ROW.match(stripped)
        if not m:
            return [], True
        left, right = m.group(1), m.group(2)
        if left == "Diagnostic" and right == "Result":
            return [], True
        if self.category == "Metadata" and left:
            self.meta[left] = right
            self.meta_line = self.meta_line or n
            return [], True
        if left.lower().startswith(("warning", "info", "error")):
            self.in_warning = True
            if self.current is not None:
                self.current["warnings"].append(right)
            return [], True
        if left:
            self.in_warning = False
            self.current = {"test": left, "category": self.category, "results": [], "warnings": [], "line": n}
            self.tests.append(self.current)
        if self.current is None:
            return [], True
        rm = _DIAG_RESULT.match(right)
        if rm and not self.in_warning:
            result = rm.group(2).lower().replace("warning", "warn")
            gpus: Any = int(rm.group(1)) if rm.group(1) is not None else (rm.group(3) or "all")
            self.current["results"].append((result, gpus, n))
        elif right and self.current["warnings"] and self.in_warning:
            self.current["warnings"][-1] += " " + right
        elif right:
            self.current["warnings"].append(right)
        return [], True

    def close(self) -> list[Row]:
        rows: list[Row] = []
        clock = self.p.clock()
        host = self.p.dcgm_host or self.p.host
        common = {"ts": clock.ts, "ts_origin": clock.origin, "ts_approx": clock.approx, "host": host, "source": "dcgm"}
        if self.meta:
            ids = [i.strip() for i in self.meta.get("GPU Device IDs Detected", "").split(",") if i.strip()]
            attrs = {"dcgm_version": self.meta.get("DCGM Version"), "driver": self.meta.get("Driver Version Detected"),
                     "device_ids": ids, "pod": self.p.dcgm_pod, "host": self.p.dcgm_host}
            rows.append(Event(kind="dcgm_diag_run", layer="gpu", severity="info", line=self.meta_line, attrs=attrs,
                              message=f"dcgmi diag: DCGM {attrs['dcgm_version']}, driver {attrs['driver']}, "
                                      f"{len(ids)} GPU(s)", **common))
            if attrs["dcgm_version"]:
                rows.append(HostFact("versions.dcgm", attrs["dcgm_version"], host=host))
            if attrs["driver"]:
                rows.append(HostFact("versions.driver", attrs["driver"], host=host))
        for test in self.tests:
            by_result: dict[str, list[Any]] = {}
            first_line: dict[str, int] = {}
            for result, gpus, n in test["results"]:
                by_result.setdefault(result, []).append(gpus)
                first_line.setdefault(result, n)
            if not by_result and test["warnings"]:
                by_result["warn"] = ["all"]
            for result, gpus in by_result.items():
                per_gpu = [g for g in gpus if isinstance(g, int)]
                listed = per_gpu or [_gpu_list(g) for g in gpus if not isinstance(g, int)]
                severity = {"fail": "error", "warn": "warning"}.get(result, "info")
                layer = "gpu" if (test["category"] or "").lower() in ("deployment", "software") else "hardware"
                rows.append(Event(kind="dcgm_diag", layer=layer, severity=severity,
                                  line=first_line.get(result, test["line"]),
                                  message=f"dcgmi diag {test['test']}: {result}"
                                          + (f" ({'; '.join(test['warnings'])[:300]})" if result != "pass"
                                             and test["warnings"] else ""),
                                  attrs={"test": test["test"], "category": test["category"], "result": result,
                                         "gpus": _flatten(listed), "warnings": test["warnings"][:20]}, **common))
        return rows


def _gpu_list(text: str) -> Any:
    """``GPU: 0, 1`` -> [0, 1]; ``All`` -> "all"."""
    nums = [int(x) for x in re.findall(r"\d+", text or "")]
    return nums or "all"


def _flatten(values: list[Any]) -> Any:
    if any(v == "all" for v in values):
        return "all"
    out: list[int] = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return sorted(set(out))


class HealthBlock(Block):
    """``dcgmi health -c`` as a table: Overall Health, then per GPU its status and incidents."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.overall: str | None = None
        self.gpus: dict[str, str] = {}
        self.incidents: list[dict[str, Any]] = []
        self.gpu: str | None = None
        self.line: int | None = None

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if not stripped.startswith(("|", "+")):
            return [], False
        self.line = self.line or n
        m = _DIAG_ROW.match(stripped)
        if not m:
            return [], True
        left, right = m.group(1), m.group(2)
        if left == "Overall Health":
            self.overall = right
        elif gm := re.match(r"GPU ID:\s*(\d+)", left):
            self.gpu = gm.group(1)
            self.gpus[self.gpu] = right
        elif not left and right and (im := re.match(r"^(.+?):\s*(Healthy|Warning|Failure|Error)\b\s*-?\s*(.*)$",
                                                    right)):
            self.incidents.append({"gpu": self.gpu, "system": im.group(1), "health": im.group(2),
                                   "message": im.group(3)})
        elif not left and right and self.incidents:
            self.incidents[-1]["message"] = (self.incidents[-1]["message"] + " " + right).strip()
        return [], True

    def close(self) -> list[Row]:
        if self.overall is None and not self.gpus:
            return []
        return [_health_event(self.p, self.overall, self.gpus, self.incidents, self.line)]


def _health_event(parser: TextParser, overall: str | None, gpus: dict[str, str], incidents: list[dict[str, Any]],
                  line: int | None) -> Event:
    states = [s.lower() for s in [overall or "", *gpus.values()]]
    severity = "error" if any(s.startswith(("fail", "error")) for s in states) else \
        "warning" if any(s.startswith("warn") for s in states) else "info"
    clock = parser.clock()
    return Event(kind="dcgm_health", message=f"dcgmi health: overall {overall}"
                 + (f"; {len(incidents)} incident(s)" if incidents else ""),
                 ts=clock.ts, ts_origin=clock.origin, ts_approx=clock.approx, host=parser.dcgm_host or parser.host,
                 source="dcgm", layer="gpu", severity=severity, line=line,
                 attrs={"overall": overall, "gpus": gpus, "incidents": incidents[:50]})


class DmonBlock(Block):
    """``dcgmi dmon``: a ``#Entity`` header of field short names, then one row per entity per tick.
    Field 230 (XIDER) is the last Xid DCGM saw on that GPU."""

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.columns: list[str] = []

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        stripped = line.strip()
        if m := _DMON_HEAD.match(stripped):
            self.columns = m.group(1).split()
            return [], True
        if not stripped:
            return [], False
        if stripped in ("ID",) or stripped.startswith("ID ") or stripped.startswith("#"):
            return [], True
        m = _DMON_ROW.match(stripped)
        if not m or not self.columns:
            return [], False
        values = m.group(3).split()
        if m.group(1) != "GPU":
            return [], True
        return self._row(n, int(m.group(2)), dict(zip(self.columns, values))), True

    def _row(self, n: int, index: int, fields: dict[str, str]) -> list[Row]:
        clock = self.p.clock()
        host = self.p.dcgm_host or self.p.host
        sample = GpuSample(ts=clock.ts, gpu=gpu_key(None, index), host=host, line=n,
                           extra={"source": "dcgmi dmon", "index": index, "dcgm": fields})
        for column, attr in DMON_COLUMNS.items():
            text = fields.get(column)
            if text is not None and text.upper() != "N/A" and (v := number(text)) is not None:
                setattr(sample, attr, int(v) if attr in ("pcie_gen", "pcie_width") else v)
        rows: list[Row] = [sample]
        xid = integer(fields.get("XIDER"))
        if xid:
            attrs = {"xid": xid, "pci": None, "pid": None, "process": None, "gpu_index": index,
                     "via": "dcgm field 230 (XIDER)"}
            attrs.update(xid_catalog_attrs(xid))
            layer = attrs.pop("layer", None) or "gpu"
            severity = attrs.pop("severity", None) or "error"
            rows.append(Event(kind="xid", message=f"DCGM: last Xid on GPU {index} is {xid}", ts=clock.ts,
                              ts_origin=clock.origin, ts_approx=True, host=host, source="dcgm", layer=layer,
                              severity=severity, attrs=attrs, line=n))
        return rows


class JsonBlock(Block):
    """A JSON document (``dcgmi health -c -j``, ``dcgmi diag -j``) collected until its braces balance; one
    document per line (``jq -c``) is one block per line."""

    LIMIT = 1 << 20

    def __init__(self, parser: TextParser) -> None:
        super().__init__(parser)
        self.parts: list[str] = []
        self.size = 0
        self.depth = 0
        self.first: int | None = None
        self.finished = False

    def feed(self, n: int, line: str) -> tuple[list[Row], bool]:
        if self.finished:
            return [], False
        self.first = self.first or n
        self.parts.append(line)
        self.size += len(line)
        self.depth += line.count("{") + line.count("[") - line.count("}") - line.count("]")
        if self.size > self.LIMIT:
            self.finished = True
            return [Skipped(n, "JSON block larger than 1 MiB")], True
        if self.depth <= 0:
            self.finished = True
        return [], True

    def close(self) -> list[Row]:
        try:
            doc = json.loads(no_lone_surrogates("\n".join(self.parts)))
        except ValueError:
            return [Skipped(self.first, "JSON block is not valid JSON")]
        if (diag := _diag_json(self.p, doc, self.first)) is not None:
            return diag
        body = doc.get("body") if isinstance(doc, dict) else None
        if not isinstance(body, dict):
            return [Skipped(self.first, "JSON document of an unknown tool")]
        overall = (body.get("Overall Health") or {}).get("value") if isinstance(body.get("Overall Health"), dict) \
            else None
        gpus: dict[str, str] = {}
        incidents: list[dict[str, Any]] = []
        for key, entry in body.items():
            gm = re.match(r"GPU ID:\s*(\d+)", key)
            if not gm or not isinstance(entry, dict):
                continue
            gpus[gm.group(1)] = str(entry.get("value"))
            for system, info in (entry.get("children") or {}).items():
                if isinstance(info, dict):
                    texts = [str(v.get("value")) for v in (info.get("children") or {}).values() if isinstance(v, dict)]
                    incidents.append({"gpu": gm.group(1), "system": system, "health": info.get("value"),
                                      "message": " ".join(texts)})
        if overall is None and not gpus:
            return [Skipped(self.first, "JSON document without a health report")]
        return [_health_event(self.p, overall, gpus, incidents, self.first)]


def _diag_json(parser: TextParser, doc: Any, line: int | None) -> list[Row] | None:
    """``dcgmi diag -j``: DCGM 2.x/3.x nest the tests under ``"DCGM GPU Diagnostic"`` in
    ``test_categories``, one result per GPU (``gpu_ids``/``gpu_id``: an id, or a CSV of ids for the software
    tests) with ``warnings`` of ``{"warning": text, "error_id": n}``; 4.x puts ``tests`` at the top with
    results per entity. The same events as the table, or None when the document is not a diagnostic."""
    if not isinstance(doc, dict):
        return None
    body = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
    if not isinstance(body, dict):
        body = doc if isinstance(doc.get("tests"), list) and "version" in doc else None
    if body is None:
        return None
    block = DiagBlock(parser)
    version = body.get("version") or doc.get("version")
    driver = body.get("driver_version_detected") or body.get("driver_version") or doc.get("driver_version")
    if version or driver:
        block.meta = {"DCGM Version": str(version or ""), "Driver Version Detected": str(driver or "")}
        block.meta = {k: v for k, v in block.meta.items() if v}
        block.meta_line = line
    categories = body.get("test_categories")
    groups = categories if isinstance(categories, list) else [{"category": None, "tests": body.get("tests")}]
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("tests"), list):
            continue
        for test in group["tests"]:
            if isinstance(test, dict) and test.get("name"):
                block.tests.append(_diag_json_test(test, group.get("category"), line))
    return block.close()


def _diag_json_test(test: dict[str, Any], category: Any, line: int | None) -> dict[str, Any]:
    name = str(test["name"])
    if category is None:
        category = test.get("category") or ("Deployment" if name.lower() == "software" else None)
    entry: dict[str, Any] = {"test": name, "category": category, "results": [], "warnings": [], "line": line}
    for result in test.get("results") or []:
        if not isinstance(result, dict):
            continue
        if result.get("entity_group") not in (None, "GPU"):
            continue
        status = str(result.get("status", "")).lower()
        status = {"warning": "warn", "skipped": "skip"}.get(status, status)
        if status not in ("pass", "fail", "warn", "skip"):
            continue
        ids = result.get("gpu_ids", result.get("gpu_id", result.get("entity_id")))
        gpus: Any = int(ids) if isinstance(ids, int) or (isinstance(ids, str) and ids.strip().isdigit()) \
            else (str(ids) if ids not in (None, "") else "all")
        entry["results"].append((status, gpus, line))
        for warning in result.get("warnings") or []:
            text = warning.get("warning") or warning.get("message") if isinstance(warning, dict) else warning
            if text:
                entry["warnings"].append(str(text))
    return entry
