"""How long ``gpuwb merge`` takes on a fleet: 1,000 small node bundles into one incident.

Each node's bundle is made the way a per-node capture or a handed-over folder makes it: raw files
written in their tools' formats (tests/perf/fleet_nodes.py: ``uptime -s`` and ``date``, a few ``dmesg``
lines, ``nvidia-smi -q`` for 8 GPUs, a few NCCL/PyTorch lines of the job's ranks, the shared ``sacct -P``
output) and ingested with ``ingest_paths`` into one bundle per node. One node's GPU falls off the bus
(AER, Xid 79) and its rank dies; every other node's first rank hits the NCCL watchdog ten minutes later.

Then, each in a child process with its own peak RSS (``os.wait4``):

- ``gpuwb merge OUT DIR`` over the whole directory, and as the baseline measured in the same run the
  same merge at ``--baseline-nodes`` (default 100): per-node cost at both sizes says whether it scales;
- ``gpuwb merge --into`` adding ``--late`` late nodes to the merged bundle, against re-merging all;
- ``gpuwb verify``, ``gpuwb analyze --json``, ``gpuwb report -f md`` on the merged bundle (their output size
  too: it must not grow with the host count) and the cockpit's Overview loaded headless until it names
  the culprit.

    python tests/perf/merge_bench.py [--nodes 1000] [--baseline-nodes 100] [--late 10] [--keep DIR]
    python tests/perf/merge_bench.py --blobs 40 [--blob-mb 16]

``--blobs N`` measures instead the merge of N bundles that each hold one incompressible file of
``--blob-mb`` MiB, made and merged twice: as gpuwb stores raw bytes now, and as it did before
(tests/perf/old_chunk_layout.py: 4 MiB chunks, default row groups). 40 x 16 MiB on the shared 2-core
box: before 1.9-2.0 GB peak RSS, 6.5-9.9 s; now 0.86-1.0 GB, 2.9-4.6 s (chunks are copied as they are).

Before the set-based merge (one ATTACH and a dozen statements per bundle, counts of the growing
tables, another host's copy of known bytes row by row in Python), on the same bundles: 100 bundles
13.9 s, 300 bundles 60.6 s (RSS 200 MB), growing faster than the node count. After, 1,000 bundles on
the same shared 2-core box: 17.3 s wall (10.8 s CPU), RSS 317 MB; 10 late nodes with --into 1.0 s;
verify 0.6 s, report 2.0 s, the cockpit's ranking 2.5 s.
"""

# ruff: noqa: E501  (log lines are kept whole)

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.perf.fleet_nodes import culprit_of, host_name, node_bundle  # noqa: E402


def build_node(args: tuple[Path, int, int]) -> float:
    """Node ``n``'s bundle in ``DIR`` (kept from an earlier run, or made now); seconds it took."""
    where, n, nodes = args
    if (where / f"{host_name(n)}.duckdb").exists():
        return 0.0
    started = time.perf_counter()
    node_bundle(where, n, nodes)
    return time.perf_counter() - started


def build_all(where: Path, first: int, count: int, nodes: int, workers: int) -> tuple[float, float]:
    """Node bundles ``first``..``first + count - 1`` in ``where`` (kept ones are reused); wall seconds and
    the mean seconds per node bundle of those built now."""
    where.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    jobs = [(where, n, nodes) for n in range(first, first + count)]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        costs = [c for c in pool.map(build_node, jobs, chunksize=8) if c]
    return time.perf_counter() - started, (sum(costs) / len(costs) if costs else 0.0)


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, CPU seconds (user + system, all threads), peak RSS (MiB) of that child alone, and
    its stdout. CPU time says what a quiet machine would take when other work shares the cores."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, cwd=ROOT)
        out = proc.stdout.read() if proc.stdout else b""
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - began
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[2:5])} failed ({code}): {err.read().decode(errors='replace')[-800:]}")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss // 1024, out.decode(errors="replace")


def gpuwb(*args: object) -> list[str]:
    return [sys.executable, "-m", "workbench.cli", *map(str, args)]


