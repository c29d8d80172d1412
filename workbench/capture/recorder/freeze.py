"""Freezing one incident into a sealed bundle, in its own process
(``python -m workbench.capture.recorder.freeze SPEC``).

Three steps, each leaving a valid sealed bundle at the final path (each is written to a copy and
renamed over it, so a reader never sees a half-written bundle nor finds it locked):

1. the pre-trigger window: the ring's raw lines as artifacts, ingested through the normal parsers so
   the timeline has events; NVML samples as one ``gpuwb.nvml/1`` document; Prometheus pages;
2. after ``--after``: what the recorder kept seeing meanwhile, added the same way;
3. the normal one-shot ``gpuwb capture`` for everything the ring does not hold (inventory, PCI,
   Slurm, ...), merged in; when it cannot run, the coverage table says why.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from collectors.framework.redact import redact_bytes
from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.ring import RingRecord, read_ring, records_by_source
from workbench.ingest.merge import merge_bundles
from workbench.ingest.session import STORED, ingest_paths
from workbench.store.bundle import Bundle
from workbench.times import iso

SETTLE_S = 2.0
"""Extra wait after ``--after`` so that the recorder's last poll of the window is on disk."""
HOST_KERNEL_SOURCES = ("kernel:journal", "kernel:kmsg")
EX_SOFTWARE = 70
CAPTURE_STOP_GRACE_S = 30.0
"""How long a capture stopped at its timeout gets to kill what its collectors started and end."""


def _epoch_iso(epoch: float) -> str:
    """A recorder clock reading (epoch seconds) as the capture meta spells it: seconds, ``+00:00``."""
    return iso(_utc(epoch), "seconds", z=False)


def _utc(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _file_name(source: str, n: int, suffix: str) -> str:
    return f"{n:02d}-" + re.sub(r"[^A-Za-z0-9._-]+", "_", source).strip("_")[:80] + suffix


def stage(records: list[RingRecord], folder: Path) -> dict[str, Any]:
    """Write ``records`` as evidence files in ``folder``: one log per followed source (its raw lines,
    verbatim but for secrets), one NVML document, one file per Prometheus page. Returns counts and the
    notes. The ring is a capture taken early, so its secrets are masked as ``gpuwb capture`` masks them
    (a training log that prints its environment, a URL with a token in a scraped page)."""
    folder.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"lines": 0, "nvml_samples": 0, "prom_pages": 0, "notes": [], "sources": []}
    for n, (source, kind, group) in enumerate(records_by_source(records)):
        if kind == "line":
            (folder / _file_name(source, n, ".log")).write_bytes(
                _redacted("".join(r.text + "\n" for r in group)))
            summary["lines"] += len(group)
            summary["sources"].append(f"{source}: {len(group)} lines")
        elif kind == "nvml":
            doc = merge_nvml([json.loads(r.text) for r in group])
            if doc is not None:
                (folder / _file_name(source, n, ".json")).write_text(json.dumps(doc, indent=1))
                summary["nvml_samples"] += len(doc["samples"])
        elif kind == "prom":
            url = source.removeprefix("prom:")
            instance = urllib.parse.urlsplit(url).netloc or "metrics"
            for record in group:
                when = _utc(record.t)
                stamp = when.strftime("%Y%m%dT%H%M%S.") + f"{when.microsecond // 1000:03d}Z"
                # the header a live `gpuwb capture --prom` scrape starts with: the page's time and instance
                mark = (f"# gpuwb-scrape url={urllib.parse.quote(url, safe=':/?&=%')} "
                        f"time={iso(when, 'microseconds')}\n")
                (folder / _file_name(f"{instance}-{stamp}", n, ".prom")).write_bytes(_redacted(mark + record.text))
            summary["prom_pages"] += len(group)
        elif kind == "note":
            summary["notes"] += [_redacted(f"{_epoch_iso(r.t)} {r.text}").decode("utf-8", "surrogateescape")
                                 for r in group]
    summary["sources"] = [_redacted(line).decode("utf-8", "surrogateescape") for line in summary["sources"]]
    return summary


def _redacted(text: str) -> bytes:
    return redact_bytes(text.encode("utf-8", "surrogateescape"))[0]


