"""Isolation and change rules: every cause id covered, the right commands per kind of place, hostile
evidence inert in the shell scripts and YAML, and every Kubernetes object valid against the API schema."""

from __future__ import annotations

import copy
import re
import shlex
from datetime import datetime, timedelta
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.workbench.postmortem.report_scenario import CAUSES, build_bundle
from workbench.analysis.causes import load_causes
from workbench.postmortem import render, report
from workbench.prevention import isolation
from workbench.prevention.isolation import Context, IsolationError, Place
from workbench.store.bundle import Bundle

K8S_VERSION = "1.30.0"
"""The Kubernetes API version the objects are validated against (pinned: schemas change between releases)."""
AT = datetime(2026, 3, 15, 8, 0, 0)
FULL = Context(incident="INC-42", at=AT, job="48213", user="alice", job_nodes=("node01", "node02", "node03"),
               namespace="serving")
HOSTILE = ["it's \"quoted\"", "$(rm -rf /)", "`reboot`", "a\nrm -rf /", "x; shutdown -h now", "\r\n#!/bin/sh\nid",
           "{host}", "tab\there", "\x1b[31mred", "--overwrite", "ünïcode"]


def _all_places() -> list[Place]:
    return [Place(cid, host="node02", gpu="0000:5d:00.0" if e["scope"] == "gpu" else None)
            for cid, e in load_causes().items() if e["scope"] != "global"] + \
           [Place(cid) for cid, e in load_causes().items() if e["scope"] == "global"]


def _rules(*places: Place, context: Context = FULL) -> dict:
    return isolation.rules_for(list(places), context)


def _argvs(rules: dict, family: str | None = None) -> list[list[str]]:
    return [c["argv"] for c in rules["commands"] if family in (None, c["family"])]


def _script_commands(text: str) -> list[list[str]]:
    """The commands a shell would run from the script: every line that is not blank or a comment."""
    return [shlex.split(line) for line in text.splitlines()
            if line.strip() and not line.startswith("#") and line != "set -eu"]


# -- the catalog -----------------------------------------------------------------------------------

def test_every_cause_of_the_catalog_has_an_entry_and_no_other_ids():
    rules = isolation.load_isolation()["causes"]
    assert set(rules) == set(load_causes())
    assert len(rules) >= 33


@pytest.mark.parametrize("cause", ["gpu_contention", "host_oom_kill", "gpu_fell_off_bus", "ecc_uncorrectable",
                                   "nvlink_error", "fabric_manager_down", "network_fabric_errors", "bad_change",
                                   "quantization_regression", "driver_stack_mismatch"])
def test_contention_noisy_neighbour_bad_node_and_bad_release_have_templates(cause):
    entry = isolation.load_isolation()["causes"][cause]
    assert entry["remedy"] == "placement"
    rendered = _rules(Place(cause, host="node02", gpu="0000:5d:00.0"))
    assert rendered["commands"] or rendered["objects"] or rendered["freezes"]


def test_every_placement_rule_renders_something_and_every_none_rule_nothing():
    rules = isolation.load_isolation()["causes"]
    for place in _all_places():
        out = _rules(place)
        produced = len(out["commands"]) + len(out["objects"]) + len(out["freezes"])
        if rules[place.cause]["remedy"] == "placement":
            assert produced, place.cause
        else:
            assert produced == 0 and out["notes"][0]["text"].startswith(f"{place.cause}: no isolation rule")


def test_bad_releases_freeze_changes():
    rules = isolation.load_isolation()["causes"]
    assert rules["bad_change"]["freeze"] and rules["quantization_regression"]["freeze"]


@pytest.mark.parametrize("breakage, message", [
    (lambda d: d["slurm"]["drain"]["argv"].append("{evidence}"), "unknown placeholder"),
    (lambda d: d["causes"].update(not_a_cause={"remedy": "none", "why": "x"}), "not a cause id"),
    (lambda d: d["causes"]["gpu_hang"].update(slurm=["no_such_template"]), "no slurm template"),
    (lambda d: d["causes"]["traffic_surge"].update(slurm=["drain"]), "remedy none names templates"),
    (lambda d: d["causes"]["bad_change"].pop("freeze"), "names no template"),
    (lambda d: d["slurm"]["drain"].update(argv="scontrol update NodeName={host}"), "argv must be a list"),
    (lambda d: d["causes"]["bad_change"].update(params={"freeze_hours": "three days"}), "whole number of hours"),
    (lambda d: d["kubectl"]["taint"].update(once_per_node="yes"), "once_per_node"),
])
def test_a_broken_catalog_is_refused(breakage, message):
    data = copy.deepcopy(isolation.load_isolation())
    breakage(data)
    with pytest.raises(IsolationError, match=message):
        isolation.validate_isolation(data, load_causes())