async def _cockpit(path: Path, culprit: str) -> dict[str, object]:
    """The Overview until the ranking is in and then the postmortem model (it verifies every artifact once),
    then the GPUs screen until its table is filled."""
    from textual.widgets import DataTable, Static

    from workbench.store.shared_bundle import SharedBundle
    from workbench.tui.app import Cockpit

    async def until(pilot, condition, what: str) -> None:
        deadline = time.perf_counter() + 600
        while not condition():
            if time.perf_counter() > deadline:
                raise TimeoutError(f"the cockpit did not get to {what} in 10 minutes")
            await pilot.pause(0.01)

    out: dict[str, object] = {}
    started = time.perf_counter()
    app = Cockpit(SharedBundle(path, "bench"))
    async with app.run_test(size=(160, 50)) as pilot:
        await until(pilot, lambda: app.analysis is not None or app.analysis_error is not None, "the analysis")
        out["analysis_s"] = time.perf_counter() - started
        await until(pilot, lambda: app.model is not None or app.analysis_error is not None, "the postmortem model")
        await pilot.pause()
        out["overview_s"] = time.perf_counter() - started
        text = "\n".join(str(w.render()) for w in app.screen.query(Static))
        lanes = [line for line in str(app.screen.query_one("#activity", Static).render()).splitlines()
                 if line[:1].isalnum() and not line.startswith(("1 col", "first"))]
        out.update(chars=len(text), culprit=culprit in text, first_lane=lanes[0].split()[0] if lanes else "",
                   lanes=len(lanes))
        began = time.perf_counter()
        await pilot.press("g")
        await until(pilot, lambda: any(t.row_count for t in app.screen.query(DataTable)), "the GPUs")
        out["gpus_s"] = time.perf_counter() - began
        out["gpu_rows"] = sum(t.row_count for t in app.screen.query(DataTable))
        await pilot.press("q")
    return out


def cockpit_child(path: Path, culprit: str) -> None:
    """Run in a child of the bench (its own peak RSS): the cockpit headless; prints JSON."""
    print(json.dumps(asyncio.run(_cockpit(path, culprit))))


