"""What changed, and what is installed: package logs (dpkg, apt, yum, dnf), deploy/config records
(``--changes FILE``, CSV or JSON) and installed Python package versions (``pip freeze``/``pip list``).

The most common root cause of an incident is a change: a driver upgraded on one node, a new model
or batch setting rolled out an hour before the latency went up. Every change becomes an event of
kind ``change`` (attrs what, version, from_version, action, who, via). Its layer says where the
change acts, decided in one place, :func:`layer_for`: GPU-stack packages and records (NVIDIA driver,
CUDA, cuDNN, NCCL, fabric manager, the kernel the driver modules are built for) are ``gpu``; the
RDMA/OFED and storage client stack is ``network_storage``; the scheduler's packages are
``scheduling``; deploy/config/model/image records and every other package are ``business``.

Deploy/config/model records are ``business`` unless they name the GPU stack.

Package logs also say what is installed now: the last version of the driver, CUDA, NCCL, cuDNN
packages a log shows becomes a host fact ``versions.driver`` / ``versions.cuda`` / ``versions.nccl``
/ ``versions.cudnn`` (what ``workbench/ingest/derivations/version_skew.py`` compares across hosts).

Times: dpkg and apt write local time without a zone, yum.log has no year; they are read as UTC and
marked approximate (``ts_origin`` ``local_as_utc`` / ``syslog_noyear``); dnf.rpm.log carries its zone.

Artifact kinds: ``dpkg_log``, ``apt_history``, ``yum_log``, ``dnf_rpm_log``, ``yum_history``,
``change_records``, ``pip_freeze``.

The modules: events.py (the change event, layers, installed versions), package_logs.py, records.py (deploy /
config records), pip_freeze.py; this one captures, sniffs and sends each kind to its parser.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

from collectors.base import Artifact, CaptureContext, ParseContext, Row, Skipped
from collectors.changes.package_logs import (
    DNF_LINE,
    DPKG_LINE,
    HISTORY_HEAD,
    YUM_LINE,
    parse_apt,
    parse_dnf,
    parse_dpkg,
    parse_history,
    parse_yum,
)
from collectors.changes.pip_freeze import PIP_FREEZE_LINE, parse_pip
from collectors.changes.records import MAX_RECORDS_BYTES, TS_KEYS, WHAT_KEYS, parse_records
from collectors.framework.lazy_re import lazy_regex

NAME = "changes"
LAYER = "business"
KINDS = ("dpkg_log", "apt_history", "yum_log", "dnf_rpm_log", "yum_history", "change_records", "pip_freeze")
TIMEOUT = 20.0

PACKAGE_LOGS = (("/var/log/dpkg.log", "dpkg_log"), ("/var/log/apt/history.log", "apt_history"),
                ("/var/log/yum.log", "yum_log"), ("/var/log/dnf.rpm.log", "dnf_rpm_log"))

_DPKG = lazy_regex(DPKG_LINE)
_YUM = lazy_regex(YUM_LINE)
_DNF = lazy_regex(DNF_LINE)
_HISTORY_HEAD = lazy_regex(HISTORY_HEAD, re.I)
_PIP_FREEZE = lazy_regex(PIP_FREEZE_LINE)


# -- live capture -------------------------------------------------------------------------------

def add_capture_arguments(parser: Any) -> None:
    parser.add_argument("--changes", metavar="FILE", action="append", default=[],
                        help="deploy/config/model records (CSV or JSON with ts, what, version, who)")


def capture(ctx: CaptureContext) -> Iterator[Artifact]:
    found = False
    for path, kind in PACKAGE_LOGS:
        if not os.path.exists(path):
            continue
        artifact = ctx.read_file(path, kind=kind, max_bytes=32 << 20)
        if artifact is not None:
            found = True
            yield artifact
    if not found:
        ctx.missing("package logs", "unavailable: no dpkg, apt, yum or dnf log on this host")
    for path in ctx.options.get("changes") or []:
        artifact = ctx.read_file(path, kind="change_records", max_bytes=MAX_RECORDS_BYTES)
        if artifact is not None:
            yield artifact


def sniff(name: str, head: str) -> dict[str, int]:
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if not lines:
        return {}
    if sum(1 for ln in lines[:50] if _DPKG.match(ln)) >= 2 or (len(lines) == 1 and _DPKG.match(lines[0])):
        return {"dpkg_log": 95}
    if "Start-Date: " in head and re.search(r"^Start-Date: \d{4}-\d\d-\d\d", head, re.MULTILINE) and re.search(
            r"^(Commandline|Upgrade|Install|Remove|Purge|End-Date):", head, re.MULTILINE):
        return {"apt_history": 95}
    if "ed: " in head and any(_YUM.match(ln) for ln in lines[:20]):
        return {"yum_log": 95}
    if ("INFO " in head or "DEBUG " in head) and sum(
            1 for ln in lines[:50] if (m := _DNF.match(ln)) and m.group(3) in ("SUBDEBUG", "INFO", "DDEBUG")) >= 2:
        return {"dnf_rpm_log": 85}
    if "|" in head and any(_HISTORY_HEAD.match(ln) for ln in lines[:10]):
        return {"yum_history": 95}
    if _records_header(lines[0]):
        return {"change_records": 85}
    if score := _json_records_score(head):
        return {"change_records": score}
    if "==" in head and sum(1 for ln in lines[:200] if _PIP_FREEZE.match(ln)) >= 5:
        return {"pip_freeze": 80}
    if re.match(r"^Package\s+Version\s*(?:Location|Editable project location)?\s*$", lines[0]) and len(lines) > 2 \
            and set(lines[1].replace(" ", "")) == {"-"}:
        return {"pip_freeze": 85}
    return {}


def _records_header(first: str) -> bool:
    if "," not in first and "\t" not in first:
        return False
    cols = {c.strip().strip('"').lower() for c in re.split(r"[,\t]", first)}
    return bool(cols & set(WHAT_KEYS)) and bool(cols & set(TS_KEYS)) and len(cols) <= 40


def _json_records_score(head: str) -> int:
    """85 for JSON records with a ``what`` key, 75 with a synonym; 0 for other JSON (Kubernetes
    objects, Prometheus API answers, host facts), which other collectors read."""
    text = head.lstrip()
    if not text.startswith(("[", "{")):
        return 0
    keys = {k.lower() for k in re.findall(r'"([A-Za-z_]+)"\s*:', text[:4096])}
    if keys & {"apiversion", "resulttype", "hostname", "metadata"} or not keys & set(TS_KEYS):
        return 0
    if "what" in keys:
        return 85
    return 75 if keys & {"component", "service", "package", "model", "application"} else 0


# -- parsing ------------------------------------------------------------------------------------

def parse(kind: str, stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    parser = {"dpkg_log": parse_dpkg, "apt_history": parse_apt, "yum_log": parse_yum,
              "dnf_rpm_log": parse_dnf, "yum_history": parse_history, "change_records": parse_records,
              "pip_freeze": parse_pip}.get(kind)
    if parser is None:
        yield Skipped(None, f"changes collector cannot parse kind {kind}")
        return
    yield from parser(stream, ctx)
