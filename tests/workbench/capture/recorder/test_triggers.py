"""Trigger detection on real kernel and NCCL log lines, the trigger files, and the storm gate."""

from __future__ import annotations

from pathlib import Path

from workbench.capture.recorder.triggers import (
    KernelTriggers,
    StormGate,
    Trigger,
    drop_trigger_file,
    nccl_trigger,
    take_trigger_files,
)

CORPUS = Path(__file__).resolve().parents[3] / "corpus"


def kernel_triggers(name: str) -> list[str]:
    detector = KernelTriggers()
    found = []
    for line in (CORPUS / "kernel" / name).read_text(errors="replace").splitlines():
        hit = detector.check(line, "kernel:test", 0.0)
        if hit is not None:
            found.append(hit.reason)
    return found


def test_real_xid_sxid_and_fallen_off_bus_lines_trigger() -> None:
    assert set(kernel_triggers("nvidia-docker_1553_xid79_pid0_crashdump_dmesg.log")) == {"xid 79"}
    assert "sxid 12028" in kernel_triggers("gpud_pr338_sxid12028_nvswitch_dmesg_iso.log")
    assert kernel_triggers("nvsentinel_155_fallen_off_bus_no_xid_dmesg.log") == ["gpu_fell_off_bus"], \
        "the three-line report without an Xid is recognised across its lines, once"


def test_corrected_aer_and_benign_lines_do_not_trigger_but_fatal_aer_does() -> None:
    detector = KernelTriggers()
    benign = ["[  5.1] e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex",
              "[  6.2] pcieport 0000:5c:00.0: AER: Corrected error received: 0000:5d:00.0",
              "[  6.2] nvidia 0000:5d:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
              "2026-12-01T10:00:00.000000+00:00 node07 sshd[812]: NVRM: Xid (PCI:0000:5d:00): 79, not the kernel's"]
    assert [detector.check(line, "k", 0.0) for line in benign] == [None] * 4
    fatal = detector.check("[  7.0] nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), "
                           "type=Transaction Layer, (Requester ID)", "k", 1.0)
    assert fatal is not None and fatal.reason == "fatal PCIe AER"


def test_nccl_watchdog_timeouts_in_real_logs_trigger_and_a_training_step_does_not() -> None:
    for name in ("ofa_271_watchdog_allreduce_1800s_legacy_format.log", "basicsr_737_watchdog_allreduce_pg_guid.log"):
        lines = (CORPUS / "nccl" / name).read_text(errors="replace").splitlines()
        assert any(nccl_trigger(line, "watch", 0.0) for line in lines), name
    assert nccl_trigger("[rank0] step 12 loss 2.31 timeout_s=1800", "watch", 0.0) is None


def test_trigger_files_are_consumed_once(tmp_path: Path) -> None:
    drop_trigger_file(tmp_path, "slurm epilog: job 42")
    (tmp_path / "junk.trigger").write_text("{not json")
    found = take_trigger_files(tmp_path)
    assert sorted(t.reason for t in found) == ["requested: requested (unreadable trigger file)",
                                               "requested: slurm epilog: job 42"]
    assert take_trigger_files(tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_storm_gate_lets_one_trigger_through_per_burst_and_cool_down() -> None:
    gate = StormGate(cooldown_s=60)
    assert gate.admit(Trigger(100.0, "xid 79", "k"), freezing=False)
    assert not gate.admit(Trigger(101.0, "xid 79", "k"), freezing=True)
    gate.finished(110.0)
    assert not gate.admit(Trigger(150.0, "xid 48", "k"), freezing=False)
    assert gate.absorbed == 2
    assert gate.admit(Trigger(171.0, "xid 48", "k"), freezing=False), "after the cool-down a new incident starts"
    assert gate.absorbed == 0
