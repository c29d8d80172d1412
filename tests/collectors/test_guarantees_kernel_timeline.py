"""What a responder sees for each kernel line: `gpuwb ingest` of a kernel log, then `timeline --json`.

Every Xid class of collectors/catalog/xid.yaml and every event kind of the kernel parser is asserted here at the
timeline level (kind, layer, severity, GPU/PCI, attributes), not only through the top hypothesis of a
scenario. Lines are in the kernel's own printk formats; most are real lines from tests/corpus/kernel
(file named in the case), the rest follow the kernel source's format strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.framework.xid_catalog import catalog
from tests.conftest import ingest_timeline

XIDS = sorted(catalog())
HOST = "node07"


def _journal(lines: list[str]) -> str:
    """``journalctl -k -o short-iso-precise``: exact UTC times, the host on every line; line n at second n."""
    return "".join(f"2026-03-14T10:{n // 60:02d}:{n % 60:02d}.000000+00:00 {HOST} kernel: {text}\n"
                   for n, text in enumerate(lines))


def _bus(code: int) -> str:
    """Each Xid on its own GPU, so that one Xid's events cannot stand in for another's."""
    return f"0000:{XIDS.index(code) + 1:02x}:00"


@pytest.fixture(scope="module")
def xid_timeline(tmp_path_factory) -> dict[int, list[dict]]:
    folder = tmp_path_factory.mktemp("xids")
    log = folder / "kern.log"
    log.write_text(_journal([f"NVRM: Xid (PCI:{_bus(code)}): {code}, pid=4242, name=python, {catalog()[code].name}"
                             for code in XIDS]))
    by_line: dict[int, list[dict]] = {}
    for event in ingest_timeline(folder / "b.duckdb", log):
        by_line.setdefault(event["line"], []).append(event)
    return {code: by_line.get(n + 1, []) for n, code in enumerate(XIDS)}


def test_the_catalog_is_not_empty():
    assert len(XIDS) > 50 and 79 in XIDS and 48 in XIDS and 13 in XIDS


@pytest.mark.parametrize("code", XIDS)
def test_every_xid_class_reaches_the_timeline(xid_timeline, code):
    info = catalog()[code]
    events = xid_timeline[code]
    (xid,) = [e for e in events if e["kind"] == "xid"]
    gpu = _bus(code) + ".0"
    assert (xid["host"], xid["gpu"], xid["layer"], xid["severity"]) == (HOST, gpu, info.layer, info.severity)
    assert xid["ts"] == f"2026-03-14T10:{XIDS.index(code) // 60:02d}:{XIDS.index(code) % 60:02d}.000000Z"
    attrs = xid["attrs"]
    assert (attrs["xid"], attrs["pci"], attrs["pid"], attrs["process"]) == (code, gpu, 4242, "python")
    assert (attrs["action"], attrs["causes"], attrs["follower"]) == (info.action, list(info.causes), info.follower)
    assert attrs["name"] == info.name and attrs["meaning"] == info.meaning
    fell = [e for e in events if e["kind"] == "gpu_fell_off_bus"]
    if "gpu_fell_off_bus" in info.causes:
        assert len(fell) == 1 and fell[0]["gpu"] == gpu and fell[0]["attrs"]["xid"] == code
        assert (fell[0]["layer"], fell[0]["severity"]) == ("hardware", "critical")
    else:
        assert fell == []


def test_xid_79_is_a_gpu_off_the_bus(xid_timeline):
    kinds = [e["kind"] for e in xid_timeline[79]]
    assert kinds.count("gpu_fell_off_bus") == 1 and kinds.count("xid") == 1


# (case id, lines before, the line, kind, layer, severity, gpu, attrs it must carry)
KINDS = [
    ("xid_with_uuid", ["NVRM: GPU at PCI:0000:3b:00: GPU-1a2b3c4d-0000-1111-2222-333344445555",
                       "NVRM: GPU Board Serial Number: 1650123456789"],
     "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been "
     "detected on GPU in the framebuffer at partition 0, subpartition 0.",
     "xid", "gpu", "critical", "0000:3b:00.0",
     {"xid": 48, "uuid": "GPU-1a2b3c4d-0000-1111-2222-333344445555", "causes": ["ecc_uncorrectable"]}),
    # nvidia-docker_1553_xid79_pid0_crashdump_dmesg.log
    ("xid79_pid0", [], "NVRM: Xid (PCI:0000:09:00): 79, pid=0, GPU has fallen off the bus.",
     "gpu_fell_off_bus", "hardware", "critical", "0000:09:00.0", {"xid": 79, "pci": "0000:09:00.0"}),
    ("fell_off_without_xid", [], "NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.",
     "gpu_fell_off_bus", "hardware", "critical", "0000:5e:00.0", {"pci": "0000:5e:00.0"}),
    # nvsentinel_155_fallen_off_bus_no_xid_dmesg.log (one message over three lines)
    ("fell_off_three_lines",
     ["NVRM: The NVIDIA GPU 0000:b3:00.0", "NVRM: (PCI ID: 10de:26b5) installed in this system has"],
     "NVRM: fallen off the bus and is not responding to commands.",
     "gpu_fell_off_bus", "hardware", "critical", "0000:b3:00.0", {"pci": "0000:b3:00.0"}),
    # nvsentinel_155_fallen_off_bus_no_xid_dmesg.log
    ("driver_open", [], "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
     "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025",
     "driver_loaded", "gpu", "info", None, {"version": "570.158.01", "flavor": "open"}),
    ("driver_proprietary", [],
     "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023",
     "driver_loaded", "gpu", "info", None, {"version": "535.104.05", "flavor": "proprietary"}),
    # ogkm_1200_gsp_heartbeat_timeout_xid154.log
    ("gsp_heartbeat", ["NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout waiting for RPC from GSP!"],
     "NVRM: _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 3175895033 heartbeat 19834604 "
     "heartbeatWithOffsetMs 3175815351 diff 79682 timeout 5200",
     "gsp_heartbeat_timeout", "gpu", "critical", "0000:3b:00.0", {"diff_ms": 79682, "timeout_ms": 5200}),
    # gpud_xid119_gsp_rpc_timeout_dmesg_ctime.log
    ("nvrm_other", [], "NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data 0x0000000000002081 "
     "0x0000000000000004.", "nvrm", "gpu", "info", None, {"gpu_index": 4}),
    ("sxid", [], "nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Non-fatal, Link 46 egress non-posted PRIV error "
     "(First)", "sxid", "hardware", "warning", None,
     {"sxid": 12028, "pci": "0000:84:00.0", "fatal": False, "link": 46, "nvswitch": "nvidia-nvswitch1"}),
    ("aer_fatal", [], "pcieport 0000:00:01.1: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction "
     "Layer, (Receiver ID)", "pcie_aer", "hardware", "critical", None,
     {"severity": "uncorrected_fatal", "device": "0000:00:01.1"}),
    # nvidia-docker_1553_xid79_pid0_crashdump_dmesg.log
    ("aer_corrected", [], "pcieport 0000:00:01.1: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, "
     "(Receiver ID)", "pcie_aer", "hardware", "warning", None, {"severity": "corrected", "device": "0000:00:01.1"}),
    ("pciehp_down", [], "pcieport 0000:17:02.0: pciehp: Slot(2): Link Down",
     "pcie_link_down", "hardware", "error", None, {"device": "0000:17:02.0", "slot": "2"}),
    ("pciehp_up", [], "pcieport 0000:17:02.0: pciehp: Slot(2): Link Up",
     "pcie_link_up", "hardware", "info", None, {"device": "0000:17:02.0"}),
    ("pcie_degraded", ["NVRM: GPU at PCI:0000:3b:00: GPU-1a2b3c4d-0000-1111-2222-333344445555",
                       "NVRM: GPU Board Serial Number: 1650123456789"],
     "nvidia 0000:3b:00.0: 15.752 Gb/s available PCIe bandwidth, limited by 8.0 GT/s PCIe x2 "
     "link at 0000:3a:00.0 (capable of 252.048 Gb/s with 16.0 GT/s PCIe x16 link)",
     "pcie_link_degraded", "hardware", "warning", "0000:3b:00.0",
     {"width": "x2", "capable_width": "x16", "limited_at": "0000:3a:00.0"}),
    # arm-nas_16_mlx5_core_probe_cable_plugged_pcie_bw.log
    ("pcie_bandwidth", [], "mlx5_core 0004:01:00.0: 63.008 Gb/s available PCIe bandwidth (8.0 GT/s PCIe x8 link)",
     "pcie_bandwidth", "hardware", "info", None, {"device": "0004:01:00.0", "gbps": 63.008}),
    ("mce_bank", [], "mce: [Hardware Error]: CPU 3: Machine Check Exception: 5 Bank 4: b200000000070005",
     "mce", "hardware", "error", None, {"subsystem": "mce", "cpu": 3, "bank": 4}),
    ("edac_ue", [], "EDAC MC0: 1 UE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 "
     "page:0x12345 offset:0x0 grain:32)", "mce", "hardware", "critical", None,
     {"subsystem": "edac", "type": "UE", "count": 1}),
    ("thermal", [], "CPU12: Core temperature above threshold, cpu clock throttled (total events = 1)",
     "mce", "hardware", "warning", None, {"subsystem": "thermal", "cpu": 12}),
    # qaconv_19_oom_killer_global_python_dmesg.log
    ("oom_invoked", [], "sunloginclient invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, "
     "oom_score_adj=0", "oom_invoked", "scheduling", "warning", None, {"process": "sunloginclient"}),
    ("oom_kill", [], "Out of memory: Killed process 698405 (python) total-vm:49978204kB, anon-rss:12918388kB, "
     "file-rss:68668kB, shmem-rss:53352kB, UID:1000 pgtables:49772kB oom_score_adj:0",
     "oom_kill", "scheduling", "error", None, {"pid": 698405, "process": "python", "anon_rss_kb": 12918388}),
    # rpi_2482_nfs_not_responding_ok_hung_task_dmesg.log
    ("hung_task", [], "INFO: task objcopy:24916 blocked for more than 120 seconds.",
     "hung_task", "hardware", "warning", None, {"process": "objcopy", "pid": 24916, "seconds": 120}),
    ("soft_lockup", [], "watchdog: BUG: soft lockup - CPU#7 stuck for 22s! [python:4242]",
     "soft_lockup", "hardware", "error", None, {"cpu": 7, "seconds": 22, "pid": 4242}),
    ("hard_lockup", [], "NMI watchdog: Watchdog detected hard LOCKUP on cpu 5",
     "soft_lockup", "hardware", "critical", None, {"cpu": 5, "hard": True}),
    ("rcu_stall", [], "rcu: INFO: rcu_sched self-detected stall on CPU",
     "rcu_stall", "hardware", "error", None, {"flavor": "rcu_sched"}),
    ("panic", [], "Kernel panic - not syncing: Fatal hardware error!",
     "kernel_panic", "hardware", "critical", None, {"reason": "Fatal hardware error!"}),
    # rpi_2482_nfs_not_responding_ok_hung_task_dmesg.log
    ("nfs_down", [], "nfs: server ease not responding, still trying",
     "nfs_not_responding", "network_storage", "error", None, {"server": "ease"}),
    ("nfs_ok", [], "nfs: server ease OK", "nfs_ok", "network_storage", "info", None, {"server": "ease"}),
    # jade_14_lustre_lnet_client_errors_dmesg_ctime.log
    ("lnet", [], "LNet: 2431:0:(o2iblnd_cb.c:3174:kiblnd_check_conns()) Timed out tx for 172.31.126.87@o2ib: "
     "403055 seconds", "lnet_error", "network_storage", "error", None,
     {"nid": "172.31.126.87@o2ib", "seconds": 403055}),
    ("lustre_error", [], "LustreError: 11-0: lustre-OST0003-osc-ffff8817f6b46000: operation ost_write to node "
     "172.31.126.87@o2ib failed: rc = -107", "lustre_error", "network_storage", "error", None,
     {"rc": -107, "target": "lustre-OST0003"}),
    ("lustre_restored", [], "Lustre: lustre-OST0003-osc-ffff8817f6b46000: Connection restored to 172.31.126.87@o2ib "
     "(at 172.31.126.87@o2ib)", "lustre_recovered", "network_storage", "info", None, {"target": "lustre-OST0003"}),
    ("io_error", [], "blk_update_request: I/O error, dev nvme0n1, sector 123456 op 0x1:(WRITE) flags 0x0 phys_seg 1 "
     "prio class 0", "io_error", "network_storage", "error", None, {"device": "nvme0n1"}),
    # arm-nas_16_mlx5_core_probe_cable_plugged_pcie_bw.log
    ("port_module", [], "mlx5_core 0004:01:00.0: Port module event: module 0, Cable plugged",
     "port_module_event", "network_storage", "info", None, {"module": 0, "status": "Cable plugged"}),
    ("tx_timeout", [], "NETDEV WATCHDOG: eth0 (mlx5_core): transmit queue 3 timed out",
     "nic_tx_timeout", "network_storage", "error", None, {"device": "eth0", "queue": 3}),
    # spdk_1184_bond_link_not_ready_rxe_journalctl.log
    ("rdma", [], "rdma_rxe: Failed sending ack", "rdma_error", "network_storage", "error", None,
     {"device": "rdma_rxe"}),
    ("ib_link_down", [], "mlx5_core 0000:c1:00.0 ibp193s0: Link down",
     "link_down", "network_storage", "warning", None, {"device": "ibp193s0", "pci": "0000:c1:00.0"}),
    ("ib_link_up", [], "mlx5_core 0000:c1:00.0 ibp193s0: Link up",
     "link_up", "network_storage", "info", None, {"device": "ibp193s0"}),
    # spdk_1184_bond_link_not_ready_rxe_journalctl.log
    ("bond_release", [], "bond0: Releasing backup interface ens1f0", "link_down", "network_storage", "warning",
     None, {}),
    # gpud_nccl_segfault_dmesg_decode_iso.log
    ("segfault_nccl", [], "pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 "
     "error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]", "segfault", "gpu", "error", None,
     {"pid": 2536443, "lib": "libnccl.so.2"}),
    # gpud_nvidia_peermem_invalid_context_journalctl_iso.log
    ("peermem", [], "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further "
     "processing", "nvidia_module", "network_storage", "error", None, {"module": "nvidia-peermem"}),
    ("boot", [], "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-045) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) "
     "11.4.0) #101-Ubuntu SMP", "boot", "hardware", "info", None, {"kernel": "5.15.0-91-generic"}),
]


@pytest.mark.parametrize(("before", "line", "kind", "layer", "severity", "gpu", "attrs"),
                         [c[1:] for c in KINDS], ids=[c[0] for c in KINDS])
def test_every_kernel_event_kind_reaches_the_timeline(tmp_path: Path, before, line, kind, layer, severity, gpu,
                                                      attrs):
    log = tmp_path / "kern.log"
    log.write_text(_journal([*before, line]))
    events = [e for e in ingest_timeline(tmp_path / "b.duckdb", log) if e["line"] == len(before) + 1]
    matching = [e for e in events if e["kind"] == kind]
    assert len(matching) == 1, [(e["kind"], e["message"]) for e in events]
    (event,) = matching
    assert (event["layer"], event["severity"], event["gpu"], event["host"]) == (layer, severity, gpu, HOST)
    assert event["ts"] == f"2026-03-14T10:00:{len(before):02d}.000000Z" and event["source"] == "kernel"
    assert {k: event["attrs"].get(k) for k in attrs} == attrs

