"""The fleet's incident history: a folder of Parquet files that outlives any one bundle.

After every postmortem someone asks "have we seen this GPU / node / Xid before?". ``gpuwb history
add`` files each incident's summary, culprits (host, GPU bus id, UUID, serial), causes and key
events under one folder; ``history show`` lists repeat offenders, and ``analyze`` / ``report`` with
``--history`` say what an incident's culprits did before. The folder is plain Parquet, one file per
incident per table (docs/history.md), so DuckDB reads it here and Spark or Trino where a fleet
outgrows one machine. An incident is keyed by its ``incident_id``: adding the same bundle twice
changes nothing, and adding it again after more evidence was sealed into it replaces its rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.base import normalize_pci
from workbench import __version__
from workbench.errors import GpuwbError
from workbench.store import gpu_identity, journal
from workbench.store.bundle import Bundle
from workbench.store.row_columns import utc_naive
from workbench.times import iso, parse_iso

HISTORY_ENV = "GPUWB_HISTORY"
"""Where ``--history`` points when it is not given."""
CULPRIT_MIN_SCORE = 0.2
"""Hypotheses from this score up are culprits (the analysis' own line: below it no root cause stands out)."""
KEY_EVENTS_MAX = 200
MESSAGE_MAX = 300
TABLES = ("incidents", "culprits", "events")
"""One folder per table; ``incidents`` is written last, so an incident whose row is there is whole."""

SEVERITY_RANK = {"warning": 2, "error": 3, "critical": 4}
_SEVERITY_SQL = "CASE severity WHEN 'critical' THEN 4 WHEN 'error' THEN 3 ELSE 2 END"
_TS = pa.timestamp("us")
SCHEMAS = {
    "incidents": pa.schema([
        ("incident_id", pa.string()), ("root_digest", pa.string()), ("title", pa.string()),
        ("started_at", _TS), ("ended_at", _TS), ("workload", pa.string()), ("impact", pa.string()),
        ("causes", pa.list_(pa.string())), ("summary", pa.string()), ("bundle", pa.string()),
        ("merged_from", pa.list_(pa.string())), ("added_at", _TS), ("tool", pa.string())]),
    "culprits": pa.schema([
        ("incident_id", pa.string()), ("started_at", _TS), ("rank", pa.int32()), ("cause", pa.string()),
        ("layer", pa.string()), ("score", pa.float64()), ("marked", pa.bool_()), ("host", pa.string()),
        ("gpu", pa.string()), ("uuid", pa.string()), ("serial", pa.string()), ("gpu_name", pa.string())]),
    "events": pa.schema([
        ("incident_id", pa.string()), ("ts", _TS), ("host", pa.string()), ("gpu", pa.string()),
        ("layer", pa.string()), ("kind", pa.string()), ("severity", pa.string()), ("xid", pa.int32()),
        ("count", pa.int64()), ("message", pa.string())]),
}
"""The Parquet columns of each table (docs/history.md). Times are UTC without a zone, as in the bundle."""

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class HistoryError(GpuwbError):
    """The history folder cannot be used (missing, not a folder, unreadable files)."""


@dataclass(frozen=True)
class Culprit:
    """A cause named for an incident and where: host, GPU bus id, and the GPU's identity when known."""

    cause: str
    layer: str | None
    score: float | None
    marked: bool
    host: str | None
    gpu: str | None
    uuid: str | None = None
    serial: str | None = None
    gpu_name: str | None = None
    rank: int = 0

    def same_gpu(self, other: Culprit) -> bool:
        """Same physical GPU: on its UUID when both know it (unique per GPU), else its serial (a
        board's serial may cover several GPUs), else (when neither knows either) the same bus id on
        the same host. A GPU swapped into a slot is another GPU."""
        if not self.gpu or not other.gpu:
            return False
        if self.uuid and other.uuid:
            return self.uuid.lower() == other.uuid.lower()
        if self.serial and other.serial:
            return self.serial == other.serial
        if self.serial or self.uuid or other.serial or other.uuid:
            return False
        return self.host == other.host and self.gpu == other.gpu

    def gpu_label(self) -> str:
        """How a responder names the GPU: its serial, else UUID, else host and bus id."""
        if self.serial:
            return f"GPU serial {self.serial}"
        if self.uuid:
            return f"GPU {self.uuid}"
        return f"GPU {self.host or '-'} {self.gpu}"


@dataclass
class Record:
    """What the history keeps of one incident."""

    incident_id: str
    root_digest: str
    title: str
    started_at: datetime | None
    ended_at: datetime | None
    workload: str
    impact: str
    summary: str
    bundle: str
    culprits: list[Culprit] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    merged_from: list[str] = field(default_factory=list)
    """Incident ids of the bundles ``gpuwb merge`` made this one of: the same incident, told in parts."""

    @property
    def causes(self) -> list[str]:
        return list(dict.fromkeys(c.cause for c in self.culprits))


@dataclass(frozen=True)
class PastIncident:
    """An incident of the history as a repeat-offender or seen-before line names it."""

    incident_id: str
    started_at: datetime | None
    title: str
    causes: tuple[str, ...]
    host: str | None
    gpu: str | None
    xids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"incident_id": self.incident_id, "date": date_of(self.started_at),
                "started_at": iso(self.started_at, "seconds"), "title": self.title, "causes": list(self.causes),
                "host": self.host, "gpu": self.gpu, "xids": list(self.xids)}


