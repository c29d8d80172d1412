"""Line mixes of the two kernel logs the ingest bench reads, written deterministically from a seed.

The quiet log is a kern.log (syslog prefix + the kernel's own seconds stamp) whose benign lines
mostly miss the collector's keywords. The noisy log is ``dmesg -T`` output of a Kubernetes GPU
node: mlx5 firmware-tracer lines, veth interfaces becoming ready and cni0 ports forwarding on every
pod start, nvidia-uvm, audit and systemd lines, with a few Xid, AER and OOM lines. Its benign lines
hit the keywords (``mlx5_``, ``link becomes ready``, ``nvidia``), so it measures the per-line path
that the quiet log never reaches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

QUIET_BENIGN = [
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
QUIET_EVENTS = [
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
QUIET_EVENT_RATE = 0.005

NOISY_BENIGN = [
    "mlx5_core 0000:{b}:00.0: mlx5_fw_tracer_handle_traces:720:(pid {p}): FW tracer event",
    "IPv6: ADDRCONF(NETDEV_CHANGE): veth{p}: link becomes ready",
    "cni0: port {n}(veth{p}) entered forwarding state",
    "EXT4-fs (nvme0n1p{n}): mounted filesystem with ordered data mode. Quota mode: none.",
    'audit: type=1400 audit({p}.{n}:{p}): apparmor="STATUS" operation="profile_replace" '
    'name="cri-containerd.apparmor.d" pid={p}',
    "nvidia-uvm: Loaded the UVM driver, major device number {n}.",
    "systemd[1]: Started Session {p} of User root.",
]
NOISY_EVENTS = [
    "NVRM: Xid (PCI:0000:{b}:00): 13, pid={p}, name=python3, Graphics SM Warp Exception on (GPC 1, TPC 2, SM 0): "
    "Out Of Range Address",
    "NVRM: Xid (PCI:0000:{b}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "pcieport 0000:{b}:01.0: AER: Corrected error received: 0000:{b}:00.0",
    "NVRM: Xid (PCI:0000:{b}:00): 63, pid={p}, Row Remapper: New row marked for remapping, reset gpu to activate.",
    "Out of memory: Killed process {p} (python3) total-vm:123456789kB, anon-rss:98765432kB, file-rss:0kB, "
    "shmem-rss:0kB, UID:1000 pgtables:200000kB oom_score_adj:0",
]
NOISY_EVENT_RATE = 0.002
NOISY_BUSES = ("1b", "3b", "5d", "9b", "bb", "cb", "db")


def quiet_lines(seed: int = 7) -> Iterator[str]:
    """kern.log lines without end: a syslog stamp per 2000 lines, kernel seconds rising on each."""
    rng = random.Random(seed)
    bodies = []
    for _ in range(20000):
        src = rng.choice(QUIET_EVENTS) if rng.random() < QUIET_EVENT_RATE else rng.choice(QUIET_BENIGN)
        bodies.append(src.format(t=rng.randint(10 ** 9, 2 * 10 ** 9), ms=rng.randint(0, 999),
                                 n=rng.randint(1000, 999999), h=f"{rng.getrandbits(32):08x}",
                                 p=rng.randint(1, 250), q=rng.randint(1, 9), r=rng.randint(1, 250)))
    start = datetime(2025, 3, 1, 8, 0, 0)
    secs = 100.0
    while True:
        stamp = (start + timedelta(seconds=int(secs))).strftime("%b %d %H:%M:%S")
        for _ in range(2000):
            secs += rng.random() * 0.002
            yield f"{stamp} gpu-node-017 kernel: [{secs:12.6f}] {bodies[rng.randrange(20000)]}\n"


def noisy_lines(seed: int = 7) -> Iterator[str]:
    """dmesg -T lines without end, 1-400 ms apart."""
    rng = random.Random(seed)
    when = datetime(2026, 11, 20, 3, 0, 0)
    while True:
        when += timedelta(milliseconds=rng.randint(1, 400))
        pool = NOISY_EVENTS if rng.random() < NOISY_EVENT_RATE else NOISY_BENIGN
        msg = rng.choice(pool).format(b=rng.choice(NOISY_BUSES), p=rng.randint(100, 999999), n=rng.randint(0, 64))
        yield f"[{when.strftime('%a %b %d %H:%M:%S %Y')}] {msg}\n"


MIXES = {"quiet": quiet_lines, "noisy": noisy_lines}


def write_log(path: Path, mix: str, size_bytes: int, seed: int = 7) -> int:
    """Write about ``size_bytes`` of the named mix to ``path``; returns the number of lines."""
    written = lines = 0
    batch: list[str] = []
    with open(path, "w", buffering=8 << 20) as out:
        for line in MIXES[mix](seed):
            batch.append(line)
            written += len(line)
            if len(batch) == 4096 or written >= size_bytes:
                out.write("".join(batch))
                lines += len(batch)
                batch.clear()
                if written >= size_bytes:
                    break
    return lines


def sample(mix: str, count: int, seed: int = 7) -> str:
    """The first ``count`` lines of a mix, for tests."""
    source = MIXES[mix](seed)
    return "".join(next(source) for _ in range(count))