# -- rendering per kind of place -------------------------------------------------------------------

def test_host_cause_drains_cordons_and_taints_its_node():
    out = _rules(Place("fabric_manager_down", host="node07"),
                 context=Context("INC-42", AT, job="77", user="bob", job_nodes=("node06", "node07")))
    assert _argvs(out, "slurm") == [
        ["scontrol", "update", "NodeName=node07", "State=DRAIN", "Reason=gpuwb: fabric_manager_down INC-42"],
        ["scontrol", "update", "JobId=77", "ExcNodeList=node07"],
        ["scontrol", "create", "reservation", "ReservationName=gpuwb-INC-42-rerun", "StartTime=now",
         "Duration=48:00:00", "Nodes=node06", "Users=bob", "Flags=IGNORE_JOBS"]]
    assert _argvs(out, "kubectl") == [["kubectl", "cordon", "node07"],
                                      ["kubectl", "taint", "nodes", "node07",
                                       "gpuwb.io/quarantine=fabric_manager_down:NoSchedule", "--overwrite"]]
    node = next(o["object"] for o in out["objects"] if o["object"]["kind"] == "Node")
    assert node["metadata"]["name"] == "node07"
    assert node["spec"]["taints"] == [{"key": "gpuwb.io/quarantine", "value": "fabric_manager_down",
                                       "effect": "NoSchedule"}]
    assert any("diagnostics_toleration left out: no Kubernetes namespace" in n["text"] for n in out["notes"])


def test_gpu_cause_names_the_gpu_and_reserves_the_jobs_other_nodes():
    out = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0"))
    drain, exclude, reserve = _argvs(out, "slurm")
    assert drain[-1] == "Reason=gpuwb: gpu_fell_off_bus INC-42 0000:5d:00.0"
    assert exclude == ["scontrol", "update", "JobId=48213", "ExcNodeList=node02"]
    assert "Nodes=node01,node03" in reserve and "Users=alice" in reserve
    pod = next(o["object"] for o in out["objects"] if o["object"]["kind"] == "PodTemplate")
    assert pod["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "node02"}
    assert {"key": "gpuwb.io/quarantine", "operator": "Equal", "value": "gpu_fell_off_bus",
            "effect": "NoSchedule"} in pod["template"]["spec"]["tolerations"]


def test_soft_hardware_cause_excludes_without_draining():
    out = _rules(Place("thermal_throttling", host="node03", gpu="0000:18:00.0"))
    assert not any(a[:2] == ["scontrol", "update"] and "State=DRAIN" in a for a in _argvs(out))
    assert ["scontrol", "update", "JobId=48213", "ExcNodeList=node03"] in _argvs(out)
    assert ["kubectl", "taint", "nodes", "node03", "gpuwb.io/quarantine=thermal_throttling:PreferNoSchedule",
            "--overwrite"] in _argvs(out)


def test_several_places_exclude_all_their_nodes_once():
    out = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0"), Place("nvlink_error", host="node03"))
    excludes = [a for a in _argvs(out) if any(x.startswith("ExcNodeList=") for x in a)]
    assert excludes == [["scontrol", "update", "JobId=48213", "ExcNodeList=node02,node03"]]
    assert [a for a in _argvs(out) if "reservation" in a][0][6] == "Nodes=node01"


def test_a_contributing_cause_on_the_same_node_keeps_the_root_causes_drain_and_taint():
    out = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0"),
                 Place("pcie_link_degraded", host="node02", gpu="0000:5d:00.0"))
    drains = [a for a in _argvs(out) if "State=DRAIN" in a]
    taints = [a for a in _argvs(out) if a[:2] == ["kubectl", "taint"]]
    assert [a[-1] for a in drains] == ["Reason=gpuwb: gpu_fell_off_bus INC-42 0000:5d:00.0"]
    assert [a[4] for a in taints] == ["gpuwb.io/quarantine=gpu_fell_off_bus:NoSchedule"]
    assert [o["cause"] for o in out["objects"] if o["object"]["kind"] == "Node"] == ["gpu_fell_off_bus"]
    assert any(n["text"] == "pcie_link_degraded: taint left out: node02 already has one for gpu_fell_off_bus"
               for n in out["notes"])


def test_causes_asking_for_the_same_object_get_it_once():
    out = _rules(Place("preemption"), Place("pod_eviction", host="node01"), Place("insufficient_capacity"))
    assert [o["object"]["kind"] for o in out["objects"]] == ["PriorityClass"]


