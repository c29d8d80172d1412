"""Prevention that runs: the alert rules ``gpuwb report --rules`` writes fire on a real Prometheus, fed by
gpuwb's own exporter, and reach a real Alertmanager and a webhook.

The path, every part real: ``gpuwb record`` follows a log; a line of the incident is appended; the recorder
counts it as ``gpuwb_log_events_total`` into node_exporter's textfile folder (the demo) or on its loopback
``/metrics`` port (the drills); Prometheus, loaded with the rule files the report wrote for that incident,
scrapes it every second and evaluates the rules every second; Alertmanager routes each alert at once to a
webhook receiver in this process. The lead time from the appended line to the notification is measured and
printed.

The lines are the incident's own: for every rule of the report that reads the log counter, the first event
of the bundle its selector matches, its raw line from the artifact (a Kubernetes event as one JSON line), the
lines before it already in the followed file. The demo's rules hold ``for: 0m`` and are used as written; the
drills' are written with ``--for-scale 0.01`` (the one ``for: 5m`` rule holds 3 s), the report's own option.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT, run_cli
from tests.integration.alerting_stack import INTERVAL_S, AlertingStack
from tests.integration.processes import free_port, stop_children
from workbench.capture.recorder.metrics import event_labels
from workbench.prevention import alert_replay, alert_rules
from workbench.prevention.alert_replay import Expr
from workbench.store.bundle import Bundle

pytestmark = pytest.mark.integration

HOLD_S = 2.0
"""--metrics-hold: the scrape interval (1 s) and a margin, so a scrape sees every new series at 0 first."""
POLL_S = 1.0
"""The recorder's poll interval."""
SLACK_S = 3.0
"""Alertmanager's dispatch, the webhook and a loaded 2-core machine, on top of the budgets below."""
FOR_SCALE = 0.01
DEMO_HOST = "node03"
"""The demo's culprit: the recorder is named for it, so host-less dmesg lines count under it, as in the bundle."""
DRILL_HOST = "e2e-drills"
KERNEL_KINDS = ("dmesg", "dmesg_ctime", "dmesg_iso", "journal", "syslog", "kmsg")


def _log_rules(rules_file: Path) -> list[dict[str, Any]]:
    doc = yaml.safe_load(rules_file.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if alert_replay.LOG_COUNTER in r["expr"]]


def _hold_s(rule: dict[str, Any]) -> float:
    return alert_rules.parse_duration(rule["for"]).total_seconds()


@dataclass
class Line:
    """One raw line of the incident and the file of the followed ones it is appended to."""

    artifact: str
    kind: str
    number: int | None
    text: str
    head: str


def _k8s_items(path: str, expr: Expr) -> Iterator[tuple[str, str]]:
    """(head, line) for each item of a Kubernetes event list whose event the selector matches, as JSON Lines."""
    from collectors import k8s
    from collectors.base import Event, ParseContext

    items = json.loads(Path(path).read_text()).get("items", [])
    for item in items:
        line = json.dumps(item)
        for row in k8s.parse("k8s_events_json", io.BytesIO(line.encode()), ParseContext()):
            if isinstance(row, Event) and expr.matches(event_labels(row.host, row.kind, row.attrs)):
                yield json.dumps(items[0]) + "\n", line


def incident_line(bundle: Path, rule: dict[str, Any]) -> Line | None:
    """The first event of the bundle the rule counts, with its raw line; None when the bundle has none."""
    expr = alert_replay.parse(rule["expr"])
    kinds = sorted(alert_rules.selected_kinds(expr))
    with Bundle.open(bundle) as b:
        rows = b.con.execute(
            "SELECT e.host, e.kind, e.attrs, a.source, a.kind, e.line FROM event e JOIN artifact a "
            "ON a.sha256 = e.artifact WHERE e.kind IN (SELECT unnest(?)) AND e.ts_origin IS DISTINCT FROM "
            "'derived' ORDER BY e.line IS NULL, e.ts NULLS LAST, e.line", [kinds]).fetchall()
    for host, kind, attrs, source, artifact_kind, number in rows:
        if not expr.matches(event_labels(host, kind, json.loads(attrs) if attrs else {})):
            continue
        if number is not None:
            lines = Path(source).read_text(errors="replace").splitlines(keepends=True)
            return Line(source, artifact_kind, number, lines[number - 1].rstrip("\n"), "".join(lines[:number - 1]))
        if artifact_kind == "k8s_events_json":
            for head, text in _k8s_items(source, expr):
                return Line(source, artifact_kind, None, text, head)
    return None