@dataclass(frozen=True)
class Offender:
    """A GPU or host that is a culprit in one or more incidents of the history."""

    what: str  # "gpu" or "host"
    label: str
    host: str | None
    gpu: str | None
    uuid: str | None
    serial: str | None
    hosts: tuple[str, ...]
    gpus: tuple[str, ...]
    incidents: tuple[PastIncident, ...]

    def to_json(self) -> dict[str, Any]:
        return {"what": self.what, "label": self.label, "serial": self.serial, "uuid": self.uuid,
                "hosts": list(self.hosts), "gpus": list(self.gpus), "count": len(self.incidents),
                "incidents": [i.to_json() for i in self.incidents]}


# -- one incident, read from its bundle -------------------------------------------------------------

def record_of(bundle: Bundle, analysis: dict[str, Any] | None = None, *, events: bool = True) -> Record:
    """The history's view of a bundle: its analysis' culprits (and the responders' marked root
    cause), the GPUs' identity from the inventory, and (unless ``events`` is false: a look-up
    needs none) the key events."""
    if analysis is None:
        from workbench.analysis.engine import analyze

        analysis = analyze(bundle)
    meta = bundle.meta()
    state = journal.state(bundle)
    seal = bundle.last_seal()
    culprits = _culprits(bundle, analysis, state)
    first = analysis.get("first_anomaly") or {}
    window = analysis.get("window") or {}
    hyps = analysis.get("hypotheses") or []
    started = (parse_iso(first.get("ts")) or (parse_iso(hyps[0].get("first_seen")) if hyps else None)
               or parse_iso(window.get("start")) or parse_iso(meta.get("created_at")))
    title_field = state.fields.get("title")
    summary = ((state.summary.body.get("text") if state.summary else None)
               or (hyps[0].get("summary") if hyps else None) or "")
    return Record(
        incident_id=meta.get("incident_id") or bundle.path.stem,
        root_digest=(seal or {}).get("root_digest") or bundle.root_digest(),
        title=(title_field.body.get("value") if title_field else None) or meta.get("title") or "",
        started_at=started, ended_at=parse_iso(window.get("end")),
        workload=analysis.get("workload") or "unknown", impact=analysis.get("impact") or "none",
        summary=str(summary), bundle=str(bundle.path.resolve()), culprits=culprits,
        events=_key_events(bundle) if events else [], merged_from=_merged_from(meta.get("merged_from")))


def _merged_from(text: str | None) -> list[str]:
    """The incident ids in a merged bundle's ``merged_from`` meta (a JSON list of the inputs)."""
    try:
        inputs = json.loads(text) if text else []
    except ValueError:
        return []
    ids = [item.get("incident_id") for item in inputs if isinstance(item, dict)] if isinstance(inputs, list) else []
    return [str(i) for i in ids if i]


