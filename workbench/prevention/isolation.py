"""Isolation and change rules: what an operator applies after a postmortem whose cause is a bad node,
a bad GPU, a noisy neighbour or a bad release (the templates of rules/isolation.yaml, chosen per cause
by the ``isolation:`` of rules/causes/<cause_id>.yaml).

The rules are filled in for the analysis' top causes and their places: Slurm and kubectl commands,
Kubernetes objects and change-freeze records. Values come from evidence (host names, bus ids, the
incident id, job users), so none of them is ever spliced into shell text: a command is an argv list,
each template argument filled on its own and written out with :func:`shlex.join`; objects and records
are data dumped as YAML. Values that are not what their slot expects (a host name with a quote in it)
are refused and the template is left out with a note, rather than quoted into something an operator
might run.
"""

from __future__ import annotations

import copy
import functools
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import yaml

import rules
from collectors.catalog import package_text
from workbench.analysis.causes import cause_file, cause_sections, load_causes
from workbench.errors import GpuwbError
from workbench.store.bundle import Bundle
from workbench.times import iso

FAMILIES = ("slurm", "kubectl", "kubernetes", "freeze")
BODY = {"slurm": "argv", "kubectl": "argv", "kubernetes": "object", "freeze": "record"}
REMEDIES = ("placement", "none")
FILES = {"slurm": "slurm.sh", "kubectl": "kubectl.sh", "kubernetes": "k8s.yaml", "freeze": "change-freeze.yaml"}
MAX_PLACES = 5
APPLIED = ("slurm", "kubectl")
"""Families whose commands ``gpuwb report --apply`` runs (the objects and freezes are for ``kubectl apply``
and the change calendar)."""
COMMAND_TIMEOUT_S = 60.0
CONTEXT_VALUES = ("cause", "incident", "host", "gpu", "reason", "job", "excluded", "rerun_nodes", "user",
                  "reservation", "name", "namespace", "freeze_start", "freeze_end", "freeze_reason")
"""Placeholders filled from the incident; every key of ``params`` is one too."""
ISOLATING = ("drain", "exclude_from_job")
"""Slurm templates that take a place's node out of the job's rerun."""
MISSING = {
    "host": "the place has no usable node name",
    "job": "no failed job in the evidence",
    "user": "the job's user is unknown",
    "excluded": "no node is isolated",
    "rerun_nodes": "no healthy node of the job is left to reserve",
    "namespace": "no Kubernetes namespace in the evidence",
}

_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_SLURM_NODE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?")
_K8S_NODE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
_JOB = re.compile(r"[0-9]{1,12}(_[0-9]{1,9})?")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_WORD_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class IsolationError(GpuwbError, ValueError):
    """rules/isolation.yaml does not match its schema; the message names the entry."""


@dataclass(frozen=True)
class Place:
    """One cause where the analysis put it: a host, and for a GPU cause the GPU's bus id."""

    cause: str
    host: str | None = None
    gpu: str | None = None
    title: str = ""
    summary: str = ""


@dataclass(frozen=True)
class Context:
    """What the rules need to know about the incident beyond the places."""

    incident: str
    at: datetime
    job: str | None = None
    user: str | None = None
    job_nodes: tuple[str, ...] = ()
    namespace: str | None = None
    changes: tuple[dict[str, Any], ...] = field(default_factory=tuple)


# -- the catalog -----------------------------------------------------------------------------------

