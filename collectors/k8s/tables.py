"""kubectl tables: ``get events`` (and describe's Events table), ``get pods``, ``get nodes``; columns by the
header's words (old kubectl: tabs), ages anchored on the file's time."""

from __future__ import annotations

import re
from datetime import timedelta

from collectors.base import Event, Row
from collectors.k8s.events import k8s_event, parse_k8s_time
from collectors.k8s.lines import LineState

HEALTHY_POD_STATUS = {"Running", "Completed", "Succeeded"}

_TABLE_WORDS = ("LAST SEEN", "FIRST SEEN", "NOMINATED NODE", "READINESS GATES", "LASTSEEN", "FIRSTSEEN",
                "SUBOBJECTPATH", "NAMESPACE", "SUBOBJECT", "RESTARTS", "MESSAGE", "VERSION", "REASON", "OBJECT",
                "SOURCE", "STATUS", "COUNT", "READY", "ROLES", "TYPE", "NAME", "KIND", "FROM", "NODE", "AGE", "IP",
                "INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME")


def parse_age(text: str | None) -> timedelta | None:
    """kubectl ages: ``5m``, ``2m30s``, ``3d4h``, ``18m (x2 over 18m)`` (the first one)."""
    if not text:
        return None
    m = re.match(r"^\s*((?:\d+[smhdy])+)", text)
    if not m:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "y": 365 * 86400}
    return timedelta(seconds=sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhdy])", m.group(1))))


def _count(text: str | None) -> int | None:
    m = re.search(r"\(x(\d+) over", text or "")
    if m:
        return int(m.group(1))
    return int(text) if text and text.strip().isdigit() else None


def table_columns(line: str) -> list[tuple[str, int]]:
    """Known header names of a kubectl table with their start columns; [] when the line is not one."""
    if "\t" in line:
        names = [c.strip() for c in re.split(r"\t+", line.strip())]
        known = [c for c in names if c.upper() in _TABLE_WORDS]
        return [(c.upper(), -1) for c in names] if len(names) >= 3 and len(known) == len(names) else []
    found: list[tuple[str, int]] = []
    pos = 0
    upper = line.upper()
    while pos < len(line):
        while pos < len(line) and line[pos] == " ":
            pos += 1
        if pos >= len(line):
            break
        word = next((w for w in _TABLE_WORDS if upper.startswith(w, pos)
                     and (pos + len(w) == len(line) or line[pos + len(w)] == " ")), None)
        if word is None:
            return []
        found.append((word, pos))
        pos += len(word)
    return found if len(found) >= 3 else []