def _culprits(bundle: Bundle, analysis: dict[str, Any], state: journal.JournalState) -> list[Culprit]:
    found: list[Culprit] = []
    seen: set[tuple[Any, ...]] = set()
    marked = state.root_cause
    if marked and marked.body.get("cause"):
        found.append(Culprit(cause=str(marked.body["cause"]), layer=None, score=None, marked=True,
                             host=marked.body.get("host") or None, gpu=normalize_pci(marked.body.get("gpu")), rank=0))
    for hyp in analysis.get("hypotheses") or []:
        if (hyp.get("score") or 0) < CULPRIT_MIN_SCORE:
            continue
        found.append(Culprit(cause=hyp["cause"], layer=hyp.get("layer"), score=hyp.get("score"), marked=False,
                             host=hyp.get("host"), gpu=normalize_pci(hyp.get("gpu")), rank=int(hyp.get("rank") or 0)))
    out = []
    named = gpu_identity.aliases(bundle.con)  # the store's one answer: inventory first, then samples and events
    for c in found:
        key = (c.cause, c.host, c.gpu)
        if key in seen:
            continue
        seen.add(key)
        gpu = named.get((c.host, c.gpu)) if c.gpu else None
        out.append(Culprit(cause=c.cause, layer=c.layer, score=c.score, marked=c.marked, host=c.host, gpu=c.gpu,
                           uuid=gpu and gpu.uuid, serial=gpu and gpu.serial, gpu_name=gpu and gpu.name,
                           rank=c.rank))
    return out


def _key_events(bundle: Bundle) -> list[dict[str, Any]]:
    """Warning-or-worse events summed up per host, GPU, kind and Xid: the first time, how many, the
    worst severity and the first line; the worst and earliest :data:`KEY_EVENTS_MAX` groups."""
    rows = bundle.con.execute(
        "SELECT min(ts) AS first_ts, host, gpu, min(layer), kind, "
        "TRY_CAST(attrs->>'xid' AS INTEGER) AS xid_number, count(*), "
        f"max({_SEVERITY_SQL}) AS worst, arg_min(message, id) FROM event "
        "WHERE severity IN ('warning', 'error', 'critical') GROUP BY host, gpu, kind, xid_number "
        "ORDER BY worst DESC, first_ts NULLS LAST, host NULLS FIRST, gpu NULLS FIRST, kind LIMIT ?",
        [KEY_EVENTS_MAX]).fetchall()
    names = {rank: name for name, rank in SEVERITY_RANK.items()}
    out = [{"ts": ts, "host": host, "gpu": gpu, "layer": layer, "kind": kind, "severity": names.get(worst, "warning"),
            "xid": xid, "count": count, "message": (message or "")[:MESSAGE_MAX]}
           for ts, host, gpu, layer, kind, xid, count, worst, message in rows]
    return sorted(out, key=lambda e: (e["ts"] is None, e["ts"] or datetime.min))


# -- the folder ------------------------------------------------------------------------------------

