"""The alert rules of every scenario and of both demos, through the real promtool: ``promtool check
rules`` accepts the rule file and ``promtool test rules`` passes the unit test fed with the bundle's
own samples. That test pins Python's prediction (no alert the minute before a rule first fires, the
firing alerts at that minute and at detection), so the lead time the report states is the rule
engine's answer too; a test that shifts one prediction by a minute shows promtool would catch it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_cli
from tests.scenarios.test_scenarios import FOLDERS, hand_over
from workbench.analysis.engine import analyze
from workbench.demo import SCENARIOS, prepare, run_scenario

pytestmark = pytest.mark.integration

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    if not Path(PROMTOOL).exists():
        pytest.fail("promtool is missing: run scripts/system-deps.sh as root (Debian package prometheus)")
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120)


def _rules_and_test(bundle: Path, tmp_path: Path) -> tuple[Path, Path, dict]:
    rules, tests = tmp_path / "rules.yaml", tmp_path / "tests"
    code, out, err = run_cli("report", bundle, "-f", "json", "--no-verify", "--rules", rules, "--rules-test", tests)
    assert code == 0, err
    return rules, tests / "rules_test.yaml", json.loads(out)["monitoring"]


def _check(rules: Path, test: Path, monitoring: dict) -> dict:
    checked = _promtool("check", "rules", rules)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = _promtool("test", "rules", test)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    doc = yaml.safe_load(test.read_text())
    cases = doc["tests"][0]["alert_rule_test"] if doc["tests"] else []
    names = [r["alert"] for r in yaml.safe_load(rules.read_text())["groups"][0]["rules"]]
    assert names == [r["alert"] for r in monitoring["rules"]]
    for rule in monitoring["rules"]:
        fired = [c for c in cases if c["alertname"] == rule["alert"] and c["exp_alerts"]]
        # a rule the report says fired is tested firing; one that never fires is tested silent
        assert bool(fired) == (rule["fired_at"] is not None), rule
    return doc


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_rules_of_every_scenario_pass_promtool(folder: Path, tmp_path: Path):
    want = yaml.safe_load((folder / "expected.yaml").read_text())
    evidence = hand_over(folder, tmp_path, want["captured_at"])
    bundle = tmp_path / "incident.duckdb"
    code, out, err = run_cli("ingest", bundle, evidence)
    assert code == 0, err or out
    rules, test, monitoring = _rules_and_test(bundle, tmp_path)
    _check(rules, test, monitoring)
    if want["workload"] and monitoring["causes"]:
        assert monitoring["rules"], f"no rule for causes {monitoring['causes']}"


@pytest.fixture(scope="module")
def demos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("demo")
    prepare(out)
    return {s.name: run_scenario(s, out, analyze=analyze).bundle for s in SCENARIOS}


@pytest.mark.parametrize("name", [s.name for s in SCENARIOS])
def test_rules_of_the_demos_pass_promtool_and_the_report_states_each_lead_time(name: str, demos, tmp_path: Path):
    rules, test, monitoring = _rules_and_test(demos[name], tmp_path)
    _check(rules, test, monitoring)
    assert monitoring["rules"] and all(r["fired_at"] and r["lead_minutes"] is not None for r in monitoring["rules"])
    markdown = (demos[name].parent / "postmortem.md").read_text()
    section = markdown.split("## Monitoring that would have caught it", 1)[1].split("\n## ", 1)[0]
    for rule in monitoring["rules"]:
        row = next(line for line in section.splitlines() if line.startswith(f"| {rule['alert']} "))
        assert rule["lead"] in row and "would have fired" in row


def test_promtool_fails_when_a_prediction_is_a_minute_early(demos, tmp_path: Path):
    rules, test, monitoring = _rules_and_test(demos["training"], tmp_path)
    doc = yaml.safe_load(test.read_text())
    cases = doc["tests"][0]["alert_rule_test"]
    first = next(i for i, c in enumerate(cases) if c["exp_alerts"])
    assert first > 0 and cases[first - 1]["alertname"] == cases[first]["alertname"]
    cases[first - 1]["exp_alerts"] = cases[first]["exp_alerts"]  # claim it fired one minute sooner
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    tested = _promtool("test", "rules", test)
    assert tested.returncode != 0 and cases[first]["alertname"] in tested.stdout + tested.stderr


def test_rules_with_scaled_holds_fire_when_their_test_says(tmp_path: Path):
    """--for-scale: promtool agrees with the replay on a 5 m hold made 3 s (one evaluation, not five)."""
    from tests.workbench.prevention.test_alert_rules import TEMP_RULE, _temp_bundle

    bundle = tmp_path / "hot.duckdb"
    _temp_bundle(bundle, [(m, 70.0) for m in range(100)] + [(m, 95.0) for m in range(100, 140)])
    fired = {}
    for scale in ("1", "0.01"):
        rules, tests = tmp_path / f"rules-{scale}.yaml", tmp_path / f"tests-{scale}"
        code, out, err = run_cli("report", bundle, "-f", "json", "--no-verify", "--rules", rules, "--rules-test",
                                 tests, "--for-scale", scale)
        assert code == 0, err
        checked = _promtool("check", "rules", rules)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        test = tests / f"rules-{scale}_test.yaml"
        tested = _promtool("test", "rules", test)
        assert tested.returncode == 0, tested.stdout + tested.stderr
        cases = yaml.safe_load(test.read_text())["tests"][0]["alert_rule_test"]
        fired[scale] = min(int(c["eval_time"].rstrip("s")) for c in cases if c["alertname"] == TEMP_RULE
                           and c["exp_alerts"])
    assert fired["1"] - fired["0.01"] == 4 * 60, "5 evaluations held become 1"
