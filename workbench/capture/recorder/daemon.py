"""The long-running recorder: poll the sources, append to the ring, freeze on a trigger.

``gpuwb record`` replaces itself (``exec``, same pid) with ``python -m workbench.capture.recorder.daemon CONFIG``
so that the process that runs for months has loaded neither DuckDB nor the other sub-commands. One
loop, woken every ``poll_s`` seconds (1 s), no busy waiting; the only thread is the optional
``--metrics-port`` server, which hands out the last rendered page. A trigger starts the freeze
as a separate process (``workbench.capture.recorder.freeze``) that reads the on-disk ring itself, so
recording never stops while a bundle is written. With ``--textfile-dir`` or ``--metrics-port`` every
line read is also counted as ``gpuwb_log_events_total`` (workbench/capture/recorder/metrics.py).
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

from workbench.capture.recorder.config import RecorderConfig
from workbench.capture.recorder.followers import FileFollower, GlobFollower, host_kernel_follower
from workbench.capture.recorder.metrics import (
    TEXTFILE,
    EventCounters,
    LineEvents,
    MetricsServer,
    catalog_kinds,
    event_labels,
    load_state,
    save_state,
    write_textfile,
)
from workbench.capture.recorder.ring import Ring, RingRecord
from workbench.capture.recorder.sampler import Loader, NvmlSampler
from workbench.capture.recorder.status import write_status
from workbench.capture.recorder.triggers import (
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
        self.host = config.host or socket.gethostname()
        config.folder.mkdir(parents=True, exist_ok=True)
        config.trigger_dir.mkdir(parents=True, exist_ok=True)
        self.ring = Ring(config.ring_dir, max_bytes=config.max_disk, window_s=config.window_s)
        offsets, saved_counters = load_state(config.offsets_path)
        self.counters = EventCounters(hold_s=config.metrics_hold_s,
                                      kinds=catalog_kinds() if config.exporting else None)
        self.counters.load(saved_counters)
        self.counters.changed = bool(self.counters.series)  # written out on the first poll
        self.line_events = LineEvents(self.host)
        self.metrics_error = ""
        self._metrics_at = 0.0
        self.server: MetricsServer | None = None
        if config.textfile_dir:
            try:
                Path(config.textfile_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.metrics_error = f"textfile {config.textfile_dir}: {exc.strerror or exc}"
                log(self.metrics_error)
        if config.metrics_port is not None:
            try:
                self.server = MetricsServer(config.metrics_port)
            except OSError as exc:  # the port is taken: the textfile (if any) still goes on
                self.metrics_error = f"--metrics-port {config.metrics_port}: {exc.strerror or exc}"
                log(self.metrics_error)
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
        self._saved_counts: list[Any] = self.counters.to_json()

    # -- one poll -----------------------------------------------------------------------------
    def poll_once(self) -> list[Trigger]:
        now = round(time.time(), 6)  # as the ring stores it, so the trigger line falls inside its window
        records: list[RingRecord] = []
        triggers: list[Trigger] = []
        read: dict[str, list[str]] = {}
        if self.kernel is not None:
            for line in self.kernel.poll():
                records.append(RingRecord(now, self.kernel.source, "line", line))
                read.setdefault(self.kernel.source, []).append(line)
                if (hit := self.kernel_triggers.check(line, self.kernel.source, now)) is not None:
                    triggers.append(hit)
        for watch in self.watches:
            for source, line in watch.poll():
                records.append(RingRecord(now, source, "line", line))
                read.setdefault(source, []).append(line)
                if (hit := nccl_trigger(line, source, now)) is not None:
                    triggers.append(hit)
        if self.config.exporting:
            records += self._count(read, now)
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
            self._save_state()
        if self.config.exporting:
            self.export(now)
        return triggers

    def _count(self, read: dict[str, list[str]], now: float) -> list[RingRecord]:
        """Count the events of the lines just read; a source its parser fails on is noted, never fatal."""
        notes = []
        for source, lines in read.items():
            try:
                for host, kind, attrs in self.line_events.events(source, lines):
                    self.counters.add(event_labels(host or self.host, kind, attrs, self.counters.kinds), now=now)
            except Exception as exc:  # a parser bug must not stop the recorder: its lines stay in the ring
                note = f"metrics: {len(lines)} line(s) of {source} not counted: {type(exc).__name__}: {exc}"[:300]
                notes.append(RingRecord(now, "recorder", "note", note))
                log(note)
        return notes

    def export(self, now: float) -> None:
        """Write the counters out when they changed, when a new series' hold ended, and every
        STATUS_EVERY_S (node_exporter's node_textfile_mtime_seconds shows the recorder alive)."""
        due = self.counters.due(self._metrics_at)
        if not (self.counters.changed or (due is not None and due <= now) or now - self._metrics_at >= STATUS_EVERY_S):
            return
        self._metrics_at = now
        self.counters.changed = False
        text = self.counters.text(now)
        if self.server is not None:
            self.server.page = text.encode("utf-8")
        if self.config.textfile_dir:
            try:
                write_textfile(Path(self.config.textfile_dir), text)
                error = ""
            except OSError as exc:
                error = f"textfile {self.config.textfile_dir}: {exc.strerror or exc}"
            if error != self.metrics_error:
                log(error or f"textfile {self.config.textfile_dir}: written again")
            self.metrics_error = error

    def _scrape(self, now: float) -> RingRecord:
        url = self.config.prom or ""
        try:
            with urllib.request.urlopen(url, timeout=PROM_TIMEOUT_S) as response:
                page = response.read(16 << 20).decode("utf-8", "replace")
            return RingRecord(now, f"prom:{url}", "prom", page)
        except (OSError, ValueError) as exc:
            return RingRecord(now, "recorder", "note", f"prometheus {url}: {exc}")

    def _save_state(self) -> None:
        state: dict[str, Any] = {}
        if isinstance(self.kernel, FileFollower):
            state[self.kernel.path] = self.kernel.state()
        for watch in self.watches:
            state.update({path: f.state() for path, f in watch.files.items()})
        counts = self.counters.to_json()
        if state != self._offsets or counts != self._saved_counts:
            self._offsets, self._saved_counts = state, counts
            save_state(self.config.offsets_path, state, self.counters)

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
        proc = subprocess.Popen([sys.executable, "-m", "workbench.capture.recorder.freeze", str(spec_path)],
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

    def metrics_status(self) -> dict[str, Any]:
        if not self.config.exporting:
            return {"state": "off"}
        return {"state": "error" if self.metrics_error else "exporting", "error": self.metrics_error,
                "textfile": str(Path(self.config.textfile_dir) / TEXTFILE) if self.config.textfile_dir else None,
                "port": self.server.port if self.server is not None else None,
                "series": len(self.counters.series), "events": sum(c.count for c in self.counters.series.values()),
                "kinds": {source: kind.kind for source, kind in self.line_events.kinds.items()}}

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
            "failed": self.failed, "metrics": self.metrics_status()})

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
            + (f" (kernel log not followed: {self.kernel_error})" if self.kernel_error else "")
            + (f"; counting log events into {self.config.textfile_dir or ''}"
               f"{' and ' if self.config.textfile_dir and self.server else ''}"
               f"{f'127.0.0.1:{self.server.port}/metrics' if self.server else ''}" if self.config.exporting else ""))
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
        if self.server is not None:
            self.server.close()
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


def main(argv: list[str]) -> int:
    return Recorder(RecorderConfig.from_json(argv[0])).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
