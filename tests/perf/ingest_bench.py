"""Ingest throughput of a large kernel log, against the tools a responder would otherwise reach for.

Generates a kern.log-style file (syslog prefix + the kernel's own seconds stamp; mostly benign
lines, with Xid, AER, NVLink, link, NFS, OOM and hung-task lines sprinkled in), then times from
one run: ``gpuwb ingest`` (MB/s and its peak RSS), ``grep -cE`` over the same keywords the
collector's prefilter uses, ``sha256sum``, and ``lnav -n`` (Debian's lnav indexing the file
headless). It also times the two halves of an ingest in-process: storing the raw bytes in the
bundle, and the kernel parser alone, so a slow run says which half to blame.

    python tests/perf/ingest_bench.py                 # 1 GiB
    python tests/perf/ingest_bench.py --size-mb 200   # quicker
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
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BENIGN = [
    'audit: type=1400 audit({t}.{ms}:{n}): apparmor="DENIED" operation="open" profile="snap.lxd" '
    'name="/proc/{n}/mounts" pid={n} comm="lxd" requested_mask="r" denied_mask="r" fsuid=0 ouid=0',
    "docker0: port {p}(veth{h}) entered blocking state",
    "docker0: port {p}(veth{h}) entered forwarding state",
    "device veth{h} entered promiscuous mode",
    "eth0: renamed from veth{h}",
    "EXT4-fs (nvme0n1p{p}): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "[UFW BLOCK] IN=eno1 OUT= MAC=0c:42:a1:{p:02x}:00:01 SRC=10.{p}.{q}.{r} DST=10.0.0.5 LEN=60 TOS=0x00 "
    "PREC=0x00 TTL=64 ID={n} DF PROTO=TCP SPT={n} DPT=22 WINDOW=64240 RES=0x00 SYN URGP=0",
    "usb 1-{p}: new high-speed USB device number {q} using xhci_hcd",
    "perf: interrupt took too long (2504 > 2500), lowering kernel.perf_event_max_sample_rate to 79750",
    "TCP: request_sock_TCP: Possible SYN flooding on port 8080. Sending cookies.  Check SNMP counters.",
    "systemd-journald[{n}]: Data hash table of /var/log/journal/system.journal has a fill level at 75.0 (8533 of "
    "11377 items, 6553600 file size, 767 bytes per hash table item), suggesting rotation.",
    "nvme nvme0: I/O {n} QID {p} timeout, completion polled",
    "kauditd_printk_skb: {p} callbacks suppressed",
    "IPVS: rr: TCP 10.96.{p}.{q}:443 - no destination available",
    "cgroup: fork rejected by pids controller in /kubepods.slice/kubepods-burstable.slice",
    "Out of date microcode? x86/split lock detection: #AC: python/{n} took a split_lock trap at address: 0x{h}",
]
EVENTS = [
    "NVRM: Xid (PCI:0000:{p:02x}:00): 79, pid=0, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:{p:02x}:00): 13, pid={n}, name=python, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): "
    "Out Of Range Address",
    "NVRM: Xid (PCI:0000:{p:02x}:00): 94, pid={n}, name=python, Contained: SM (0x1). RST: No, D-RST: No",
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
    "0x00000000 0x00100000 0x00000004)",
    "pcieport 0000:00:01.1: AER: Corrected error received: 0000:{p:02x}:00.0",
    "pcieport 0000:00:01.1: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Receiver ID)",
    "mlx5_core 0000:{p:02x}:00.0 ibp{q}s0: Link down",
    "mlx5_core 0000:{p:02x}:00.0 ibp{q}s0: Link up",
    "nfs: server fs{p} not responding, still trying",
    "Out of memory: Killed process {n} (python) total-vm:49978204kB, anon-rss:12918388kB, file-rss:68668kB, "
    "shmem-rss:53352kB, UID:1000 pgtables:49772kB oom_score_adj:0",
    "INFO: task python:{n} blocked for more than 120 seconds.",
    "nvidia-nvswitch{p}: SXid (PCI:0000:0{q}:00.0): 12028, Non-fatal, Link {r} egress non-posted PRIV error (First)",
]
EVENT_RATE = 0.005


def generate(path: Path, size_mb: int, seed: int = 7) -> int:
    """A kern.log of about ``size_mb`` MiB; returns the number of lines."""
    rng = random.Random(seed)
    target = size_mb << 20
    bodies = []
    for _ in range(20000):
        src = rng.choice(EVENTS) if rng.random() < EVENT_RATE else rng.choice(BENIGN)
        bodies.append(src.format(t=rng.randint(10 ** 9, 2 * 10 ** 9), ms=rng.randint(0, 999),
                                 n=rng.randint(1000, 999999), h=f"{rng.getrandbits(32):08x}",
                                 p=rng.randint(1, 250), q=rng.randint(1, 9), r=rng.randint(1, 250)))
    start = datetime(2025, 3, 1, 8, 0, 0)
    written = lines = 0
    secs = 100.0
    with open(path, "w", buffering=8 << 20) as out:
        while written < target:
            batch = []
            stamp = (start + timedelta(seconds=int(secs))).strftime("%b %d %H:%M:%S")
            for _ in range(2000):
                secs += rng.random() * 0.002
                batch.append(f"{stamp} gpu-node-017 kernel: [{secs:12.6f}] {bodies[rng.randrange(20000)]}\n")
            chunk = "".join(batch)
            out.write(chunk)
            written += len(chunk)
            lines += len(batch)
    return lines


def timed(argv: list[str], **kwargs) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) of that child alone, and its stdout."""
    began = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - began
    if proc.returncode != 0:
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{argv[0]} failed ({proc.returncode}): {err[-500:]}")
    return elapsed, usage.ru_maxrss, out.decode(errors="replace")


