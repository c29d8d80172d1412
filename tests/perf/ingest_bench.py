"""Ingest throughput of large kernel logs, against the tools a responder would otherwise reach for.

Generates two logs of the same size (tests/perf/kernel_log_mix.py): a quiet kern.log whose
benign lines mostly miss the collector's keywords, and the noisy ``dmesg -T`` of a Kubernetes
GPU node whose benign lines hit them (mlx5 FW tracer, veth links becoming ready, nvidia-uvm).
For each it times, from one run: ``gpuwb ingest`` (MB/s and its peak RSS), ``grep -cE`` over the
same keywords the collector's prefilter uses, ``sha256sum``, and ``lnav -n`` (lnav indexing the
file headless). It also times the two halves of an ingest in-process: storing the raw bytes in
the bundle, and the kernel parser alone (and, as a baseline in the same run, with its keywords not
narrowed), so a slow run says which half to blame. Beside ``gpuwb ingest`` it runs the same ingest with
the raw bytes stored as before the flat-memory layout (tests/perf/old_chunk_layout.py: 4 MiB chunks,
default row groups) unless ``--no-baseline``, so peak RSS before and after come from one run. 1 GiB
quiet log on the shared 2-core box: 681-719 MB before, 275-307 MB after, the same seconds.
The 512-rank NCCL set of tests/perf/nccl_bench.py (one file per rank) follows unless ``--no-nccl``.

    python tests/perf/ingest_bench.py                 # 1 GiB each
    python tests/perf/ingest_bench.py --size-mb 50    # quicker
    python tests/perf/ingest_bench.py --size-mb 2048 --mix quiet --no-nccl --metrics-mb 200

With the row writer off Arrow (no pandas) and 10,000 rows parsed ahead: 2 GiB quiet log 447 -> 275-290 MB,
200 MB metrics CSV 1,360 -> 347-348 MB peak RSS, the same seconds.

With the parse worker (the parse on the second core, workbench/ingest/parse_worker.py), 1 GiB each, idle 2-core box,
one run (MB/s, peak RSS of both processes): quiet gpuwb 274.9 / 263 MB, one core 165.7, lnav 238.5;
noisy gpuwb 311.9 / 244 MB, one core 184.6, lnav 314.5 (three more pairs: gpuwb 309-314, lnav 310-315);
512 NCCL rank logs gpuwb 220.9 / 258 MB, one core 143.9, lnav 615.0.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.perf.kernel_log_mix import write_log  # noqa: E402


def timed(argv: list[str], ok: tuple[int, ...] = (0,), **kwargs) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) and stdout of a child. The peak is the larger of the child's own
    (from the kernel) and the sum over it and its descendants sampled every 20 ms: gpuwb ingest's parse
    worker is a second process whose memory counts too."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    tree_peak = [0]
    sampler = threading.Thread(target=_sample_tree_rss, args=(proc.pid, tree_peak), daemon=True)
    sampler.start()
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - began
    sampler.join()
    if proc.returncode not in ok:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-500:]}")
    return elapsed, max(usage.ru_maxrss, tree_peak[0]), out.decode(errors="replace")


def _sample_tree_rss(pid: int, peak: list[int]) -> None:
    while True:
        pids = [pid]
        total = 0
        while pids:
            current = pids.pop()
            try:
                status = Path(f"/proc/{current}/status").read_text()
                if "\nState:\tZ" in status:  # exited, not yet reaped: the sampling is over
                    return
                total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) if "VmRSS" in status else 0
                children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
            except (OSError, AttributeError):
                if current == pid:
                    return
                continue
            pids += [int(c) for c in children]
        peak[0] = max(peak[0], total)
        time.sleep(0.02)


def grep_pattern() -> str:
    from collectors.kernel.prefilter import KEYWORDS

    return "|".join(re.sub(r"([][.\\^$*+?(){}|/])", r"\\\1", k.decode()) for k in KEYWORDS)


def store_only(path: Path, tmp: Path) -> float:
    from workbench.store.bundle import Bundle

    target = tmp / f"store-only-{path.stem}.duckdb"
    began = time.perf_counter()
    with Bundle.create(target) as bundle, open(path, "rb") as f:
        bundle.add_artifact(f, kind="syslog", source=str(path))
    elapsed = time.perf_counter() - began
    target.unlink()
    return elapsed


def parse_only(path: Path, plain: bool = False) -> tuple[float, int]:
    """The kernel parser alone; ``plain``: with no keyword narrowed (collectors/kernel/prefilter.py NARROWED), the
    parser as it was before the narrowing, a baseline in the same run."""
    from collectors import kernel
    from collectors.base import Event, ParseContext
    from collectors.kernel import prefilter

    narrowed = prefilter.NARROWED
    prefilter.NARROWED = () if plain else narrowed
    try:
        began = time.perf_counter()
        ctx = ParseContext(host="gpu-node-017", reference_time=datetime(2025, 3, 2))
        with open(path, "rb") as f:
            events = sum(1 for row in kernel.parse("syslog", f, ctx) if isinstance(row, Event))
        return time.perf_counter() - began, events
    finally:
        prefilter.NARROWED = narrowed


def measure(log: Path, tmp: Path, name: str, baseline: bool = True) -> list[tuple[str, float, int | None, str]]:
    """The table rows of one log: gpuwb ingest first (and, with ``baseline``, as it stored raw bytes
    before), then the other tools over the same bytes."""
    rows: list[tuple[str, float, int | None, str]] = []
    bundle = tmp / f"bench-{name}.duckdb"
    runs = [("gpuwb ingest", "workbench.cli", "", "1"),
            ("gpuwb ingest, one core", "workbench.cli", "; baseline: no parse worker", "0")]
    if baseline:
        runs.append(("gpuwb ingest, 4 MiB chunks", "tests.perf.old_chunk_layout", "; baseline: storage before", "1"))
    for what, module, note, worker in runs:
        secs, rss, out = timed([sys.executable, "-m", module, "ingest", str(bundle), str(log)], cwd=ROOT,
                               env={**os.environ, "GPUWB_PARSE_WORKER": worker})
        bundle.unlink(missing_ok=True)
        Path(f"{bundle}.wal").unlink(missing_ok=True)
        events = re.search(r"(\d+) events", out)
        rows.append((what, secs, rss, f"{events.group(1) if events else '?'} events{note}"))
    secs, rss, out = timed(["grep", "-cE", grep_pattern(), str(log)], env={**os.environ, "LC_ALL": "C"}, ok=(0, 1))
    rows.append(("grep -cE (same keywords)", secs, rss, f"{out.strip()} matching lines"))
    secs, rss, _ = timed(["sha256sum", str(log)])
    rows.append(("sha256sum", secs, rss, ""))
    if shutil.which("lnav"):
        secs, rss, out = timed(["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs", str(log)],
                               env={**os.environ, "HOME": str(tmp)})
        count = out.split()[-1] if out.split() else "?"
        rows.append(("lnav -n (index + count)", secs, rss, f"{count} log lines"))
    return rows


def breakdown(log: Path, tmp: Path) -> list[tuple[str, float, int | None, str]]:
    """The two halves of an ingest, in this process: run after every child is timed, since a child
    forked from a grown parent reports the parent's pages in its peak RSS."""
    secs, n = parse_only(log)
    plain_secs, plain_n = parse_only(log, plain=True)
    return [("  part: store raw bytes", store_only(log, tmp), None, "Bundle.add_artifact, in-process"),
            ("  part: kernel parser", secs, None, f"{n} events, no bundle"),
            ("  part: parser, plain keys", plain_secs, None, f"{plain_n} events: baseline, keywords not narrowed")]


