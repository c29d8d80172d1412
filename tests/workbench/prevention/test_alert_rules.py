"""Alert rules that would have fired: the template catalog covers the cause catalog, thresholds come
from the pre-incident baseline, and the first firing / lead time is what a hand computation over a
synthetic series says (Prometheus' own answer is checked by tests/integration/test_promtool_rules.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from collectors.framework.vocabulary import event_kinds
from tests.conftest import run_cli
from workbench.analysis.causes import CatalogError, cause_sections, load_causes
from workbench.prevention import alert_replay, alert_rules, rules_test
from workbench.prevention.alert_replay import STEP, Replay, Series
from workbench.store.bundle import Bundle

T0 = datetime(2026, 3, 14, 8, 0)
TEMP_RULE = "GpuTemperatureAboveBaseline"


def test_every_template_names_a_cause_and_every_cause_has_a_rule_or_says_why_not():
    causes = set(load_causes())
    templates, unmeasured = alert_rules.load_templates(), alert_rules.load_unmeasured()
    assert set(templates) <= causes and set(unmeasured) <= causes
    assert set(templates) | set(unmeasured) == causes
    assert not set(templates) & set(unmeasured)
    assert all(text.strip() for text in unmeasured.values())
    names = [t.alert for ts in templates.values() for t in ts]
    assert len(names) == len(set(names))


def test_every_template_renders_to_a_form_the_replay_evaluates():
    for cause, templates in alert_rules.load_templates().items():
        for t in templates:
            for series in t.series:
                expr = alert_replay.parse(alert_rules.render_expr(t, series, 1.5))
                assert expr.name == series, (cause, t.alert)


def test_log_counter_rules_name_declared_event_kinds_and_attrs():
    kinds = event_kinds()
    labels = set(alert_replay.EVENT_LABELS.values()) | {"kind", "instance"}
    for templates in alert_rules.load_templates().values():
        for t in templates:
            expr = alert_replay.parse(alert_rules.render_expr(t, t.series[0], 0.0))
            if expr.name != alert_replay.LOG_COUNTER:
                continue
            assert alert_rules.selected_kinds(expr) and alert_rules.selected_kinds(expr) <= set(kinds), t.alert
            assert {label for label, _, _ in expr.matchers} <= labels, t.alert


def _templates_document() -> dict:
    """Every cause file's alerts and unmeasured, as validate_templates reads them."""
    return {"rules": cause_sections("alerts"), "unmeasured": cause_sections("unmeasured")}


def test_a_template_for_an_unknown_cause_or_in_an_unknown_form_is_refused():
    data = _templates_document()
    data["rules"]["no_such_cause"] = data["rules"]["nvswitch_fault"]
    with pytest.raises(CatalogError, match="no_such_cause"):
        alert_rules.validate_templates(data, set(load_causes()))
    data = _templates_document()
    data["rules"]["nvswitch_fault"][0]["expr"] = "rate({series}[5m]) > {threshold}"
    with pytest.raises(CatalogError, match="unsupported expression form"):
        alert_rules.validate_templates(data, set(load_causes()))


def _temp_bundle(path: Path, temps: list[tuple[int, float]]) -> None:
    """One GPU's temperature, one sample per (minute after T0 + 20 s, value)."""
    with Bundle.create(path) as bundle:
        for minute, value in temps:
            bundle.con.execute("INSERT INTO gpu_sample (ts, host, gpu, temp_c) VALUES (?, 'node01', '0000:5d:00.0', ?)",
                               [T0 + timedelta(minutes=minute, seconds=20), value])


def test_threshold_is_never_below_its_floor(bundle_path):
    # 70 C before the incident (minute 100): 1.1 x 70 = 77 is under the template's floor of 85
    temps = [(m, 70.0) for m in range(100)] + [(m, 96.0) for m in range(100, 140)]
    _temp_bundle(bundle_path, temps)
    template = next(t for t in alert_rules.load_templates()["thermal_throttling"] if t.alert == TEMP_RULE)
    assert template.threshold == {"baseline": "p99", "factor": 1.1, "at_least": 85}
    with Bundle.open(bundle_path) as bundle:
        plan = alert_rules.plan(bundle, ["thermal_throttling"], start=T0 + timedelta(minutes=100),
                                detection=T0 + timedelta(minutes=130), end=None)
    rule = next(r for r in plan.rules if r.template.alert == TEMP_RULE)
    assert rule.threshold == 85.0 and "at least 85" in rule.basis
    assert rule.expr == "DCGM_FI_DEV_GPU_TEMP > 85"