def grep_pattern() -> str:
    from collectors.kernel import KEYWORDS

    return "|".join(re.sub(r"([][.\\^$*+?(){}|/])", r"\\\1", k.decode()) for k in KEYWORDS)


def store_only(path: Path, tmp: Path) -> float:
    from workbench.bundle import Bundle

    began = time.perf_counter()
    with Bundle.create(tmp / "store-only.duckdb") as bundle, open(path, "rb") as f:
        bundle.add_artifact(f, kind="syslog", source=str(path))
    return time.perf_counter() - began


def parse_only(path: Path) -> tuple[float, int]:
    from collectors import kernel
    from collectors.base import Event, ParseContext

    began = time.perf_counter()
    ctx = ParseContext(host="gpu-node-017", reference_time=datetime(2025, 3, 2))
    with open(path, "rb") as f:
        events = sum(1 for row in kernel.parse("syslog", f, ctx) if isinstance(row, Event))
    return time.perf_counter() - began, events


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="size of the generated log (default 1024)")
    parser.add_argument("--keep", metavar="DIR", help="generate into DIR and keep the file for the next run")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the in-process store/parse timings")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="gpuwb-bench-"))
    work = Path(args.keep) if args.keep else tmp
    work.mkdir(parents=True, exist_ok=True)
    log = work / f"kern-{args.size_mb}m.log"
    try:
        if not log.exists():
            began = time.perf_counter()
            generate(log, args.size_mb)
            print(f"generated {log} in {time.perf_counter() - began:.1f} s", file=sys.stderr)
        size_mb = log.stat().st_size / 1e6
        rows: list[tuple[str, float, int | None, str]] = []

        bundle = tmp / "bench.duckdb"
        secs, rss, out = timed([sys.executable, "-m", "workbench.cli", "ingest", str(bundle), str(log)], cwd=ROOT)
        events = re.search(r"(\d+) events", out)
        rows.append(("gpuwb ingest", secs, rss, f"{events.group(1) if events else '?'} events"))

        secs, rss, out = timed(["grep", "-cE", grep_pattern(), str(log)])
        rows.append(("grep -cE (same keywords)", secs, rss, f"{out.strip()} matching lines"))
        secs, rss, _ = timed(["sha256sum", str(log)])
        rows.append(("sha256sum", secs, rss, ""))
        if shutil.which("lnav"):
            secs, rss, out = timed(["lnav", "-n", "-c", ";SELECT count(*) FROM all_logs", str(log)],
                                   env={**os.environ, "HOME": str(tmp)})
            count = out.split()[-1] if out.split() else "?"
            rows.append(("lnav -n (index + count)", secs, rss, f"{count} log lines"))
        if not args.no_breakdown:
            rows.append(("  part: store raw bytes", store_only(log, tmp), None, "Bundle.add_artifact, in-process"))
            secs, n = parse_only(log)
            rows.append(("  part: kernel parser", secs, None, f"{n} events, no bundle"))

        ours = rows[0][1]
        print(f"\nkernel-log ingest benchmark: {size_mb:,.0f} MB, {os.cpu_count()} CPUs\n")
        print(f"{'what':<28} {'seconds':>8} {'MB/s':>8} {'peak RSS':>10} {'speed/gpuwb':>11}  note")
        for name, secs, rss, note in rows:
            ratio = f"{ours / secs:10.2f}x" if not name.startswith("  part") else ""
            rss_text = f"{rss / 1024:7.0f} MB" if rss is not None else ""
            print(f"{name:<28} {secs:8.2f} {size_mb / secs:8.1f} {rss_text:>10} {ratio:>11}  {note}")
        print("\nspeed/gpuwb: the tool's MB/s over gpuwb ingest's (below 1: gpuwb ingest is faster)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