def test_contention_gets_a_quota_a_mig_config_and_an_exclusive_rerun():
    out = _rules(Place("gpu_contention", host="node01", gpu="0000:18:00.0"))
    kinds = {o["object"]["kind"]: o["object"] for o in out["objects"]}
    assert kinds["ResourceQuota"]["spec"]["hard"] == {"requests.nvidia.com/gpu": "0"}
    mig = yaml.safe_load(kinds["ConfigMap"]["data"]["config.yaml"])
    label = next(a for a in _argvs(out, "kubectl") if a[1] == "label")
    config = label[4].split("=", 1)[1]
    assert mig["mig-configs"][config][0]["mig-devices"] == {"3g.40gb": 2}
    assert not any("State=DRAIN" in a for a in _argvs(out)), "the GPU is healthy: nothing is drained"
    assert any("Nodes=node01,node02,node03" in a for a in _argvs(out))


def test_global_bad_change_is_a_change_freeze_with_its_window():
    changes = ({"ts": "2026-03-14T08:55:00Z", "host": "node01", "what": "model llama-70b", "version": "v2",
                "from_version": "v1", "who": "deploy-bot"},)
    out = _rules(Place("bad_change", title="Bad deploy", summary="error rate stepped up at the v2 rollout"),
                 context=Context("INC-42", AT, namespace="serving", changes=changes))
    assert out["commands"] == [] and out["objects"] == []
    (freeze,) = out["freezes"]
    record = freeze["record"]
    assert record["window"] == {"start": "2026-03-15T08:00:00Z",
                                "end": (AT + timedelta(hours=72)).isoformat() + "Z"}
    assert record["incident"] == "INC-42" and record["cause"] == "bad_change"
    assert "v2 rollout" in record["reason"]
    assert record["suspect_changes"] == list(changes)
    assert yaml.safe_load(isolation.freeze_yaml(out)) == {"incident": "INC-42", "freezes": [record]}


def test_a_job_without_user_or_nodes_leaves_the_reservation_out_with_a_note():
    out = _rules(Place("gpu_hang", host="node02", gpu="0000:5d:00.0"),
                 context=Context("INC-42", AT, job="5", job_nodes=("node01", "node02")))
    assert not any("reservation" in a for a in _argvs(out))
    assert any(n["text"] == "gpu_hang: rerun_reservation left out: the job's user is unknown" for n in out["notes"])


# -- hostile evidence ------------------------------------------------------------------------------

@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_hosts_users_and_jobs_are_refused_not_quoted(text):
    out = _rules(Place("gpu_fell_off_bus", host=text, gpu=f"0000:5d:00.0{text}"),
                 context=Context(f"INC{text}", AT, job=f"1{text}", user=f"alice{text}",
                                 job_nodes=(text,), namespace=f"ns{text}"))
    assert out["commands"] == [] and out["objects"] == []
    script = isolation.command_script(out, "slurm") + isolation.command_script(out, "kubectl")
    assert _script_commands(script) == []
    assert all("\n" not in n["text"] and "\x1b" not in n["text"] for n in out["notes"])


@settings(max_examples=60, deadline=None)
@given(incident=st.text(min_size=1, max_size=40), summary=st.text(max_size=80))
def test_any_incident_id_and_summary_come_out_inert(incident, summary):
    out = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0", summary=summary),
                 Place("bad_change", summary=summary), context=Context(incident, AT, job="9", user="alice",
                                                                        job_nodes=("node01", "node02"),
                                                                        namespace="serving"))
    for c in out["commands"]:
        assert shlex.split(c["line"]) == c["argv"]
    for family in ("slurm", "kubectl"):
        assert _script_commands(isolation.command_script(out, family)) == _argvs(out, family)
    reason = next(a for a in _argvs(out) if "State=DRAIN" in a)[-1]
    assert reason.startswith("Reason=gpuwb: gpu_fell_off_bus ") and not set(reason) & set("'\"$`\\\n;")
    assert yaml.safe_load(isolation.freeze_yaml(out))["freezes"] == [f["record"] for f in out["freezes"]]
    assert list(yaml.safe_load_all(isolation.kubernetes_yaml(out))) == [o["object"] for o in out["objects"]]


def test_evidence_braces_are_not_templates():
    out = _rules(Place("bad_change", summary="{host} {incident} {freeze_end}"), context=FULL)
    assert out["freezes"][0]["record"]["reason"].endswith(": {host} {incident} {freeze_end}")


# -- Kubernetes schemas ----------------------------------------------------------------------------