def page(url: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The gpuwb_log_events_total series of a /metrics page."""
    body = AlertingStack.get(url)
    out = {}
    for line in (body or b"").decode().splitlines():
        m = re.match(r"^gpuwb_log_events_total\{(.*)\} (\S+)$", line)
        if m:
            # node_exporter pads a family's series to the same label names with "": Prometheus drops those
            labels = tuple(sorted((k, v) for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)) if v))
            out[labels] = float(m.group(2))
    return out


@contextmanager
def recorder(out: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``gpuwb record``, stopped by its pid however the test ends."""
    log = open(out.parent / f"{out.name}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "workbench.cli", "record", "--out", str(out), "--no-nvml",
                             "--no-capture", "--after", "1s", "--cooldown", "1h", "--metrics-hold", f"{HOLD_S:g}s",
                             *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    log.close()
    try:
        deadline = time.monotonic() + 30
        while not _status(out).get("pid") == proc.pid:
            assert proc.poll() is None and time.monotonic() < deadline, (out.parent / f"{out.name}.log").read_text()
            time.sleep(0.1)
        yield proc
    finally:
        stop_children([("recorder", proc)])  # TERM, then KILL after 10 s


def _status(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@dataclass
class Case:
    """An incident: its rule file, and per log-counter rule the line that must fire it."""

    name: str
    rules_file: Path
    rules: list[dict[str, Any]]
    lines: dict[str, Line]
    follow: dict[str, Path] = field(default_factory=dict)


def prepare_case(name: str, bundle: Path, rules_file: Path, *extra: str) -> Case:
    code, _, err = run_cli("report", bundle, "-f", "json", "--no-verify", "-o", rules_file.with_suffix(".json"),
                           "--rules", rules_file, *extra)
    assert code == 0, err
    rules = _log_rules(rules_file)
    lines = {r["alert"]: found for r in rules if (found := incident_line(bundle, r)) is not None}
    return Case(name, rules_file, [r for r in rules if r["alert"] in lines], lines)


def _follow(case: Case, folder: Path, kernel_log: Path | None) -> None:
    """Each line's artifact, up to that line, as a followed file (the kernel log for a kernel artifact)."""
    for alert, line in case.lines.items():
        if kernel_log is not None and line.kind in KERNEL_KINDS:
            path = kernel_log
        else:
            path = folder / f"{case.name}-{len(case.follow)}-{Path(line.artifact).name}"
        if not path.exists():
            path.write_text(line.head)
        case.follow[alert] = path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertingStack]:
    """node_exporter, Prometheus (also scraping the drills' recorder, once it runs), Alertmanager, webhook."""
    with AlertingStack(tmp_path_factory.mktemp("stack"), extra_targets=[f"127.0.0.1:{free_port()}"]) as s:
        yield s.start()


@pytest.fixture(scope="module")
def demo(stack: AlertingStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Case]:
    """The training demo, its report's rules loaded, a recorder named node03 following its kernel log and
    slurmctld.log into node_exporter's textfile folder."""
    from workbench.analysis.engine import analyze
    from workbench.demo import SCENARIOS, prepare, run_scenario

    root = tmp_path_factory.mktemp("demo")
    prepare(root)
    training = next(s for s in SCENARIOS if s.name == "training")
    case = prepare_case("demo", run_scenario(training, root, analyze=analyze).bundle, root / "demo.yaml")
    (root / "follow").mkdir()
    kernel = root / "follow" / "kern.log"
    _follow(case, root / "follow", kernel)
    watch = [a for p in sorted({p for p in case.follow.values() if p != kernel}) for a in ("--watch", str(p))]
    with recorder(root / "rec", "--kernel-log", str(kernel), *watch, "--host", DEMO_HOST,
                  "--textfile-dir", str(stack.textfile_dir)):
        stack.add_rules(case.rules_file)
        yield case


LOG_RULE_CAUSES = [c for c, ts in alert_rules.load_templates().items()
                   if any(alert_replay.LOG_COUNTER in t.series for t in ts)]


@dataclass
class Drills:
    cases: dict[str, Case]
    page: str
    before: dict[tuple[tuple[str, str], ...], float]
    appended_at: dict[str, float]


@pytest.fixture(scope="module")
def drills(stack: AlertingStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drills]:
    """A drill of every cause with a log-counter rule, its report's rules loaded, one recorder following
    all their files on its /metrics port; then every drill's lines appended at once (one poll)."""
    from workbench.prevention.drill import write
    from workbench.prevention.drill.registry import workloads_of

    root = tmp_path_factory.mktemp("drills")
    cases = {}
    for cause in LOG_RULE_CAUSES:
        # the first workload whose drill holds a line the cause's log-counter rules count (a CUDA
        # traceback in a training job's log is no kernel or engine log line a recorder follows)
        for workload in workloads_of(cause):
            written = write(cause, workload, 1, root / f"{cause}-{workload}")
            assert written.bundle is not None
            cases[cause] = prepare_case(cause, written.bundle, root / f"{cause}-{workload}.yaml", "--for-scale",
                                        str(FOR_SCALE))
            if cases[cause].rules:
                break
    follow = root / "follow"
    follow.mkdir()
    for case in cases.values():
        _follow(case, follow, None)
    (root / "kern.log").touch()
    target = stack.extra_targets[0]
    with recorder(root / "rec", "--kernel-log", str(root / "kern.log"), "--watch", str(follow / "*"),
                  "--host", DRILL_HOST, "--metrics-port", target.rsplit(":", 1)[1]):
        stack.wait_up("extra0")
        stack.add_rules(*(case.rules_file for case in cases.values()))
        url = f"http://{target}/metrics"
        before = page(url)
        appended_at: dict[str, float] = {}
        seen: set[tuple[Path, str]] = set()
        for cause, case in cases.items():
            for alert, line in case.lines.items():
                if (case.follow[alert], line.text) not in seen:
                    seen.add((case.follow[alert], line.text))
                    appended_at[cause] = _append(case.follow[alert], line.text)
            appended_at.setdefault(cause, time.time())
        deadline = time.monotonic() + POLL_S + SLACK_S
        while page(url) == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert page(url) != before, (f"the recorder counted none of the lines: {_status(root / 'rec')}\n"
                                     + (root / "rec.log").read_text())
        yield Drills(cases, url, before, appended_at)


def _append(path: Path, text: str) -> float:
    with open(path, "a") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    return time.time()


def _risen(url: str, before: dict, expr: Expr, within: float = 0.0) -> list[dict[str, str]]:
    """The series of the selector whose count rose since ``before`` (waiting up to ``within`` seconds:
    a new series shows 0 for the recorder's hold first)."""
    deadline = time.monotonic() + within
    while True:
        risen = [dict(labels) for labels, value in page(url).items()
                 if value > before.get(labels, 0) and expr.matches(labels)]
        if risen or time.monotonic() >= deadline:
            return risen
        time.sleep(0.05)


def _report(name: str, alert: str, lead: float, exposed: float | None, budget: float, capsys) -> None:
    with capsys.disabled():
        seen = f"; counter exposed -> notification {exposed:.1f} s" if exposed is not None else ""
        print(f"\nlead time {name} {alert}: line -> Alertmanager webhook {lead:.1f} s{seen} (budget {budget:.0f} s)")


def test_demo_line_reaches_the_webhook_through_node_exporter(stack: AlertingStack, demo: Case, capsys):
    """The demo's own lines (an uncorrectable AER error on node03, the node's drain in slurmctld.log),
    counted into node_exporter's textfile folder, fire the rules its report wrote, each within its
    ``for`` plus two scrape intervals of node_exporter exposing the count."""
    case = demo
    node_page = f"{stack.url('node_exporter')}/metrics"
    assert {r["alert"] for r in case.rules} == {"GpuPcieUncorrectableErrors", "NodeDrainedOrDown"}
    for rule in case.rules:
        expr = alert_replay.parse(rule["expr"])
        before = page(node_page)
        appended = _append(case.follow[rule["alert"]], case.lines[rule["alert"]].text)
        risen = _risen(node_page, before, expr, within=POLL_S + HOLD_S + SLACK_S)
        assert risen, f"node_exporter never exposed a rise of {rule['expr']}: {page(node_page)}"
        exposed = time.time()
        budget = _hold_s(rule) + 2 * INTERVAL_S + SLACK_S
        at, alert = stack.wait_for_alert(*({**series, "job": "node", "alertname": rule["alert"], **rule["labels"]}
                                           for series in risen), since=appended, timeout=budget + 5)
        assert alert["annotations"]["threshold"] == rule["annotations"]["threshold"]
        lead = at - appended
        _report("demo", rule["alert"], lead, at - exposed, budget, capsys)
        assert at - exposed <= budget, f"{rule['alert']} took {at - exposed:.1f} s from the exposed count"
        assert lead <= POLL_S + HOLD_S + budget
    assert stack.query('node_textfile_scrape_error') and all(
        r["value"][1] == "0" for r in stack.query("node_textfile_scrape_error")), "node_exporter read the file"


@pytest.mark.parametrize("cause", LOG_RULE_CAUSES)
def test_every_drills_log_event_rules_fire_end_to_end(cause: str, stack: AlertingStack, drills: Drills, capsys):
    """For every cause with a log-counter rule, the drill's report's log-counter rules fire on a line of
    the drill, through the recorder's /metrics port (Prometheus scrapes it directly)."""
    case = drills.cases[cause]
    assert case.rules, f"the {cause} drill holds no line any of its log-counter rules counts"
    assert any(r["labels"]["cause"] == cause for r in case.rules), "the cause's own rule is among them"
    appended = drills.appended_at[cause]
    for rule in case.rules:
        expr = alert_replay.parse(rule["expr"])
        risen = _risen(drills.page, drills.before, expr, within=appended + POLL_S + HOLD_S + SLACK_S - time.time())
        assert risen, f"no series {rule['expr']} reads rose: {page(drills.page)}"
        budget = POLL_S + HOLD_S + _hold_s(rule) + 2 * INTERVAL_S + SLACK_S
        at, alert = stack.wait_for_alert(*({**series, "job": "extra0", "alertname": rule["alert"], **rule["labels"]}
                                           for series in risen), since=appended, timeout=budget + 10)
        _report(cause, rule["alert"], at - appended, None, budget, capsys)
        assert at - appended <= budget + 10