def test_threshold_is_the_baseline_statistic_times_the_factor(bundle_path):
    # p99 (nearest rank) of 99 pre-incident minutes: 98 at 90 C and one at 93 C -> the 99th value, 93
    temps = [(m, 93.0 if m == 50 else 90.0) for m in range(100)] + [(m, 110.0) for m in range(100, 140)]
    _temp_bundle(bundle_path, temps)
    with Bundle.open(bundle_path) as bundle:
        plan = alert_rules.plan(bundle, ["thermal_throttling"], start=T0 + timedelta(minutes=100),
                                detection=T0 + timedelta(minutes=130), end=None)
    rule = next(r for r in plan.rules if r.template.alert == TEMP_RULE)
    assert rule.threshold == pytest.approx(102.3) and rule.basis.startswith("102.3: 1.1 x the pre-incident p99 (93)")


def test_lead_time_is_detection_minus_first_firing_with_the_for_duration(bundle_path):
    # hot from minute 100 (sample at 100:20, seen at grid minute 101); for 5m -> fires at minute 106
    temps = [(m, 70.0) for m in range(100)] + [(m, 95.0) for m in range(100, 140)]
    _temp_bundle(bundle_path, temps)
    detection = T0 + timedelta(minutes=120, seconds=30)
    with Bundle.open(bundle_path) as bundle:
        plan = alert_rules.plan(bundle, ["thermal_throttling"], start=T0 + timedelta(minutes=100),
                                detection=detection, end=None)
    rule = next(r for r in plan.rules if r.template.alert == TEMP_RULE)
    assert rule.template.hold == "5m"
    assert rule.fired_at == T0 + timedelta(minutes=106)
    assert rule.lead == timedelta(minutes=14, seconds=30)
    assert rule.lead_text == "would have fired 14 min before detection"
    flag = next(r for r in plan.rules if r.template.alert == "GpuHwThermalSlowdown")
    assert flag.lead_text.startswith("no samples of DCGM_FI_DEV_CLOCKS_EVENT_REASONS")


def test_a_rule_that_never_crosses_says_so(bundle_path):
    _temp_bundle(bundle_path, [(m, 70.0) for m in range(140)])
    with Bundle.open(bundle_path) as bundle:
        plan = alert_rules.plan(bundle, ["thermal_throttling"], start=T0 + timedelta(minutes=100),
                                detection=T0 + timedelta(minutes=120), end=None)
    rule = next(r for r in plan.rules if r.template.alert == TEMP_RULE)
    assert rule.fired_at is None and rule.lead_text == "would not have fired on this data"


def _grid(values: list[float | None], name: str = "x") -> Replay:
    return Replay(T0, STEP, len(values), {name: [Series(name, (("instance", "a"),), values)]})


def test_increase_extrapolates_as_prometheus_does():
    # minutes 28, 29, 30 hold 1, 1, 4 in a 10 min window at minute 30: raw increase 3 over 120 s,
    # the zero point lies 40 s before the first sample (< 1.1 x the 60 s spacing), so 3 x 160/120 = 4
    values: list[float | None] = [None] * 28 + [1.0, 1.0, 4.0]
    expr = alert_replay.parse("increase(x[10m]) > 3.9")
    assert alert_replay.measured(expr, _grid(values))[(("instance", "a"),)][30] == pytest.approx(4.0)
    # a full window of samples (no extrapolation): 7, then a restart and 2 -> the counter rose by 2
    values = [5.0] * 20 + [7.0, 2.0] + [2.0] * 9
    measured = alert_replay.measured(alert_replay.parse("increase(x[10m]) > 0"), _grid(values))
    assert measured[(("instance", "a"),)][30] == pytest.approx(2.0)


