"""The kernel beyond Xid: the harvested vocabularies (collectors/catalog/harvest/linux_kernel.yaml and
nvidia_driver.yaml) are known at >= 90 % each, and the families that recognise them stay precise: benign
look-alikes make no events, an OOM kill is one event whether or not its kill line survived, one oops is one
event, and the GSP RPC dump under an Xid 119 stays the driver's plain text."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from collectors import kernel
from collectors.base import Event, ParseContext

HARVEST = Path(__file__).resolve().parents[2] / "collectors" / "catalog" / "harvest"
GENERIC = {"nvrm"}
"""The catch-all kind of the kernel collector: a line kept as text, its meaning unknown."""


def _events(text: str) -> list[Event]:
    data = text.encode()
    return [r for r in kernel.parse("dmesg", io.BytesIO(data), ParseContext(host="node-1")) if isinstance(r, Event)]


@pytest.mark.parametrize("component", ["linux_kernel", "nvidia_driver"])
def test_the_harvested_vocabulary_is_known(component: str) -> None:
    doc = yaml.safe_load((HARVEST / f"{component}.yaml").read_text(encoding="utf-8"))
    assert doc["component"] == component and doc["source"]["repo"]
    messages = doc["messages"]
    found: dict[int, set[str]] = {}
    for event in _events("".join(" ".join(m["text"].splitlines()) + "\n" for m in messages)):
        found.setdefault(event.line, set()).add(event.kind)
    known = [m for i, m in enumerate(messages, 1)
             if (found.get(i, set()) - GENERIC) and (m.get("kind") is None or m["kind"] in found.get(i, set()))]
    assert len(known) / len(messages) >= 0.90, [m["text"] for m in messages if m not in known][:20]


@pytest.mark.parametrize("line", [
    "[ 10.5] nvme nvme0: I/O 937865 QID 87 timeout, completion polled",
    "[ 10.5] EXT4-fs (nvme0n1p1): re-mounted. Opts: errors=remount-ro. Quota mode: none.",
    "[ 10.5] nvme nvme0: 32/0/0 default/read/poll queues",
    "[ 10.5] mlx5_core 0000:3b:00.0: Port module event: module 0, Cable plugged",
    "[ 10.5] NVRM:      0    103  GSP_RM_ALLOC          0x0000000000002081 0x0000000000000004 0x00062ed1a6bd61fa",
    "[ 10.5] nvidia-uvm: Loaded the UVM driver, major device number 48.",
])
def test_benign_look_alikes_make_no_error_events(line: str) -> None:
    assert all(e.kind in GENERIC | {"port_module_event"} and e.severity in ("info", "warning", "debug")
               for e in _events(line + "\n")), [(e.kind, e.severity) for e in _events(line + "\n")]


def test_an_oom_kill_is_one_event_with_or_without_its_kill_line() -> None:
    summary = ("[ 5.0] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
               "oom_memcg=/kubepods/pod1,task_memcg=/kubepods/pod1/c1,task=python,pid={pid},uid=0\n")
    kill = "[ 5.1] Memory cgroup out of memory: Killed process {pid} (python) total-vm:1000kB, anon-rss:900kB\n"
    whole = _events(summary.format(pid=42) + kill.format(pid=42))
    assert [(e.kind, e.line, e.attrs["cgroup"]) for e in whole] == [("oom_kill", 2, "/kubepods/pod1/c1")]
    cut = _events(summary.format(pid=42) + "[ 6.0] eth0: renamed from veth1\n")
    assert [(e.kind, e.line, e.attrs["pid"], e.attrs["process"]) for e in cut] == [("oom_kill", 1, 42, "python")]
    other = _events(summary.format(pid=41) + kill.format(pid=42))
    assert sorted((e.line, e.attrs["pid"]) for e in other if e.kind == "oom_kill") == [(1, 41), (2, 42)]


def test_one_oops_is_one_event_and_names_the_nvidia_driver_in_its_trace() -> None:
    events = _events("[ 1.0] BUG: kernel NULL pointer dereference, address: 0000000000000008\n"
                     "[ 1.0] #PF: supervisor read access in kernel mode\n"
                     "[ 1.0] Oops: 0000 [#1] SMP NOPTI\n"
                     "[ 1.0] RIP: 0010:_nv012345rm+0x1f/0x40 [nvidia]\n")
    assert [(e.kind, e.layer) for e in events] == [("kernel_oops", "gpu")]


def test_the_driver_families_name_what_failed() -> None:
    kinds = {e.message: e.kind for e in _events(
        "[ 1.0] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x26:0x56:1474)\n"
        "[ 1.1] NVRM: failed to allocate ioctl memory\n"
        "[ 1.2] NVRM: Memory add failed. base: 0x2080000000 size: 0x1000000000 ret: -12\n"
        "[ 1.3] NVRM: DSI init cmd parsing from DT failed\n"
        "[ 1.4] nv-caps-drv failed to create cdev.\n")}
    assert list(kinds.values()) == ["driver_device_error", "driver_client_error", "driver_memory_error",
                                    "driver_platform_error", "driver_client_error"]
