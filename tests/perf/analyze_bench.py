"""How long ``analyze`` takes on a large incident, against a plain scan of the same table.

Builds a real bundle (schema, artifact, seal) and fills it in bulk with SQL: a 1024-rank job's
kind mix of a bad night (NCCL warnings and timeouts from every rank, kernel chatter, corrected AER,
throttle samples, scheduler and Kubernetes events, a few Xids, changes), plus GPU samples, metric
points and topology rows; the fault itself (an Xid 79 on one GPU) is one line among them.
Then it times ``analyze(bundle)`` and, as the baseline measured in the same run, the
``SELECT kind, count(*) FROM event GROUP BY kind`` a responder would type first.

    python tests/perf/analyze_bench.py [--size 1000000] [--repeat 3]
"""

# ruff: noqa: E501  (SQL and sample log lines are kept whole)

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from workbench.analysis.engine import analyze
from workbench.store.bundle import Bundle
from workbench.table import format_table

RANKS = 1024
HOSTS = 128

# (share of events in per-mille, kind, source, layer, attrs SQL, message SQL): each row's "i" is its number
MIX = [
    (430, "nvrm", "kernel", "gpu", "'{}'", "'NVRM: GPU at PCI:0000:' || lpad(printf('%x', 24 + i % 8), 2, '0') || ':00: GPU-info'"),
    (200, "nccl_warn", "nccl", "network_storage", "'{\"text\": \"NET/IB retry\"}'",
     "'NCCL WARN NET/IB : retrying connection to peer ' || (i % 1024)"),
    (120, "pcie_aer", "kernel", "hardware",
     "'{\"severity\": \"corrected\", \"device\": \"0000:5d:00.0\"}'", "'AER: Corrected error received: 0000:5d:00.0'"),
    (100, "gpu_throttle", "nvml", "hardware",
     "'{\"reasons\": [\"sw_power_cap\"], \"util_gpu\": 0, \"idle\": true}'", "'clocks held back: sw_power_cap'"),
    (60, "nccl_timeout", "nccl", "network_storage",
     "'{\"seq\": ' || (1000 + i % 7) || ', \"op\": \"ALLREDUCE\", \"timeout_ms\": 600000, \"elapsed_ms\": 600100}'",
     "'Watchdog caught collective operation timeout: WorkNCCL(SeqNum=' || (1000 + i % 7) || ')'"),
    (40, "k8s_event", "k8s", "scheduling", "'{\"reason\": \"BackOff\", \"object\": \"Pod/worker-' || (i % 50) || '\"}'",
     "'Back-off restarting failed container'"),
    (25, "job_state", "slurm", "scheduling",
     "'{\"job\": \"' || (9000 + i % 300) || '\", \"state\": \"COMPLETED\"}'", "'job completed'"),
    (15, "link_up", "kernel", "network_storage", "'{\"device\": \"ibp12s0\"}'", "'mlx5_core 0000:0c:00.0 ibp12s0: Link up'"),
    (6, "port_module_event", "kernel", "network_storage", "'{\"status\": \"Cable plugged\"}'",
     "'mlx5_core 0000:0c:00.0: Port module event: module 0, Cable plugged'"),
    (3, "change", "changes", "business", "'{\"what\": \"vim-common\", \"version\": \"2:8.2\", \"via\": \"dpkg\"}'",
     "'upgrade vim-common'"),
    (1, "xid", "kernel", "gpu", "'{\"xid\": 13}'", "'NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception'"),
]


