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
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any, BinaryIO

from collectors.base import (
    MONTHS,
    Artifact,
    CaptureContext,
    Event,
    HostFact,
    ParseContext,
    Row,
    Skipped,
    infer_year,
    to_utc,
)
from collectors.framework.json_items import ITEM_ERRORS, decoded
from collectors.framework.lazy_re import lazy_regex
from collectors.host import PACKAGES

NAME = "changes"
LAYER = "business"
KINDS = ("dpkg_log", "apt_history", "yum_log", "dnf_rpm_log", "yum_history", "change_records", "pip_freeze")
TIMEOUT = 20.0

PACKAGE_LOGS = (("/var/log/dpkg.log", "dpkg_log"), ("/var/log/apt/history.log", "apt_history"),
                ("/var/log/yum.log", "yum_log"), ("/var/log/dnf.rpm.log", "dnf_rpm_log"))
MAX_RECORDS_BYTES = 64 << 20
MAX_BUFFERED = 200_000

_GPU_STACK = lazy_regex(r"nvidia|cuda|cudnn|nccl|nvlink|fabricmanager|fabric-manager|tensorrt|cublas|cufft|curand"
                        r"|cusolver|cusparse|nvjpeg|npp|dcgm|datacenter-gpu-manager|gdrcopy|gdrdrv|^linux-image"
                        r"|^linux-modules|^kernel(?:-core|-modules)?$|^kmod-|gpu.?driver|rocm",
                        re.IGNORECASE)
_NET_STORAGE = lazy_regex(r"ofed|mlnx|rdma|ibverbs|infiniband|libibumad|ucx|openmpi|hpcx|nfs|lustre|beegfs|gpfs"
                          r"|weka|ceph|fuse|efa|libfabric|aws-ofi", re.IGNORECASE)
_SCHEDULING = lazy_regex(r"slurm|munge|pmix|kubelet|kubeadm|containerd|docker|cri-o|runc|nvidia-container",
                         re.IGNORECASE)

_ARCHES = (".x86_64", ".noarch", ".i686", ".i386", ".aarch64", ".ppc64le", ".s390x", ".src")


def layer_for(what: str) -> str:
    """Where a change acts (see the module docstring)."""
    if _SCHEDULING.search(what):
        return "scheduling"
    if _GPU_STACK.search(what):
        return "gpu"
    if _NET_STORAGE.search(what):
        return "network_storage"
    return "business"


def version_key(package: str, version: str | None) -> tuple[str, str] | None:
    """(``driver``/``cuda``/``nccl``/``cudnn``, upstream version) for a GPU-stack package, else None."""
    name = package.split(":")[0].lower()
    upstream = upstream_version(version)
    if not upstream:
        return None
    if re.match(r"^(nvidia-driver|nvidia-dkms|nvidia-utils|nvidia-headless|libnvidia-compute|nvidia-kernel-source"
                r"|nvidia-compute-utils|cuda-drivers|kmod-nvidia|nvidia-open|nvidia-kmod)", name):
        return "driver", upstream
    if m := re.match(r"^cuda(?:-toolkit|-runtime|-cudart|-libraries|-compiler|-nvcc)?-(\d+)-(\d+)$", name):
        return "cuda", f"{m.group(1)}.{m.group(2)}"
    if name in ("cuda", "cuda-toolkit"):
        return "cuda", upstream
    if re.match(r"^libnccl\d*$|^nccl$", name):
        return "nccl", upstream
    if re.match(r"^libcudnn\d*(?:-cuda-\d+)?$", name):
        return "cudnn", upstream
    if re.match(r"^(nvidia-fabricmanager|cuda-drivers-fabricmanager)", name):
        return "fabricmanager", upstream
    return None


def upstream_version(version: str | None) -> str | None:
    """``3:550.90.07-0ubuntu0.22.04.1`` -> ``550.90.07``; ``2.21.5-1+cuda12.4`` -> ``2.21.5``."""
    if not version or version in ("<none>", "-"):
        return None
    text = version.split(":", 1)[1] if re.match(r"^\d+:", version) else version
    return text.split("-", 1)[0] or None


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


# -- sniffing -----------------------------------------------------------------------------------

