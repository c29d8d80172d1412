"""Live capture: ``--prom URL`` scrapes (each stored under the file-name convention exposition.py reads, its
body verbatim after one ``# gpuwb-scrape url=... time=...`` header line), ``--prom-server URL --query Q``
range queries over the capture window, and the ``--latency`` files. Only http(s) URLs the user gave are
fetched, through urllib with a timeout; nothing is ever passed to a shell."""

from __future__ import annotations

import argparse
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from collectors.base import Artifact, CaptureContext
from collectors.framework import metric_vocabulary as vocabulary
from collectors.framework.framing import format_iso
from collectors.framework.lazy_re import lazy_regex

MAX_FETCH_BYTES = 64 << 20
REQUEST_TIMEOUT = 10.0
MAX_POINTS = 11_000
"""Prometheus refuses range queries with more points than this per series."""

_LOOPBACK = lazy_regex(r"^(?:127\.\d+\.\d+\.\d+|localhost|::1|0\.0\.0\.0)$", re.I)


def duration(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 15, 15s, 1m, 500ms)")
    factor = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    return float(m.group(1)) * factor


def add_capture_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("serving metrics (Prometheus)")
    group.add_argument("--prom", metavar="URL", action="append", default=[],
                       help="scrape this /metrics URL several times during the capture (repeatable)")
    group.add_argument("--prom-samples", metavar="N", type=int, default=3, help="scrapes per --prom URL (default 3)")
    group.add_argument("--prom-interval", metavar="SECONDS", type=duration, default=5.0,
                       help="time between scrapes (default 5s)")
    group.add_argument("--prom-server", metavar="URL", action="append", default=[],
                       help="Prometheus server to run --query over the capture window (repeatable)")
    group.add_argument("--query", metavar="PROMQL", action="append", default=[],
                       help="query_range for each --prom-server (repeatable; default: the serving metrics)")
    group.add_argument("--prom-step", metavar="DURATION", type=duration, default=None,
                       help="query_range step (default: window / 1000, at least 1s)")
    group.add_argument("--latency", metavar="FILE", action="append", default=[],
                       help="a latency/metrics file to include: .prom page, API JSON, CSV (repeatable)")


def default_query() -> str:
    """Every family of the serving vocabulary in one selector, for a server given without --query."""
    names = sorted({re.escape(n) for n in vocabulary.VOCABULARY})
    return '{__name__=~"(' + "|".join(names) + ')(_bucket|_sum|_count|_total)?"}'


def capture_files(ctx: CaptureContext, owner: str, *, report_unclaimed: bool = False) -> Iterator[Artifact]:
    """The ``--latency`` files whose sniffed kind collector ``owner`` parses (each collector stores
    its own kinds, so the right parser reads them). With ``report_unclaimed``, files no running
    collector will take are recorded as missing, with the reason."""
    from collectors.framework import registry  # deferred: the registry imports every collector, this one included

    running = set(ctx.options.get("only") or [m.NAME for m in registry.all_collectors()])
    running -= set(ctx.options.get("skip") or [])
    for path in ctx.options.get("latency") or []:
        try:
            with open(path, "rb") as f:
                head = f.read(64 << 10).decode("utf-8", "replace")
        except OSError as exc:
            if report_unclaimed:
                ctx.missing(path, f"unavailable: {exc.strerror or exc}")
            continue
        found = registry.sniff(path, head)
        if found is not None and found[1].NAME == owner:
            artifact = ctx.read_file(path, kind=found[0])
            if artifact is not None:
                yield artifact
        elif report_unclaimed and found is None:
            ctx.missing(path, "not a recognised latency or metrics format")
        elif report_unclaimed and found is not None and found[1].NAME not in running:
            ctx.missing(path, f"{found[0]} is read by collector {found[1].NAME}, which is not running")


def usable(ctx: CaptureContext, url: str) -> bool:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        ctx.missing(url, "unsupported URL: only http:// and https:// are fetched")
        return False
    return True


def _metrics_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.path in ("", "/"):
        parts = parts._replace(path="/metrics")
    return urllib.parse.urlunsplit(parts)


def fetch(url: str, timeout: float, accept: str) -> tuple[int | None, bytes, str]:
    """GET ``url``: (HTTP status or None, body up to MAX_FETCH_BYTES, error text). Loopback
    addresses bypass any proxy from the environment."""
    host = urllib.parse.urlsplit(url).hostname or ""
    handlers: list[Any] = [urllib.request.ProxyHandler({})] if _LOOPBACK.match(host) else []
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "gpuwb-capture"})
    try:
        with opener.open(request, timeout=max(timeout, 0.5)) as response:
            return response.status, response.read(MAX_FETCH_BYTES), ""
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_FETCH_BYTES) if exc.fp else b""
        return exc.code, body, f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, b"", f"unavailable: {reason}"


def scrape_page(ctx: CaptureContext, url: str, deadline: float) -> Artifact | None:
    target = _metrics_url(url)
    started = datetime.now(timezone.utc)
    began = time.monotonic()
    status, body, error = fetch(target, min(REQUEST_TIMEOUT, deadline - began),
                                "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5,*/*;q=0.1")
    if status != 200:
        ctx.missing(target, error or f"HTTP {status}")
        return None
    instance = urllib.parse.urlsplit(target).netloc
    stamp = started.strftime("%Y%m%dT%H%M%S.") + f"{started.microsecond // 1000:03d}Z"
    mark = f"# gpuwb-scrape url={urllib.parse.quote(target, safe=':/?&=%')} time={format_iso(started)}\n".encode()
    return Artifact(source=f"{instance}-{stamp}.prom", kind="prom_text", data=mark + body, captured_at=started,
                    info={"url": target, "http_status": status, "duration_s": round(time.monotonic() - began, 3),
                          "bytes": len(body), "truncated": len(body) >= MAX_FETCH_BYTES})


def range_query(ctx: CaptureContext, server: str, query: str, step: float | None,
                 deadline: float) -> Artifact | None:
    if not usable(ctx, server):
        return None
    end = time.time()
    start = ctx.since.timestamp() if ctx.since else end - 3600
    window = max(end - start, 1.0)
    step = max(step or max(1.0, round(window / 1000)), window / MAX_POINTS)
    params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
    url = server.rstrip("/") + "/api/v1/query_range?" + params
    began = time.monotonic()
    status, body, error = fetch(url, min(REQUEST_TIMEOUT, deadline - began), "application/json")
    if status is None:
        ctx.missing(url, error)
        return None
    if status != 200:
        ctx.missing(url, f"{error}: {body[:200].decode('utf-8', 'replace')}")
        if not body:
            return None
    return Artifact(source=url, kind="prom_api_json", data=body, captured_at=datetime.now(timezone.utc),
                    info={"url": url, "query": query, "http_status": status, "step_s": step,
                          "duration_s": round(time.monotonic() - began, 3), "bytes": len(body)})