class History:
    """The incident catalog in ``root``: add incidents, list repeat offenders, find what came before."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def open(cls, directory: str | os.PathLike[str], *, create: bool = False) -> History:
        """The history in ``directory``; ``create`` makes the folder (not its parents) when missing."""
        root = Path(directory)
        # a folder no option named comes from the environment: say so, or the user hunts for it
        where = f" (from ${HISTORY_ENV})" if str(directory) == os.environ.get(HISTORY_ENV) else ""
        if root.exists() and not root.is_dir():
            raise HistoryError(f"incident history {root}{where} is not a folder")
        if not root.exists():
            if not create:
                raise HistoryError(f"no incident history at {root}{where}: gpuwb history add creates it"
                                   + (f"; unset {HISTORY_ENV} to go without" if where else ""))
            if not root.parent.is_dir():
                raise HistoryError(f"cannot create incident history {root}{where}: folder {root.parent} "
                                   "does not exist")
            root.mkdir()
        return cls(root)

    def files(self, table: str) -> list[Path]:
        folder = self.root / table
        return sorted(folder.glob("*.parquet")) if folder.is_dir() else []

    def add(self, record: Record) -> str:
        """File one incident: ``added``, ``already in history`` (same incident, same seal: nothing
        written) or ``updated`` (same incident, sealed again since: its rows are replaced)."""
        name = _file_name(record.incident_id)
        existing = self._read("incidents", [self.root / "incidents" / f"{name}.parquet"])
        if existing:
            if existing[0]["root_digest"] == record.root_digest:
                return "already in history"
        added_at = datetime.now(timezone.utc).replace(tzinfo=None)
        inc = record.incident_id
        self._write("events", name, [{**e, "incident_id": inc} for e in record.events])
        self._write("culprits", name, [
            {"incident_id": inc, "started_at": record.started_at, "rank": c.rank, "cause": c.cause,
             "layer": c.layer, "score": c.score, "marked": c.marked, "host": c.host, "gpu": c.gpu,
             "uuid": c.uuid, "serial": c.serial, "gpu_name": c.gpu_name} for c in record.culprits])
        self._write("incidents", name, [{
            "incident_id": inc, "root_digest": record.root_digest, "title": record.title,
            "started_at": record.started_at, "ended_at": record.ended_at, "workload": record.workload,
            "impact": record.impact, "causes": record.causes, "summary": record.summary, "bundle": record.bundle,
            "merged_from": record.merged_from, "added_at": added_at, "tool": f"gpuwb {__version__}"}])
        return "updated" if existing else "added"

    def _write(self, table: str, name: str, rows: list[dict[str, Any]]) -> None:
        """One file, written beside its final name and renamed over it: a reader never sees half a file."""
        folder = self.root / table
        folder.mkdir(exist_ok=True)
        final = folder / f"{name}.parquet"
        tmp = folder / f".{name}.parquet.part-{os.getpid()}"
        try:
            pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), tmp)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)

    def _read(self, table: str, files: list[Path] | None = None, *, where: str | None = None,
              columns: str | None = None) -> list[dict[str, Any]]:
        """Rows of a table's files; ``where`` and ``columns`` are this module's own SQL, never user text."""
        files = [f for f in (self.files(table) if files is None else files) if f.is_file()]
        if not files:
            return []
        try:
            rel = duckdb.connect().read_parquet([str(f) for f in files])
            if where:
                rel = rel.filter(where)
            if columns:
                rel = rel.project(columns)
            return [dict(zip(rel.columns, row)) for row in rel.fetchall()]
        except duckdb.Error as exc:
            raise HistoryError(f"incident history {self.root} cannot be read: "
                               f"{(str(exc).splitlines() or [''])[0]}") from None

    def incidents(self) -> dict[str, dict[str, Any]]:
        """Every whole incident, by id; the per-node bundles of an incident added as a merged bundle
        too are that incident, counted once (as the merged one)."""
        rows = self._read("incidents")
        parts = {part for row in rows for part in row["merged_from"] or ()}
        return {row["incident_id"]: row for row in rows if row["incident_id"] not in parts}

    def culprit_rows(self) -> list[tuple[Culprit, PastIncident]]:
        """Each culprit of each whole incident with the incident as lines name it, oldest first."""
        incidents = self.incidents()
        xids = self._xids()
        out = []
        for row in self._read("culprits"):
            inc = incidents.get(row["incident_id"])
            if inc is None:  # its incident row is not written yet, or was never: not part of the history
                continue
            culprit = Culprit(cause=row["cause"], layer=row["layer"], score=row["score"], marked=bool(row["marked"]),
                              host=row["host"], gpu=row["gpu"], uuid=row["uuid"], serial=row["serial"],
                              gpu_name=row["gpu_name"], rank=row["rank"] or 0)
            seen = xids.get((inc["incident_id"], culprit.host, culprit.gpu), ())
            out.append((culprit, _past(inc, culprit, seen)))
        out.sort(key=lambda pair: (pair[1].started_at or datetime.min, pair[1].incident_id, pair[0].rank))
        return out

    def _xids(self) -> dict[tuple[str, str | None, str | None], tuple[int, ...]]:
        """Xid numbers of each incident per (host, GPU), and per (host, None) for the whole host."""
        found: dict[tuple[str, str | None, str | None], set[int]] = {}
        for row in self._read("events", where="xid IS NOT NULL", columns="incident_id, host, gpu, xid"):
            for key in ((row["incident_id"], row["host"], row["gpu"]), (row["incident_id"], row["host"], None)):
                found.setdefault(key, set()).add(int(row["xid"]))
        return {key: tuple(sorted(values)) for key, values in found.items()}

    def offenders(self, *, host: str | None = None, gpu: str | None = None, since: datetime | None = None,
                  min_incidents: int | None = None) -> list[Offender]:
        """GPUs and hosts named as culprits in at least ``min_incidents`` incidents (default:
        :func:`least_incidents`) since ``since``, most incidents first; ``host`` and ``gpu`` (serial,
        UUID or bus id) narrow the list."""
        least = least_incidents(min_incidents, host=host, gpu=gpu)
        since = utc_naive(since)
        rows = [(c, p) for c, p in self.culprit_rows()
                if since is None or (p.started_at is not None and p.started_at >= since)]
        found: list[Offender] = []
        for group in _gpu_groups([(c, p) for c, p in rows if c.gpu]):
            if ((gpu is None or any(_names_gpu(c, gpu) for c, _ in group))
                    and (host is None or any(c.host == host for c, _ in group))):
                found.append(_offender("gpu", group))
        if gpu is None:
            by_host: dict[str, list[tuple[Culprit, PastIncident]]] = {}
            for c, p in rows:
                if c.host and (host is None or c.host == host):
                    by_host.setdefault(c.host, []).append((c, p))
            found.extend(_offender("host", group) for group in by_host.values())
        found = [o for o in found if len(o.incidents) >= least]
        return sorted(found, key=lambda o: (-len(o.incidents), o.what != "gpu", o.label))

    def seen_before_bundle(self, bundle: Bundle, analysis: dict[str, Any]) -> list[dict[str, Any]]:
        """The ``seen_before`` entries of a bundle's analysis (docs/cli.md)."""
        return self.seen_before(record_of(bundle, analysis, events=False))

    def seen_before(self, record: Record) -> list[dict[str, Any]]:
        """For each culprit GPU and host of ``record``: the earlier incidents of the history that
        name the same GPU or host as a culprit (never ``record`` itself, never a later incident)."""
        itself = {record.incident_id, *record.merged_from}
        rows = [(c, p) for c, p in self.culprit_rows() if p.incident_id not in itself
                and (record.started_at is None or p.started_at is None or p.started_at <= record.started_at)]
        out: list[dict[str, Any]] = []
        for culprit in _distinct_gpus(record.culprits):
            past = _by_incident([p for c, p in rows if culprit.same_gpu(c)])
            out.append(_seen("gpu", culprit.gpu_label(), culprit, past))
        for host in dict.fromkeys(c.host for c in record.culprits if c.host):
            past = _by_incident([p for c, p in rows if c.host == host])
            out.append(_seen("host", f"host {host}", Culprit(cause="", layer=None, score=None, marked=False,
                                                             host=host, gpu=None), past))
        return out


