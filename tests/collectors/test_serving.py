# ruff: noqa: E501  (the engines' real lines stay whole)
"""Serving engines: vLLM, SGLang, TGI, TensorRT-LLM and Triton logs sniffed as what they are and read in
their own frames (time, level, tensor-parallel rank), their known messages recognised with the engine's
time, their versions host facts."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

import pytest

from collectors import serving
from collectors.base import Event, HostFact, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import ingest_timeline

MTIME = datetime(2024, 6, 1, 12, 0, tzinfo=timezone.utc)

VLLM = """INFO 05-12 10:11:02 [api_server.py:1043] vLLM API server version 0.8.5
INFO 05-12 10:11:05 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512
(EngineCore_DP0 pid=972) ERROR 05-12 10:11:12 [core.py:700] ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
RuntimeError: Engine process failed to start. See stack trace for the root cause.
"""

SGLANG = """[2024-05-12 10:11:12 TP0] Decode batch. #running-req: 36, #token: 81254, token usage: 0.99, gen throughput (token/s): 2529.33, #queue-req: 13
[2024-05-12 10:11:13 TP3] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.5933 -> 1.0000
"""

TGI_JSON = """{"timestamp":"2024-05-12T10:11:12.123456Z","level":"INFO","fields":{"message":"Starting shard"},"target":"text_generation_launcher","span":{"rank":0,"name":"shard-manager"}}
{"timestamp":"2024-05-12T10:11:14.5Z","level":"ERROR","fields":{"message":"Shard 1 failed to start"},"target":"text_generation_launcher"}
{"timestamp": 12,
"""

TRITON = """I0512 10:11:10.123456 1 server.cc:674] +----------------------------------+
| server_version                   | 2.41.0 |
E0512 10:11:12.123456 1 model_lifecycle.cc:638] failed to load 'llama' version 1: Internal: unable to create stream: out of memory
E0512 10:11:13.123456 1 main.cc:1099] error: creating server: INTERNAL - failed to load all models
"""

TRTLLM = """[TensorRT-LLM] TensorRT-LLM version: 0.12.0
[05/12/2024-10:11:12] [TRT-LLM] [E] RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB
[TensorRT-LLM][ERROR] NCCL error: unhandled system error
"""


def _parse(kind: str, text: str) -> list:
    ctx = ParseContext(mtime=MTIME, reference_time=MTIME)
    return list(serving.parse(kind, io.BytesIO(text.encode()), ctx))


@pytest.mark.parametrize(("name", "text", "kind"), [
    ("api-server.log", VLLM, "vllm_log"), ("server.log", SGLANG, "sglang_log"), ("launcher.log", TGI_JSON, "tgi_log"),
    ("server.log", TRITON, "triton_log"), ("engine.log", TRTLLM, "trtllm_log")])
def test_each_engines_log_is_sniffed_as_that_engine(name: str, text: str, kind: str) -> None:
    scores = serving.sniff(name, text)
    assert max(scores, key=scores.get) == kind


def test_a_file_named_after_an_engine_is_not_its_log_without_its_frames() -> None:
    assert serving.sniff("vllm-0-20250306T140030Z.prom", "# HELP vllm:num_requests_running\n") == {}


def test_vllm_lines_take_the_engines_time_and_the_kv_cache_numbers() -> None:
    rows = _parse("vllm_log", VLLM)
    assert ("versions.vllm", "0.8.5") in [(r.key, r.value) for r in rows if isinstance(r, HostFact)]
    events = {r.line: r for r in rows if isinstance(r, Event)}
    kv = events[3]
    assert kv.kind == "kv_cache_no_blocks" and kv.attrs["causes"] == ["kv_cache_pressure"]
    assert (kv.attrs["max_model_len"], kv.attrs["kv_tokens"]) == (32768, 7344)
    assert kv.ts == datetime(2024, 5, 12, 10, 11, 12, tzinfo=timezone.utc)
    assert events[4].kind == "serving_engine_error"
    assert 2 not in events  # a healthy block count is not an event


def test_sglang_lines_carry_their_tensor_parallel_rank() -> None:
    events = [r for r in _parse("sglang_log", SGLANG) if isinstance(r, Event)]
    assert [(e.kind, e.rank, e.attrs["mode"]) for e in events] == [("kv_cache_preemption", 3, "RETRACT")]
    assert events[0].attrs["cumulative"] == 3


def test_tgi_json_lines_are_read_and_a_broken_one_is_skipped() -> None:
    rows = _parse("tgi_log", TGI_JSON)
    events = [r for r in rows if isinstance(r, Event)]
    assert [(e.kind, e.attrs["shard"], e.ts) for e in events] == [
        ("serving_engine_error", 1, datetime(2024, 5, 12, 10, 11, 14, 500000, tzinfo=timezone.utc))]
    assert [s.line for s in rows if isinstance(s, Skipped)] == [3]


def test_triton_model_load_failures_and_version() -> None:
    rows = _parse("triton_log", TRITON)
    assert ("versions.triton", "2.41.0") in [(r.key, r.value) for r in rows if isinstance(r, HostFact)]
    loads = [r for r in rows if isinstance(r, Event) and r.kind == "serving_model_load_failed"]
    assert [(e.line, e.attrs.get("model")) for e in loads] == [(3, "llama"), (4, None)]
    assert loads[0].ts == datetime(2024, 5, 12, 10, 11, 12, 123456, tzinfo=timezone.utc)


def test_tensorrt_llm_frames_give_the_message_its_time() -> None:
    rows = _parse("trtllm_log", TRTLLM)
    assert ("versions.tensorrt_llm", "0.12.0") in [(r.key, r.value) for r in rows if isinstance(r, HostFact)]
    events = {r.line: r for r in rows if isinstance(r, Event)}
    assert events[2].ts == datetime(2024, 5, 12, 10, 11, 12, tzinfo=timezone.utc)
    assert events[3].kind == "nccl_error" and events[3].attrs["error"] == "unhandled system error"


TRTLLM_RANKED = """[11/18/2025-09:33:30] [TRT-LLM] [RANK 3] [E] Failed to initialize executor on rank 3: [TensorRT-LLM][ERROR] Assertion failed: Failed, NCCL error ../tensorrt_llm/runtime/ncclCommunicator.cpp:90 'invalid usage (run with NCCL_DEBUG=WARN for details)'
[05/12/2024-10:11:12] [TRT-LLM] [MPI_Rank 1] [W] maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache. They are reduced to 5185
12-02-2025 10:11:12.123456 [TRT-LLM] [E] [2] Encountered an error in forwardAsync function: [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of memory (/src/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:125)
"""


def test_tensorrt_llm_rank_frames_and_the_1x_cpp_stamp_give_time_and_rank() -> None:
    """The Python logger's [RANK n] / [MPI_Rank n] and the 1.x C++ logger's "<mm-dd-yyyy hh:mm:ss.us>
    [TRT-LLM] [E] [rank]" frame: the event carries the rank and the time, the inner error is what is known."""
    events = {r.line: r for r in _parse("trtllm_log", TRTLLM_RANKED) if isinstance(r, Event)}
    assert (events[1].kind, events[1].rank) == ("nccl_error", 3)
    assert events[1].attrs["error"].startswith("invalid usage")
    assert events[1].ts == datetime(2025, 11, 18, 9, 33, 30, tzinfo=timezone.utc)
    assert (events[2].kind, events[2].rank, events[2].attrs["kv_tokens"]) == ("kv_cache_no_blocks", 1, 5185)
    assert (events[3].kind, events[3].rank, events[3].attrs["oom"]) == ("cuda_error", 2, True)
    assert events[3].ts == datetime(2025, 12, 2, 10, 11, 12, 123456, tzinfo=timezone.utc)


def test_an_engine_log_ingested_yields_its_events_once(tmp_path: Path) -> None:
    """The user's path: a vLLM log ingested is parsed by this collector, each known line written once."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "vllm.log").write_text(VLLM)
    events = ingest_timeline(tmp_path / "b.duckdb", evidence)
    kv = [e for e in events if e["kind"] == "kv_cache_no_blocks"]
    assert len(kv) == 1 and kv[0]["source"] == "serving"


def test_the_registry_finds_the_collector_for_every_engine() -> None:
    assert {registry.collector_for_kind(k) for k in serving.KINDS} == {serving}
