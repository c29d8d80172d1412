"""Serving engines' own logs: vLLM, SGLang, text-generation-inference (TGI), TensorRT-LLM and Triton
Inference Server, sniffed as what they are (``vllm_log``, ``sglang_log``, ``tgi_log``, ``trtllm_log``,
``triton_log``) instead of ``unknown``.

An inference incident is read in the engine's log first: KV cache exhausted or too small, the engine
process dead, a shard that did not start, requests turned away. Each engine frames its lines its own way
(vLLM ``INFO 05-12 10:11:12 [engine.py:123]``, SGLang ``[2024-05-12 10:11:12 TP0]``, TGI
``2024-05-12T10:11:12.123456Z ERROR text_generation_launcher:`` or the same as JSON, Triton's glog
``E0512 10:11:12.123456 1 file.cc:12]``, TensorRT-LLM ``[TensorRT-LLM][ERROR]``); this parser reads that
frame (time, level, tensor-parallel rank) and matches the signature catalog
(collectors/catalog/signatures/serving.yaml and the CUDA/NCCL families) on the message, so the events
carry the engine's own time and rank. The engine's version, where the log prints it, becomes a host fact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any, BinaryIO

from collectors.base import HostFact, ParseContext, Row, Skipped, to_utc
from collectors.framework.framing.times import parse_iso

NAME = "serving"
LAYER = "business"
KINDS = ("vllm_log", "sglang_log", "tgi_log", "trtllm_log", "triton_log")
TIMEOUT = 10.0
PRIORITY = 50
SIGNATURES_INLINE = True
"""parse() matches the signature catalog on each line's message with the engine's own time and rank."""

_SNIFF = (
    ("vllm_log", re.compile(r"^(?:\(\w+ pid=\d+\) )?(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d"
                            r"(?: \[[\w./-]+:\d+\]| [\w./-]+\.py:\d+\])", re.MULTILINE), ("vllm", "vLLM")),
    ("sglang_log", re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: (?:TP|DP|PP|EP)\d+[^\]]*)?\] ", re.MULTILINE),
     ("sglang", " TP0]", "#running-req", "mem-fraction-static")),
    ("tgi_log", re.compile(r"text_generation_(?:launcher|router|server)"), ("text_generation",)),
    ("trtllm_log", re.compile(r"\[TensorRT-LLM\]|\[TRT-LLM\]"), ("TensorRT-LLM", "TRT-LLM")),
    ("triton_log", re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w.]+\.cc:\d+\]", re.MULTILINE),
     ("tritonserver", "model_repository_manager", "model_lifecycle", "Triton", "grpc_server.cc", "http_server.cc",
      "server_version")),
)
_NAME_HINT = (("vllm", "vllm_log"), ("sglang", "sglang_log"), ("text-generation", "tgi_log"), ("tgi", "tgi_log"),
              ("trtllm", "trtllm_log"), ("tensorrt_llm", "trtllm_log"), ("triton", "triton_log"))
_TP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? (?:DP\d+ )?TP(?P<tp>\d+)")
_TRTLLM = re.compile(r"^(?:\[(?P<stamp>\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d)\] "
                     r"|(?P<cpp>\d\d-\d\d-\d{4} \d\d:\d\d:\d\d\.\d+) )?"
                     r"\[(?:TensorRT-LLM|TRT-LLM)\](?: \[(?:RANK|MPI_Rank) (?P<prank>\d+)\])?"
                     r"(?:\[(?P<level>[A-Z]+)\]| \[(?P<short>[A-Z])\])(?: \[(?P<crank>\d+)\])?\s*(?P<msg>.*)$")
"""The logger frames: Python's "[mm/dd/yyyy-HH:MM:SS] [TRT-LLM] [RANK n] [E]" ([MPI_Rank n] before 1.0), the
C++ logger's "[TensorRT-LLM][ERROR]" (before 1.x) and "mm-dd-yyyy HH:MM:SS.us [TRT-LLM] [E] [rank]" (1.x)."""
_VERSIONS = (
    (re.compile(r"vLLM API server version (?P<v>[\w.+-]+)|Initializing a V\d LLM engine \(v(?P<v2>[\w.+-]+)\)"
                r"|Initializing an LLM engine \(v(?P<v3>[\w.+-]+)\)"), "vllm"),
    (re.compile(r"sglang(?:==| version[: ]+)(?P<v>\d[\w.+-]*)"), "sglang"),
    (re.compile(r'"version":\s*"(?P<v>\d[\w.+-]*)"[^\n]*text.generation|text-generation-launcher (?P<v2>\d[\w.+-]*)'
                r"|Args \{[^\n]*\bversion: \"?(?P<v3>\d[\w.+-]*)"), "tgi"),
    (re.compile(r"TensorRT-LLM version: (?P<v>\d[\w.+-]*)"), "tensorrt_llm"),
    (re.compile(r"\|\s*server_version\s*\|\s*(?P<v>\d[\w.+-]*)"), "triton"),
)