def build(path: Path, size: int) -> float:
    """A bundle with ``size`` events; returns the seconds it took."""
    started = time.perf_counter()
    bundle = Bundle.create(path, title="analyze benchmark")
    sha, _, _ = bundle.add_artifact(io.BytesIO(b"benchmark"), kind="synthetic", source="bench", collector="kernel")
    con = bundle.con
    bounds = []
    low = 0
    for share, *rest in MIX:
        bounds.append((low, low + share, *rest))
        low += share
    case = lambda pick: "CASE " + " ".join(  # noqa: E731  (one CASE per column over the same buckets)
        f"WHEN i % {low} < {hi} THEN {pick(rest)}" for lo, hi, *rest in bounds) + " END"
    con.execute(f"""
        INSERT INTO event (id, ts, ts_origin, ts_approx, host, source, layer, kind, severity, gpu, rank, job, message,
                           attrs, artifact, line)
        SELECT i + 1, TIMESTAMP '2025-03-01 00:00:00' + to_microseconds(CAST(i AS BIGINT) * 43000), 'iso', false,
               'node' || lpad(CAST(i % {HOSTS} AS VARCHAR), 3, '0'),
               {case(lambda r: repr(r[1]))}, {case(lambda r: repr(r[2]))}, {case(lambda r: repr(r[0]))},
               CASE WHEN i % {low} >= {low - 4} THEN 'debug' ELSE 'info' END,
               '0000:' || lpad(printf('%x', 24 + i % 8), 2, '0') || ':00.0', CAST(i % {RANKS} AS INTEGER), '4242',
               {case(lambda r: r[4])}, CAST({case(lambda r: r[3])} AS JSON), ?, i + 1
        FROM range({size}) t(i)""", [sha])
    con.execute(f"""
        INSERT INTO event (id, ts, ts_origin, host, source, layer, kind, severity, gpu, rank, message, attrs, artifact, line)
        VALUES ({size + 1}, TIMESTAMP '2025-02-28 23:59:00', 'iso', 'node017', 'kernel', 'hardware', 'xid', 'critical',
                '0000:1a:00.0', NULL, 'NVRM: Xid (PCI:0000:1a:00): 79, pid=48211, name=python3, GPU has fallen off the bus.',
                '{{"xid": 79}}', ?, {size + 1})""", [sha])
    con.execute(f"""
        INSERT INTO topology (host, rank, nranks, comm_id, cuda_dev, gpu, job, artifact)
        SELECT 'node' || lpad(CAST(r // 8 AS VARCHAR), 3, '0'), r, {RANKS}, 'c1', r % 8,
               '0000:' || lpad(printf('%x', 24 + r % 8), 2, '0') || ':00.0', '4242', ?
        FROM range({RANKS}) t(r)""", [sha])
    con.execute(f"""
        INSERT INTO gpu_sample (ts, host, gpu, util_gpu, temp_c, power_w, throttle_reasons, artifact, line)
        SELECT TIMESTAMP '2025-03-01 00:00:00' + to_seconds(CAST(i // 1024 AS BIGINT) * 60),
               'node' || lpad(CAST((i % 1024) // 8 AS VARCHAR), 3, '0'),
               '0000:' || lpad(printf('%x', 24 + i % 8), 2, '0') || ':00.0', 97, 70 + i % 9, 650,
               CASE WHEN i % 50 = 0 THEN ['sw_power_cap'] ELSE [] END, ?, i
        FROM range({size // 10}) t(i)""", [sha])
    con.execute(f"""
        INSERT INTO series (ts, host, name, labels, value, artifact)
        SELECT TIMESTAMP '2025-03-01 00:00:00' + to_seconds(CAST(i // 4 AS BIGINT) * 15), 'vllm-' || (i % 4),
               'vllm:num_requests_waiting', '{{"metric": "queue_depth"}}', i % 7, ?
        FROM range({size // 20}) t(i)""", [sha])
    bundle.seal()
    bundle.close()
    return time.perf_counter() - started


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="events in the bundle (default 1M)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwb-bench-") as tmp:
        path = Path(tmp) / "big.duckdb"
        build_s = build(path, args.size)
        with Bundle.open(path) as bundle:
            events = bundle.con.execute("SELECT count(*) FROM event").fetchall()[0][0]
            base_min, base_med, _ = timed(
                lambda: bundle.con.execute("SELECT kind, count(*) FROM event GROUP BY kind").fetchall(), args.repeat)
            scan_min, scan_med, _ = timed(
                lambda: bundle.con.execute("SELECT count(*) FROM event WHERE message ILIKE '%fallen off%'").fetchall(),
                args.repeat)
            an_min, an_med, result = timed(lambda: analyze(bundle), args.repeat)
    top = result["hypotheses"][0] if result["hypotheses"] else {}
    rows = [
        ["build bundle (bulk SQL insert, seal)", f"{build_s:.2f}", "-", f"{events:,} events"],
        ["baseline: SELECT kind, count(*) GROUP BY kind", f"{base_min:.3f}", f"{base_med:.3f}", "-"],
        ["baseline: full-text ILIKE scan of messages", f"{scan_min:.3f}", f"{scan_med:.3f}", "-"],
        ["analyze(bundle)", f"{an_min:.3f}", f"{an_med:.3f}",
         f"top: {top.get('cause')} {top.get('host')} {top.get('gpu')} ({top.get('score')})"],
    ]
    print(format_table(["operation", "best s", "median s", "notes"], rows))
    print(f"analyze / group-by baseline: {an_min / base_min:.0f}x; {len(result['checks'])} checks evaluated")


if __name__ == "__main__":
    main()
