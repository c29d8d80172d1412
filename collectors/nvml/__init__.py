"""NVML: GPU inventory, a short window of samples and Xid events, through pynvml.

Live capture goes through ``NvmlAdapter``, a thin wrapper over the ``pynvml`` module that turns
every NVML error into a null value plus a reason, so one unsupported field (ECC on a GeForce,
row remapping before Ampere) never costs the rest. ``pynvml`` is imported inside ``capture``,
never at module import: capture must start fast, and on a host without a driver the import
works but ``nvmlInit`` raises ``NVMLError_LibraryNotFound``, which becomes the coverage note
``unavailable: NVML library not found``. A GPU that fell off the bus makes NVML calls hang in the
driver; the framework's per-collector deadline (TIMEOUT) cuts such a capture off.

The raw artifact (kind ``nvml_json``) is one JSON document of everything recorded, with NVML's
own units (mW, bytes, bitmasks); ``parse`` turns it into inventory, sample and event rows.
The sample-to-event rules (``HealthTracker``) live here too, because the offline nvidia-smi and DCGM
parsers read the same quantities and must raise the same events.

The package:

    adapter.py    the thin pynvml adapter (every NVML error a null value plus a reason)
    recording.py  live recording: inventory, samples, Xid events -> the ``nvml_json`` document
    document.py   the document read back as inventory, sample and event rows
    health.py     HealthTracker: readings -> events when a condition starts or changes
    shared.py     what every GPU source shares: gpu_key, throttle-reason bits, CUDA version, Xid attrs
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import Artifact, CaptureContext, ParseContext, Row
from collectors.nvml import document
from collectors.nvml.adapter import NvmlAdapter, load_nvml
from collectors.nvml.recording import FORMAT, record

NAME = "nvml"
LAYER = "gpu"
KINDS = ("nvml_json",)
TIMEOUT = 25.0
TOUCHES_GPU = True


def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--nvml-samples", type=int, default=5, metavar="N",
                        help="NVML samples per GPU during capture (default 5)")
    parser.add_argument("--nvml-interval", type=float, default=1.0, metavar="S",
                        help="seconds between NVML samples; Xid events are polled meanwhile (default 1.0)")


# -- live capture --------------------------------------------------------------------------------

def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    try:
        nvml = load_nvml()
    except ImportError:
        ctx.missing("NVML", "unavailable: pynvml (nvidia-ml-py) is not installed")
        return
    adapter = NvmlAdapter(nvml)
    reason = adapter.init()
    if reason:
        ctx.missing("NVML", reason)
        return
    try:
        samples = max(1, int(ctx.options.get("nvml_samples") or 5))
        interval = max(0.0, float(ctx.options.get("nvml_interval") if ctx.options.get("nvml_interval")
                                  is not None else 1.0))
        doc = record(adapter, samples=samples, interval=interval, host=ctx.host)
    finally:
        adapter.shutdown()
    for err in doc["errors"]:
        ctx.missing(f"GPU {err.get('index')}", f"unavailable: {err.get('call')} failed: {err.get('error')}")
    yield Artifact(source="nvml", kind="nvml_json", data=json.dumps(doc, indent=1, default=str).encode(),
                   host=ctx.host, info={"gpus": len(doc["devices"]), "samples": len(doc["samples"]),
                                        "xid_events": len(doc["events"])})


# -- parse ---------------------------------------------------------------------------------------

def sniff(name: str, head: str) -> dict[str, int]:
    if head.lstrip().startswith("{") and f'"format": "{FORMAT}"' in head:
        return {"nvml_json": 95}
    return {}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    yield from document.rows(stream, ctx)


__all__ = ["FORMAT", "KINDS", "LAYER", "NAME", "TIMEOUT", "TOUCHES_GPU", "add_capture_arguments", "capture", "parse",
           "sniff"]
