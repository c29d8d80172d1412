"""Package logs: dpkg.log, apt's history.log, yum.log, dnf.rpm.log and ``yum history`` tables, each line of a
package installed, upgraded or removed a ``change`` event, and the GPU stack they leave installed a host fact."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

from collectors.base import MONTHS, Event, ParseContext, Row, Skipped, infer_year
from collectors.changes.events import Installed, change_event, layer_for
from collectors.framework.lazy_re import lazy_regex

DPKG_LINE = (r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (status|install|upgrade|remove|purge|configure|trigproc"
             r"|startup|conffile) (.*)$")
YUM_LINE = (r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d) (Installed|Updated|Erased|Dep-Installed"
            r"|Obsoleted|Downgraded|Reinstalled): (.+)$")
DNF_LINE = (r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?)(Z|[+-]\d\d(?::?\d\d)?)? (SUBDEBUG|INFO|DEBUG|DDEBUG)"
            r" (.*)$")
HISTORY_HEAD = r"^\s*ID\s*\|\s*(Login user|Command line)\s*\|\s*Date and time\s*\|\s*Action"
"""The lines that name each log (the sniffer of collectors/changes/__init__.py compiles them too)."""
_DPKG = lazy_regex(DPKG_LINE)
_YUM = lazy_regex(YUM_LINE)
_DNF = lazy_regex(DNF_LINE)
_DNF_ACTION = lazy_regex(r"^(Upgrade|Upgraded|Install|Installed|Erase|Erased|Downgrade|Downgraded|Reinstall"
                         r"|Reinstalled|Obsolete|Obsoleted|Cleanup|Remove|Removed): (\S+)")
_HISTORY_HEAD = lazy_regex(HISTORY_HEAD, re.I)
_ARCHES = (".x86_64", ".noarch", ".i686", ".i386", ".aarch64", ".ppc64le", ".s390x", ".src")
MAX_BUFFERED = 200_000


def _local_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(re.sub(r"\s+", "T", text.strip(), count=1)).replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def parse_dpkg(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """dpkg.log: one change per install / upgrade / remove / purge, the GPU stack left installed as host facts."""
    installed = Installed()
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


def parse_apt(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """apt's history.log: each transaction's packages, its command line and who ran it."""
    installed = Installed()
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


def parse_yum(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """yum.log, whose lines have no year (dated from the evidence, approximate)."""
    installed = Installed()
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


def parse_dnf(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """dnf.rpm.log, whose lines carry their zone; an upgrade's old and new package lines make one change."""
    installed = Installed()
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


def parse_history(stream: BinaryIO, ctx: ParseContext) -> Iterator[Row]:
    """A ``yum history`` / ``dnf history`` table: one change per transaction."""
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