_DPKG = lazy_regex(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (status|install|upgrade|remove|purge|configure|trigproc"
                   r"|startup|conffile) (.*)$")
_YUM = lazy_regex(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d) (Installed|Updated|Erased|Dep-Installed"
                  r"|Obsoleted|Downgraded|Reinstalled): (.+)$")
_DNF = lazy_regex(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d(?::?\d\d)?)? (SUBDEBUG|INFO|DEBUG|DDEBUG)"
                  r" (.*)$")
_DNF_ACTION = lazy_regex(r"^(Upgrade|Upgraded|Install|Installed|Erase|Erased|Downgrade|Downgraded|Reinstall"
                         r"|Reinstalled|Obsolete|Obsoleted|Cleanup|Remove|Removed): (\S+)")
_HISTORY_HEAD = lazy_regex(r"^\s*ID\s*\|\s*(Login user|Command line)\s*\|\s*Date and time\s*\|\s*Action", re.I)
_PIP_FREEZE = lazy_regex(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;]+)")
_PIP_LIST = lazy_regex(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s+(\d[^\s]*)\s*(?:\S.*)?$")

TS_KEYS = ("ts", "time", "timestamp", "date", "datetime", "deployed_at", "created_at", "at", "when", "start")
WHAT_KEYS = ("what", "component", "service", "package", "name", "target", "model", "app", "application")
VERSION_KEYS = ("version", "new_version", "to_version", "to", "image", "tag", "revision", "release")
FROM_KEYS = ("from_version", "old_version", "previous_version", "from", "previous")
WHO_KEYS = ("who", "user", "author", "by", "actor", "owner", "requested_by")
ACTION_KEYS = ("action", "type", "kind", "change_type", "event")
HOST_KEYS = ("host", "node", "hostname", "nodes", "hosts")
NOTE_KEYS = ("description", "message", "note", "notes", "summary", "comment", "details")


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
    parser = {"dpkg_log": _parse_dpkg, "apt_history": _parse_apt, "yum_log": _parse_yum,
              "dnf_rpm_log": _parse_dnf, "yum_history": _parse_history, "change_records": _parse_records,
              "pip_freeze": _parse_pip}.get(kind)
    if parser is None:
        yield Skipped(None, f"changes collector cannot parse kind {kind}")
        return
    yield from parser(stream, ctx)


def change_event(*, what: str, version: str | None, from_version: str | None, action: str, who: str | None,
                 via: str, ts: datetime | None, ts_origin: str, ts_raw: str | None, line: int | None,
                 host: str | None = None, layer: str | None = None, note: str | None = None,
                 approx: bool = True) -> Event:
    """One ``change`` event; ``layer`` defaults to :func:`layer_for` of ``what``. A package outside the
    GPU, network/storage and scheduler stacks is kept at severity ``debug``: a libc update is on
    record, but it is not the deploy that a ``bad_change`` hypothesis looks for."""
    if from_version and version and from_version != version:
        detail = f"{from_version} -> {version}"
    else:
        detail = version or from_version or ""
    message = f"{action} {what} {detail}".strip() + (f" by {who}" if who else "") + (f": {note}" if note else "")
    layer = layer or layer_for(what)
    attrs = {"what": what, "version": version, "from_version": from_version, "action": action, "who": who,
             "via": via}
    if note:
        attrs["note"] = note
    return Event(kind="change", message=message[:500], ts=ts, ts_origin=ts_origin if ts else "none",
                 ts_approx=bool(ts and approx), ts_raw=ts_raw, host=host, layer=layer,
                 severity="debug" if layer == "business" and via not in ("records", "yum history") else "info",
                 attrs=attrs, line=line)


class _Installed:
    """The last version of each GPU-stack package a log shows, for the ``versions.*`` host facts."""

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}

    def saw(self, package: str, version: str | None) -> None:
        key = version_key(package, version)
        if key:
            self.versions[key[0]] = key[1]

    def removed(self, package: str) -> None:
        key = version_key(package, "0")
        if key:
            self.versions.pop(key[0], None)

    def facts(self) -> Iterator[Row]:
        for key, value in sorted(self.versions.items()):
            yield HostFact(f"versions.{key}", value)


