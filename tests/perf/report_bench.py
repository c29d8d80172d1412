"""Postmortem of a large bundle: the report must stay a few seconds at 1M events.

Builds a bundle by bulk SQL insert (64 hosts, two hours, mostly NCCL INFO noise, with warnings,
errors, a GPU that fell off the bus, NCCL timeouts on every rank, job and node state changes),
then times `report.build` + Markdown and HTML rendering, with the analysis given (the engine is
timed on its own, since it has its own benchmark). Baselines from the same run: one full scan
(`SELECT count(*)` and a GROUP BY over every event), what any report must at least read.

    python tests/perf/report_bench.py [--size 1000000] [--with-engine]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from datetime import datetime
from pathlib import Path

from workbench.postmortem import render, report
from workbench.store.bundle import Bundle

T0 = datetime(2026, 3, 14, 8, 0, 0)
HOSTS = 64


def build(path: Path, size: int) -> dict:
    """A bundle of ``size`` events plus topology, and an analysis in DESIGN.md's shape."""
    with Bundle.create(path, title=f"bench {size} events", incident_id="bench") as bundle:
        shas = [bundle.add_artifact(io.BytesIO(f"node{h:02d} log\n".encode() * 10), kind="nccl_log",
                                    source=f"node{h:02d}/train.log", collector="nccl", host=f"node{h:02d}")[0]
                for h in range(HOSTS)]
        con = bundle.con
        con.execute("CREATE TEMP TABLE shas AS SELECT * FROM (SELECT unnest(?) AS sha, "
                    "generate_subscripts(?, 1) - 1 AS h)", [shas, shas])
        con.execute(f"""
            INSERT INTO event
            SELECT i, TIMESTAMP '{T0:%Y-%m-%d %H:%M:%S}' + to_microseconds(CAST(i * 7200000000 // {size} AS BIGINT)),
                   'iso', false, NULL, 'node' || lpad(CAST(i % {HOSTS} AS VARCHAR), 2, '0'),
                   CASE WHEN i % 10 < 7 THEN 'nccl' WHEN i % 10 < 9 THEN 'kernel' ELSE 'slurm' END,
                   CASE WHEN i % 10 < 7 THEN 'network_storage' WHEN i % 10 < 9 THEN 'hardware' ELSE 'scheduling' END,
                   CASE WHEN i % 1000 = 7 THEN 'nccl_timeout' WHEN i % 997 = 3 THEN 'pcie_aer'
                        WHEN i % 5003 = 11 THEN 'node_state' WHEN i % 10 < 7 THEN 'nccl_info' ELSE 'kernel_msg' END,
                   CASE WHEN i % 1000 = 7 THEN 'error' WHEN i % 997 = 3 THEN 'warning' WHEN i % 5003 = 11
                        THEN 'warning' ELSE 'info' END,
                   CASE WHEN i % 997 = 3 THEN '0000:5d:00.0' END, CAST(i % 512 AS INTEGER), '48213',
                   'bench line ' || i || ' NCCL INFO channel ' || (i % 32) || ' <b>&amp;</b>',
                   CASE WHEN i % 5003 = 11 THEN '{{"state": "DRAIN", "reason": "bench"}}'
                        WHEN i % 997 = 3 THEN '{{"severity": "corrected"}}' ELSE '{{}}' END,
                   (SELECT sha FROM shas WHERE h = i % {HOSTS}), 1 + i % 10
            FROM range({size}) r(i)""")
        con.execute("""INSERT INTO event (id, ts, ts_origin, ts_approx, host, source, layer, kind, severity, gpu,
                       message, attrs, artifact, line)
                       VALUES (?, ?, 'iso', false, 'node03', 'kernel', 'hardware', 'xid', 'critical',
                               '0000:5d:00.0', 'NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.',
                               '{"xid": 79}', ?, 1)""", [size, T0.replace(hour=9, minute=1), shas[3]])
        con.execute("INSERT INTO topology (host, rank, nranks, gpu, job) SELECT 'node' || lpad(CAST(r // 8 AS "
                    "VARCHAR), 2, '0'), r, 512, '0000:18:00.0', '48213' FROM range(512) t(r)")
        bundle.seal()
    return {"workload": "training", "window": {"start": T0.isoformat() + "Z", "end": "2026-03-14T10:00:00Z"},
            "first_anomaly": {"ts": "2026-03-14T09:01:00Z", "host": "node03", "layer": "hardware", "kind": "xid",
                              "text": "Xid 79"},
            "hypotheses": [{"rank": 1, "layer": "hardware", "cause": "gpu_fell_off_bus", "score": 0.9,
                            "host": "node03", "gpu": "0000:5d:00.0", "ranks": [27],
                            "first_seen": "2026-03-14T09:01:00Z",
                            "summary": "Xid 79 on node03", "symptoms": ["nccl_timeout"],
                            "evidence": [{"source": "kernel", "ts": "2026-03-14T09:01:00Z", "host": "node03",
                                          "text": "Xid 79", "artifact": shas[3], "line": 1}]}],
            "layers": {layer: {"verdict": "clear", "findings": []}
                       for layer in ("business", "scheduling", "gpu", "network_storage", "hardware")}}


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000, help="events in the bundle (default 1M)")
    parser.add_argument("--with-engine", action="store_true", help="also time workbench.analysis.engine.analyze")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.duckdb"
        build_s, analysis = timed(lambda: build(path, args.size))
        rows = []
        with Bundle.open(path) as bundle:
            scan_s, _ = timed(lambda: bundle.con.execute("SELECT count(*) FROM event").fetchall())
            group_s, _ = timed(lambda: bundle.con.execute(
                "SELECT host, kind, count(*) FROM event GROUP BY ALL").fetchall())
            model_s, model = timed(lambda: report.build(bundle, analysis=analysis, causes={}))
            md_s, md = timed(lambda: render.render(model, "md"))
            html_s, html = timed(lambda: render.render(model, "html"))
            rows += [("baseline: SELECT count(*) FROM event", scan_s, ""),
                     ("baseline: GROUP BY host, kind (full scan)", group_s, ""),
                     ("report.build (SQL aggregates, verify)", model_s, f"{len(model['timeline'])} timeline rows"),
                     ("render Markdown", md_s, f"{len(md) / 1024:.0f} KiB"),
                     ("render HTML", html_s, f"{len(html) / 1024:.0f} KiB"),
                     ("report md+html total", model_s + md_s + html_s, "")]
            if args.with_engine:
                from workbench.analysis.engine import analyze

                engine_s, _ = timed(lambda: analyze(bundle))
                rows.append(("engine: analyze (for reference)", engine_s, ""))
    print(f"bundle: {args.size:,} events, {HOSTS} hosts; built in {build_s:.1f} s")
    print(f"{'step':<44}{'seconds':>9}  note")
    for name, seconds, note in rows:
        print(f"{name:<44}{seconds:>9.3f}  {note}")


if __name__ == "__main__":
    main()
