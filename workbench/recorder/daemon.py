"""The long-running recorder: poll the sources, append to the ring, freeze on a trigger.

``gpuwb record`` replaces itself (``exec``, same pid) with ``python -m workbench.recorder.daemon CONFIG``
so that the process that runs for months has loaded neither DuckDB nor the other sub-commands. One
loop, woken every ``poll_s`` seconds (1 s): no threads, no busy waiting. A trigger starts the freeze
as a separate process (``workbench.recorder.freeze``) that reads the on-disk ring itself, so
recording never stops while a bundle is written.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from workbench.recorder.config import RecorderConfig
from workbench.recorder.followers import FileFollower, GlobFollower, host_kernel_follower
from workbench.recorder.ring import Ring, RingRecord
from workbench.recorder.sampler import Loader, NvmlSampler
from workbench.recorder.status import write_status
from workbench.recorder.triggers import (
    KernelTriggers,
    StormGate,
    Trigger,
    nccl_trigger,
    nvml_trigger,
    take_trigger_files,
)

STATUS_EVERY_S = 10.0
HEALTH_LOG_S = 600.0
PROM_TIMEOUT_S = 5.0


class Recorder:
    """The recorder's state between polls; ``run()`` is the loop."""

    def __init__(self, config: RecorderConfig, *, nvml_loader: Loader | None = None) -> None:
        self.config = config
        self.host = socket.gethostname()
        config.folder.mkdir(parents=True, exist_ok=True)
        config.trigger_dir.mkdir(parents=True, exist_ok=True)
        self.ring = Ring(config.ring_dir, max_bytes=config.max_disk, window_s=config.window_s)
        offsets = _load_json(config.offsets_path)
        self.kernel: Any = None
        self.kernel_error = ""
        if config.kernel_log:
            saved = offsets.get(config.kernel_log, {})
            self.kernel = FileFollower(config.kernel_log, f"kernel:{config.kernel_log}",
                                       inode=saved.get("inode"), offset=saved.get("offset"))
        else:
            self.kernel, self.kernel_error = host_kernel_follower()
        self.watches = [GlobFollower(pattern, offsets) for pattern in config.watch]
        self.sampler = NvmlSampler(config.nvml_interval_s, timeout_s=config.nvml_timeout_s, loader=nvml_loader,
                                   host=self.host) if config.nvml else None
        self.kernel_triggers = KernelTriggers()
        self.gate = StormGate(config.cooldown_s)
        self.freezer: subprocess.Popen[bytes] | None = None
        self.freezing_bundle = ""
        self.bundles: list[str] = []
        self.failed: list[str] = []
        self.last_trigger: Trigger | None = None
        self.started_at = time.time()
        self.stop = False
        self.usr1 = False
        self._status_at = 0.0
        self._health_at = time.time()
        self._prom_at = 0.0
        self._offsets: dict[str, Any] = {}

    # -- one poll -----------------------------------------------------------------------------
    def poll_once(self) -> list[Trigger]:
        now = round(time.time(), 6)  # as the ring stores it, so the trigger line falls inside its window
        records: list[RingRecord] = []
        triggers: list[Trigger] = []
        if self.kernel is not None:
            for line in self.kernel.poll():
                records.append(RingRecord(now, self.kernel.source, "line", line))
                if (hit := self.kernel_triggers.check(line, self.kernel.source, now)) is not None:
                    triggers.append(hit)
        for watch in self.watches:
            for source, line in watch.poll():
                records.append(RingRecord(now, source, "line", line))
                if (hit := nccl_trigger(line, source, now)) is not None:
                    triggers.append(hit)
        if self.sampler is not None:
            docs, notes = self.sampler.poll()
            records += [RingRecord(now, "nvml", "nvml", json.dumps(doc, separators=(",", ":"))) for doc in docs]
            triggers += [hit for doc in docs for event in doc.get("events", [])
                         if (hit := nvml_trigger(event, now)) is not None]
            records += [RingRecord(now, "recorder", "note", note) for note in notes]
            for note in notes:
                log(note)
        if self.config.prom and now - self._prom_at >= self.config.prom_interval_s:
            self._prom_at = now
            records.append(self._scrape(now))
        triggers += take_trigger_files(self.config.trigger_dir)
        if self.usr1:
            self.usr1 = False
            triggers.append(Trigger(now, "requested: SIGUSR1", "signal"))
        records += [RingRecord(t.at, "recorder", "note", f"trigger: {t.reason} ({t.source})") for t in triggers]
        self.ring.append(records)
        if records:
            self._save_offsets()
        return triggers

    def _scrape(self, now: float) -> RingRecord:
        url = self.config.prom or ""
        try:
            with urllib.request.urlopen(url, timeout=PROM_TIMEOUT_S) as response:
                page = response.read(16 << 20).decode("utf-8", "replace")
            return RingRecord(now, f"prom:{url}", "prom", page)
        except (OSError, ValueError) as exc:
            return RingRecord(now, "recorder", "note", f"prometheus {url}: {exc}")

    def _save_offsets(self) -> None:
        state: dict[str, Any] = {}
        if isinstance(self.kernel, FileFollower):
            state[self.kernel.path] = self.kernel.state()
        for watch in self.watches:
            state.update({path: f.state() for path, f in watch.files.items()})
        if state != self._offsets:
            self._offsets = state
            partial = self.config.offsets_path.with_suffix(".tmp")
            partial.write_text(json.dumps(state))
            os.replace(partial, self.config.offsets_path)

    # -- triggers and freezing ------------------------------------------------------------------
    def handle(self, triggers: list[Trigger]) -> None:
        if self.freezer is not None and (code := self.freezer.poll()) is not None:
            self.freezer = None
            self.gate.finished(time.time())
            if Path(self.freezing_bundle).exists():
                self.bundles.append(self.freezing_bundle)
                failed = f" (its last step failed, exit {code})" if code else ""
                log(f"bundle written: {self.freezing_bundle}{failed}")
            else:
                self.failed.append(self.freezing_bundle)
                log(f"no bundle: freezing {self.freezing_bundle} failed (exit {code}; its message is above)")
            self.write_status()
        for trigger in triggers:
            self.last_trigger = trigger
            if not self.gate.admit(trigger, freezing=self.freezer is not None):
                log(f"trigger {trigger.reason} joins the current incident ({self.gate.absorbed} so far)")
                continue
            self.freezer, self.freezing_bundle = self._start_freeze(trigger)
            log(f"trigger {trigger.reason} ({trigger.source}): freezing into {self.freezing_bundle}")
            self.write_status()

    def _start_freeze(self, trigger: Trigger) -> tuple[subprocess.Popen[bytes], str]:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(trigger.at))
        bundle = self.config.folder / f"incident-{self.host}-{stamp}.duckdb"
        n = 1
        while bundle.exists():
            n += 1
            bundle = self.config.folder / f"incident-{self.host}-{stamp}-{n}.duckdb"
        spec = {"config": json.loads(self.config.to_json()), "trigger": trigger.as_dict(), "bundle": str(bundle),
                "host": self.host, "kernel_source": getattr(self.kernel, "source", None)}
        spec_path = self.config.folder / f".freeze-{stamp}-{n}.json"
        spec_path.write_text(json.dumps(spec))
        proc = subprocess.Popen([sys.executable, "-m", "workbench.recorder.freeze", str(spec_path)],
                                stdin=subprocess.DEVNULL, start_new_session=True)
        return proc, str(bundle)

    # -- health -----------------------------------------------------------------------------------
    def sources(self) -> list[dict[str, str]]:
        found = []
        if self.kernel is not None:
            found.append({"source": self.kernel.source, "error": self.kernel.error})
        elif self.kernel_error:
            found.append({"source": "kernel", "error": f"not followed: {self.kernel_error}"})
        for watch in self.watches:
            found.append({"source": watch.source, "error": "" if watch.files else "no file matches yet"})
            found += [{"source": f.source, "error": f.error} for f in watch.files.values()]
        if self.config.prom:
            found.append({"source": f"prom:{self.config.prom}", "error": ""})
        return found

    def write_status(self) -> None:
        self._status_at = time.time()
        segments = self.ring.segments()
        write_status(self.config.status_path, {
            "pid": os.getpid(), "host": self.host, "started_at": self.started_at, "updated_at": self._status_at,
            "out": self.config.out, "sources": self.sources(),
            "ring": {"bytes": self.ring.size(), "segments": len(segments), "records": self.ring.records_written,
                     "max_bytes": self.config.max_disk, "window_s": self.config.window_s},
            "nvml": ({"state": self.sampler.state, "reason": self.sampler.reason, "samples": self.sampler.samples}
                     if self.sampler else {"state": "off", "reason": "--no-nvml"}),
            "last_trigger": self.last_trigger.as_dict() if self.last_trigger else None,
            "freezing": self.freezer is not None, "absorbed": self.gate.absorbed, "bundles": self.bundles,
            "failed": self.failed})

    def log_health(self) -> None:
        """One line to stderr (the service's journal) every few minutes: alive, how big, what is wrong."""
        self._health_at = time.time()
        broken = [f"{s['source']}: {s['error']}" for s in self.sources() if s["error"]]
        nvml = f"nvml {self.sampler.state} ({self.sampler.samples} samples)" if self.sampler else "nvml off"
        log(f"health: ring {self.ring.size() / (1 << 20):.1f} MiB, {self.ring.records_written} records, {nvml}, "
            f"{len(self.bundles)} bundle(s)" + (f"; {'; '.join(broken)}" if broken else ""))

    def run(self) -> int:
        signal.signal(signal.SIGUSR1, self._on_usr1)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        log(f"recording into {self.config.out}: " + ", ".join(s["source"] for s in self.sources())
            + (f" (kernel log not followed: {self.kernel_error})" if self.kernel_error else ""))
        self.write_status()
        try:
            while not self.stop:
                began = time.monotonic()
                self.handle(self.poll_once())
                if time.time() - self._status_at >= STATUS_EVERY_S:
                    self.write_status()
                if time.time() - self._health_at >= HEALTH_LOG_S:
                    self.log_health()
                time.sleep(max(0.05, self.config.poll_s - (time.monotonic() - began)))
        finally:
            self.close()
        return 0

    def _on_usr1(self, signum: int, frame: Any) -> None:
        self.usr1 = True

    def _on_stop(self, signum: int, frame: Any) -> None:
        self.stop = True

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
        if self.kernel is not None and hasattr(self.kernel, "close"):
            self.kernel.close()
        self.ring.close()
        self.write_status()
        log("stopped" + (f"; bundle {self.freezing_bundle} is still being written by pid {self.freezer.pid}"
                         if self.freezer is not None and self.freezer.poll() is None else ""))


def log(message: str) -> None:
    print(f"gpuwb record: {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def _load_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def main(argv: list[str]) -> int:
    return Recorder(RecorderConfig.from_json(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