def test_every_kubernetes_object_validates_against_the_pinned_api():
    kinds, templates = set(), set()
    for place in _all_places():
        out = _rules(place)
        for doc in yaml.safe_load_all(isolation.kubernetes_yaml(out)):
            if doc:
                kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
                kinds.add(doc["kind"])
        templates |= {o["template"] for o in out["objects"]}
    assert kinds == {"Node", "PodTemplate", "ResourceQuota", "ConfigMap", "PriorityClass"}
    assert templates == set(isolation.load_isolation()["kubernetes"]), "every object template was rendered"


LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
QUALIFIED_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")


def test_taints_and_labels_the_commands_set_are_valid_kubernetes_keys_and_values():
    seen = 0
    for place in _all_places():
        for argv in _argvs(_rules(place), "kubectl"):
            if argv[1] == "taint":
                key, rest = argv[4].split("=", 1)
                value, effect = rest.rsplit(":", 1)
            elif argv[1] == "label":
                key, value = argv[4].split("=", 1)
                effect = "NoSchedule"
            else:
                continue
            seen += 1
            assert QUALIFIED_KEY.fullmatch(key) and LABEL_VALUE.fullmatch(value) and len(value) <= 63, argv
            assert effect in ("NoSchedule", "PreferNoSchedule", "NoExecute")
    assert seen >= 10


def test_the_schema_check_can_fail():
    out = _rules(Place("gpu_contention", host="node01"))
    quota = next(o["object"] for o in out["objects"] if o["object"]["kind"] == "ResourceQuota")
    quota["spec"]["hrad"] = quota["spec"].pop("hard")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(quota, K8S_VERSION, strict=True)


# -- from a bundle ---------------------------------------------------------------------------------

SACCT = """JobID|JobName|User|Partition|State|ExitCode|Start|End|NodeList
48213|llm-pretrain|alice|gpu|FAILED|1:0|2026-03-14T06:00:00|2026-03-14T09:31:02|node[01-04]
"""
CHANGES = """time,who,what,from_version,version,action
2026-03-14T08:55:00Z,deploy-bot,model llama-70b,v1,v2,deploy
2026-03-01T08:00:00Z,deploy-bot,model llama-70b,v0,v1,deploy
"""


def test_context_reads_the_jobs_user_and_nodes_and_the_recent_changes(bundle_path, tmp_path):
    (tmp_path / "sacct.txt").write_text(SACCT)
    (tmp_path / "changes.csv").write_text(CHANGES)
    code, _, err = run_cli("ingest", bundle_path, tmp_path / "sacct.txt", tmp_path / "changes.csv")
    assert code == 0, err
    with Bundle.open(bundle_path) as bundle:
        ctx = isolation.context_from(bundle, "INC-1", AT, "48213", datetime(2026, 3, 14, 9), datetime(2026, 3, 14, 10))
    assert (ctx.user, ctx.job_nodes) == ("alice", ("node01", "node02", "node03", "node04"))
    assert ctx.changes == ({"ts": "2026-03-14T08:55:00Z", "what": "model llama-70b",
                            "from_version": "v1", "version": "v2", "who": "deploy-bot"},)
    out = _rules(Place("gpu_fell_off_bus", host="node03", gpu="0000:5d:00.0"), context=ctx)
    reserve = next(a for a in _argvs(out) if "reservation" in a)
    assert "Nodes=node01,node02,node04" in reserve and "Users=alice" in reserve


# -- gpuwb report --isolation ----------------------------------------------------------------------

def test_report_isolation_writes_the_files_and_the_section(bundle_path, tmp_path):
    build_bundle(bundle_path)
    folder = tmp_path / "rules"
    code, _, err = run_cli("report", bundle_path, "-o", tmp_path / "r.md", "--isolation", folder,
                           "--generated-at", "2026-03-15T08:00:00Z", "--no-verify")
    assert code == 0, err
    assert sorted(p.name for p in folder.iterdir()) == ["change-freeze.yaml", "k8s.yaml", "kubectl.sh", "slurm.sh"]
    text = (tmp_path / "r.md").read_text()
    assert "## Isolation and change rules" in text
    for line in _script_commands((folder / "slurm.sh").read_text()):
        assert line[0] == "scontrol" and f"`{shlex.join(line)}`" not in err
        assert shlex.join(line) in text
    for doc in yaml.safe_load_all((folder / "k8s.yaml").read_text()):
        if doc:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert yaml.safe_load((folder / "change-freeze.yaml").read_text())["freezes"] is not None

    code, out, _ = run_cli("report", bundle_path, "--no-verify")
    assert code == 0 and "Isolation and change rules" not in out