def _local_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(re.sub(r"\s+", "T", text.strip(), count=1)).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def _parse_dpkg(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    installed = _Installed()
    for n, line in ctx.lines(stream):
        m = _DPKG.match(line)
        if not m:
            if line.strip():
                yield Skipped(n, "not a dpkg.log line")
            continue
        stamp, action, rest = m.groups()
        parts = rest.split()
        if action == "status" and len(parts) >= 3 and parts[0] == "installed":
            installed.saw(parts[1], parts[2])
            continue
        if action not in ("install", "upgrade", "remove", "purge") or len(parts) < 3:
            continue
        package, old, new = parts[0], parts[1], parts[2]
        what = package.split(":")[0]
        old_v = None if old == "<none>" else old
        new_v = None if new == "<none>" else new
        if action in ("remove", "purge"):
            installed.removed(package)
        else:
            installed.saw(package, new_v)
        if action == "upgrade" and old_v == new_v:
            action = "reinstall"
        ts = _local_time(stamp)
        yield change_event(what=what, version=new_v, from_version=old_v, action=action, who=None, via="dpkg",
                           ts=ts, ts_origin="local_as_utc", ts_raw=stamp, line=n)
    yield from installed.facts()


_APT_PACKAGE = lazy_regex(r"([^\s,()]+) \(([^)]*)\)")
_APT_ACTIONS = {"Install": "install", "Upgrade": "upgrade", "Remove": "remove", "Purge": "purge",
                "Downgrade": "downgrade", "Reinstall": "reinstall"}


def _parse_apt(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    installed = _Installed()
    stamp: str | None = None
    who: str | None = None
    command: str | None = None
    for n, line in ctx.lines(stream):
        key, sep, value = line.partition(": ")
        if not sep:
            if line.strip():
                yield Skipped(n, "not an apt history line")
            else:
                stamp = who = command = None
            continue
        value = value.strip()
        if key == "Start-Date":
            stamp, who, command = value, None, None
        elif key == "Requested-By":
            who = re.sub(r"\s*\(\d+\)$", "", value)
        elif key == "Commandline":
            command = value
        elif key in _APT_ACTIONS:
            ts = _local_time(stamp) if stamp else None
            for package, versions in _APT_PACKAGE.findall(value):
                vers = [v.strip() for v in versions.split(",") if v.strip() and v.strip() != "automatic"]
                action = _APT_ACTIONS[key]
                if action in ("upgrade", "downgrade") and len(vers) >= 2:
                    old, new = vers[0], vers[1]
                elif action in ("remove", "purge"):
                    old, new = (vers[0] if vers else None), None
                else:
                    old, new = None, (vers[0] if vers else None)
                if new:
                    installed.saw(package, new)
                else:
                    installed.removed(package)
                yield change_event(what=package.split(":")[0], version=new, from_version=old, action=action,
                                   who=who, via="apt", ts=ts, ts_origin="local_as_utc", ts_raw=stamp, line=n,
                                   note=None if not command else f"apt: {command}"[:200])
    yield from installed.facts()


def split_nevra(text: str) -> tuple[str, str | None]:
    """``3:nvidia-driver-418.67-1.el7.x86_64`` or ``nvidia-driver-3:465.19.01-1.el8.x86_64`` ->
    (``nvidia-driver``, ``465.19.01-1.el8``)."""
    body = text.strip()
    for arch in _ARCHES:
        if body.endswith(arch):
            body = body[: -len(arch)]
            break
    if m := re.match(r"^\d+:(.+)$", body):
        body = m.group(1)
    parts = body.rsplit("-", 2)
    if len(parts) < 3:
        return body, None
    name, version, release = parts
    version = version.split(":", 1)[1] if ":" in version else version
    return name, f"{version}-{release}"


def _parse_yum(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    installed = _Installed()
    actions = {"Installed": "install", "Dep-Installed": "install", "Updated": "upgrade", "Erased": "remove",
               "Obsoleted": "remove", "Downgraded": "downgrade", "Reinstalled": "reinstall"}
    for n, line in ctx.lines(stream):
        m = _YUM.match(line)
        if not m:
            if line.strip():
                yield Skipped(n, "not a yum.log line")
            continue
        mon, day, clock, verb, package = m.groups()
        month = MONTHS.get(mon.lower())
        ts = None
        if month:
            year, _ = infer_year(month, int(day), ctx.reference_for(ctx.host))
            try:
                ts = datetime.strptime(f"{year} {month} {day} {clock}", "%Y %m %d %H:%M:%S").replace(
                    tzinfo=timezone.utc)
            except ValueError:
                ts = None
        action = actions[verb]
        if action == "remove":
            name, version = package.strip(), None
            installed.removed(name)
        else:
            name, version = split_nevra(package)
            installed.saw(name, version)
        yield change_event(what=name, version=version, from_version=None, action=action, who=None, via="yum",
                           ts=ts, ts_origin="syslog_noyear", ts_raw=f"{mon} {day} {clock}", line=n)
    yield from installed.facts()


def _parse_dnf(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    installed = _Installed()
    pending: list[Event] = []
    actions = {"Upgrade": "upgrade", "Install": "install", "Installed": "install", "Erase": "remove",
               "Remove": "remove", "Downgrade": "downgrade", "Reinstall": "reinstall", "Obsolete": "remove"}
    for n, line in ctx.lines(stream):
        m = _DNF.match(line)
        if not m:
            continue
        stamp, zone, _, rest = m.groups()
        am = _DNF_ACTION.match(rest)
        if not am:
            continue
        verb, package = am.groups()
        name, version = split_nevra(package)
        if verb in ("Upgraded", "Downgraded", "Reinstalled", "Obsoleted", "Cleanup", "Erased", "Removed"):
            for event in reversed(pending):
                if event.attrs["what"] == name and event.attrs["from_version"] is None and \
                        event.attrs["action"] in ("upgrade", "downgrade", "reinstall"):
                    event.attrs["from_version"] = version
                    event.message = f"{event.attrs['action']} {name} {version} -> {event.attrs['version']}"
                    break
            if verb in ("Erased", "Removed") and not any(e.attrs["what"] == name for e in pending):
                pending.append(_dnf_event(name, None, version, "remove", stamp, zone, n))
                installed.removed(name)
            continue
        action = actions.get(verb, verb.lower())
        if action == "remove":
            installed.removed(name)
            pending.append(_dnf_event(name, None, version, action, stamp, zone, n))
        else:
            installed.saw(name, version)
            pending.append(_dnf_event(name, version, None, action, stamp, zone, n))
        if len(pending) >= MAX_BUFFERED:
            yield from pending
            pending = []
    yield from pending
    yield from installed.facts()


def _dnf_event(name: str, version: str | None, old: str | None, action: str, stamp: str, zone: str | None,
               line: int) -> Event:
    when = datetime.fromisoformat(stamp)
    if zone and zone != "Z":
        digits = zone.replace(":", "")
        sign = 1 if digits[0] == "+" else -1
        when -= sign * timedelta(hours=int(digits[1:3]), minutes=int(digits[3:5] or 0))
    return change_event(what=name, version=version, from_version=old, action=action, who=None, via="dnf",
                        ts=when.replace(tzinfo=timezone.utc), ts_origin="iso" if zone else "local_as_utc",
                        ts_raw=stamp + (zone or ""), line=line, approx=not zone)


def _parse_history(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    header: list[str] | None = None
    for n, line in ctx.lines(stream):
        if _HISTORY_HEAD.match(line):
            header = [c.strip().lower() for c in line.split("|")]
            continue
        cols = [c.strip() for c in line.split("|")]
        if header is None or len(cols) != len(header) or not cols[0].isdigit():
            continue
        row = dict(zip(header, cols))
        stamp = row.get("date and time", "")
        ts = _local_time(stamp + ":00") if re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d$", stamp) else None
        command = row.get("command line") or ""
        who = row.get("login user") or None
        if who:
            who = re.sub(r".*<(.+)>$", r"\1", who)
        what = command or f"transaction {cols[0]}"
        action = (row.get("action(s)") or "change").lower()
        yield change_event(what=what[:200], version=None, from_version=None, action=action, who=who, via="yum history",
                           ts=ts, ts_origin="local_as_utc", ts_raw=stamp, line=n,
                           note=f"transaction {cols[0]}, {row.get('altered', '').strip()} packages altered",
                           layer=layer_for(command) if command else "business")


# -- deploy / config records --------------------------------------------------------------------

def _parse_records(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    data = stream.read(MAX_RECORDS_BYTES + 1)
    ctx.lines_read = data.count(b"\n") + 1
    if len(data) > MAX_RECORDS_BYTES:
        yield Skipped(None, f"change records larger than {MAX_RECORDS_BYTES >> 20} MiB; only the start was read")
        data = data[:MAX_RECORDS_BYTES]
    text = decoded(data).lstrip("\ufeff")
    stripped = text.lstrip()
    records: list[tuple[int | None, dict[str, Any]]] = []
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = None
            for n, line in enumerate(text.splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except ValueError:
                    yield Skipped(n, "not a JSON record")
                    continue
                if isinstance(item, dict):
                    records.append((n, item))
        if doc is not None:
            items = doc if isinstance(doc, list) else next(
                (v for v in doc.values() if isinstance(v, list)), [doc]) if isinstance(doc, dict) else []
            records.extend((None, item) for item in items if isinstance(item, dict))
    else:
        dialect = "excel-tab" if "\t" in text.split("\n", 1)[0] else "excel"
        reader = csv.DictReader(io.StringIO(text), dialect=dialect)
        try:
            for row in reader:
                records.append((reader.line_num, {(k or "").strip(): v for k, v in row.items()}))
        except csv.Error as exc:
            yield Skipped(reader.line_num, f"CSV error: {exc}")
    for n, record in records:
        try:
            row = _record_event(record, n)
        except ITEM_ERRORS as exc:  # one record of the wrong shape costs no other
            yield Skipped(n, f"unreadable change record ({type(exc).__name__})")
            continue
        if row is None:
            yield Skipped(n, "change record without 'what'")
        else:
            yield row


def _field(record: dict[str, Any], keys: tuple[str, ...]) -> Any:
    lowered = {str(k).strip().lower(): v for k, v in record.items()}
    for key in keys:
        value = lowered.get(key)
        if value not in (None, ""):
            return value
    return None


def _record_event(record: dict[str, Any], n: int | None) -> Event | None:
    what = _field(record, WHAT_KEYS)
    if what is None:
        return None
    raw_ts = _field(record, TS_KEYS)
    ts, origin = parse_record_time(raw_ts)
    version = _field(record, VERSION_KEYS)
    host = _field(record, HOST_KEYS)
    if isinstance(host, list):
        host = ",".join(str(h) for h in host)
    action = str(_field(record, ACTION_KEYS) or "deploy")
    layer = layer_for(f"{what} {action}") if _GPU_STACK.search(str(what)) else "business"
    note = _field(record, NOTE_KEYS)
    return change_event(what=str(what), version=None if version is None else str(version),
                        from_version=_str(_field(record, FROM_KEYS)), action=action, who=_str(_field(record, WHO_KEYS)),
                        via="records", ts=ts, ts_origin=origin, ts_raw=None if raw_ts is None else str(raw_ts),
                        line=n, host=str(host) if host and "," not in str(host) else None, layer=layer,
                        note=None if note is None else str(note)[:300], approx=origin != "iso")


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_record_time(value: Any) -> tuple[datetime | None, str]:
    """ISO 8601 (with or without zone), ``YYYY-MM-DD HH:MM[:SS]`` or epoch seconds/milliseconds."""
    if value is None:
        return None, "none"
    if isinstance(value, (int, float)) or (isinstance(value, str) and re.fullmatch(r"\d{9,13}(\.\d+)?", value.strip())):
        try:
            seconds = float(value)
            if seconds > 1e11:
                seconds /= 1000.0
            return datetime.fromtimestamp(seconds, tz=timezone.utc), "iso"
        except (OverflowError, ValueError, OSError):
            return None, "none"
    text = str(value).strip().replace("Z", "+00:00").replace("z", "+00:00")
    text = re.sub(r"^(\d{4}-\d\d-\d\d)\s+", r"\1T", text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None, "none"
    if when.tzinfo is None:
        return when.replace(tzinfo=timezone.utc), "local_as_utc"
    return to_utc(when), "iso"


# -- installed Python packages ------------------------------------------------------------------

_TRACKED = {p.lower().replace("_", "-"): p for p in PACKAGES} | {
    name: name for name in ("torchvision", "jaxlib", "flash-attn", "xformers", "triton", "megatron-core",
                            "accelerate", "nvidia-cudnn-cu12", "nvidia-cuda-runtime-cu12", "text-generation-server",
                            "tensorrt", "onnxruntime-gpu", "cupy-cuda12x", "ray")}


def _parse_pip(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    for _, line in ctx.lines(stream):
        m = _PIP_FREEZE.match(line) or _PIP_LIST.match(line)
        if not m:
            continue
        key = _TRACKED.get(m.group(1).lower().replace("_", "-"))
        if key:
            yield HostFact(f"versions.{key}", m.group(2))
