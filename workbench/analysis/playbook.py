"""Layered playbooks as data: load, validate and evaluate them against a bundle.

The checks (playbooks/checks/) are SQL written once; each check's ``runs_in`` says which
workload's playbook runs it, at which place in its layer (the order a responder of that workload
looks) and with which thresholds, so a new check is one entry in one file. training.yaml and
inference.yaml hold only what is playbook-wide: the layers' order and focus, stage 0, recovery. The
schema lives here, in code, as typed models: a check or playbook that names an unknown cause,
layer, workload or parameter is refused at load time with the file and field in the message.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb
import yaml

import playbooks
from collectors.base import gpu_id
from collectors.catalog import package_text
from collectors.framework.vocabulary import LAYERS
from workbench.analysis.causes import load_causes
from workbench.errors import GpuwbError
from workbench.store.schema import EVIDENCE_TABLES
from workbench.times import iso

WORKLOADS = ("training", "inference")
ROLES = ("cause", "locator")
ROW_COLUMNS: dict[str, str] = {
    "ts": "TIMESTAMP", "host": "VARCHAR", "gpu": "VARCHAR", "rank": "INTEGER", "job": "VARCHAR",
    "kind": "VARCHAR", "text": "VARCHAR", "source": "VARCHAR", "layer": "VARCHAR", "artifact": "VARCHAR",
    "line": "BIGINT", "strength": "DOUBLE", "cause": "VARCHAR", "nodes": "VARCHAR"}
"""The columns a check's rows may carry; any it leaves out are NULL."""

ROWS_PER_GROUP = 20
EARLIEST_PER_GROUP = 5
"""Rows kept per (cause, host, GPU): the strongest and the earliest; the count is always exact."""

_PARAM = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_NEED = re.compile(r"^(kind|table|collector):[A-Za-z0-9_]+$")
_ENGINE_PARAMS = {"horizon_s": 3600.0, "tolerance_s": 5.0}


class PlaybookError(GpuwbError, ValueError):
    """A playbook or check file that does not match the schema; names the file and field."""


@dataclass(frozen=True)
class Run:
    """Where a workload's playbook runs a check: its place in the layer and its overrides."""

    order: int
    params: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0


@dataclass(frozen=True)
class Check:
    """One question asked of the evidence, with the SQL that answers it."""

    id: str
    layer: str
    title: str
    question: str
    why: str
    sql: str
    causes: tuple[str, ...]
    needs: tuple[str, ...] = ()
    role: str = "cause"
    fault: float = 0.6
    suspect: float = 0.3
    params: dict[str, Any] = field(default_factory=dict)
    weight: float = 1.0
    runs_in: dict[str, Run] = field(default_factory=dict)
    """workload -> where its playbook runs this check (none: the check is in no playbook)"""
    catalog: tuple[tuple[str, str], ...] = ()
    """(signature id, cause) of the catalog entries whose cause this check counts: in a playbook, each
    cause a signature names is counted by one check, the first of the cause's own layer that lists it"""

    def bound_params(self) -> dict[str, Any]:
        """Only the parameters the SQL names: DuckDB refuses extra ones."""
        return {name: self.params[name] for name in sorted(set(_PARAM.findall(self.sql)))}


@dataclass(frozen=True)
class Step:
    """A stage-0 or recovery step; its optional SQL shows what the evidence says about it."""

    id: str
    title: str
    action: str
    why: str
    sql: str | None = None


@dataclass(frozen=True)
class LayerPlan:
    layer: str
    focus: str
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class Playbook:
    workload: str
    title: str
    params: dict[str, float]
    stage0: tuple[Step, ...]
    layers: tuple[LayerPlan, ...]
    recover: tuple[Step, ...]
    symptoms_sql: str

    def checks(self) -> list[Check]:
        return [c for plan in self.layers for c in plan.checks]