def validate_isolation(data: Any, causes: dict[str, Any]) -> dict[str, Any]:
    """Check the rules' shape: known sections, templates with a body and known placeholders, cause ids
    of the cause catalog naming existing templates. Returns the data unchanged when valid."""
    if not isinstance(data, dict):
        raise IsolationError("isolation.yaml: top level must be a mapping")
    unknown = sorted(set(data) - {"params", "causes", *FAMILIES})
    if unknown:
        raise IsolationError(f"isolation.yaml: unknown section(s) {', '.join(unknown)}")
    params = data.get("params") or {}
    _check_params("isolation.yaml: params", params)
    known = set(CONTEXT_VALUES) | set(params)
    for family in FAMILIES:
        for name, template in (data.get(family) or {}).items():
            where = f"isolation.yaml: {family}.{name}"
            if not isinstance(template, dict) or not isinstance(template.get("what"), str) \
                    or BODY[family] not in template:
                raise IsolationError(f"{where}: needs 'what' (text) and '{BODY[family]}'")
            if not isinstance(template.get("once_per_node", False), bool):
                raise IsolationError(f"{where}: once_per_node must be true or false")
            if family in ("slurm", "kubectl") and not (
                    isinstance(template["argv"], list) and template["argv"]
                    and all(isinstance(a, str) for a in template["argv"])):
                raise IsolationError(f"{where}: argv must be a list of strings")
            strange = sorted(set(_placeholders(template[BODY[family]])) - known)
            if strange:
                raise IsolationError(f"{where}: unknown placeholder(s) {', '.join(strange)}")
    for cid, entry in (data.get("causes") or {}).items():
        at = f"{cause_file(cid)}: isolation"
        if cid not in causes:
            raise IsolationError(f"{at}: not a cause id of the catalog")
        if not isinstance(entry, dict) or entry.get("remedy") not in REMEDIES or not entry.get("why"):
            raise IsolationError(f"{at}: needs remedy ({' or '.join(REMEDIES)}) and why")
        named = [(f, n) for f in FAMILIES for n in entry.get(f) or []]
        if entry["remedy"] == "none" and named:
            raise IsolationError(f"{at}: remedy none names templates")
        if entry["remedy"] == "placement" and not named:
            raise IsolationError(f"{at}: remedy placement names no template")
        for family, name in named:
            if name not in (data.get(family) or {}):
                raise IsolationError(f"{at}: no {family} template {name!r}")
        extra = sorted(set(entry.get("params") or {}) - set(params))
        if extra:
            raise IsolationError(f"{at}: params {', '.join(extra)} are not in the top-level params")
        _check_params(f"{at}: params", {**params, **(entry.get("params") or {})})
    return data


def _check_params(where: str, params: dict[str, Any]) -> None:
    if not all(isinstance(v, str) for v in params.values()):
        raise IsolationError(f"{where}: every value must be a string")
    for key in ("freeze_hours", "reservation_hours"):
        if not str(params.get(key, "")).isdigit():
            raise IsolationError(f"{where}: {key} must be a whole number of hours")


