"""What ``gpuwb record`` costs a node: CPU % of one core and peak RSS over N minutes, 8 replayed GPUs.

The recorder runs as it does in production (its own process, the NVML sampler in a child, a 1 s poll)
but NVML is the recorded 8x A100 node of ``tests/data/nvml/replay_8xa100_nvlink.json`` replayed call
by call (the same semantics as ``tests/collectors/test_nvml.FakeNvml``, kept small here so that the
sampler child does not load pytest and DuckDB and look bigger than it is). Meanwhile a kernel log gets
a line every 2 s and a trainer log two lines a second. Baselines measured in the same run: ``tail -F``
on the same two files, and an idle Python interpreter.

    python tests/perf/record_bench.py [--minutes 10] [--nvml-interval 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "tests" / "data" / "nvml" / "replay_8xa100_nvlink.json"
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def serve(config_json: str) -> int:
    """The recorder under test, with NVML replayed (this is the process being measured)."""
    sys.path.insert(0, str(ROOT))
    from tests.nvml_replay import FakeNvml
    from workbench.capture.recorder.config import RecorderConfig
    from workbench.capture.recorder.daemon import Recorder

    recording = {**json.loads(RECORDING.read_text()), "events": []}  # steady state: no Xid to freeze on
    return Recorder(RecorderConfig.from_json(config_json), nvml_loader=lambda: FakeNvml(recording)).run()


# -- measuring ---------------------------------------------------------------------------------

def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _tree(pid: int) -> list[int]:
    tree = _children()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += tree.get(p, [])
    return found


def _cpu_and_rss(pid: int) -> tuple[float, int]:
    """(CPU seconds of the process and its reaped children, RSS bytes); (0, 0) once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError):
        return 0.0, 0
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return (utime + stime + cutime + cstime) / TICKS, rss


class Probe:
    """CPU time and peak RSS of one process, and of it with its descendants."""

    def __init__(self, name: str, pid: int) -> None:
        self.name, self.pid = name, pid
        self.cpu0 = self.cpu = self.tree_cpu = 0.0
        self.peak = self.tree_peak = 0
        self.tree_cpu0: float | None = None
        self.t0 = time.monotonic()
        self.cpu0 = _cpu_and_rss(pid)[0]
        self.seen: dict[int, float] = {}
        self.seen0: dict[int, float] = {}

    def sample(self) -> None:
        cpu, rss = _cpu_and_rss(self.pid)
        if cpu:
            self.cpu = cpu
        self.peak = max(self.peak, rss)
        total = 0
        for p in _tree(self.pid):
            c, r = _cpu_and_rss(p)
            total += r
            if p != self.pid and c:
                self.seen0.setdefault(p, c)
                self.seen[p] = c
        self.tree_peak = max(self.tree_peak, total)

    def row(self, wall: float) -> list[str]:
        own = (self.cpu - self.cpu0) / wall * 100
        tree = own + sum(self.seen[p] - self.seen0[p] for p in self.seen) / wall * 100
        return [self.name, f"{own:.2f}", f"{tree:.2f}", f"{self.peak / (1 << 20):.1f}",
                f"{self.tree_peak / (1 << 20):.1f}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--nvml-interval", type=float, default=10.0)
    parser.add_argument("--serve", metavar="CONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    sys.path.insert(0, str(ROOT))
    from workbench.capture.recorder.config import RecorderConfig
    from workbench.capture.recorder.ring import read_ring
    from workbench.table import format_table

    with tempfile.TemporaryDirectory(prefix="gpuwb-record-bench-") as tmp:
        kern, trainer = Path(tmp) / "kern.log", Path(tmp) / "trainer-rank0.log"
        kern.touch()
        trainer.touch()
        config = RecorderConfig(out=str(Path(tmp) / "rec"), kernel_log=str(kern), watch=[str(trainer)],
                                nvml_interval_s=args.nvml_interval, capture=False)
        procs = {
            "gpuwb record (8 replayed GPUs)": subprocess.Popen([sys.executable, __file__, "--serve", config.to_json()],
                                                               stderr=subprocess.DEVNULL),
            "baseline: tail -F same files": subprocess.Popen(["tail", "-q", "-F", str(kern), str(trainer)],
                                                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
            "baseline: idle python": subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1e6)"]),
        }
        try:
            time.sleep(3)  # start-up (imports) is not the steady state being measured
            probes = [Probe(name, p.pid) for name, p in procs.items()]
            began = time.monotonic()
            end = began + args.minutes * 60
            n = 0
            while time.monotonic() < end:
                with open(trainer, "a") as f:
                    f.write(f"[rank0] step {n} loss 2.{n % 1000:03d} lr 3e-4 tokens/s 412345\n")
                    f.write(f"[rank0] step {n} grad_norm 0.{n % 97:02d}\n")
                if n % 2 == 0:
                    with open(kern, "a") as f:
                        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
                        f.write(f"{stamp}.000000+00:00 node07 kernel: eno1: rx queue {n % 8} ok\n")
                for probe in probes:
                    probe.sample()
                n += 1
                time.sleep(1.0)
            wall = time.monotonic() - began
            status = json.loads((Path(config.out) / "status.json").read_text())
            records, _ = read_ring(config.ring_dir)
        finally:
            for proc in procs.values():
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    print(f"{args.minutes:g} min, NVML every {args.nvml_interval:g} s, {n} trainer seconds "
          f"({2 * n} trainer lines, {(n + 1) // 2} kernel lines)")
    print(format_table(["process", "CPU % (own)", "CPU % (with children)", "peak RSS MiB", "peak RSS MiB (tree)"],
                       [p.row(wall) for p in probes]))
    nvml_docs = sum(r.kind == "nvml" for r in records)
    print(f"ring: {status['ring']['bytes'] / (1 << 20):.2f} MiB in {status['ring']['segments']} segments, "
          f"{len(records)} records ({nvml_docs} NVML readings of {status['nvml'].get('state')} 8 GPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