def nccl_rows(tmp: Path, size_mb: int) -> tuple[float, list[tuple[str, float, int | None, str]]]:
    """gpuwb ingest, grep and sha256sum over 512 per-rank NCCL logs of ``size_mb`` MiB in all."""
    from collectors.nccl.prefilter import GREP_PATTERN
    from tests.data.nccl_multirank import write_job

    logs = tmp / "nccl"
    write_job(logs, hosts=64, gpus_per_host=8, seq=900_001, straggler=170, filler_bytes=(size_mb << 20) // 512,
              per_host=False)
    files = sorted(str(p) for p in logs.rglob("*.log"))
    mb = sum(os.path.getsize(p) for p in files) / 1e6
    rows: list[tuple[str, float, int | None, str]] = []
    bundle = tmp / "bench-nccl.duckdb"
    for what, worker, note in (("gpuwb ingest", "1", ""),
                               ("gpuwb ingest, one core", "0", "; baseline: no parse worker")):
        secs, rss, out = timed([sys.executable, "-m", "workbench.cli", "ingest", "-q", str(bundle), str(logs)],
                               cwd=ROOT, env={**os.environ, "GPUWB_PARSE_WORKER": worker})
        bundle.unlink(missing_ok=True)
        rows.append((what, secs, rss, f"{len(files)} files{note}"))
    secs, rss, _ = timed(["grep", "-cE", GREP_PATTERN, *files], env={**os.environ, "LC_ALL": "C"}, ok=(0, 1))
    rows.append(("grep -cE (same selection)", secs, rss, ""))
    secs, rss, _ = timed(["sha256sum", *files])
    rows.append(("sha256sum", secs, rss, ""))
    if shutil.which("lnav"):
        secs, rss, out = timed(["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs", *files],
                               env={**os.environ, "HOME": str(tmp)})
        rows.append(("lnav -n (index + count)", secs, rss, f"{out.split()[-1] if out.split() else '?'} log lines"))
    return mb, rows