@functools.lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    data = yaml.load(package_text(rules, "isolation.yaml"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if isinstance(data, dict) and "causes" in data:
        raise IsolationError("isolation.yaml: causes: a cause's isolation rule is the isolation: of its own "
                             "rules/causes/<cause_id>.yaml")
    return validate_isolation({**(data or {}), "causes": cause_sections("isolation")}, load_causes())


def load_isolation() -> dict[str, Any]:
    """The validated rules catalog, a fresh copy."""
    return copy.deepcopy(_load())


def _placeholders(body: Any) -> list[str]:
    if isinstance(body, str):
        return _PLACEHOLDER.findall(body)
    if isinstance(body, dict):
        return [p for k, v in body.items() for p in _placeholders(k) + _placeholders(v)]
    if isinstance(body, list):
        return [p for item in body for p in _placeholders(item)]
    return []


# -- filling the templates -------------------------------------------------------------------------

class _Missing(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _fill(body: Any, values: dict[str, str | None]) -> Any:
    """The template with every {name} replaced inside its own string; a value is never re-read as a
    template, so braces in evidence stay literal."""
    if isinstance(body, str):
        def one(m: re.Match[str]) -> str:
            value = values.get(m.group(1))
            if value is None:
                raise _Missing(m.group(1))
            return value
        return _PLACEHOLDER.sub(one, body)
    if isinstance(body, dict):
        return {_fill(k, values): _fill(v, values) for k, v in body.items()}
    if isinstance(body, list):
        return [_fill(item, values) for item in body]
    return body


def slurm_word(text: str, limit: int = 64) -> str:
    """Text reduced to what survives scontrol's own parsing unchanged (it strips quotes), for reasons
    and reservation names."""
    return _WORD_UNSAFE.sub("_", str(text)).strip("_")[:limit] or "unknown"


def dns_label(text: str, limit: int = 30) -> str:
    """Text as a piece of a Kubernetes object name: lower case letters, digits and dashes."""
    return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")[:limit].strip("-") or "x"


def _valid(pattern: re.Pattern[str], value: Any) -> str | None:
    return value if isinstance(value, str) and pattern.fullmatch(value) else None


def one_line(text: Any) -> str:
    """Text safe for a comment line or a YAML scalar: no control characters, whitespace folded."""
    return " ".join(_CONTROL.sub(" ", str(text or "")).split())


def rules_for(places: list[Place], context: Context, catalog: dict[str, Any] | None = None) -> dict[str, Any]:
    """The rules for these places, as plain data: commands (argv and the shell line), Kubernetes
    objects, change-freeze records, and a note for every template left out and every cause without a
    placement remedy. Identical commands and objects from several places are kept once."""
    catalog = catalog if catalog is not None else load_isolation()
    params = catalog.get("params") or {}
    rules = catalog.get("causes") or {}
    places = _distinct(places)[:MAX_PLACES]
    excluded = sorted({p.host for p in places if _valid(_SLURM_NODE, p.host) and
                       set(ISOLATING) & set((rules.get(p.cause) or {}).get("slurm") or [])})
    rerun = [n for n in context.job_nodes if _valid(_SLURM_NODE, n) and n not in excluded]
    incident = slurm_word(context.incident)
    out: dict[str, Any] = {"incident": incident, "places": [], "commands": [], "objects": [], "freezes": [],
                           "notes": []}
    seen: set[str] = set()
    node_owner: dict[tuple[str, str, str], str] = {}
    for place in places:
        rule = rules.get(place.cause)
        out["places"].append({"cause": place.cause, "host": place.host, "gpu": place.gpu, "title": place.title,
                              "remedy": rule["remedy"] if rule else "none",
                              "why": rule["why"] if rule else "no rule in isolation.yaml"})
        if not rule or rule["remedy"] == "none":
            out["notes"].append({"family": None, "text": one_line(
                f"{place.cause}: no isolation rule ({rule['why'] if rule else 'none in isolation.yaml'})")})
            continue
        gpu = _valid(_BUS_ID, place.gpu)
        reason = f"gpuwb: {place.cause} {incident}" + (f" {gpu}" if gpu else "")
        summary = one_line(place.summary) or one_line(place.title) or place.cause
        start = context.at.replace(microsecond=0)
        merged = {**params, **(rule.get("params") or {})}
        values: dict[str, str | None] = {
            **merged,
            "cause": place.cause, "incident": incident, "gpu": gpu, "reason": reason,
            "job": _valid(_JOB, context.job), "user": _valid(_USER, context.user),
            "excluded": ",".join(excluded) or None, "rerun_nodes": ",".join(rerun) or None,
            "reservation": slurm_word(f"gpuwb-{incident}-rerun"),
            "name": f"gpuwb-{dns_label(incident)}-{dns_label(place.cause, 24)}",
            "namespace": _valid(_DNS_LABEL, context.namespace),
            "freeze_start": iso(start, "auto"),
            "freeze_end": iso(start + timedelta(hours=int(merged["freeze_hours"])), "auto"),
            "freeze_reason": f"{place.cause} in incident {context.incident}: {summary}",
        }
        for family in FAMILIES:
            values["host"] = _valid(_K8S_NODE if family in ("kubectl", "kubernetes") else _SLURM_NODE, place.host)
            for name in rule.get(family) or []:
                template = catalog[family][name]
                try:
                    body = _fill(template[BODY[family]], values)
                except _Missing as gap:
                    why = MISSING.get(gap.name, f"no {gap.name}")
                    if gap.name == "host" and place.host:
                        why = f"{ascii(place.host)} is not a valid node name here"
                    out["notes"].append({"family": family, "text": one_line(f"{place.cause}: {name} left out: {why}")})
                    continue
                if template.get("once_per_node") and values["host"]:
                    owner = node_owner.setdefault((family, name, values["host"]), place.cause)
                    if owner != place.cause:
                        out["notes"].append({"family": family, "text": one_line(
                            f"{place.cause}: {name} left out: {values['host']} already has one for {owner}")})
                        continue
                entry = {"family": family, "template": name, "cause": place.cause, "host": values["host"],
                         "what": template["what"]}
                key = repr((family, body))
                if key in seen:
                    continue
                seen.add(key)
                if BODY[family] == "argv":
                    out["commands"].append({**entry, "argv": body, "line": shlex.join(body)})
                elif family == "kubernetes":
                    out["objects"].append({**entry, "object": body})
                else:
                    if name == "release_freeze" and context.changes:
                        body["suspect_changes"] = [dict(c) for c in context.changes]
                    out["freezes"].append({**entry, "record": body})
    out["commands"].sort(key=lambda c: FAMILIES.index(c["family"]))  # stable: slurm, then kubectl
    return out


def _distinct(places: list[Place]) -> list[Place]:
    seen: set[tuple[str, str | None, str | None]] = set()
    out = []
    for p in places:
        if (p.cause, p.host, p.gpu) not in seen:
            seen.add((p.cause, p.host, p.gpu))
            out.append(p)
    return out


# -- writing them out ------------------------------------------------------------------------------

def command_script(rules: dict[str, Any], family: str) -> str:
    """The family's commands as a POSIX shell script, one shlex-quoted command per line under a comment
    saying what it does; the operator reviews it and runs it with ``sh``."""
    lines = ["#!/bin/sh", f"# gpuwb isolation rules for incident {rules['incident']} ({family}); "
             "review, then run with sh", "set -eu"]
    commands = [c for c in rules["commands"] if c["family"] == family]
    for c in commands:
        lines += ["", f"# {one_line(c['what'])} [{c['cause']}" + (f" on {c['host']}]" if c["host"] else "]"),
                  c["line"]]
    if not commands:
        lines += ["", "# nothing to apply"]
    lines += [f"# note: {one_line(n['text'])}" for n in rules["notes"] if n["family"] in (None, family)]
    return "\n".join(lines) + "\n"


def kubernetes_yaml(rules: dict[str, Any]) -> str:
    """The Kubernetes objects as one multi-document YAML file, each under a comment saying what it is for."""
    docs = [f"# {one_line(o['what'])} [{o['cause']}]\n" + _dump(o["object"]) for o in rules["objects"]]
    return "---\n".join(docs) if docs else "# nothing to apply\n"


def freeze_yaml(rules: dict[str, Any]) -> str:
    """The change-freeze records, as one YAML document."""
    return _dump({"incident": rules["incident"], "freezes": [f["record"] for f in rules["freezes"]]})


class _Dumper(yaml.SafeDumper):
    """Safe YAML with multi-line strings (a ConfigMap's embedded file) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # PyYAML falls back to a quoted style by itself where a block cannot hold the text exactly
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _str)


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=False,
                     width=1000)


def write(rules: dict[str, Any], folder: Path) -> list[Path]:
    """slurm.sh, kubectl.sh, k8s.yaml and change-freeze.yaml in ``folder`` (created if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = {"slurm": command_script(rules, "slurm"), "kubectl": command_script(rules, "kubectl"),
             "kubernetes": kubernetes_yaml(rules), "freeze": freeze_yaml(rules)}
    paths = []
    for family, text in texts.items():
        path = folder / FILES[family]
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def apply(rules: dict[str, Any], family: str, *, dry_run: bool = False, out: TextIO | None = None,
          timeout_s: float = COMMAND_TIMEOUT_S) -> int:
    """Run the family's commands in order, each its argv list (never a shell), each under the comment
    saying what it does; with ``dry_run`` only print them, as the script has them. A command that fails
    is told in one line and the others still run (drain, job exclusion and reservation do not depend on
    each other). Returns how many failed."""
    out = out if out is not None else sys.stderr
    commands = [c for c in rules["commands"] if c["family"] == family]
    if not dry_run and commands and shutil.which(commands[0]["argv"][0]) is None:
        raise IsolationError(f"{commands[0]['argv'][0]} not found: run {FILES[family]} where the {family} client "
                             "is, or look at the commands with --dry-run")
    failed = 0
    for c in commands:
        print(f"# {one_line(c['what'])} [{c['cause']}" + (f" on {c['host']}]" if c["host"] else "]"), file=out)
        if dry_run:
            print(c["line"], file=out)
            continue
        try:
            proc = subprocess.run(c["argv"], capture_output=True, text=True, timeout=timeout_s,
                                  stdin=subprocess.DEVNULL)
            said = (proc.stderr or proc.stdout).strip().splitlines()
            why = "" if proc.returncode == 0 else f"exit {proc.returncode}: {one_line(said[-1] if said else '')}"
        except subprocess.TimeoutExpired:
            why = f"no answer within {timeout_s:g} s"
        except OSError as exc:
            why = exc.strerror or str(exc)
        print(f"{'ran' if not why else 'FAILED'}: {c['line']}" + (f"  ({why})" if why else ""), file=out)
        failed += bool(why)
    if not commands:
        print(f"# no {family} command for this incident", file=out)
    for note in rules["notes"]:
        if note["family"] in (None, family):
            print(f"# note: {one_line(note['text'])}", file=out)
    return failed


# -- from a bundle and its analysis ----------------------------------------------------------------

def places_from(root: dict[str, Any] | None, hypotheses: list[dict[str, Any]], min_score: float,
                causes: dict[str, Any]) -> list[Place]:
    """The root cause's place first, then the other hypotheses scored at least ``min_score``."""
    rows = ([root] if root and root.get("cause") else []) + [
        h for h in hypotheses if float(h.get("score") or 0) >= min_score and h.get("cause")]
    return [Place(cause=str(h["cause"]), host=h.get("host"), gpu=h.get("gpu"),
                  title=str((causes.get(h["cause"]) or {}).get("title") or h["cause"]),
                  summary=str(h.get("summary") or "")) for h in rows]


def context_from(bundle: Bundle, incident: str, at: datetime, job: str | None,
                 since: datetime | None, until: datetime | None) -> Context:
    """The failed job's user and nodes, the Kubernetes namespace with warnings, and the changes
    recorded in the window, read from the bundle (parameterised queries only)."""
    user, nodes = None, ()
    if job:
        for (attrs,) in bundle.con.execute(
                "SELECT attrs FROM event WHERE kind = 'job_state' AND "
                "coalesce(job, json_extract_string(attrs, '$.job')) = ? ORDER BY ts NULLS FIRST", [job]).fetchall():
            data = _attrs(attrs)
            user = data.get("user") or user
            if isinstance(data.get("nodes"), list) and data["nodes"]:
                nodes = tuple(str(n) for n in data["nodes"])
    namespace = bundle.con.execute(
        "SELECT json_extract_string(attrs, '$.namespace') AS ns FROM event WHERE kind = 'k8s_event' "
        "AND ns IS NOT NULL GROUP BY ns ORDER BY count(*) FILTER (WHERE severity IN ('warning', 'error', "
        "'critical')) DESC, ns LIMIT 1").fetchone()
    window = [] if since is None or until is None else [since - timedelta(hours=24), until]
    changes = bundle.con.execute(
        "SELECT ts, host, attrs FROM event WHERE kind = 'change'"
        + (" AND ts >= ? AND ts <= ?" if window else "") + " ORDER BY ts DESC LIMIT 10", window).fetchall()
    return Context(incident=incident, at=at, job=job, user=user, job_nodes=nodes,
                   namespace=namespace[0] if namespace else None,
                   changes=tuple(_change(ts, host, _attrs(a)) for ts, host, a in changes))


def _attrs(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    try:
        data = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _change(ts: datetime | None, host: str | None, attrs: dict[str, Any]) -> dict[str, Any]:
    record = {"ts": iso(ts, "auto"), "host": host}
    record.update({k: one_line(attrs[k]) for k in ("what", "from_version", "version", "who") if attrs.get(k)})
    return {k: v for k, v in record.items() if v is not None}


def for_report(bundle: Bundle, model: dict[str, Any], hypotheses: list[dict[str, Any]], causes: dict[str, Any],
               min_score: float) -> dict[str, Any]:
    """The rules for a postmortem: its root cause and the hypotheses it lists as contributing, its
    incident id, failed job and window; the freeze starts when the report is generated."""
    impact = model.get("impact") or {}
    failed = next((j for j in impact.get("jobs") or [] if j.get("failed")), None)
    header = model.get("header") or {}
    context = context_from(bundle, header.get("incident_id") or Path(bundle.path).stem, model["generated_at"],
                           str(failed["job"]) if failed else None, header.get("start"), header.get("end"))
    return rules_for(places_from(model.get("root_cause"), hypotheses, min_score, causes), context)
