"""Live capture of the kernel log: the journal first (``journalctl -k``, this boot and the two before: after a
reboot the evidence is in the previous boot), else ``dmesg``, else /var/log/kern.log, messages or syslog;
pstore dumps of a crashed boot too. A syslog file next to a journal or dmesg that only covers this boot is
kept as ``syslog_before_boot`` (the parser keeps only its lines from before the boot)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from collectors.base import Artifact, CaptureContext

FILE_TAIL_BYTES = 128 << 20
PSTORE_DIRS = ("/var/lib/systemd/pstore", "/sys/fs/pstore")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    journal_ok, previous_boots = yield from _journal(ctx)
    dmesg_ok = False
    if not journal_ok:
        dmesg_ok = yield from _dmesg(ctx)
    if not previous_boots:
        yield from _log_files(ctx, before_boot=journal_ok or dmesg_ok)
    yield from _pstore(ctx)


def _head(art: Artifact, size: int = 64 << 10) -> str:
    if art.path is None:
        return (art.data or b"")[:size].decode("utf-8", "replace")
    try:
        with open(art.path, "rb") as f:
            return f.read(size).decode("utf-8", "replace")
    except OSError:
        return ""


def _has_entries(art: Artifact) -> bool:
    """journalctl prints ``-- No entries --`` and exits 0 when it has nothing; dmesg may print nothing."""
    return any(line.strip() and not line.startswith("-- ") for line in _head(art).splitlines())


def _reason(art: Artifact, default: str) -> str:
    err = str(art.info.get("error") or art.info.get("stderr") or "").strip()
    first = err.splitlines()[0] if err else default
    if "not permitted" in err or "denied" in err.lower():
        return f"denied: {first}"
    if art.info.get("timed_out"):
        return "timeout: " + first
    return f"unavailable: {first}"


def _journal(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("journalctl"):
        ctx.missing("journalctl -k", "unavailable: journalctl not installed")
        return False, False
    since = [f"--since=@{int(ctx.since.timestamp())}"] if ctx.since else []
    art = None
    fmt = "short-iso-precise"
    for fmt in ("short-iso-precise", "short-iso"):  # short-iso-precise needs systemd 234
        art = ctx.run(["journalctl", "-k", "--no-pager", "-o", fmt, *since], kind="journal", timeout=8)
        if _has_entries(art) or art.info.get("exit_code") == 0:
            break
    if art is None or not _has_entries(art):
        ctx.missing("journalctl -k", _reason(art, "no kernel messages in the journal") if art is not None
                    else "unavailable")
        return False, False
    yield art
    boots = ctx.run(["journalctl", "--list-boots", "--no-pager", "-q"], kind="journal_boots", timeout=4)
    count = sum(1 for line in _head(boots).splitlines() if line.strip() and not line.startswith(("IDX", "--")))
    for offset in range(1, min(count, 3)):
        previous = ctx.run(["journalctl", "-k", "--no-pager", "-o", fmt, "-b", f"-{offset}", *since], kind="journal",
                           timeout=5)
        if _has_entries(previous):
            yield previous
    return True, count > 1


def _dmesg(ctx: CaptureContext) -> Iterator[Artifact]:
    if not ctx.which("dmesg"):
        ctx.missing("dmesg", "unavailable: dmesg not installed")
        return False
    art = ctx.run(["dmesg", "--time-format", "iso"], kind="dmesg_iso", timeout=5)
    if not _has_entries(art):  # util-linux before 2.27 has no --time-format: raw seconds since boot
        art = ctx.run(["dmesg"], kind="dmesg", timeout=5)
    if _has_entries(art):
        yield art
        return True
    ctx.missing("dmesg", _reason(art, "empty kernel ring buffer"))
    return False


def _log_files(ctx: CaptureContext, before_boot: bool) -> Iterator[Artifact]:
    """The first of kern.log, messages, syslog (they repeat each other); the tail of a big one."""
    kind = "syslog_before_boot" if before_boot else "syslog"
    for path in ("/var/log/kern.log", "/var/log/messages", "/var/log/syslog"):
        if not os.path.exists(path):
            continue
        art = ctx.read_file(path, kind=kind, max_bytes=FILE_TAIL_BYTES, tail=True)
        if art is not None:
            yield art
            return
    if not before_boot:
        ctx.missing("/var/log/kern.log, messages, syslog", "unavailable: no kernel log file")


def _pstore(ctx: CaptureContext) -> Iterator[Artifact]:
    """Crash dumps the kernel left in persistent storage; absent on most hosts, which is fine."""
    found = 0
    for root in PSTORE_DIRS:
        try:
            walk = sorted(os.walk(root))
        except OSError:
            continue
        for dirpath, _, files in walk:
            for fname in sorted(files):
                if found >= 64:
                    return
                art = ctx.read_file(os.path.join(dirpath, fname), kind="pstore", max_bytes=16 << 20)
                if art is not None:
                    found += 1
                    yield art