def merge_nvml(docs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One ``gpuwb.nvml/1`` document from the sampler's one-reading documents: the latest inventory,
    every reading and every Xid event, in order."""
    docs = [d for d in docs if isinstance(d, dict) and d.get("samples") is not None]
    if not docs:
        return None
    doc = dict(docs[-1])
    doc["started_at"] = docs[0].get("started_at")
    doc["samples"] = [s for d in docs for s in d.get("samples", [])]
    doc["events"] = [e for d in docs for e in d.get("events", [])]
    doc["errors"] = [e for d in docs for e in d.get("errors", [])]
    return doc


def boot_time() -> datetime | None:
    """This host's boot time, for /dev/kmsg and dmesg lines stamped in seconds since boot: the ring
    was recorded live here, so the running kernel's boot is theirs."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return datetime.fromtimestamp(int(line.split()[1]), tz=timezone.utc)
    except (OSError, ValueError):
        return None
    return None


def amend(path: Path, change: Callable[[Bundle], None]) -> None:
    """Apply ``change`` to a copy of the bundle and rename it over the original."""
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    shutil.copyfile(path, partial)
    os.chmod(partial, 0o600)
    try:
        with Bundle.open(partial, write=True) as bundle:
            change(bundle)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
        Path(str(partial) + ".wal").unlink(missing_ok=True)


def add_window(bundle: Bundle, records: list[RingRecord], *, host: str, name: str, since: float, until: float,
               extra: dict[str, Any]) -> None:
    """Ingest one window of the ring into ``bundle`` and record it in the coverage table; sealed. The
    staged files are named ``ring/…`` or ``ring-after/…`` after the window, not after a temporary folder."""
    label = "ring" if name == "recorder" else "ring-after"
    with tempfile.TemporaryDirectory(prefix="gpuwb-freeze-") as tmp:
        summary = stage(records, Path(tmp) / label)
        here = os.getcwd()
        os.chdir(tmp)
        try:
            results = (ingest_paths(bundle, [label], host=host, boot_time=boot_time())
                       if any((Path(tmp) / label).iterdir()) else [])
        finally:
            os.chdir(here)
    stored = [r for r in results if r.status in STORED]
    what = (f"{summary['lines']} lines, {summary['nvml_samples']} NVML readings, {summary['prom_pages']} "
            f"Prometheus pages from {_epoch_iso(since)} to {_epoch_iso(until)}")
    status = "ok" if stored or not records else "partial"
    bundle.record_capture(name, host=host, status=status, reason=what if status == "ok" else
                          f"{what}; nothing could be stored", started_at=_utc(since),
                          duration_s=round(until - since, 3), artifacts=len(stored),
                          detail={**extra, "sources": summary["sources"], "notes": summary["notes"][-50:]})
    bundle.seal()


def run_capture(config: RecorderConfig, spec: dict[str, Any], since: float, folder: Path) -> tuple[Path | None, str]:
    """The normal one-shot capture in its own process. (bundle or None, why not)."""
    out = folder / "capture.duckdb"
    argv = [sys.executable, "-m", "workbench.cli", "capture", "-o", str(out), "--since", _epoch_iso(since),
            "--title", f"capture after {spec['trigger']['reason']}"]
    if spec.get("kernel_source") in HOST_KERNEL_SOURCES:
        argv += ["--skip", "kernel"]  # the ring already holds this host's kernel log for the window
    for pattern in config.watch:
        argv += ["--nccl-log", pattern]
    if config.prom:
        argv += ["--prom", config.prom]
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return None, f"error: gpuwb capture could not start: {exc.strerror or exc}"
    try:
        _, err = proc.communicate(timeout=config.capture_timeout_s)
    except subprocess.TimeoutExpired:
        _stop_capture(proc)
        return None, f"timeout: gpuwb capture did not finish within {config.capture_timeout_s:g} s"
    if not out.exists():
        last = (err or b"").decode("utf-8", "replace").strip().splitlines()
        return None, f"error: gpuwb capture exited with {proc.returncode}: {last[-1] if last else 'no message'}"
    return out, ""


def _stop_capture(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM first: the capture then kills every process its collectors started, which run in sessions
    of their own where no process-group kill reaches them. SIGKILL only if it has not ended after
    CAPTURE_STOP_GRACE_S; every wait is bounded (a survivor holding the stderr pipe must not hold us)."""
    proc.terminate()
    try:
        proc.communicate(timeout=CAPTURE_STOP_GRACE_S)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=5)


def freeze(spec: dict[str, Any]) -> Path:
    config = RecorderConfig(**spec["config"])
    trigger = spec["trigger"]
    host = spec["host"]
    path = Path(spec["bundle"])
    at = round(float(trigger["at"]), 6)  # as the ring stores times
    since = at - config.window_s
    extra = {"trigger": trigger}
    records, torn = read_ring(config.ring_dir, since=since, until=at)
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    title = f"{trigger['reason']} on {host} (gpuwb record)"
    try:
        with Bundle.create(partial, title=title, meta={"captured_on": host, "capture_started": _epoch_iso(at),
                                                       "since": _epoch_iso(since)}) as bundle:
            os.chmod(partial, 0o600)
            add_window(bundle, records, host=host, name="recorder", since=since, until=at,
                       extra={**extra, "unreadable_ring_lines": torn})
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
        Path(str(partial) + ".wal").unlink(missing_ok=True)

    time.sleep(max(0.0, at + config.after_s + SETTLE_S - time.time()))
    until = at + config.after_s
    after, torn = read_ring(config.ring_dir, since=at, until=until)
    after = [r for r in after if r.t > at]
    amend(path, lambda b: add_window(b, after, host=host, name="recorder-after", since=at, until=until,
                                     extra={**extra, "unreadable_ring_lines": torn}))

    if not config.capture:
        amend(path, lambda b: _not_captured(b, host, "skipped: --no-capture given"))
        return path
    with tempfile.TemporaryDirectory(prefix="gpuwb-freeze-capture-", dir=path.parent) as tmp:
        captured, why = run_capture(config, spec, since, Path(tmp))
        if captured is None:
            amend(path, lambda b: _not_captured(b, host, why))
            return path
        merged = Path(tmp) / "merged.duckdb"
        merge_bundles(merged, [path, captured], title=title)
        os.chmod(merged, 0o600)
        os.replace(merged, path)
    return path


def _not_captured(bundle: Bundle, host: str, why: str) -> None:
    status, _, reason = why.partition(": ")
    bundle.record_capture("capture", host=host, status=status, reason=reason, started_at=datetime.now(timezone.utc))
    bundle.seal()


def main(argv: list[str]) -> int:
    spec_path = Path(argv[0])
    spec = json.loads(spec_path.read_text())
    try:
        path = freeze(spec)
        print(f"gpuwb record: bundle {path} sealed", file=sys.stderr, flush=True)
    except Exception as exc:  # the recorder goes on; the one line says what this incident lost
        print(f"gpuwb record: freezing {spec.get('bundle')} failed: {type(exc).__name__}: {exc}", file=sys.stderr,
              flush=True)
        return EX_SOFTWARE
    finally:
        spec_path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
