"""Alert rules that would have caught the incident: the monitoring templates of its causes (the
``alerts:`` of rules/causes/<cause_id>.yaml) with thresholds set from the incident's own pre-incident
baseline, replayed over the bundle's samples to say when each would have fired and how long before detection.

A postmortem's monitoring action item is only worth something if it is a rule someone can load and
if it would have fired; this module writes the rule file and states that lead time, and
workbench/prevention/rules_test.py writes the promtool unit test that checks the claim with the real engine.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import yaml

from workbench.analysis.causes import CatalogError, cause_file, cause_sections, load_causes
from workbench.prevention import alert_replay
from workbench.prevention.alert_replay import Expr, Labels, Replay
from workbench.store.bundle import Bundle

BASELINE = timedelta(hours=2)
"""How far before the incident's start the replay reaches: the baseline the thresholds are set from."""
AFTER_DETECTION = timedelta(minutes=15)
"""The replay runs this long past detection (or past the incident's start when nothing detected it)."""
LONGEST_REPLAY = timedelta(hours=12)
"""The replay never runs longer than this past the incident's start (a week-long evidence window would
cost a promtool test of 10 000 points a series for nothing the lead time needs)."""
STATISTICS = ("max", "p99", "min")
_TEMPLATE_KEYS = {"alert", "expr", "series", "match", "threshold", "for", "severity", "summary"}
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


@dataclass(frozen=True)
class Template:
    """One monitoring template: a rule of a cause's ``alerts:`` (rules/causes/FORMAT.md)."""

    cause: str
    alert: str
    expr: str
    series: tuple[str, ...]
    match: str
    threshold: dict[str, Any]
    hold: str
    severity: str
    summary: str


@dataclass
class Rule:
    """A template made concrete for one incident, with what the replay says about it."""

    template: Template
    series: str
    expr: str
    threshold: float | None
    basis: str
    hold: str = ""
    """the rule's ``for:`` (the template's, unless the plan scaled it)"""
    fired_at: datetime | None = None
    detection: datetime | None = None
    has_samples: bool = False
    states: dict[Labels, list[bool]] = field(default_factory=dict)

    @property
    def lead(self) -> timedelta | None:
        """Detection minus the first firing (negative: it fired only after detection)."""
        if self.fired_at is None or self.detection is None:
            return None
        return self.detection - self.fired_at

    @property
    def lead_text(self) -> str:
        if not self.has_samples:
            selector = f"{self.series}{{{self.template.match}}}" if self.template.match else self.series
            return f"no samples of {selector} around the incident: would not have fired on this data"
        if self.fired_at is None:
            return "would not have fired on this data"
        if self.lead is None:
            return f"would have fired at {self.fired_at:%Y-%m-%d %H:%M} (no detection time to compare)"
        seconds = int(abs(self.lead).total_seconds())
        if seconds < 60:
            side = "" if not seconds else f" ({seconds} s {'before' if self.lead > timedelta(0) else 'after'})"
            return f"would have fired at detection{side}"
        minutes = lead_minutes(self.lead) or 0
        if self.lead >= timedelta(0):
            return f"would have fired {minutes} min before detection"
        return f"would have fired {-minutes} min after detection"

    @property
    def annotations(self) -> dict[str, str]:
        return {"summary": self.template.summary, "threshold": self.basis}

    @property
    def labels(self) -> dict[str, str]:
        return {"severity": self.template.severity, "cause": self.template.cause}


@dataclass
class Plan:
    """The rules of an incident's causes and the replay they were judged on."""

    causes: list[str]
    rules: list[Rule]
    grid: Replay
    start: datetime | None
    detection: datetime | None


def parse_duration(text: str) -> timedelta:
    """``5m`` -> 5 minutes (the Prometheus durations the templates use: s, m, h)."""
    text = str(text).strip()
    if len(text) < 2 or text[-1] not in _DURATION_UNITS or not text[:-1].isdigit():
        raise ValueError(f"bad duration {text!r} (want a number and s, m or h)")
    return timedelta(seconds=int(text[:-1]) * _DURATION_UNITS[text[-1]])