def least_incidents(min_incidents: int | None, *, host: str | None = None, gpu: str | None = None) -> int:
    """Incidents an offender needs to be listed: as asked, else 2 (a repeat), else 1 when the
    question already names a host or a GPU (its whole record is wanted)."""
    if min_incidents is not None:
        return min_incidents
    return 1 if host is not None or gpu is not None else 2


def _file_name(incident_id: str) -> str:
    """The incident's file name: its id when that is a safe name (12 hex digits always are), else a hash."""
    if _SAFE_NAME.match(incident_id) and not incident_id.startswith("."):
        return incident_id
    return hashlib.sha256(incident_id.encode()).hexdigest()[:24]


def _past(inc: dict[str, Any], culprit: Culprit, xids: tuple[int, ...]) -> PastIncident:
    return PastIncident(incident_id=inc["incident_id"], started_at=inc["started_at"], title=inc["title"] or "",
                        causes=(culprit.cause,), host=culprit.host, gpu=culprit.gpu, xids=xids)


def _by_incident(past: Iterable[PastIncident]) -> list[PastIncident]:
    """One line per incident, its causes at that place merged, oldest first."""
    merged: dict[str, PastIncident] = {}
    for p in past:
        had = merged.get(p.incident_id)
        if had is None:
            merged[p.incident_id] = p
        else:
            causes = tuple(dict.fromkeys(had.causes + p.causes))
            merged[p.incident_id] = PastIncident(had.incident_id, had.started_at, had.title, causes, had.host, had.gpu,
                                                 tuple(sorted(set(had.xids) | set(p.xids))))
    return sorted(merged.values(), key=lambda p: (p.started_at or datetime.min, p.incident_id))


def _distinct_gpus(culprits: Iterable[Culprit]) -> list[Culprit]:
    out: list[Culprit] = []
    for c in culprits:
        if c.gpu and not any(c.same_gpu(o) for o in out):
            out.append(c)
    return out


