"""Throughput of the network/storage/change parsers against the line-reading floor, same run.

The floor is ``ParseContext.lines`` alone (decode + cut giant lines), which every parser pays;
each row shows how far above it a parser is. Inputs are generated in the real layouts:
dpkg.log, a long training log with a checkpoint failure at its end, ``iostat -x`` reports,
``ethtool -S`` of a ConnectX port, ``/sys/class/infiniband`` samples.

    python tests/perf/network_storage_bench.py            # 200k lines per input
    python tests/perf/network_storage_bench.py --size 2000000
"""

from __future__ import annotations

import argparse
import io
import time
from datetime import datetime, timezone
from types import ModuleType

from collectors import changes, ethtool, infiniband, storage
from collectors.base import ParseContext


def dpkg_log(lines: int) -> bytes:
    out = []
    for i in range(lines // 4):
        pkg = f"lib{i % 5000}-x:amd64"
        out += [f"2026-11-28 10:{i // 3600 % 60:02d}:{i % 60:02d} upgrade {pkg} 1.{i}-1 1.{i + 1}-1",
                f"2026-11-28 10:{i // 3600 % 60:02d}:{i % 60:02d} status half-configured {pkg} 1.{i + 1}-1",
                f"2026-11-28 10:{i // 3600 % 60:02d}:{i % 60:02d} status installed {pkg} 1.{i + 1}-1",
                f"2026-11-28 10:{i // 3600 % 60:02d}:{i % 60:02d} trigproc man-db:amd64 2.10.2-1 <none>"]
    return ("\n".join(out) + "\n").encode()


def training_log(lines: int) -> bytes:
    out = [f"[2026-11-28 10:{i // 60 % 60:02d}:{i % 60:02d},{i % 1000:03d}] [INFO] [logging.py:96:log_dist] "
           f"step={i} loss={2.5 - i * 1e-6:.5f} lr=3e-4 grad_norm=0.91 tokens/s=182344" for i in range(lines - 4)]
    out += ["Traceback (most recent call last):",
            '  File "/usr/lib/python3.10/site-packages/torch/serialization.py", line 628, in save',
            "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1059577536 vs 1059577424",
            "OSError: [Errno 28] No space left on device"]
    return ("\n".join(out) + "\n").encode()


def iostat(lines: int) -> bytes:
    header = ("Device            r/s     rkB/s   rrqm/s  %rrqm r_await rareq-sz     w/s     wkB/s   wrqm/s  %wrqm "
              "w_await wareq-sz     d/s     dkB/s   drqm/s  %drqm d_await dareq-sz     f/s f_await  aqu-sz  %util")
    out = []
    for report in range(lines // 10):
        out.append(f"2026-11-28T10:{report // 60 % 60:02d}:{report % 60:02d}+0000")
        out.append(header)
        for dev in range(7):
            await_ms = 0.1 if report % 500 else 900.0
            out.append(f"nvme{dev}n1  13526.00 216416.00 0.00 0.00 {await_ms:.2f} 16.00 0.00 0.00 0.00 0.00 0.00 "
                       "0.00 0.00 0.00 0.00 0.00 0.00 0.00 0.00 0.00 1.40 100.00")
        out.append("")
    return ("\n".join(out) + "\n").encode()


def ethtool_stats(lines: int) -> bytes:
    out = ["NIC statistics:"]
    out += [f"     rx{i % 64}_counter_{i // 64}: {i * 7}" for i in range(lines - 1)]
    return ("\n".join(out) + "\n").encode()


def ib_sysfs(lines: int) -> bytes:
    names = ["symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards", "port_xmit_wait",
             "port_xmit_data", "port_rcv_data"]
    out = []
    per_sample = 8 * (len(names) + 2)
    for sample in range(max(1, lines // per_sample)):
        out.append(f"# ib_sysfs sample {sample + 1} at 2026-11-28T10:00:{sample % 60:02d}+00:00")
        for dev in range(8):
            base = f"/sys/class/infiniband/mlx5_{dev}/ports/1"
            out += [f"{base}/state:4: ACTIVE", f"{base}/phys_state:5: LinkUp"]
            out += [f"{base}/counters/{name}:{sample * (i + 1)}" for i, name in enumerate(names)]
    return ("\n".join(out) + "\n").encode()


CASES: list[tuple[str, ModuleType, str, object]] = [
    ("dpkg.log", changes, "dpkg_log", dpkg_log), ("training log", storage, "checkpoint_log", training_log),
    ("iostat -x", storage, "iostat", iostat), ("ethtool -S", ethtool, "ethtool", ethtool_stats),
    ("ib sysfs", infiniband, "ib_sysfs", ib_sysfs)]


def _ctx() -> ParseContext:
    return ParseContext(host="bench", mtime=datetime(2026, 11, 28, tzinfo=timezone.utc))


def measure(data: bytes, module: ModuleType | None, kind: str) -> tuple[float, int]:
    ctx = _ctx()
    start = time.perf_counter()
    if module is None:
        rows = sum(1 for _ in ctx.lines(io.BytesIO(data)))
    else:
        rows = sum(1 for _ in module.parse(kind, io.BytesIO(data), ctx))
    return time.perf_counter() - start, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000, help="lines per input (default 200000)")
    args = parser.parse_args()
    print(f"{'input':<14} {'lines':>9} {'MB':>7} {'floor s':>8} {'parse s':>8} {'x floor':>8} {'lines/s':>11} "
          f"{'rows':>9}")
    for label, module, kind, make in CASES:
        data = make(args.size)
        lines = data.count(b"\n")
        floor, _ = measure(data, None, kind)
        took, rows = measure(data, module, kind)
        print(f"{label:<14} {lines:>9} {len(data) / 1e6:>7.1f} {floor:>8.3f} {took:>8.3f} {took / floor:>8.1f} "
              f"{lines / took:>11,.0f} {rows:>9}")


if __name__ == "__main__":
    main()