def test_hostile_hosts_stay_escaped_in_the_report_section(bundle_path):
    analysis = build_bundle(bundle_path)
    analysis["hypotheses"][0]["host"] = "node02<script>alert(1)</script>$(reboot)"
    with Bundle.open(bundle_path) as bundle:
        model = report.build(bundle, analysis=analysis, causes=CAUSES, generated_at=AT, isolation=True)
    assert not any("reboot" in c["line"] for c in model["isolation"]["commands"])
    html = render.render(model, "html")
    section = html[html.index('<section id="isolation">'):html.index('<section id="evidence">')]
    assert "<script>" not in section and "&lt;script&gt;" in section
    md = render.render(model, "md")
    section = md[md.index("## Isolation and change rules"):md.index("## Evidence appendix")]
    assert "<script>" not in section.replace("`node02<script>alert(1)</script>$(reboot)`", "")


def test_report_isolation_refuses_a_file(bundle_path, tmp_path):
    build_bundle(bundle_path)
    target = tmp_path / "taken"
    target.write_text("x")
    code, _, err = run_cli("report", bundle_path, "--isolation", target, "--no-verify")
    assert code == 2 and "is a file" in err and err.count("\n") == 1


FAKE_SCONTROL = """#!/bin/sh
printf '%s\\n' "$@" >> "$SCONTROL_LOG"
printf -- '--\\n' >> "$SCONTROL_LOG"
case "$2" in JobId=*) echo "slurm_update error: Invalid job id specified" >&2; exit 1;; esac
"""


def _fake_scontrol(tmp_path, monkeypatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "scontrol.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("SCONTROL_LOG", str(log))
    return log


def test_apply_runs_each_argv_as_written_and_goes_on_past_a_failure(tmp_path, monkeypatch):
    import io

    log = _fake_scontrol(tmp_path, monkeypatch)
    rules = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0"),
                   context=Context(incident="INC-9 $(id)", at=AT, job="48213", user="alice",
                                   job_nodes=("node01", "node02")))
    said = io.StringIO()
    failed = isolation.apply(rules, "slurm", out=said)
    argvs = _argvs(rules, "slurm")
    assert len(argvs) == 3 and failed == 1, "drain and reservation ran; the job update failed and was told"
    ran = [chunk.strip("\n").split("\n") for chunk in ("\n" + log.read_text()).split("\n--\n") if chunk.strip()]
    assert [["scontrol", *a] for a in ran] == argvs, "every argv arrived exactly, without a shell"
    lines = said.getvalue().splitlines()
    assert f"ran: {shlex.join(argvs[0])}" in lines
    assert f"FAILED: {shlex.join(argvs[1])}  (exit 1: slurm_update error: Invalid job id specified)" in lines


def test_dry_run_prints_the_scripts_commands_and_runs_none(tmp_path, monkeypatch):
    import io

    log = _fake_scontrol(tmp_path, monkeypatch)
    rules = _rules(Place("gpu_fell_off_bus", host="node02", gpu="0000:5d:00.0"))
    said = io.StringIO()
    assert isolation.apply(rules, "slurm", dry_run=True, out=said) == 0
    assert not log.exists()
    printed = [line for line in said.getvalue().splitlines() if not line.startswith("#")]
    assert [shlex.split(line) for line in printed] == _script_commands(isolation.command_script(rules, "slurm"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(IsolationError, match="scontrol not found"):
        isolation.apply(rules, "slurm")


def test_report_apply_needs_isolation_and_dry_run_needs_apply(bundle_path, tmp_path):
    from workbench.commands import report as report_command

    assert report_command.APPLIED == isolation.APPLIED
    build_bundle(bundle_path)
    for argv, word in ((("--apply", "slurm"), "--apply needs --isolation"),
                       (("--isolation", tmp_path / "i", "--dry-run"), "--dry-run goes with --apply"),
                       (("--isolation", tmp_path / "i", "--apply", "ssh"), "invalid choice")):
        code, _, err = run_cli("report", bundle_path, "--no-verify", *argv)
        assert code == 2 and word in err and err.count("\n") == 1, (argv, err)
    code, out, err = run_cli("report", bundle_path, "--no-verify", "-o", tmp_path / "r.md", "--isolation",
                             tmp_path / "i", "--apply", "slurm", "--dry-run")
    assert code == 0 and out == "", err
    script = _script_commands((tmp_path / "i" / "slurm.sh").read_text())
    assert script and all(shlex.join(argv) in err.splitlines() for argv in script)