def test_counter_alert_fires_at_the_step_and_resolves_after_its_window():
    values: list[float | None] = [0.0] * 30 + [1.0] * 30
    states = alert_replay.alert_states(alert_replay.parse("increase(x[10m]) > 0"), timedelta(0), _grid(values))
    firing = [i for i, on in enumerate(states[(("instance", "a"),)]) if on]
    assert firing == list(range(30, 40))  # the window [t-10m, t] holds minute 29 up to minute 39


def test_gauge_keeps_its_last_sample_for_five_minutes_of_lookback():
    values: list[float | None] = [1.0, None, None, None, None, None, None]
    measured = alert_replay.measured(alert_replay.parse("x > 0"), _grid(values))[(("instance", "a"),)]
    assert measured == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, None]


def test_bit_form_reads_one_clock_event_reason():
    values: list[float | None] = [0.0, 64.0 + 32.0, 32.0, 128.0 + 64.0]
    measured = alert_replay.measured(alert_replay.parse("floor(x / 64) % 2 == 1"), _grid(values))
    assert measured[(("instance", "a"),)] == [0, 1, 0, 1]


def test_matchers_select_series_by_label():
    expr = alert_replay.parse('x{kind=~"xid|sxid", xid!="13"} > 0')
    assert expr.matches((("kind", "xid"), ("xid", "79")))
    assert not expr.matches((("kind", "xid"), ("xid", "13")))
    assert not expr.matches((("kind", "xidx"),))


def test_input_values_use_promtools_expanding_notation():
    assert rules_test.input_values([0.0, 0.0, 0.0, None, None, 5.0, 0.25]) == "0+0x2 _x2 5 0.25"
    assert rules_test.input_values([None]) == "_"


def test_report_rules_options(tmp_path):
    path = tmp_path / "incident.duckdb"
    temps = [(m, 70.0) for m in range(100)] + [(m, 95.0) for m in range(100, 140)]
    _temp_bundle(path, temps)
    code, _, err = run_cli("report", path, "--rules-test", tmp_path / "t")
    assert code == 2 and "--rules" in err
    code, _, err = run_cli("report", path, "--rules", path)
    assert code == 2
    rules, tests = tmp_path / "rules.yaml", tmp_path / "tests"
    code, out, err = run_cli("report", path, "--no-verify", "--rules", rules, "--rules-test", tests)
    assert code == 0, err
    doc = yaml.safe_load(rules.read_text())
    assert doc["groups"][0]["rules"] == [] or all("expr" in r for r in doc["groups"][0]["rules"])
    test = yaml.safe_load((tests / "rules_test.yaml").read_text())
    assert test["rule_files"] == ["../rules.yaml"]
    assert "Monitoring that would have caught it" in out


@pytest.mark.parametrize(("fired", "detected", "text"), [
    (T0, T0 + timedelta(seconds=30), "would have fired at detection (30 s before)"),
    (T0 + timedelta(minutes=1), T0 + timedelta(seconds=30), "would have fired at detection (30 s after)"),
    (T0, T0 + timedelta(minutes=14, seconds=59), "would have fired 14 min before detection"),
    (T0 + timedelta(minutes=3), T0, "would have fired 3 min after detection"),
    (T0, None, "would have fired at 2026-03-14 08:00 (no detection time to compare)"),
])
def test_lead_text_says_before_or_after_detection_in_whole_minutes(fired, detected, text):
    template = alert_rules.load_templates()["thermal_throttling"][0]
    rule = alert_rules.Rule(template=template, series=template.series[0], expr="", threshold=None, basis="",
                            fired_at=fired, detection=detected, has_samples=True)
    assert rule.lead_text == text


def test_the_replays_histogram_quantile_interpolates_inside_the_bucket_that_holds_the_rank():
    buckets = [(0.1, 10.0), (0.5, 60.0), (1.0, 90.0), (float("inf"), 100.0)]
    # rank 50 lies in (0.1, 0.5]: 40 of that bucket's 50 observations -> 0.1 + 0.4 x 40/50
    assert alert_replay.histogram_quantile(0.5, buckets) == pytest.approx(0.42)
    # rank 99 lies in +Inf: Prometheus answers the highest finite bound
    assert alert_replay.histogram_quantile(0.99, buckets) == 1.0
    assert alert_replay.histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) != \
        alert_replay.histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)])  # NaN: no observations


