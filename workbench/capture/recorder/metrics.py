"""gpuwb's own exporter: ``gpuwb_log_events_total``, a counter of the log events the recorder reads, for
the alert rules ``gpuwb report --rules`` writes (the causes' alerts:, rules/causes/) where no exporter has the signal
(an Xid or AER line, a Slurm drain, an OOM kill, NFS not responding).

Every line the recorder follows is parsed by the same collectors and signature catalog ``gpuwb ingest``
uses (workbench/ingest/artifact_rows.py), so a line counts under the kind and labels it has in a bundle, and the
replay of workbench/prevention/alert_replay.py builds the same series from a bundle through :func:`event_labels`.

Labels are bounded (docs/alerts.md): ``instance`` is the host the event names (else the recorder's),
``kind`` one of collectors/catalog/events.yaml, ``xid`` a code of up to three digits, ``state``, ``reason`` and
``event_severity`` single words; anything else reads ``other``, and so does every value past the first
:data:`MAX_VALUES` of a label. A label set first seen shows 0 for ``hold_s`` before its count, because
Prometheus' ``increase()`` cannot see the rise of a series whose first sample is already 1.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

METRIC = "gpuwb_log_events_total"
TEXTFILE = "gpuwb.prom"
"""The file written in ``--textfile-dir``: node_exporter's textfile collector reads ``*.prom`` there."""
LABELS = ("instance", "kind", "xid", "state", "reason", "event_severity")
EVENT_LABELS = {"xid": "xid", "state": "state", "reason": "reason", "severity": "event_severity"}
"""Event attr -> label (a rule can ask for Xid 79 or state DRAIN); the event's own severity is renamed so
that the alert's ``severity`` label cannot clobber it."""
OTHER = "other"
MAX_VALUES = {"instance": 4096, "kind": 512, "xid": 1000, "state": 128, "reason": 128, "event_severity": 32}
"""Distinct values kept per label; later new values read ``other``. With the forms below this bounds the
series count whatever the logs say."""
_FORMS = {
    "instance": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}"),
    "xid": re.compile(r"[0-9]{1,3}"),
    "word": re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:+*~#@%-]{0,63}"),
}
HELP = ("Log events the gpuwb flight recorder parsed, by host and event kind "
        "(docs/events.md; labels bounded, docs/alerts.md)")