def validate_templates(data: Any, cause_ids: set[str]) -> tuple[dict[str, list[Template]], dict[str, str]]:
    """(cause -> templates, cause -> why nothing measures it), or CatalogError naming what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), dict):
        raise CatalogError("alert rules: need rules: (cause id -> list of rules)")
    unmeasured = {str(k): str(v) for k, v in (data.get("unmeasured") or {}).items()}
    out: dict[str, list[Template]] = {}
    names: set[str] = set()
    for cause, items in data["rules"].items():
        at = f"{cause_file(cause)}: alerts"
        if cause not in cause_ids:
            raise CatalogError(f"{at}: not a cause of the catalog")
        if not isinstance(items, list) or not items:
            raise CatalogError(f"{at}: must be a non-empty list of rules")
        for item in items:
            if not isinstance(item, dict) or not {"alert", "expr", "series", "for", "severity",
                                                  "summary"} <= set(item) or set(item) - _TEMPLATE_KEYS:
                raise CatalogError(f"{at}: each rule needs alert, expr, series, for, severity, summary "
                                   f"(and may have match, threshold)")
            t = Template(cause=cause, alert=str(item["alert"]), expr=str(item["expr"]),
                         series=tuple(str(s) for s in item["series"]), match=str(item.get("match") or ""),
                         threshold=dict(item.get("threshold") or {}), hold=str(item["for"]),
                         severity=str(item["severity"]), summary=" ".join(str(item["summary"]).split()))
            if t.alert in names:
                raise CatalogError(f"{at}: alert name {t.alert} used twice")
            names.add(t.alert)
            try:
                parse_duration(t.hold)
                alert_replay.parse(render_expr(t, t.series[0], 0.0))
            except ValueError as exc:
                raise CatalogError(f"{at}: {t.alert}: {exc}") from None
            _check_threshold(t, at)
            out.setdefault(cause, []).append(t)
    both = sorted(set(out) & set(unmeasured))
    if both:
        raise CatalogError(f"{cause_file(both[0])}: has alerts and is unmeasured ({', '.join(both)})")
    return out, unmeasured


def _check_threshold(t: Template, where: str) -> None:
    spec = t.threshold
    if "{threshold}" not in t.expr:
        return
    if "value" in spec:
        return
    if spec.get("baseline") not in STATISTICS or "factor" not in spec or not ({"at_least", "at_most"} & set(spec)):
        raise CatalogError(f"{where}: {t.alert}: threshold needs value, or baseline ({', '.join(STATISTICS)}), "
                           "factor and at_least or at_most")


@functools.lru_cache(maxsize=1)
def _load() -> tuple[dict[str, list[Template]], dict[str, str]]:
    data = {"rules": cause_sections("alerts"), "unmeasured": cause_sections("unmeasured")}
    return validate_templates(data, set(load_causes()))


def load_templates() -> dict[str, list[Template]]:
    """cause id -> its monitoring templates."""
    return dict(_load()[0])


def load_unmeasured() -> dict[str, str]:
    """cause id -> why no time series shows it."""
    return dict(_load()[1])


def render_expr(t: Template, series: str, threshold: float | None) -> str:
    """The template's expression for one metric name and threshold."""
    selector = f"{series}{{{t.match}}}" if t.match else series
    return t.expr.replace("{series}", selector).replace("{threshold}", format_number(threshold or 0.0))


def format_number(value: float) -> str:
    """A threshold as PromQL reads it back exactly (4 significant digits, no trailing zeros)."""
    return f"{value:g}"


def _round(value: float) -> float:
    return float(f"{value:.4g}")


# -- the plan for one incident ---------------------------------------------------------------------

def scaled_hold(hold: str, scale: float) -> str:
    """``for:`` times ``scale`` in whole seconds, rounded up (``5m`` x 0.01 -> ``3s``); unscaled as written."""
    if scale == 1:
        return hold
    seconds = parse_duration(hold).total_seconds()
    return f"{math.ceil(seconds * scale)}s" if seconds else hold


def plan(bundle: Bundle, causes: list[str], *, start: datetime | None, detection: datetime | None,
         end: datetime | None, for_scale: float = 1.0) -> Plan:
    """Rules for ``causes`` (in order, each once), thresholds from the baseline before ``start``, each
    replayed from ``BASELINE`` before ``start`` to past ``detection`` to find when it first fires.
    ``for_scale`` multiplies every rule's ``for:`` (a fire drill on a staging Prometheus wants the
    alerts within seconds); the replay holds them as scaled."""
    templates = load_templates()
    chosen = [t for cid in dict.fromkeys(causes) for t in templates.get(cid, [])]
    anchor = start or detection or end
    if anchor is None:
        lo, hi = _data_range(bundle)
        anchor, end = hi, hi
    if anchor is None:
        anchor = datetime(1970, 1, 1)
    since = anchor - BASELINE
    until = max(x for x in (end, anchor, (detection or anchor) + AFTER_DETECTION) if x is not None)
    until = min(until, max(anchor, detection or anchor) + LONGEST_REPLAY)
    present = _names_present(bundle, {s for t in chosen for s in t.series})
    picks = {t.alert: next((s for s in t.series if s in present), t.series[0]) for t in chosen}
    exprs = [alert_replay.parse(render_expr(t, picks[t.alert], 0.0)) for t in chosen]
    kinds = {k for e in exprs if e.name == alert_replay.LOG_COUNTER for k in selected_kinds(e)}
    grid = alert_replay.replay(bundle, set(picks.values()), since, until, kinds)
    baseline_end = grid.index(start) if start else 0
    rules = []
    for t, e in zip(chosen, exprs):
        threshold, basis = _threshold(t, e, grid, baseline_end)
        expr = render_expr(t, picks[t.alert], threshold)
        final = alert_replay.parse(expr)
        rule = Rule(template=t, series=picks[t.alert], expr=expr, threshold=threshold, basis=basis,
                    hold=scaled_hold(t.hold, for_scale), detection=detection,
                    has_samples=bool(alert_replay.measured(final, grid)))
        rule.states = alert_replay.alert_states(final, parse_duration(rule.hold), grid)
        first = min((i for states in rule.states.values() for i, on in enumerate(states) if on), default=None)
        rule.fired_at = grid.time(first) if first is not None else None
        rules.append(rule)
    return Plan(causes=list(dict.fromkeys(causes)), rules=rules, grid=grid, start=start, detection=detection)