def blob_merge(work: Path, count: int, blob_mb: int) -> list[list[str]]:
    """Merge ``count`` one-blob bundles in each storage layout; a row per layout."""
    rows = []
    for layout, module in (("now", "workbench.cli"), ("before (4 MiB chunks)", "tests.perf.old_chunk_layout")):
        where = work / f"blobs-{module}"
        where.mkdir(parents=True, exist_ok=True)
        for n in range(count):
            blob = work / f"{host_name(n)}.bin"
            blob.write_bytes(os.urandom(blob_mb << 20))
            timed([sys.executable, "-m", module, "ingest", "-q", where / f"{host_name(n)}.duckdb", blob])
            blob.unlink()
        merged = work / f"merged-{module}.duckdb"
        secs, cpu, rss, _ = timed([sys.executable, "-m", module, "merge", merged, where])
        rows.append([f"merge {count} bundles of {blob_mb} MiB incompressible, storage {layout}", f"{secs:.1f}",
                     f"{cpu:.1f}", str(rss), f"{merged.stat().st_size / 2**20:.0f} MiB merged"])
        merged.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="node bundles to merge (default 1000)")
    parser.add_argument("--baseline-nodes", type=int, default=100, help="the same merge at this size, for per-node cost")
    parser.add_argument("--late", type=int, default=10, help="late nodes added with merge --into (default 10)")
    parser.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)),
                        help="processes building the node bundles")
    parser.add_argument("--keep", metavar="DIR", help="build the node bundles here and reuse them next time")
    parser.add_argument("--blobs", type=int, default=0, help="instead: merge this many bundles of one large blob")
    parser.add_argument("--blob-mb", type=int, default=16, help="MiB of incompressible bytes per --blobs bundle")
    parser.add_argument("--cockpit-child", metavar="BUNDLE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cockpit_child:
        cockpit_child(Path(args.cockpit_child), host_name(culprit_of(args.nodes)))
        return
    from workbench.table import format_table

    if args.blobs:
        with tempfile.TemporaryDirectory(prefix="gpuwb-merge-bench-") as tmp:
            print(format_table(["step", "wall s", "CPU s", "peak RSS MiB", "notes"],
                               blob_merge(Path(tmp), args.blobs, args.blob_mb)))
        return
    with tempfile.TemporaryDirectory(prefix="gpuwb-merge-bench-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        nodes_dir, late_dir = work / f"nodes{args.nodes}", work / f"late{args.nodes}"
        rows: list[list[str]] = []
        build_s, per_node = build_all(nodes_dir, 0, args.nodes, args.nodes, args.workers)
        build_all(late_dir, args.nodes, args.late, args.nodes, args.workers)
        size = sum(p.stat().st_size for p in nodes_dir.glob("*.duckdb"))
        rows.append([f"build {args.nodes} node bundles (ingest, {args.workers} processes)", f"{build_s:.1f}", "-", "-",
                     (f"{per_node:.2f} s per bundle" if per_node else f"kept from a run before in {work}")
                     + f"; {size / 2**20:.0f} MiB on disk"])
        merged = Path(tmp) / "merged.duckdb"
        small = Path(tmp) / "small.duckdb"
        culprit = host_name(culprit_of(args.nodes))
        baseline = sorted(nodes_dir.glob("*.duckdb"))[:args.baseline_nodes]
        secs, cpu, rss, _ = timed(gpuwb("merge", small, *baseline))
        rows.append([f"baseline: merge {len(baseline)} bundles", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"{cpu / len(baseline) * 1000:.0f} ms CPU per bundle"])
        secs_m, cpu, rss, _ = timed(gpuwb("merge", merged, nodes_dir))
        rows.append([f"merge {args.nodes} bundles (a directory)", f"{secs_m:.1f}", f"{cpu:.1f}", str(rss),
                     f"{cpu / args.nodes * 1000:.0f} ms CPU per bundle; {merged.stat().st_size / 2**20:.0f} MiB"])
        late = sorted(late_dir.glob("*.duckdb"))
        secs, cpu, rss, _ = timed(gpuwb("merge", "--into", merged, *late))
        rows.append([f"merge --into: {len(late)} late nodes", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"{secs / secs_m:.0%} of the whole merge's wall time"])
        secs, cpu, rss, out = timed(gpuwb("merge", "--into", merged, *late))
        skipped = re.search(r"; (\d+) skipped", out)
        rows.append(["merge --into: the same late nodes again", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"{skipped.group(1) if skipped else 0} of {len(late)} skipped as already merged, "
                     f"{'nothing added' if 'Added 0 bundle' in out else 'ADDED'}"])
        secs, cpu, rss, out = timed(gpuwb("verify", merged))
        rows.append(["verify merged", f"{secs:.1f}", f"{cpu:.1f}", str(rss), out.strip().splitlines()[-1][:60]])
        secs, cpu, rss, out = timed(gpuwb("analyze", merged, "--json"))
        doc = json.loads(out)
        top = doc["hypotheses"][0] if doc.get("hypotheses") else {}
        rows.append(["analyze --json", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"top {top.get('cause')} on {top.get('host')} ({'right' if top.get('host') == culprit else 'WRONG'}); "
                     f"{len(out) // 1024} KiB ({len(doc.get('symptoms', []))} symptom groups)"])
        secs, cpu, rss, out = timed(gpuwb("analyze", merged))
        rows.append(["analyze (text)", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"{out.count(chr(10))} lines, culprit {'named' if culprit in out else 'MISSING'}"])
        secs, cpu, rss, out = timed(gpuwb("report", merged, "-f", "md"))
        rows.append(["report -f md (verify included)", f"{secs:.1f}", f"{cpu:.1f}", str(rss),
                     f"{len(out) // 1024} KiB, {out.count(chr(10))} lines, culprit {'named' if culprit in out else 'MISSING'}"])
        secs, cpu, rss, out = timed([sys.executable, __file__, "--cockpit-child", str(merged), "--nodes", str(args.nodes)])
        cockpit = json.loads(out)
        rows.append(["cockpit: Overview until the ranking is in", f"{cockpit['analysis_s']:.1f}", "-", "-",
                     "the culprit leads the root-cause table from here"])
        rows.append(["cockpit: ... and the postmortem model", f"{cockpit['overview_s']:.1f}", "-", str(rss),
                     f"{cockpit['chars']} chars, culprit {'named' if cockpit['culprit'] else 'MISSING'}, "
                     f"activity: {cockpit['lanes']} lanes, first {cockpit['first_lane']}"])
        rows.append(["cockpit: then the GPUs screen", f"{cockpit['gpus_s']:.1f}", "-", "-",
                     f"{cockpit['gpu_rows']} rows (one per GPU inventoried)"])
    print(format_table(["step", "wall s", "CPU s", "peak RSS MiB", "notes"], rows))


if __name__ == "__main__":
    main()