def _bounded(label: str, value: Any, kinds: frozenset[str] | None) -> str | None:
    """The value as the label may carry it: None (label left out), the value, or ``other``."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value)
    if text == "":
        return None
    if label == "kind":
        return text if kinds is None or text in kinds else OTHER
    form = _FORMS.get(label, _FORMS["word"])
    return text if form.fullmatch(text) else OTHER


def event_labels(host: str | None, kind: str, attrs: dict[str, Any] | None,
                 kinds: frozenset[str] | None = None) -> tuple[tuple[str, str], ...]:
    """The counter's labels for one event, sorted: ``instance`` (host), ``kind`` and the attrs of
    :data:`EVENT_LABELS` the event has, each reduced to its bounded form. ``kinds``: the kinds kept
    (the event catalog's); None keeps any."""
    attrs = attrs or {}
    raw: dict[str, Any] = {"instance": host, "kind": kind}
    raw.update({label: attrs.get(attr) for attr, label in EVENT_LABELS.items()})
    out = {label: v for label, value in raw.items() if (v := _bounded(label, value, kinds)) is not None}
    return tuple(sorted(out.items()))


def catalog_kinds() -> frozenset[str]:
    """The event kinds of collectors/catalog/events.yaml: the values ``kind`` may take."""
    from collectors.framework.vocabulary import event_kinds

    return frozenset(event_kinds())


Labels = tuple[tuple[str, str], ...]


@dataclass
class Counter:
    """One series: its count and the time from which the count is shown (0 before, see the module)."""

    count: int
    shown_from: float


class EventCounters:
    """The counters, their bounds, and the text they are exposed as."""

    def __init__(self, *, hold_s: float, kinds: frozenset[str] | None = None) -> None:
        self.hold_s = hold_s
        self.kinds = kinds
        self.series: dict[Labels, Counter] = {}
        self.values: dict[str, set[str]] = {label: set() for label in LABELS}
        self.changed = False

    def add(self, labels: Labels, n: int = 1, now: float | None = None) -> Labels:
        """Count ``n`` events of ``labels`` (past a label's :data:`MAX_VALUES`, its new values read
        ``other``); returns the labels counted under."""
        now = time.time() if now is None else now
        kept = []
        for label, value in labels:
            seen = self.values.setdefault(label, set())
            if value not in seen:
                if len(seen) >= MAX_VALUES.get(label, 32):
                    value = OTHER
                seen.add(value)
            kept.append((label, value))
        key = tuple(kept)
        counter = self.series.get(key)
        if counter is None:
            counter = self.series[key] = Counter(0, now + self.hold_s)
        counter.count += n
        self.changed = True
        return key

    def due(self, now: float) -> float | None:
        """The next time a held count is due, or None."""
        return min((c.shown_from for c in self.series.values() if c.shown_from > now), default=None)

    def text(self, now: float | None = None) -> str:
        """The exposition format page (text 0.0.4): HELP, TYPE and one line per series."""
        now = time.time() if now is None else now
        lines = [f"# HELP {METRIC} {HELP}", f"# TYPE {METRIC} counter"]
        for labels, counter in sorted(self.series.items()):
            value = counter.count if counter.shown_from <= now else 0
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{METRIC}{{{body}}} {value}")
        return "\n".join(lines) + "\n"

    # -- kept across restarts, with the offsets of the lines they counted ------------------------------
    def to_json(self) -> list[dict[str, Any]]:
        return [{"labels": dict(labels), "count": c.count, "shown_from": c.shown_from}
                for labels, c in sorted(self.series.items())]

    def load(self, saved: Any) -> int:
        """Counters a previous run saved (ignoring malformed entries); returns how many were taken."""
        taken = 0
        for entry in saved if isinstance(saved, list) else []:
            try:
                labels = tuple(sorted((str(k), str(v)) for k, v in dict(entry["labels"]).items()))
                count, shown = int(entry["count"]), float(entry["shown_from"])
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if count < 0 or {k for k, _ in labels} - set(LABELS):
                continue
            self.series[labels] = Counter(count, shown)
            for label, value in labels:
                self.values.setdefault(label, set()).add(value)
            taken += 1
        return taken


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def write_textfile(folder: Path, text: str) -> Path:
    """``folder/gpuwb.prom``, replaced in one rename so that node_exporter never reads half a file (its
    textfile collector ignores the temporary name, which does not end in ``.prom``)."""
    path = folder / TEXTFILE
    partial = folder / f".{TEXTFILE}.{os.getpid()}.tmp"
    partial.write_text(text, encoding="utf-8")
    os.chmod(partial, 0o644)
    os.replace(partial, path)
    return path


# -- what each followed source is, and its lines as events --------------------------------------------

KERNEL_KINDS = {"kernel:journal": "journal", "kernel:kmsg": "kmsg"}
"""The host's kernel followers and the kernel collector's kind of their lines."""
HEADED_KINDS = frozenset({"k8s_events_table", "k8s_pods_table", "sacct", "squeue", "sinfo"})
"""Tables whose parser finds its columns in the header line: the file's first line is read again
before every batch of new rows."""
SNIFF_BYTES = 64 << 10
CONFIDENT = 80
"""workbench/ingest/session.py's sniffing constants, spelled here: importing the ingest would load DuckDB into
the long-running process (a test checks they agree)."""


@dataclass
class SourceKind:
    """How one followed source's lines are parsed: the collector's kind and module (None: the
    signature catalog alone), whether they are unwrapped first, and a table's header line."""

    kind: str
    module: str | None
    unwrap: bool = False
    header: bytes = b""


def classify(path: str | None, head: bytes, fallback: str = "unknown") -> SourceKind:
    """The kind of a followed file, sniffed from its first bytes as ``gpuwb ingest`` sniffs a file:
    the most confident collector, else the lines unwrapped, else ``fallback``."""
    from collectors.framework import registry

    name = os.path.basename(path or "")
    text = head.decode("utf-8", "replace")
    scored = registry.sniff_scored(name, text)
    unwrap = False
    if scored is None or scored[0] < CONFIDENT:
        unwrapped = registry.sniff_unwrapped(name, text)
        if unwrapped is not None and (scored is None or unwrapped[0] > scored[0]):
            scored, unwrap = unwrapped, True
    if scored is None:
        module = registry.collector_for_kind(fallback)
        return SourceKind(fallback, module.__name__ if module is not None else None)
    kind, module = scored[1], scored[2]
    header = head.split(b"\n", 1)[0] + b"\n" if kind in HEADED_KINDS else b""
    return SourceKind(kind, module.__name__ if hasattr(module, "parse") else None, unwrap, header)


def read_head(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(SNIFF_BYTES)
    except OSError:
        return b""


class LineEvents:
    """Turns each followed source's new lines into events, with that source's parser."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.kinds: dict[str, SourceKind] = {}

    def source_kind(self, source: str, lines: list[str]) -> SourceKind:
        found = self.kinds.get(source)
        if found is None:
            if source in KERNEL_KINDS:
                found = SourceKind(KERNEL_KINDS[source], "collectors.kernel")
            else:
                path = source.split(":", 1)[1] if ":" in source else None
                head = read_head(path) if path else b""
                found = classify(path, head or "\n".join(lines).encode("utf-8", "replace"),
                                 fallback="syslog" if source.startswith("kernel:") else "unknown")
                if source.startswith("kernel:") and found.module != "collectors.kernel":
                    found = SourceKind("syslog", "collectors.kernel")  # --kernel-log holds kernel lines
            self.kinds[source] = found
        return found

    def events(self, source: str, lines: list[str]) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
        """(host, kind, attrs) of every event the lines hold, as a bundle would store them."""
        from collectors.base import Event
        from workbench.ingest.artifact_rows import HostClocks, ParseRequest, ParseSummary, artifact_rows

        if not lines:
            return
        what = self.source_kind(source, lines)
        request = ParseRequest(module=what.module, kind=what.kind, host=self.host, source_name=source,
                               unwrap=what.unwrap)
        data = "".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape")
        from collectors.framework.signatures import STRUCTURED_KINDS

        # a structured kind is read as JSON Lines: each line one document (kubectl get events -w -o json | jq -c .)
        chunks: Iterable[bytes] = data.splitlines(keepends=True) if what.kind in STRUCTURED_KINDS else [data]
        for chunk in chunks:
            body = what.header + chunk
            first = 2 if what.header else 1
            for row in artifact_rows(request, lambda b=body: io.BytesIO(b), HostClocks(), ParseSummary()):
                if isinstance(row, Event) and (row.line is None or row.line >= first):
                    yield row.host, row.kind, row.attrs


def save_state(path: Path, files: dict[str, Any], counters: EventCounters) -> None:
    """The followed files' offsets and the counters, in one file replaced in one rename: a restart
    neither counts a line twice nor loses a count (the counters are of the lines before the offsets)."""
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps({"version": 2, "files": files, "counters": counters.to_json()}))
    os.replace(partial, path)


def load_state(path: Path) -> tuple[dict[str, Any], list[Any]]:
    """(offsets by file, saved counters) of :func:`save_state`; a ring of an older recorder has the
    offsets alone, a missing or unreadable file neither."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, []
    if not isinstance(doc, dict):
        return {}, []
    if doc.get("version") == 2:
        files = doc.get("files")
        counters = doc.get("counters")
        return (files if isinstance(files, dict) else {}), (counters if isinstance(counters, list) else [])
    return doc, []


class MetricsServer:
    """``GET /metrics`` on a loopback port: the last page the recorder rendered. One thread, which only
    hands out that page, so the recorder's loop never waits on a scraper."""

    def __init__(self, port: int) -> None:
        import http.server
        import threading

        self.page = b""
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 5

            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                body = owner.page
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:  # scrapes every few seconds: not for the journal
                return None

        self.server = http.server.HTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="gpuwb-metrics", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