def metrics_rows(tmp: Path, size_mb: int) -> tuple[float, list[tuple[str, float, int | None, str]]]:
    """gpuwb ingest of a long-format metrics CSV (ts,name,value,host: 20 metrics over 1,000 hosts, 15 s
    scrapes) of ``size_mb`` MiB, the shape collectors/metrics_csv.py streams into the series table."""
    dump = tmp / "metrics.csv"
    rng = random.Random(7)
    names = [f"vllm:metric_{k}" for k in range(20)]
    with open(dump, "w", encoding="utf-8") as out:
        out.write("ts,name,value,host\n")
        block = 0
        while out.tell() < size_mb << 20:
            ts = 1_700_000_000 + 15 * block
            out.write("".join(f"{ts},{names[j % 20]},{rng.random() * 100:.3f},node{j // 20:04d}\n"
                              for j in range(20_000)))
            block += 1
    bundle = tmp / "bench-metrics.duckdb"
    secs, rss, out = timed([sys.executable, "-m", "workbench.cli", "ingest", "-q", str(bundle), str(dump)], cwd=ROOT)
    mb = dump.stat().st_size / 1e6
    dump.unlink()
    return mb, [("gpuwb ingest", secs, rss, f"{20_000 * block:,} points")]


def print_table(title: str, size_mb: float, rows: list[tuple[str, float, int | None, str]]) -> None:
    ours = rows[0][1]
    print(f"\n{title}: {size_mb:,.0f} MB, {os.cpu_count()} CPUs")
    print(f"{'what':<28} {'seconds':>8} {'MB/s':>8} {'peak RSS':>10} {'speed/gpuwb':>11}  note")
    for name, secs, rss, note in rows:
        ratio = f"{ours / secs:10.2f}x" if not name.startswith("  part") else ""
        rss_text = f"{rss / 1024:7.0f} MB" if rss is not None else ""
        print(f"{name:<28} {secs:8.2f} {size_mb / secs:8.1f} {rss_text:>10} {ratio:>11}  {note}")


def cpu_seconds(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system CPU seconds of a child and its descendants (the parse worker): on a shared box the
    wall clock measures the other tenants, the CPU time measures the run."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{argv} failed: {proc.stderr.read().decode(errors='replace')[-500:] if proc.stderr else ''}")
    return usage.ru_utime + usage.ru_stime