# -- loading and validation --------------------------------------------------------------------
def _read_yaml(name: str) -> Any:
    text = package_text(playbooks, name)
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml when present: 10x
    except yaml.YAMLError as exc:
        raise PlaybookError(f"{name}: not valid YAML: {exc}") from None


def _text(where: str, entry: dict[str, Any], key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PlaybookError(f"{where}: {key} must be non-empty text")
    return value.strip()


def _keys(where: str, entry: Any, required: set[str], optional: set[str]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise PlaybookError(f"{where}: must be a mapping")
    missing = required - set(entry)
    if missing:
        raise PlaybookError(f"{where}: missing {', '.join(sorted(missing))}")
    unknown = set(entry) - required - optional
    if unknown:
        raise PlaybookError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    return entry


def _params(where: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, (int, float)) for v in value.values()):
        raise PlaybookError(f"{where}: params must map names to numbers")
    return dict(value)


def parse_library(data: Any, name: str = "checks.yaml") -> tuple[dict[str, Check], str]:
    """The check library as one document (checks_document) -> (check id -> Check, the symptoms SQL)."""
    data = _keys(name, data, {"symptoms", "checks"}, set())
    symptoms = _keys(f"{name}: symptoms", data["symptoms"], {"sql"}, {"why"})
    causes = load_causes()
    checks: dict[str, Check] = {}
    if not isinstance(data["checks"], dict):
        raise PlaybookError(f"{name}: checks must be a mapping of id -> check")
    for cid, entry in data["checks"].items():
        where = f"{name}: check {cid}"
        _keys(where, entry, {"layer", "title", "question", "why", "sql", "causes", "verdict"},
              {"needs", "role", "params", "runs_in"})
        if entry["layer"] not in LAYERS:
            raise PlaybookError(f"{where}: layer {entry['layer']!r} is not one of {', '.join(LAYERS)}")
        cause_ids = entry["causes"]
        if not isinstance(cause_ids, list) or not cause_ids:
            raise PlaybookError(f"{where}: causes must be a non-empty list")
        unknown = [c for c in cause_ids if c not in causes]
        if unknown:
            raise PlaybookError(f"{where}: unknown cause id(s) {', '.join(unknown)} (see rules/causes/)")
        needs = entry.get("needs") or []
        bad = [n for n in needs if not isinstance(n, str) or not _NEED.match(n)]
        if bad:
            raise PlaybookError(f"{where}: needs entries must look like kind:K, table:T or collector:C, not {bad}")
        role = entry.get("role", "cause")
        if role not in ROLES:
            raise PlaybookError(f"{where}: role must be one of {', '.join(ROLES)}")
        verdict = _keys(f"{where}: verdict", entry["verdict"], {"fault", "suspect"}, set())
        if not all(isinstance(verdict[k], (int, float)) and 0 <= verdict[k] <= 1 for k in verdict) \
                or verdict["suspect"] > verdict["fault"]:
            raise PlaybookError(f"{where}: verdict thresholds must be 0..1 with suspect <= fault")
        params = _params(where, entry.get("params"))
        sql = _text(where, entry, "sql").rstrip(";")
        missing = set(_PARAM.findall(sql)) - set(params)
        if missing:
            raise PlaybookError(f"{where}: the SQL uses ${', $'.join(sorted(missing))} without a default in params")
        checks[cid] = Check(id=cid, layer=entry["layer"], title=_text(where, entry, "title"),
                            question=_text(where, entry, "question"), why=_text(where, entry, "why"), sql=sql,
                            causes=tuple(cause_ids), needs=tuple(needs), role=role, fault=float(verdict["fault"]),
                            suspect=float(verdict["suspect"]), params=params,
                            runs_in=_runs_in(where, entry.get("runs_in"), params))
    return checks, _text(f"{name}: symptoms", symptoms, "sql").rstrip(";")


def _runs_in(where: str, value: Any, defaults: dict[str, Any]) -> dict[str, Run]:
    """A check's ``runs_in``: workload -> {order, params (overrides of the check's own), weight}."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PlaybookError(f"{where}: runs_in must map workloads to {{order, params, weight}}")
    runs = {}
    for workload, spec in value.items():
        at = f"{where}: runs_in.{workload}"
        if workload not in WORKLOADS:
            raise PlaybookError(f"{at}: workload must be one of {', '.join(WORKLOADS)}")
        _keys(at, spec, {"order"}, {"params", "weight"})
        if not isinstance(spec["order"], int) or isinstance(spec["order"], bool):
            raise PlaybookError(f"{at}: order must be a whole number (its place in the layer, lowest first)")
        over = _params(at, spec.get("params"))
        unknown = set(over) - set(defaults)
        if unknown:
            raise PlaybookError(f"{at}: the check has no parameter(s) {', '.join(sorted(unknown))}")
        weight = spec.get("weight", 1.0)
        if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 < weight <= 2:
            raise PlaybookError(f"{at}: weight must be in (0, 2]")
        runs[workload] = Run(order=spec["order"], params=over, weight=float(weight))
    return runs


def _steps(where: str, value: Any) -> tuple[Step, ...]:
    if not isinstance(value, list) or not value:
        raise PlaybookError(f"{where}: must be a non-empty list of steps")
    steps = []
    for n, entry in enumerate(value):
        at = f"{where}[{n}]"
        _keys(at, entry, {"id", "title", "action", "why"}, {"sql"})
        sql = entry.get("sql")
        if sql is not None and (not isinstance(sql, str) or not sql.strip()):
            raise PlaybookError(f"{at}: sql must be text")
        steps.append(Step(id=_text(at, entry, "id"), title=_text(at, entry, "title"),
                          action=_text(at, entry, "action"), why=_text(at, entry, "why"),
                          sql=sql.strip().rstrip(";") if sql else None))
    ids = [s.id for s in steps]
    if len(set(ids)) != len(ids):
        raise PlaybookError(f"{where}: step ids must be unique")
    return tuple(steps)


def parse_playbook(data: Any, library: dict[str, Check], symptoms_sql: str, name: str) -> Playbook:
    """A workload playbook: its layers run the library's checks whose ``runs_in`` names the workload,
    in their ``order``, with its overrides."""
    data = _keys(name, data, {"workload", "title", "stage0", "layers", "recover"}, {"params"})
    if data["workload"] not in WORKLOADS:
        raise PlaybookError(f"{name}: workload must be one of {', '.join(WORKLOADS)}")
    params = dict(_ENGINE_PARAMS)
    extra = _params(f"{name}: params", data.get("params"))
    unknown = set(extra) - set(_ENGINE_PARAMS)
    if unknown:
        raise PlaybookError(f"{name}: params: unknown engine parameter(s) {', '.join(sorted(unknown))}")
    params.update({k: float(v) for k, v in extra.items()})
    layers = data["layers"]
    if not isinstance(layers, list) or [e.get("layer") if isinstance(e, dict) else None for e in layers] \
            != list(LAYERS):
        raise PlaybookError(f"{name}: layers must be the five layers in order: {', '.join(LAYERS)}")
    plans = []
    workload = data["workload"]
    for entry in layers:
        where = f"{name}: layer {entry['layer']}"
        _keys(where, entry, {"layer", "focus"}, set())
        runs = sorted(((c.runs_in[workload].order, c.id, c) for c in library.values()
                       if c.layer == entry["layer"] and workload in c.runs_in), key=lambda r: r[:2])
        if not runs:
            raise PlaybookError(f"{where}: no check of the layer runs in {workload} "
                                f"(give one 'runs_in: {{{workload}: {{order: N}}}}' in playbooks/checks/)")
        for (order, a, _), (same, b, _) in zip(runs, runs[1:]):
            if order == same:
                raise PlaybookError(f"{where}: checks {a} and {b} both have runs_in.{workload}.order {order}")
        resolved = tuple(replace(c, params={**c.params, **c.runs_in[workload].params},
                                 weight=c.runs_in[workload].weight) for _, _, c in runs)
        plans.append(LayerPlan(layer=entry["layer"], focus=_text(where, entry, "focus"), checks=resolved))
    plans = _home_signature_causes(plans)
    return Playbook(workload=data["workload"], title=_text(name, data, "title"), params=params,
                    stage0=_steps(f"{name}: stage0", data["stage0"]), layers=tuple(plans),
                    recover=_steps(f"{name}: recover", data["recover"]), symptoms_sql=symptoms_sql)


def checks_document() -> dict[str, Any]:
    """playbooks/checks/ as one document: the symptoms query and every layer file's checks, in the
    walk's order. A check in the wrong layer's file, or one id in two files, is refused by name."""
    doc: dict[str, Any] = {"symptoms": _read_yaml("checks/symptoms.yaml").get("symptoms"), "checks": {}}
    for layer in LAYERS:
        name = f"checks/{layer}.yaml"
        part = _read_yaml(name)
        if not isinstance(part, dict) or part.get("layer") != layer or not isinstance(part.get("checks"), dict):
            raise PlaybookError(f"{name}: 'layer: {layer}' and a 'checks' mapping are required")
        for cid, entry in part["checks"].items():
            if cid in doc["checks"]:
                raise PlaybookError(f"{name}: check {cid} is also in another layer's file")
            if isinstance(entry, dict) and entry.get("layer", layer) != layer:
                raise PlaybookError(f"{name}: check {cid} says layer {entry.get('layer')!r}, its file is {layer}")
            doc["checks"][cid] = entry
    return doc


def _home_signature_causes(plans: list[LayerPlan]) -> list[LayerPlan]:
    """Give every cause the signature catalog names to one check of the playbook: the first cause-role
    check of the cause's own layer that lists it, else the first anywhere. A signature's ``cause:`` is
    then evidence like a row of that check's SQL, so no check re-matches the catalog's phrases."""
    from collectors.framework.signatures import load_signatures  # deferred: only analysis reads it

    layers = {cid: entry["layer"] for cid, entry in load_causes().items()}
    checks = [c for plan in plans for c in plan.checks if c.role == "cause"]
    homed: dict[str, list[tuple[str, str]]] = {}
    for sig in load_signatures():
        # a code-table entry (a CUDA error by name or code) names its own cause
        for cause in sorted({sig.cause} - {None} | (sig.table.causes() if sig.table is not None else set())):
            own = [c for c in checks if cause in c.causes]
            home = next((c for c in own if c.layer == layers.get(cause)), own[0] if own else None)
            if home is not None:
                homed.setdefault(home.id, []).append((sig.id, cause))
    return [replace(plan, checks=tuple(replace(c, catalog=tuple(homed.get(c.id, ()))) for c in plan.checks))
            for plan in plans]


_CATALOG_SQL = """
    SELECT e.ts, e.host, e.gpu, e.rank, e.job, e.kind, e.message AS text, e.source, e.layer, e.artifact,
           e.line, s.cause,
           CASE e.severity WHEN 'critical' THEN 0.8 WHEN 'error' THEN 0.7 WHEN 'warning' THEN 0.45 ELSE 0.25 END
             AS strength
    FROM event AS e
    JOIN (SELECT unnest($signatures) AS id, unnest($causes) AS cause) AS s
      ON e.attrs->>'signature' = s.id AND e.attrs->>'$.causes[0]' = s.cause
"""
"""A catalog entry's lines as check rows: its cause, a strength from the severity the entry gave the line."""


@functools.lru_cache(maxsize=1)
def load_library() -> tuple[dict[str, Check], str]:
    return parse_library(checks_document(), "playbooks/checks/")


@functools.lru_cache(maxsize=4)
def load_playbook(workload: str) -> Playbook:
    """The playbook for a workload; ``mixed`` and ``unknown`` walk both, training's order first."""
    library, symptoms = load_library()
    if workload in WORKLOADS:
        return parse_playbook(_read_yaml(f"{workload}.yaml"), library, symptoms, f"{workload}.yaml")
    if workload not in ("mixed", "unknown"):
        raise PlaybookError(f"unknown workload {workload!r}: training, inference, mixed or unknown")
    return combine(load_playbook("training"), load_playbook("inference"), workload)


def combine(first: Playbook, second: Playbook, workload: str) -> Playbook:
    """Both walks in one: each layer runs first's checks, then second's that first lacks."""
    plans = []
    for a, b in zip(first.layers, second.layers):
        seen = {c.id for c in a.checks}
        plans.append(LayerPlan(layer=a.layer, focus=a.focus + " " + b.focus,
                               checks=a.checks + tuple(c for c in b.checks if c.id not in seen)))

    def merged(x: tuple[Step, ...], y: tuple[Step, ...]) -> tuple[Step, ...]:
        ids = {s.id for s in x}
        return x + tuple(s for s in y if s.id not in ids)

    params = {k: max(first.params[k], second.params[k]) for k in first.params}
    return Playbook(workload=workload, title=f"{first.title} / {second.title}", params=params,
                    stage0=merged(first.stage0, second.stage0), layers=tuple(plans),
                    recover=merged(first.recover, second.recover), symptoms_sql=first.symptoms_sql)


# -- evaluation --------------------------------------------------------------------------------
def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """Register what checks may join besides the bundle: ``xid_catalog`` (one row per Xid and cause).

    Temporary, so it works on a read-only bundle and is never stored in the evidence."""
    from collectors.framework.xid_catalog import CatalogError, catalog_source, parse_catalog

    try:
        entries, _ = parse_catalog(catalog_source())
    except CatalogError as exc:  # an edited catalog is input like an edited playbook: one line
        raise PlaybookError(f"xid.yaml: {exc}") from None
    rows = [(code, cause, info.follower, info.severity) for code, info in entries.items() for cause in info.causes]
    con.execute("CREATE OR REPLACE TEMP TABLE xid_catalog "
                "(xid INTEGER, cause VARCHAR, follower BOOLEAN, severity VARCHAR)")
    if rows:
        con.executemany("INSERT INTO xid_catalog VALUES (?, ?, ?, ?)", rows)


@dataclass
class Presence:
    """What kinds of evidence a bundle holds: decides clear vs no_evidence."""

    kinds: set[str]
    tables: set[str]
    collectors: set[str]

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> Presence:
        kinds = {r[0] for r in con.execute("SELECT DISTINCT kind FROM event").fetchall()}
        tables = {t for t in EVIDENCE_TABLES
                  if con.execute(f"SELECT EXISTS (SELECT 1 FROM {t})").fetchall()[0][0]}
        collectors = {r[0] for r in con.execute(
            "SELECT DISTINCT collector FROM artifact WHERE collector IS NOT NULL").fetchall()}
        return cls(kinds=kinds, tables=tables, collectors=collectors)

    def has(self, need: str) -> bool:
        what, name = need.split(":", 1)
        pool = {"kind": self.kinds, "table": self.tables, "collector": self.collectors}[what]
        return name in pool


@dataclass
class CheckResult:
    """A check evaluated: its rows (strongest and earliest per place), exact count and verdict."""

    check: Check
    rows: list[dict[str, Any]]
    total: int
    verdict: str
    max_strength: float = 0.0
    error: str | None = None


def run_rows(con: duckdb.DuckDBPyConnection, sql: str, params: dict[str, Any], *,
             default_strength: float = 0.5,
             group_by: tuple[str, ...] = ("cause", "host", "gpu")) -> tuple[list[dict[str, Any]], int]:
    """Run a check-shaped query; returns (kept rows with every ROW_COLUMNS key, exact row count).

    Only the strongest and the earliest rows of each ``group_by`` group come back, so a million
    matching lines cost a million-row scan in DuckDB, not a million Python dicts."""
    cur = con.execute(f"SELECT * FROM ({sql}) AS q LIMIT 0", params)
    cur.fetchall()
    have = {d[0] for d in cur.description}
    proj = ", ".join(f"TRY_CAST(q.{name} AS {typ}) AS {name}" if name in have else f"NULL::{typ} AS {name}"
                     for name, typ in ROW_COLUMNS.items())
    part = ", ".join(group_by)
    wrapped = (f"SELECT *, count(*) OVER () AS _total FROM (SELECT {proj} FROM ({sql}) AS q) AS p "
               f"QUALIFY row_number() OVER (PARTITION BY {part} ORDER BY strength DESC NULLS LAST, "
               f"ts NULLS LAST) <= {ROWS_PER_GROUP} "
               f"OR row_number() OVER (PARTITION BY {part} ORDER BY ts NULLS LAST) <= {EARLIEST_PER_GROUP}")
    cur = con.execute(wrapped, params)
    names = [d[0] for d in cur.description]
    rows = []
    total = 0
    for values in cur.fetchall():
        row = dict(zip(names, values))
        total = row.pop("_total")
        if row["strength"] is None:
            row["strength"] = default_strength
        if row["gpu"]:
            row["gpu"] = gpu_id(row["gpu"])
        rows.append(row)
    return rows, total


def evaluate_check(con: duckdb.DuckDBPyConnection, check: Check, presence: Presence) -> CheckResult:
    """Run one check; a broken query is reported as an error on the check, never raised."""
    try:
        rows, total = run_rows(con, check.sql, check.bound_params())
        if check.catalog:
            params = {"signatures": [sig for sig, _ in check.catalog], "causes": [cause for _, cause in check.catalog]}
            seen = {(r["artifact"], r["line"]) for r in rows if r["line"] is not None}
            found, found_total = run_rows(con, _CATALOG_SQL, params)
            more = [r for r in found if (r["artifact"], r["line"]) not in seen]
            rows, total = rows + more, total + found_total - (len(found) - len(more))
    except duckdb.Error as exc:
        return CheckResult(check=check, rows=[], total=0, verdict="no_evidence",
                           error=str(exc).splitlines()[0][:300])
    for row in rows:
        row["strength"] = min(1.0, max(0.0, float(row["strength"]) * check.weight))
        if row["cause"] not in check.causes:
            row["cause"] = check.causes[0]
        row["layer"] = row["layer"] or check.layer
        row["check"] = check.id
    strongest = max((r["strength"] for r in rows), default=0.0)
    if strongest >= check.fault:
        verdict = "fault"
    elif strongest >= check.suspect:
        verdict = "suspect"
    elif rows or not check.needs or any(presence.has(n) for n in check.needs):
        verdict = "clear"
    else:
        verdict = "no_evidence"
    return CheckResult(check=check, rows=rows, total=total, verdict=verdict, max_strength=strongest)


def evaluate_step(con: duckdb.DuckDBPyConnection, step: Step) -> dict[str, Any]:
    """A stage-0/recovery step with what the bundle says: ok, attention, or todo (no evidence)."""
    out: dict[str, Any] = {"id": step.id, "title": step.title, "action": step.action, "why": step.why,
                           "status": "todo", "evidence": []}
    if not step.sql:
        return out
    try:
        cur = con.execute(step.sql)
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
    except duckdb.Error as exc:
        out["error"] = str(exc).splitlines()[0][:300]
        return out
    for row in rows:
        ts = row.get("ts")
        out["evidence"].append({"ts": iso(ts, "auto"), "host": row.get("host"),
                                "text": row.get("text"), "status": row.get("status") or "attention"})
    if out["evidence"]:
        out["status"] = "attention" if any(e["status"] == "attention" for e in out["evidence"]) else "ok"
    return out
