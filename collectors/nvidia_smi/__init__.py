"""nvidia-smi text: the offline twin of the NVML collector, plus a live nvidia-smi capture.

Responders hand over whatever they ran, frequently several outputs pasted into one file, so one line
dispatcher (``collectors.framework.text_blocks``) recognises each block as it comes and hands it to the
module of its format:

    q_text.py        ``nvidia-smi -q`` (any driver's layout, or a pasted excerpt)
    q_xml.py         ``nvidia-smi -q -x`` (DTD nvsmi_device_v10 through v13, often cut short)
    tree.py          the GPU tree both -q forms are read into, and the rows read from it
    table.py         the default ``nvidia-smi`` table (``ERR!`` fields of a failing GPU included)
    query_csv.py     ``--query-gpu ... --format=csv[,noheader][,nounits]``
    nvlink.py        ``nvidia-smi nvlink --status`` / ``-s`` and ``-e``
    topo.py          ``nvidia-smi topo -m`` (a ``gpu_topology`` host fact)
    fabricmanager.py ``nv-fabricmanager --version`` (``versions.fabricmanager``)
    failures.py      ``No devices were found``, ``Unable to determine the device handle ...``

DCGM's outputs (``collectors.dcgm``) are read by the same dispatcher, so a file mixing both is read
whole whichever collector it was sniffed as. Every reader produces the same rows as NVML (GpuInventory,
GpuSample) and the same derived events through ``collectors.nvml.health.HealthTracker``. Lines that belong to
no known block are counted as skipped, never fatal. Live capture runs nvidia-smi itself (TOUCHES_GPU:
``gpuwb capture --safe`` skips it, since on a GPU that fell off the bus it can hang the host).

Times: nvidia-smi prints local time without a zone (``Mon Jul  8 08:11:21 2024``); it is kept as
UTC with ts_origin ``localtime`` and ts_approx. Outputs with no clock of their own (nvlink, dmon)
take the capture time or the file's mtime (ParseContext.snapshot_time()).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import BinaryIO

from collectors import dcgm
from collectors.base import Artifact, CaptureContext, ParseContext, Row
from collectors.framework import text_blocks
from collectors.nvidia_smi import fabricmanager, failures, nvlink, q_text, q_xml, query_csv, table, topo
from collectors.nvidia_smi.tree import norm
from collectors.nvml.health import HealthTracker

NAME = "nvidia_smi"
LAYER = "gpu"
KINDS = ("nvidia_smi_q", "nvidia_smi_xml", "nvidia_smi_table", "nvidia_smi_csv", "nvidia_smi_nvlink", "nvidia_smi_topo",
         "fabricmanager_version", "nvidia_smi")
STRUCTURED_KINDS = ("nvidia_smi_xml", "nvidia_smi_csv")
"""XML and CSV are read as a structure: the signature matcher does not read their lines."""
TIMEOUT = 45.0
TOUCHES_GPU = True
COMMAND_TIMEOUT = 15.0
COMMANDS = (("nvidia-smi -q -x", "nvidia_smi_xml"), ("nvidia-smi -q", "nvidia_smi_q"),
            ("nvidia-smi nvlink --status", "nvidia_smi_nvlink"), ("nvidia-smi nvlink -e", "nvidia_smi_nvlink"),
            ("nvidia-smi topo -m", "nvidia_smi_topo"), ("nv-fabricmanager --version", "fabricmanager_version"))
"""What live capture may run, in order, with the kind each output is stored as (``gpuwb capture --list``);
``-q`` only when ``-q -x`` failed, ``nv-fabricmanager`` only where it is installed."""

OPENERS = (q_xml.open_xml, q_text.open_banner, table.open_table, table.open_excerpt, failures.open_failure,
           table.open_date,
           nvlink.open_nvlink, topo.open_topo, fabricmanager.open_version, query_csv.open_csv)
"""nvidia-smi's formats, in the order the dispatcher tries them; the -q excerpt opener goes last of all."""


class TextParser(text_blocks.TextParser):
    """The dispatcher over every nvidia-smi and DCGM format. Shared with the nvidia-bug-report parser,
    which hands it the lines of its nvidia-smi section."""

    def __init__(self, ctx: ParseContext, *, host: str | None = None,
                 snapshot: tuple[datetime, str] | None = None) -> None:
        super().__init__(ctx, OPENERS + dcgm.OPENERS + (q_text.open_by_hint,), HealthTracker(), host=host,
                         snapshot=snapshot, unknown="not nvidia-smi or DCGM output")


# -- live capture --------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    """``nvidia-smi -q -x`` (the structured form), ``-q`` text only when the XML run fails (the same
    facts twice would double every event), and the NVLink status and error counters."""
    if ctx.which("nvidia-smi") is None:
        ctx.missing("nvidia-smi", "unavailable: command not found")
        return
    xml, text, *rest = COMMANDS
    first = ctx.run(xml[0].split(), kind=xml[1], timeout=COMMAND_TIMEOUT)
    yield first
    if first.info.get("exit_code") != 0 or first.info.get("timed_out"):
        yield ctx.run(text[0].split(), kind=text[1], timeout=COMMAND_TIMEOUT)
    for command, kind in rest:
        if command.startswith("nv-fabricmanager") and ctx.which("nv-fabricmanager") is None:
            continue
        yield ctx.run(command.split(), kind=kind, timeout=COMMAND_TIMEOUT)


# -- sniff ---------------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    """Confident only for nvidia-smi output; DCGM's is ``collectors.dcgm``'s, other formats their own
    collectors'."""
    if "<nvidia_smi_log" in head or "nvsmi_device_v" in head:
        return {"nvidia_smi_xml": 95}
    lines = [ln for ln in head.splitlines()[:400] if ln.strip()]
    if "NVSMI LOG" in head and any(q_text.BANNER.match(ln) for ln in lines):
        return {"nvidia_smi_q": 95}
    if "Driver Version:" in head and any(table.TABLE_HEAD.search(ln) for ln in lines[:60]):
        return {"nvidia_smi_table": 95}
    if "|" in head and any(table.TABLE_GPU1.match(ln.strip()) for ln in lines[:60]):
        return {"nvidia_smi_table": 85}
    if ("--query-gpu" in head and any(query_csv.QUERY_CMD.search(ln) for ln in lines[:40])) or (
            lines and query_csv.is_csv_header(lines[0])):
        return {"nvidia_smi_csv": 90}
    if "Fabric Manager version is" in head and any(fabricmanager.FM_VERSION.search(ln) for ln in lines[:5]):
        return {"fabricmanager_version": 85}
    if "CPU Affinity" in head and any(topo.TOPO_HEAD.match(ln) for ln in lines[:5]):
        return {"nvidia_smi_topo": 90}
    if any(nvlink.NVLINK_GPU.match(a) and nvlink.NVLINK_LINK.match(b) for a, b in zip(lines[:4], lines[1:5])):
        return {"nvidia_smi_nvlink": 90}
    if any(pattern.search(ln) for pattern, needle in failures.ERRORS if needle in head for ln in lines[:20]):
        return {"nvidia_smi": 80}
    q_lines = sum(1 for ln in lines[:200]
                  if (m := q_text.KV.match(ln) or q_text.HEADER.match(ln)) and norm(m.group(2)) in q_text.Q_HINTS)
    if q_lines >= 3:
        return {"nvidia_smi_q": 70}
    return {}


# -- parse ---------------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = TextParser(ctx)
    for n, line in ctx.lines(stream):
        yield from parser.feed(n, line)
    yield from parser.close()
