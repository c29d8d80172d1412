"""The Kubernetes Job `gpuwb cluster manifest` prints: valid against the API schemas (strict: an unknown
field fails), one pod per listed node, and only the privileges capture needs."""

from __future__ import annotations

from datetime import datetime, timezone

import kubernetes_validate
import pytest
import yaml

from tests.conftest import run_cli
from workbench.capture.cluster.manifest import ManifestOptions, capture_job, manifests
from workbench.errors import UsageError

VERSIONS = ("1.29.0", "1.33.0")
"""The first release with backoffLimitPerIndex on by default, and a recent one."""
NODES = ["gpu-node-01", "gpu-node-02", "gpu-node-07"]


def _options(**kw) -> ManifestOptions:
    base = dict(nodes=NODES, image="registry.example/gpuwb:0.1", name="gpuwb-capture-t1",
                since=datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc), nccl_dirs=["/var/log/nccl"], claim_size="20Gi")
    base.update(kw)
    return ManifestOptions(**base)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(version):
    docs = manifests(_options(safe=True)) + manifests(_options(safe=False, claim_size=None, nccl_dirs=[]))
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "Job", "Pod", "Job", "Pod"]
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_can_fail():
    job = capture_job(_options())
    job["spec"]["template"]["spec"]["hostPid"] = True  # a typo of hostPID
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, VERSIONS[0], strict=True)


def test_one_pod_per_listed_node():
    job = capture_job(_options())
    spec = job["spec"]
    assert spec["completions"] == spec["parallelism"] == len(NODES)
    assert spec["completionMode"] == "Indexed" and spec["backoffLimitPerIndex"] == 0
    pod = spec["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": NODES}]}]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    assert anti["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    assert pod["restartPolicy"] == "Never" and pod["tolerations"] == [{"operator": "Exists"}]


def test_only_the_privileges_capture_needs():
    pod = capture_job(_options())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert pod["hostPID"] is True
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYSLOG", "DAC_READ_SEARCH"]}
    assert "nvidia.com/gpu" not in str(container["resources"]), "the hung job holds every GPU"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    for path in ("/dev/kmsg", "/var/log", "/var/log/nccl"):
        assert mounts[path]["readOnly"] is True
    writable = sorted(p for p, m in mounts.items() if not m.get("readOnly"))
    assert writable == ["/bundles", "/tmp"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert sorted(host.values()) == ["/dev/kmsg", "/var/log", "/var/log/nccl"]
    assert {m["name"] for m in container["volumeMounts"] if m["mountPath"] in host.values()} == set(host)


def test_the_container_runs_the_same_capture():
    command = capture_job(_options(safe=True))["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:4] == ["gpuwb", "capture", "-o", "/bundles/$(NODE_NAME).duckdb"]
    assert command[command.index("--since") + 1] == "2026-12-01T10:00:00Z"
    assert "--safe" in command and command[command.index("--nccl-log") + 1] == "/var/log/nccl/*"
    unsafe = capture_job(_options(safe=False))["spec"]["template"]["spec"]["containers"][0]
    assert "--safe" not in unsafe["command"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in unsafe["env"]


@pytest.mark.parametrize("change, needle", [
    ({"name": "Bad_Name"}, "--name"), ({"namespace": "a b"}, "--namespace"),
    ({"nodes": ["gpu-01", "GPU_02"]}, "node name"), ({"nccl_dirs": ["relative/dir"]}, "--nccl-log-dir"),
    ({"nccl_dirs": ["/"]}, "--nccl-log-dir"), ({"image": "bad image"}, "--image")])
def test_names_kubernetes_would_refuse_are_refused(change, needle):
    with pytest.raises(UsageError, match=needle):
        manifests(_options(**change))


def test_the_command_prints_a_yaml_stream():
    code, out, err = run_cli("cluster", "manifest", "--nodes", "gpu-node-[01-03]", "--image", "reg/gpuwb:1",
                             "--name", "cap1", "--safe", "--nccl-log-dir", "/var/log/nccl")
    assert code == 0, err
    docs = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in docs] == ["Job", "Pod"]
    for doc in docs:
        kubernetes_validate.validate(doc, VERSIONS[0], strict=True)
    assert docs[1]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "gpuwb-bundles"
    code, out, err = run_cli("cluster", "manifest", "--nodes", "gpu-node-01")
    assert code == 2 and "--image" in err