def small_rows(tmp: Path, against: Path | None, repeat: int) -> None:
    """The fixed cost of ``gpuwb ingest``: CPU seconds (best of ``repeat``) of an empty file and of a
    100 KB NCCL/torch rank log (and the same ending in an NCCL WARN), beside lnav indexing the same file
    and, with ``against``, the same ingest run from another checkout (``--against ../other-checkout``)
    interleaved in the same run."""
    from tests.data.nccl_multirank import write_job

    write_job(tmp / "job", hosts=1, gpus_per_host=1, seq=900_001, straggler=0, filler_bytes=100_000)
    log = next((tmp / "job").rglob("*.log"))
    empty = tmp / "empty.log"
    empty.write_bytes(b"")
    warn = tmp / "warn.log"  # the same log ending in the NCCL WARN of a failed job
    warn.write_bytes(log.read_bytes() + b"gpu-node-07:41000:41077 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : "
                     b"Got completion from peer 10.42.0.11<51522> with status=12 opcode=0 len=0 vendor err 129\n")
    trees = [("gpuwb ingest", ROOT)] + ([(f"gpuwb ingest ({against})", against)] if against else [])
    print(f"\nfixed cost: CPU seconds (user+sys, best of {repeat}), {os.cpu_count()} CPUs")
    print(f"{'what':<40} {'empty file':>10} {log.stat().st_size / 1e3:>7.0f} KB {'+ a WARN':>10}")
    best: dict[tuple[str, str], float] = {}
    for _ in range(repeat):
        for name, tree in trees:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed gpuwb runs from .pyc files
            for which, path in (("empty", empty), ("log", log), ("warn", warn)):
                bundle = tmp / "small.duckdb"
                bundle.unlink(missing_ok=True)
                secs = cpu_seconds([sys.executable, "-m", "workbench.cli", "ingest", "-q", str(bundle), str(path)],
                                   env, tree)
                best[name, which] = min(best.get((name, which), secs), secs)
    for name, _ in trees:
        print(f"{name:<40} {best[name, 'empty']:10.3f} {best[name, 'log']:10.3f} {best[name, 'warn']:10.3f}")
    if shutil.which("lnav"):
        secs = min(cpu_seconds(["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs", str(log)],
                               {**os.environ, "HOME": str(tmp)}, tmp) for _ in range(repeat))
        print(f"{'lnav -n (index + count)':<40} {'':>10} {secs:10.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of each generated log (default 1024)")
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep the files for the next run")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the in-process store/parse timings")
    parser.add_argument("--mix", choices=("quiet", "noisy", "both"), default="both", help="which kernel log(s)")
    parser.add_argument("--no-nccl", action="store_true", help="skip the 512-rank NCCL set (--size-mb in all)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the ingest with the former 4 MiB chunks")
    parser.add_argument("--metrics-mb", type=int, default=0, help="also a long-format metrics CSV of this size")
    parser.add_argument("--small", action="store_true",
                        help="only the fixed cost: an empty file and a 100 KB NCCL log, CPU seconds")
    parser.add_argument("--against", metavar="CHECKOUT", type=Path,
                        help="with --small: the same ingest run from this checkout too (a same-run baseline)")
    parser.add_argument("--repeat", type=int, default=5, help="with --small: best of this many runs (default 5)")
    args = parser.parse_args()

    if args.small:
        tmp = Path(tempfile.mkdtemp(prefix="gpuwb-bench-"))
        try:
            small_rows(tmp, args.against, args.repeat)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="gpuwb-bench-"))
    work = Path(args.keep) if args.keep else tmp
    work.mkdir(parents=True, exist_ok=True)
    try:
        tables = []
        for mix in ("quiet", "noisy") if args.mix == "both" else (args.mix,):
            log = work / f"kern-{mix}-{args.size_mb}m.log"
            if not log.exists():
                began = time.perf_counter()
                write_log(log, mix, args.size_mb << 20)
                print(f"generated {log} in {time.perf_counter() - began:.1f} s", file=sys.stderr)
            tables.append((f"{mix} kernel log", log, measure(log, tmp, mix, baseline=not args.no_baseline)))
        if not args.no_nccl:
            mb, rows = nccl_rows(tmp, args.size_mb)
            tables.append(("512-rank NCCL logs, one file per rank", mb, rows))
        if args.metrics_mb:
            mb, rows = metrics_rows(tmp, args.metrics_mb)
            tables.append(("metrics CSV, long format", mb, rows))
        for title, log, rows in tables:
            if isinstance(log, Path) and not args.no_breakdown:
                rows += breakdown(log, tmp)
            print_table(title, log.stat().st_size / 1e6 if isinstance(log, Path) else log, rows)
        print("\nspeed/gpuwb: the tool's MB/s over gpuwb ingest's (below 1: gpuwb ingest is faster)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