def _gpu_groups(rows: list[tuple[Culprit, PastIncident]]) -> list[list[tuple[Culprit, PastIncident]]]:
    """Culprit rows that name the same physical GPU (:meth:`Culprit.same_gpu`), grouped. Two groups
    that know different UUIDs stay apart even when a row without a UUID matches both on the serial."""
    parent = list(range(len(rows)))
    uuids = [{c.uuid.lower()} if c.uuid else set() for c, _ in rows]

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    buckets: dict[tuple[str, ...], list[int]] = {}
    for i, (c, _) in enumerate(rows):
        if c.serial:
            buckets.setdefault(("serial", c.serial), []).append(i)
        if c.uuid:
            buckets.setdefault(("uuid", c.uuid.lower()), []).append(i)
        if not c.serial and not c.uuid:
            buckets.setdefault(("slot", c.host or "", c.gpu or ""), []).append(i)
    for members in buckets.values():
        for i in members:
            for j in members:
                if i < j and rows[i][0].same_gpu(rows[j][0]):
                    a, b = find(i), find(j)
                    if a != b and not (uuids[a] and uuids[b] and uuids[a] != uuids[b]):
                        parent[b] = a
                        uuids[a] |= uuids[b]
    groups: dict[int, list[tuple[Culprit, PastIncident]]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(find(i), []).append(row)
    return list(groups.values())


def _names_gpu(culprit: Culprit, wanted: str) -> bool:
    """``--gpu``: a serial, a UUID (any case) or a PCI bus id in any spelling."""
    wanted = wanted.strip()
    return (wanted == culprit.serial or (culprit.uuid or "").lower() == wanted.lower()
            or (culprit.gpu is not None and normalize_pci(wanted) == culprit.gpu))


def _offender(what: str, group: list[tuple[Culprit, PastIncident]]) -> Offender:
    culprits = [c for c, _ in group]
    latest = culprits[-1]
    serial = next((c.serial for c in reversed(culprits) if c.serial), None)
    uuid = next((c.uuid for c in reversed(culprits) if c.uuid), None)
    if what == "gpu":
        label = Culprit(cause="", layer=None, score=None, marked=False, host=latest.host, gpu=latest.gpu,
                        uuid=uuid, serial=serial).gpu_label()
    else:
        label, serial, uuid = f"host {latest.host}", None, None
    return Offender(what=what, label=label, host=latest.host, gpu=latest.gpu if what == "gpu" else None,
                    uuid=uuid, serial=serial, hosts=tuple(dict.fromkeys(c.host for c in culprits if c.host)),
                    gpus=tuple(dict.fromkeys(c.gpu for c in culprits if c.gpu)),
                    incidents=tuple(_by_incident(p for _, p in group)))


def _seen(what: str, label: str, culprit: Culprit, past: list[PastIncident]) -> dict[str, Any]:
    return {"what": what, "label": label, "host": culprit.host, "gpu": culprit.gpu, "serial": culprit.serial,
            "uuid": culprit.uuid, "count": len(past), "incidents": [p.to_json() for p in past]}


# -- reading and telling ---------------------------------------------------------------------------

def history_dir(option: str | None) -> str | None:
    """``--history`` if given, else ``$GPUWB_HISTORY``; None when neither is set."""
    return option or os.environ.get(HISTORY_ENV) or None


def date_of(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d") if ts else "undated"


def incidents_phrase(incidents: list[dict[str, Any]], *, hosts: bool = False) -> str:
    """``1 incident (2025-03-10 ecc_uncorrectable with Xid 45 63 94 on node04)``: how many, when, why
    (and where)."""
    n = len(incidents)
    listed = "; ".join(f"{i['date']} {', '.join(i['causes'])}" + (f" with {xid_text(i['xids'])}" if i["xids"] else "")
                       + (f" on {i['host']}" if hosts and i["host"] else "") for i in incidents)
    return f"{n} incident{'s' if n != 1 else ''} ({listed})"


def xid_text(xids: Iterable[int]) -> str:
    return "Xid " + " ".join(str(x) for x in xids)


def seen_before_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The text ``analyze`` prints: one line per culprit GPU or host the history has seen before."""
    hits = [e for e in entries if e["count"]]
    if not hits:
        return ["History: no earlier incident names these culprits."]
    out = []
    for e in hits:
        where = f" ({e['host'] or '-'} {e['gpu']})" if e["what"] == "gpu" and (e["serial"] or e["uuid"]) else ""
        out.append(f"{e['label']}{where} seen before: {incidents_phrase(e['incidents'], hosts=e['what'] == 'gpu')}")
    return out