def sniff(name: str, head: str) -> dict[str, int]:
    """An engine's log by its own line frames; the file's name only adds to that (a 'vllm-0.prom' is metrics)."""
    scores: dict[str, int] = {}
    lowered = name.lower()
    for kind, frame, hints in _SNIFF:
        if not any(h in head for h in hints):
            continue
        found = len(frame.findall(head[:65536]))
        if found:
            scores[kind] = min(90, 60 + 5 * found)
    for word, kind in _NAME_HINT:
        if word in lowered and kind in scores:
            scores[kind] += 10
            break
    return {k: min(v, 95) for k, v in scores.items()}


def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    from collectors.framework.framing.wrappers import Framed, peel
    from collectors.framework.signatures import catalog, event_of

    signatures = catalog()
    versions: set[tuple[str, str]] = set()
    for n, line in ctx.lines(stream):
        if not line.strip():
            continue
        try:
            framed = _frame(line, n, ctx, peel, Framed)
        except ValueError as exc:
            yield Skipped(n, f"unreadable line: {exc}"[:200])
            continue
        for pattern, key in _VERSIONS:
            m = pattern.search(line)
            if m:
                version = next(v for v in m.groups() if v)
                if (key, version) not in versions:
                    versions.add((key, version))
                    yield HostFact(f"versions.{key}", version)
        for piece in framed.message.split("#012"):
            found = signatures.match(piece)
            if found is not None:
                yield event_of(found[0], found[1], framed, piece)
                break


def _frame(line: str, n: int, ctx: ParseContext, peel: Any, framed_type: Any) -> Any:
    """The line's message, time and rank as the engine printed them; what no engine frame reads
    framing.peel reads (vLLM, glog, ISO, docker/kubectl wrappers)."""
    stripped = line.strip()
    if stripped.startswith("{") and '"timestamp"' in stripped:  # TGI --json-output
        doc = json.loads(stripped)
        if not isinstance(doc, dict):
            raise ValueError("JSON line is not an object")
        fields = doc.get("fields") if isinstance(doc.get("fields"), dict) else {}
        message = str(fields.get("message") or doc.get("message") or "")
        ts, raw = _iso(str(doc.get("timestamp") or ""))
        span = doc.get("span") if isinstance(doc.get("span"), dict) else {}
        rank = span.get("rank")
        return framed_type(line=n, message=message, ts=ts, ts_raw=raw, ts_origin="iso" if ts else "none",
                           level=str(doc.get("level") or "").lower() or None,
                           rank=int(rank) if isinstance(rank, int | str) and str(rank).isdigit() else None)
    m = _TRTLLM.match(stripped)
    if m:
        ts = None
        stamp = m.group("stamp") or m.group("cpp")
        if stamp:
            try:
                layout = "%m/%d/%Y-%H:%M:%S" if m.group("stamp") else "%m-%d-%Y %H:%M:%S.%f"
                ts = to_utc(datetime.strptime(stamp, layout))
            except ValueError:
                ts = None
        rank = m.group("prank") or m.group("crank")
        return framed_type(line=n, message=m.group("msg"), ts=ts, ts_raw=stamp,
                           ts_origin="iso" if ts else "none", level=(m.group("level") or m.group("short")).lower(),
                           rank=int(rank) if rank else None)
    framed = peel(line, n, reference=ctx.reference_for(ctx.host))
    tp = _TP.match(stripped)
    if tp and framed.rank is None:
        framed.rank = int(tp.group("tp"))
    return framed


def _iso(text: str) -> tuple[datetime | None, str | None]:
    """(the time, the text as written) of an ISO stamp: the collectors' one ISO reader, framing.parse_iso."""
    return (parse_iso(text), text) if text else (None, None)
