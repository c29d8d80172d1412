"""A promtool unit test (``promtool test rules``) for an incident's alert rules, fed with the bundle's
own samples: "would this rule have fired, and when?" asked of the real Prometheus rule engine.

For each rule the test pins what workbench/prevention/alert_rules.py predicted: the alerts firing at the first
minute it fires and none the minute before, and the alerts firing at the detection time (none at
all for a rule that never fires). A promtool that disagrees fails the test, so the lead time the
report states is the rule engine's answer, not only ours.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from workbench.prevention import alert_rules
from workbench.prevention.alert_replay import Labels, Series
from workbench.prevention.alert_rules import Plan, Rule
from workbench.store.bundle import Bundle


def input_values(values: list[float | None]) -> str:
    """Grid values in promtool's expanding notation: runs of one value as ``v+0xN`` (N+1 values),
    runs of gaps as ``_xN`` (N gaps)."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i] and (values[i] is None) == (values[j + 1] is None):
            j += 1
        run = j - i + 1
        value = values[i]
        if value is None:
            parts.append("_" if run == 1 else f"_x{run}")
        else:
            text = repr(float(value)) if not float(value).is_integer() else str(int(value))
            parts.append(text if run == 1 else f"{text}+0x{run - 1}")
        i = j + 1
    return " ".join(parts)


def series_selector(s: Series) -> str:
    """``name{label="value",...}`` with PromQL string escaping."""
    labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels)
    return f"{s.name}{{{labels}}}" if labels else s.name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _duration(plan: Plan, index: int) -> str:
    return f"{int((index * plan.grid.step).total_seconds())}s"


def _firing(rule: Rule, index: int) -> list[dict[str, Any]]:
    alerts = []
    for labels, states in sorted(rule.states.items()):
        if 0 <= index < len(states) and states[index]:
            alerts.append({"exp_labels": {**dict(labels), **rule.labels}, "exp_annotations": rule.annotations})
    return alerts


def checkpoints(plan: Plan, rule: Rule) -> list[int]:
    """Grid points the test checks for this rule: the minute before it first fires, that minute, detection."""
    points: list[int] = []
    if rule.fired_at is not None:
        first = plan.grid.index(rule.fired_at)
        points += [first - 1, first] if first > 0 else [first]
    if plan.detection is not None:
        points.append(min(plan.grid.index(plan.detection), plan.grid.length - 1))
    elif rule.fired_at is None:
        points.append(plan.grid.length - 1)
    return sorted(set(points))


def unit_test(plan: Plan, rule_file: Path, test_dir: Path) -> str:
    """The promtool test file for ``plan`` (its rules written at ``rule_file``), to be saved in ``test_dir``."""
    used: dict[tuple[str, Labels], Series] = {}
    for rule in plan.rules:
        name = rule.series
        for s in plan.grid.series.get(name, []):
            used[(s.name, s.labels)] = s
    tests = []
    for rule in plan.rules:
        for index in checkpoints(plan, rule):
            tests.append({"eval_time": _duration(plan, index), "alertname": rule.template.alert,
                          "exp_alerts": _firing(rule, index)})
    doc = {
        "rule_files": [os.path.relpath(rule_file.resolve(), test_dir.resolve())],
        "evaluation_interval": f"{int(plan.grid.step.total_seconds())}s",
        "tests": [{
            "name": f"replay from {plan.grid.start:%Y-%m-%dT%H:%M}Z (time 0), one point per "
                    f"{int(plan.grid.step.total_seconds())} s",
            "interval": f"{int(plan.grid.step.total_seconds())}s",
            "input_series": [{"series": series_selector(s), "values": input_values(s.values)}
                             for _, s in sorted(used.items())],
            "alert_rule_test": tests,
        }],
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100000, allow_unicode=True)


def test_file_name(rule_file: Path) -> str:
    """``rules.yaml`` -> ``rules_test.yaml``: the test beside others in DIR, named after its rules."""
    return f"{rule_file.stem}_test.yaml"


def rule_files(bundle: Bundle, monitoring: dict[str, Any], rule_file: Path, test_dir: Path | None,
               group: str, for_scale: float = 1.0) -> tuple[str, str | None]:
    """(the rule file's text, the promtool test's text or None) for the report's monitoring section:
    the same causes and times, so the rules are the ones the report describes (with ``for_scale``,
    their ``for:`` scaled, in the test too)."""
    the_plan = alert_rules.plan(bundle, list(monitoring["causes"]), start=monitoring["start"],
                                detection=monitoring["detection"], end=monitoring["end"], for_scale=for_scale)
    rules = alert_rules.rules_yaml(the_plan, group)
    return rules, unit_test(the_plan, rule_file, test_dir) if test_dir is not None else None
