# ruff: noqa: E501  (the toolkit's and docker's real lines stay whole)
"""NVIDIA container toolkit: its own logs sniffed and read in their frames (libnvidia-container's glog
lines, the runtime's logrus text and JSON, nvidia-ctk's short form), its errors named with their causes,
and the docker/containerd text that wraps them recognised in any file."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path

from collectors import container_toolkit
from collectors.base import Event, HostFact, ParseContext, Skipped
from collectors.framework import registry
from tests.conftest import ingest_timeline

MTIME = datetime(2025, 3, 4, 12, 0, tzinfo=timezone.utc)

# ``nvidia-container-cli -k -d /dev/tty info`` as pasted in NVIDIA/nvidia-container-toolkit#171 (first lines),
# then the failure of NVIDIA/nvidia-docker#1629.
CLI_DEBUG = """I1128 17:35:08.651661 1737 nvc.c:376] initializing library context (version=1.14.3, build=1eb5a30a6ad0415550a9df632ac8832bf7e2bbba)
I1128 17:35:08.651794 1737 nvc.c:350] using root /
I1128 17:35:08.651820 1737 nvc.c:351] using ldcache /etc/ld.so.cache
W1128 17:35:08.654012 1738 nvc.c:273] failed to set inheritable capabilities
W1128 17:35:08.654149 1738 nvc.c:274] skipping kernel modules load due to failure
I1128 17:35:08.655011 1739 rpc.c:71] starting driver rpc service
nvidia-container-cli: initialization error: nvml error: driver not loaded
"""

RUNTIME_LOG = """time="2025-03-04T10:11:12Z" level=info msg="Running with config: {}"
time="2025-03-04T10:11:13Z" level=error msg="failed to create NVIDIA Container Runtime: failed to construct OCI spec modifier: failed to construct CDI modifier: failed to inject CDI devices: unresolvable CDI devices nvidia.com/gpu=all"
time="2025-03-04T10:11:14Z" level=error msg="error discovering mounts for discoverer \\"graphics\\": permission denied"
time="2025-03-04T10:11:15Z" level=warning msg="Ignoring unsupported config mode for legacy"
time="2025-03-04T10:11:16Z" level=error msg="something nobody has catalogued"
{"level":"error","msg":"failed to create NVIDIA Container Runtime: requirements not met: unsatisfied condition: cuda>=12.6 (cuda=12.2)","time":"2025-03-04T10:11:17Z"}
{"level":"error","msg":
"""


def _parse(text: str) -> list:
    ctx = ParseContext(mtime=MTIME, reference_time=MTIME)
    return list(container_toolkit.parse("container_toolkit_log", io.BytesIO(text.encode()), ctx))


def test_the_toolkits_logs_are_sniffed_by_name_or_by_their_own_frames() -> None:
    assert container_toolkit.sniff("nvidia-container-toolkit.log", "")["container_toolkit_log"] >= 70
    assert container_toolkit.sniff("cli.txt", CLI_DEBUG) == {"container_toolkit_log": 80}
    healthy = "".join(CLI_DEBUG.splitlines(keepends=True)[:-1])  # a debug log without any error in it
    assert container_toolkit.sniff("info.txt", healthy) == {"container_toolkit_log": 80}
    assert container_toolkit.sniff("runtime.txt", RUNTIME_LOG)["container_toolkit_log"] == 80
    # the same error pasted in a kubectl describe or a docker run stays that program's text
    describe = ("  Warning  Failed  10s  kubelet  Error: failed to create containerd task: failed to create shim task: "
                "OCI runtime create failed: runc create failed: unable to start container process: error during container "
                "init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as "
                "'legacy'\nnvidia-container-cli: initialization error: nvml error: driver not loaded: unknown\n")
    assert container_toolkit.sniff("describe.txt", describe) == {}


def test_the_cli_debug_log_gives_the_library_version_and_the_driver_failure_with_its_cause() -> None:
    rows = _parse(CLI_DEBUG)
    facts = [r for r in rows if isinstance(r, HostFact)]
    assert [(f.key, f.value) for f in facts] == [("versions.nvidia_container_cli", "1.14.3")]
    events = [r for r in rows if isinstance(r, Event)]
    errors = [e for e in events if e.severity == "error"]
    assert [e.attrs["causes"] for e in errors] == [["driver_stack_mismatch"]]
    assert errors[0].attrs["stage"] == "initialization" and errors[0].line == 7
    # the warnings of every run are on the timeline as warnings, pointing at no cause
    warnings = [e for e in events if e.severity == "warning"]
    assert [e.line for e in warnings] == [4, 5] and not any("causes" in e.attrs for e in warnings)


def test_runtime_lines_keep_their_time_and_a_known_message_its_cause() -> None:
    rows = _parse(RUNTIME_LOG)
    events = {r.line: r for r in rows if isinstance(r, Event)}
    assert 1 not in events  # info lines are not events
    cdi = events[2]
    assert cdi.kind == "container_toolkit_error" and cdi.attrs["causes"] == ["gpu_runtime_misconfigured"]
    assert cdi.ts == datetime(2025, 3, 4, 10, 11, 13, tzinfo=timezone.utc)
    assert cdi.attrs["signature"] in ("cdi_unresolvable_devices", "nvidia_runtime_error")
    mounts = events[3]  # no signature knows it: the toolkit's own words say what it is about
    assert mounts.attrs["family"] == "driver_discovery" and mounts.attrs["causes"] == ["gpu_runtime_misconfigured"]
    assert events[4].attrs["family"] == "config" and "causes" not in events[4].attrs  # a warning has no cause
    assert events[4].severity == "warning"
    assert events[5].kind == "container_toolkit_line"  # kept, but nobody knew its meaning
    requirement = events[6]
    assert requirement.attrs["causes"] == ["driver_stack_mismatch"]
    assert requirement.attrs["required_version"] == "12.6" and requirement.attrs["host_version"] == "12.2"
    assert requirement.ts == datetime(2025, 3, 4, 10, 11, 17, tzinfo=timezone.utc)


def test_a_broken_json_line_is_a_counted_skip_not_a_traceback() -> None:
    rows = _parse(RUNTIME_LOG)
    skipped = [r for r in rows if isinstance(r, Skipped)]
    assert [s.line for s in skipped] == [7]


def test_docker_errors_in_a_file_nobody_sniffs_name_their_cause(tmp_path: Path) -> None:
    """The user's path: the docker error pasted as is, ingested, on the timeline with its cause."""
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "docker-run.txt").write_text(
        "docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime "
        "create failed: runc create failed: unable to start container process: error during container init: error running "
        "prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please update your driver to a newer "
        "version, or use an earlier cuda container: unknown\n"
        "docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\n")
    events = ingest_timeline(tmp_path / "b.duckdb", evidence)
    by_line = {e["line"]: e for e in events if e["kind"] == "container_toolkit_error"}
    assert by_line[1]["attrs"]["signature"] == "oci_prestart_hook_failed"
    assert by_line[2]["attrs"]["causes"] == ["driver_stack_mismatch"]
    assert by_line[2]["attrs"]["requirement"] == "cuda>=12.8"
    assert by_line[3]["attrs"]["causes"] == ["gpu_runtime_misconfigured"]


def test_the_registry_finds_the_collector() -> None:
    assert registry.collector_for_kind("container_toolkit_log") is container_toolkit