def selected_kinds(expr: Expr) -> set[str]:
    """Event kinds a log-counter selector can match (its kind matcher's literal alternatives)."""
    out: set[str] = set()
    for label, op, value in expr.matchers:
        if label == "kind" and op in ("=", "=~"):
            out |= set(value.split("|")) if op == "=~" else {value}
    return out


def _names_present(bundle: Bundle, names: set[str]) -> set[str]:
    """Which of ``names`` the bundle has samples of (GPU fields and the log counter always count)."""
    present = {n for n in names if n in alert_replay.GPU_FIELDS or n in (alert_replay.LOG_COUNTER,
                                                                         alert_replay.XID_GAUGE)}
    stored = {v: k for k, v in alert_replay.NODE_NAMES.items()}
    rest = sorted(names - present)
    if rest:
        raw = [stored.get(n, n) for n in rest]
        marks = ", ".join("?" * len(raw))
        found = {r[0] for r in bundle.con.execute(f"SELECT DISTINCT name FROM series WHERE name IN ({marks})",
                                                  raw).fetchall()}
        present |= {n for n in rest if stored.get(n, n) in found}
    return present


def _data_range(bundle: Bundle) -> tuple[datetime | None, datetime | None]:
    from workbench.query.events import time_range

    return time_range(bundle)


def _threshold(t: Template, expr: Expr, grid: Replay, baseline_end: int) -> tuple[float | None, str]:
    """The threshold and a sentence saying how it was set."""
    spec = t.threshold
    if "{threshold}" not in t.expr:
        return None, "a flag: no threshold"
    if "value" in spec:
        return float(spec["value"]), f"fixed at {format_number(float(spec['value']))}"
    values = sorted(v for series in alert_replay.measured(expr, grid).values()
                    for v in series[:baseline_end] if v is not None)
    stat, factor = spec["baseline"], float(spec["factor"])
    bound_key = "at_least" if "at_least" in spec else "at_most"
    bound = float(spec[bound_key])
    if not values:
        return bound, f"{format_number(bound)}: no pre-incident samples to set it from"
    base = {"max": values[-1], "min": values[0],
            "p99": values[max(0, math.ceil(0.99 * len(values)) - 1)]}[stat]
    raw = _round(base * factor)
    value = max(raw, bound) if bound_key == "at_least" else min(raw, bound)
    how = f"{format_number(factor)} x the pre-incident {stat} ({format_number(_round(base))})"
    if value != raw:
        how += f", {bound_key.replace('_', ' ')} {format_number(bound)}"
    return value, f"{format_number(value)}: {how}"


# -- rendering -------------------------------------------------------------------------------------

def rules_yaml(the_plan: Plan, group: str) -> str:
    """The Prometheus rule file (one group) of the plan's rules."""
    rules = [{"alert": r.template.alert, "expr": r.expr, "for": r.hold, "labels": r.labels,
              "annotations": r.annotations} for r in the_plan.rules]
    doc = {"groups": [{"name": group, "rules": rules}]}
    head = (f"# Written by gpuwb report --rules: the monitoring templates (rules/causes/*.yaml alerts) of "
            f"{', '.join(the_plan.causes) or 'no cause'},\n"
            "# thresholds from the incident's pre-incident baseline (annotation 'threshold'; docs/alerts.md).\n")
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000, allow_unicode=True)


def describe(the_plan: Plan) -> list[dict[str, Any]]:
    """Plain data for the report: each rule, its threshold, when it fires and its lead time."""
    return [{"alert": r.template.alert, "cause": r.template.cause, "expr": r.expr, "for": r.hold,
             "severity": r.template.severity, "threshold": r.basis, "summary": r.template.summary,
             "fired_at": r.fired_at, "lead_minutes": lead_minutes(r.lead), "lead": r.lead_text}
            for r in the_plan.rules]


def unmeasured_causes(causes: list[str]) -> list[dict[str, str]]:
    """The causes no time series shows, with why (the report says so instead of leaving a silent gap)."""
    why = load_unmeasured()
    return [{"cause": c, "why": why[c]} for c in dict.fromkeys(causes) if c in why]


def lead_minutes(lead: timedelta | None) -> int | None:
    """Whole minutes, rounded toward zero: 14 min 50 s before detection is 14 min."""
    if lead is None:
        return None
    minutes = math.floor(abs(lead).total_seconds() / 60)
    return minutes if lead >= timedelta(0) else -minutes