class TableLines(LineState):
    """Reads one row of the table whose header the driver found."""

    def _slice(self, line: str) -> dict[str, str] | None:
        """A row cut at its header's columns; a value may start a little off its column, as when a
        reporter masked an IP with a longer string, so chunks go to the nearest column on their left."""
        table = self.table
        assert table is not None
        starts: list[int] = table["starts"]
        cols: list[str] = table["cols"]
        values: dict[str, list[str]] = {}
        for chunk in re.finditer(r"\S+(?: \S+)*", line):
            index = max((i for i, start in enumerate(starts) if start <= chunk.start() + 2), default=None)
            if index is None:
                return None
            if index == len(cols) - 1:
                values.setdefault(cols[index], []).append(line[chunk.start():].strip())
                break
            values.setdefault(cols[index], []).append(chunk.group())
        return {col: " ".join(values.get(col, [])) for col in cols}

    # -- tables: get events, describe's Events, get pods, get nodes
    def _tab_row(self, line: str) -> dict[str, str] | None:
        """Old kubectl separated columns by tabs; an empty SubobjectPath collapses into its neighbours' tabs."""
        assert self.table is not None
        cols: list[str] = self.table["cols"]
        values = [v.strip() for v in re.split(r"\t+", line.strip())]
        if len(values) == len(cols) - 1:
            gap = next((i for i, c in enumerate(cols) if c in ("SUBOBJECTPATH", "SUBOBJECT")), None)
            if gap is None:
                return None
            values.insert(gap, "")
        if len(values) < len(cols):
            return None
        values = values[:len(cols) - 1] + ["\t".join(values[len(cols) - 1:])]
        return dict(zip(cols, values))

    def _table_row(self, n: int, row: dict[str, str]) -> list[Row] | None:
        """The events of one table row; None when the line does not fit the table (the table ended)."""
        if "REASON" in row:
            if not re.fullmatch(r"[A-Za-z][\w:.-]*", row["REASON"]) or row.get("TYPE", "Normal") not in (
                    "Normal", "Warning", ""):
                return None
            return [self._event_row(n, row)]
        if "RESTARTS" in row:
            if not re.fullmatch(r"\d+/\d+", row.get("READY", "")):
                return None
            event = self._pod_row(n, row)
        elif "STATUS" in row and ("ROLES" in row or "VERSION" in row):
            event = self._node_row(n, row)
        else:
            return None
        return [event] if event is not None else []

    def _event_row(self, n: int, row: dict[str, str]) -> Event:
        age_text = row.get("LAST SEEN") or row.get("LASTSEEN") or row.get("AGE")
        age = parse_age(age_text)
        anchor, origin = self._anchor()
        ts = anchor - age if anchor is not None and age is not None else None
        approx = True
        if age is None and (when := parse_k8s_time(age_text)) is not None:
            # old kubectl printed the time itself: ``Tue, 07 Jul 2015 12:53:51 -0700``
            ts, origin, approx = when, "iso", False
        source = row.get("FROM") or row.get("SOURCE") or ""
        node = None
        m = re.match(r"^\{?\s*(kubelet|node-controller|nvidia\S*)[, ]+\s*([\w.-]+)\s*\}?$", source)
        if m:
            node = m.group(2)
        node = node or self.pod.get("node")
        obj = row.get("OBJECT") or (f"{row.get('KIND')}/{row.get('NAME')}" if row.get("KIND") else None)
        obj = obj or (f"Pod/{self.pod['name']}" if self.pod.get("name") else None)
        count = _count(row.get("COUNT")) or _count(age_text)
        return k8s_event(row["REASON"], row.get("MESSAGE", ""), ts=ts, origin=origin, approx=approx, host=node,
                         line=n, ts_raw=age_text, type=row.get("TYPE"), object=obj, count=count, age=age_text,
                         namespace=row.get("NAMESPACE") or self.pod.get("namespace"),
                         component=re.sub(r"[{}]", "", source).split(",")[0].strip() or None, node=node)

    def _pod_row(self, n: int, row: dict[str, str]) -> Event | None:
        status = row.get("STATUS", "")
        ready = row.get("READY", "")
        restarts = _count(row.get("RESTARTS", "").split(" ")[0]) or 0
        m = re.fullmatch(r"(\d+)/(\d+)", ready)
        unready = bool(m and int(m.group(1)) < int(m.group(2)))
        if status in HEALTHY_POD_STATUS and not restarts and not (unready and status == "Running"):
            return None
        anchor, origin = self._anchor()
        node = row.get("NODE") if row.get("NODE") not in (None, "", "<none>") else None
        reason = status.split(":", 1)[1] if status.startswith("Init:") else status
        return k8s_event(reason or "Unknown", "", ts=anchor, origin=origin, approx=True, host=node, line=n,
                         object=f"Pod/{row.get('NAME')}", namespace=row.get("NAMESPACE"), status=status, ready=ready,
                         restarts=restarts, age=row.get("AGE"), node=node,
                         init_container=status.startswith("Init:") or None)

    def _node_row(self, n: int, row: dict[str, str]) -> Event | None:
        status = row.get("STATUS", "")
        if "NotReady" in status:
            reason = "NodeNotReady"
        elif "SchedulingDisabled" in status:
            reason = "NodeNotSchedulable"
        else:
            return None
        anchor, origin = self._anchor()
        name = row.get("NAME")
        return k8s_event(reason, "", ts=anchor, origin=origin, approx=True, host=name, line=n, object=f"Node/{name}",
                         node=name, status=status)
