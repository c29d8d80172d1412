"""Is this a training or an inference incident? The answer picks the playbook.

Training leaves NCCL topology, collective timeouts, per-rank logs and Slurm jobs behind; inference
leaves serving metrics (vLLM, TGI, Triton, SGLang), latency anomalies and Kubernetes events on
serving pods. Both at once (a training job on a serving node) is ``mixed``; neither is ``unknown``.
"""

from __future__ import annotations

import duckdb

TRAINING_KINDS = ("nccl_timeout", "nccl_net_error", "straggler_rank", "nan_loss", "rank_failed",
                  "checkpoint_last_good", "checkpoint_partial", "checkpoint_write_failed")
INFERENCE_KINDS = ("latency_spike", "error_rate_spike", "queue_backlog", "kv_cache_saturation", "request_rate_surge")
SERVING_SERIES = r"^(vllm:|tgi_|nv_inference_|sglang:|tensorrt_llm|trtllm|ray_serve)|time_to_first_token|ttft|" \
                 r"request_latency|e2e_request_latency|inter_token_latency"
SERVING_OBJECTS = r"(vllm|tgi|triton|inference|serving|predictor|sglang|llm-|text-generation|model-server)"
THRESHOLD = 2


def detect_workload(con: duckdb.DuckDBPyConnection) -> tuple[str, dict[str, int]]:
    """(workload, signal scores): each signal found adds to its side; THRESHOLD decides."""
    training = 0
    inference = 0
    if con.execute("SELECT EXISTS (SELECT 1 FROM topology)").fetchall()[0][0]:
        training += 3
    kinds = {r[0] for r in con.execute("SELECT DISTINCT kind FROM event").fetchall()}
    training += 2 * len(kinds.intersection(TRAINING_KINDS))
    inference += 2 * len(kinds.intersection(INFERENCE_KINDS))
    if "job_state" in kinds:
        training += 1
    collectors = {r[0] for r in con.execute("SELECT DISTINCT collector FROM artifact").fetchall()}
    if "nccl" in collectors:
        training += 2
    if con.execute("SELECT EXISTS (SELECT 1 FROM series WHERE regexp_matches(lower(name), ?))",
                   [SERVING_SERIES]).fetchall()[0][0]:
        inference += 3
    if con.execute("SELECT EXISTS (SELECT 1 FROM event WHERE kind = 'k8s_event' AND regexp_matches("
                   "lower(coalesce(attrs->>'object', '') || ' ' || coalesce(message, '')), ?))",
                   [SERVING_OBJECTS]).fetchall()[0][0]:
        inference += 2
    signals = {"training": training, "inference": inference}
    if training >= THRESHOLD and inference >= THRESHOLD:
        return "mixed", signals
    if training >= THRESHOLD:
        return "training", signals
    if inference >= THRESHOLD:
        return "inference", signals
    return "unknown", signals
