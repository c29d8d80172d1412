"""Benchmark: NCCL / PyTorch rank logs from many ranks, parsed and ingested, beside grep.

Generates one log per rank (512 ranks on 64 hosts by default) in the real line formats of
tests/data/nccl_multirank, mostly per-collective ``NCCL INFO`` lines and trainer lines as a long
NCCL_DEBUG=INFO run writes them, with one straggler's watchdog timeout at the end; then times

- ``grep -cE`` with the collector's own selection (``collectors.nccl.prefilter.GREP_PATTERN``): the floor;
- the collector's parser alone (``collectors.nccl.parse`` over every file, in a child process);
- ``gpuwb ingest`` end to end (store the raw bytes, parse, derive), in a child process;

for two layouts of the same job (per-node ``srun --label`` output with 8 ranks interleaved, and one
file per rank), and prints MB/s and each child's peak RSS. Default 256 MB for a quick run; the target is
``--size-mb 1024``: >= 100 MB/s with memory that does not grow with the input.

    python tests/perf/nccl_bench.py [--size-mb 1024] [--ranks 512] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from collectors.nccl.prefilter import GREP_PATTERN  # noqa: E402
from tests.data.nccl_multirank import write_job  # noqa: E402

_PARSE_ONLY = """
import sys
from pathlib import Path
from collectors.nccl import parse
from collectors.base import Event, ParseContext, Skipped
rows = events = skipped = 0
for path in sorted(Path(sys.argv[1]).rglob("*.log")):
    with open(path, "rb") as f:
        for row in parse("nccl_log", f, ParseContext(host=path.parent.name)):
            rows += 1
            events += isinstance(row, Event)
            skipped += isinstance(row, Skipped)
print(rows, events, skipped)
"""


def _run(argv: list[str], **kwargs) -> tuple[float, float, str]:
    """Wall seconds, the child's peak RSS in MiB, and its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err.decode()[-2000:]}")
    return seconds, usage.ru_maxrss / 1024, out.decode()


def _layout(work: Path, name: str, args: argparse.Namespace, per_host: bool) -> list[tuple]:
    """Generate one layout of the job's logs and time the three readers over it."""
    logs, bundle = work / name, work / f"{name}.duckdb"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    started = time.perf_counter()
    job = write_job(logs, hosts=max(1, args.ranks // 8), gpus_per_host=8, seq=900_001, straggler=args.ranks // 3,
                    filler_bytes=(args.size_mb << 20) // args.ranks, per_host=per_host)
    files = sorted(str(p) for p in logs.rglob("*.log"))
    mb = sum(os.path.getsize(p) for p in files) / (1 << 20)
    print(f"{name}: generated {len(files)} files, {mb:.0f} MiB, in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    grep_s, grep_rss, grep_out = _run(["grep", "-cE", GREP_PATTERN, *files], env=dict(os.environ, LC_ALL="C"))
    grep_lines = sum(int(line.rsplit(":", 1)[1]) for line in grep_out.splitlines() if ":" in line)
    parse_s, parse_rss, parse_out = _run([sys.executable, "-c", _PARSE_ONLY, str(logs)], env=env, cwd=ROOT)
    rows, events, skipped = (int(x) for x in parse_out.split())
    gpuwb = ["gpuwb"] if shutil.which("gpuwb") else [sys.executable, "-m", "workbench.cli"]
    ingest_s, ingest_rss, _ = _run([*gpuwb, "ingest", "-q", str(bundle), str(logs)], env=env, cwd=ROOT)
    _, _, found = _run([*gpuwb, "timeline", str(bundle), "--kind", "straggler_rank", "--json"], env=env, cwd=ROOT)
    stragglers = [json.loads(line) for line in found.splitlines() if line.strip()]
    ok = [(s["rank"], s["host"], s["gpu"]) for s in stragglers] == [
        (job.straggler, job.host_of(job.straggler), job.bus_of(job.straggler))]
    label = f"{len(files)} files"
    return [(f"grep -cE, same selection ({label})", grep_s, mb, grep_rss, f"{grep_lines} lines"),
            (f"nccl parser only ({label})", parse_s, mb, parse_rss, f"{rows} rows, {events} events, {skipped} skipped"),
            (f"gpuwb ingest ({label})", ingest_s, mb, ingest_rss,
             f"straggler {'found' if ok else 'WRONG: ' + repr(stragglers)[:200]}")], ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256, help="total size of the generated logs (default 256)")
    parser.add_argument("--ranks", type=int, default=512, help="ranks, 8 per host (default 512)")
    parser.add_argument("--dir", help="work folder (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the generated logs and bundles")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="gpuwb-nccl-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        table, all_ok = [], True
        for name, per_host in (("per-node", True), ("per-rank", False)):
            rows, ok = _layout(work, name, args, per_host)
            table += rows
            all_ok &= ok
        print()
        print(f"{args.ranks} ranks on {max(1, args.ranks // 8)} hosts, {args.size_mb} MiB of logs per layout "
              "(per-node: srun --label output, 8 ranks interleaved; per-rank: one file per rank)")
        print(f"{'reader':<44}{'seconds':>9}{'MB/s':>9}{'peak RSS MiB':>14}  result")
        for name, secs, mb, rss, result in table:
            print(f"{name:<44}{secs:>9.2f}{mb / secs:>9.1f}{rss:>14.0f}  {result}")
        return 0 if all_ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