def test_quantile_form_sums_bucket_rates_by_its_labels():
    grid = Replay(T0, STEP, 11, {"h_bucket": [
        Series("h_bucket", (("instance", "a"), ("le", "0.5")), [float(6 * i) for i in range(11)]),
        Series("h_bucket", (("instance", "a"), ("le", "+Inf")), [float(10 * i) for i in range(11)]),
    ]})
    values = alert_replay.measured(alert_replay.parse(
        "histogram_quantile(0.5, sum by (le, instance) (rate(h_bucket[5m]))) > 0.6"), grid)[(("instance", "a"),)]
    # per minute 6 of 10 observations under 0.5 s: rank 5 of 10 is 5/6 of the way into (0, 0.5]
    assert values[0] is None and values[10] == pytest.approx(0.5 * 5 / 6)
    values = alert_replay.measured(alert_replay.parse(
        "histogram_quantile(0.9, sum by (le, instance) (rate(h_bucket[5m]))) > 0.6"), grid)[(("instance", "a"),)]
    assert values[10] == 0.5  # rank 9 lies in +Inf: the highest finite bound


def test_report_says_why_a_cause_has_no_rule(bundle_path):
    from workbench.postmortem import render, report

    _temp_bundle(bundle_path, [(m, 70.0) for m in range(10)])
    analysis = {"hypotheses": [{"cause": "quantization_regression", "layer": "business", "score": 0.9},
                               {"cause": "thermal_throttling", "layer": "hardware", "score": 0.5}]}
    with Bundle.open(bundle_path) as bundle:
        model = report.build(bundle, analysis=analysis, verify=False)
    monitoring = model["monitoring"]
    assert monitoring["causes"] == ["quantization_regression", "thermal_throttling"]
    assert {r["cause"] for r in monitoring["rules"]} == {"thermal_throttling"}
    why = alert_rules.load_unmeasured()["quantization_regression"]
    assert monitoring["unmeasured"] == [{"cause": "quantization_regression", "why": why}]
    markdown, html = render.render(model, "md"), render.render(model, "html")
    assert "`quantization_regression`: no alert rule: " + render.md_text(why) in markdown
    assert "no alert rule: " in html and "GpuTemperatureAboveBaseline" in html


def test_for_scale_shortens_the_hold_in_the_replay_and_the_rule_file_only(bundle_path, tmp_path):
    # hot from minute 100 (seen at 101); for 5m x 0.01 = 3 s: pending at 101, firing one evaluation later
    temps = [(m, 70.0) for m in range(100)] + [(m, 95.0) for m in range(100, 140)]
    _temp_bundle(bundle_path, temps)
    with Bundle.open(bundle_path) as bundle:
        plan = alert_rules.plan(bundle, ["thermal_throttling"], start=T0 + timedelta(minutes=100),
                                detection=T0 + timedelta(minutes=120), end=None, for_scale=0.01)
    rule = next(r for r in plan.rules if r.template.alert == TEMP_RULE)
    assert rule.hold == "3s" and rule.fired_at == T0 + timedelta(minutes=102)
    assert alert_rules.scaled_hold("0m", 0.01) == "0m" and alert_rules.scaled_hold("2m", 1) == "2m"
    assert alert_rules.scaled_hold("1m", 0.001) == "1s", "rounded up: a hold never vanishes"

    rules = tmp_path / "rules.yaml"
    code, out, err = run_cli("report", bundle_path, "--no-verify", "-f", "json", "--rules", rules,
                             "--rules-test", tmp_path / "t", "--for-scale", "0.01")
    assert code == 0, err
    written = {r["alert"]: r["for"] for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]}
    assert written[TEMP_RULE] == "3s" and written["GpuHwThermalSlowdown"] == "1s"
    reported = {r["alert"]: r["for"] for r in json.loads(out)["monitoring"]["rules"]}
    assert reported[TEMP_RULE] == "5m", "the report states the real hold"
    code, _, err = run_cli("report", bundle_path, "--no-verify", "--for-scale", "0.5")
    assert code == 2 and "--for-scale goes with --rules" in err
    code, _, err = run_cli("report", bundle_path, "--no-verify", "--rules", rules, "--for-scale", "0")
    assert code == 2 and "above 0" in err
