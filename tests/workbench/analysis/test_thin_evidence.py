"""Diagnosis on thin evidence: what a responder pastes into a ticket is often one line, with no time
and no host. A single specific line must still rank its cause, untimed lines take part in ranking and
are ordered by their place in the file, a PCIe error is pinned on the endpoint the kernel names, and
a CUDA OOM where PyTorch holds little of a full card points at whoever else holds it.

Rows are written directly (not parsed): these tests pin the checks and the engine; the real-incident
benchmark (tests/real_incidents) takes the same evidence from the pasted text."""

from __future__ import annotations

import io
from datetime import datetime, timedelta
from pathlib import Path

from collectors.base import Event
from workbench.analysis.engine import analyze
from workbench.analysis.hypotheses import LOW_SCORE
from workbench.store.bundle import Bundle


def diagnose(tmp_path: Path, rows: list[Event], *more_files: list[Event]) -> dict:
    """Analyse the rows as pasted lines of one file (and each further list as another file)."""
    path = tmp_path / "thin.duckdb"
    bundle = Bundle.create(path, title="thin evidence")
    for n, file_rows in enumerate((rows, *more_files)):
        sha, _, _ = bundle.add_artifact(io.BytesIO(f"pasted {n}".encode()), kind="synthetic",
                                        source=f"ticket-{n}.txt", collector="kernel")
        writer = bundle.writer(sha)
        for row in file_rows:
            writer.add(row)
        writer.flush()
    bundle.seal()
    bundle.close()
    with Bundle.open(path) as opened:
        return analyze(opened)


def top(result: dict) -> dict:
    assert result["hypotheses"], "no hypothesis at all"
    return result["hypotheses"][0]


def test_one_untimed_cuda_802_line_names_fabric_manager(tmp_path: Path) -> None:
    result = diagnose(tmp_path, [Event(kind="cuda_error", layer="gpu", line=1, attrs={"code": 802},
                                       message="RuntimeError: cuda runtime error (802) : system not yet initialized")])
    assert top(result)["cause"] == "fabric_manager_down"
    assert top(result)["score"] >= LOW_SCORE


def test_fabric_manager_version_refusal_is_not_a_driver_library_mismatch(tmp_path: Path) -> None:
    line = ("nv-fabricmanager[3228]: fabric manager NVIDIA GPU driver interface version 530.30.02 don't match "
            "with driver version 530.41.03. Please update with matching NVIDIA driver package.")
    result = diagnose(tmp_path, [Event(kind="fabric_manager_error", layer="gpu", line=1, message=line,
                                       attrs={"driver_interface_version": "530.30.02", "driver_version": "530.41.03"})])
    assert [h["cause"] for h in result["hypotheses"]] == ["fabric_manager_down"]


def test_nvidia_smi_version_mismatch_alone_names_the_driver_stack(tmp_path: Path) -> None:
    result = diagnose(tmp_path, [Event(kind="nvidia_smi_error", layer="gpu", line=1,
                                       message="Failed to initialize NVML: Driver/library version mismatch",
                                       attrs={"error": "Failed to initialize NVML",
                                              "reason": "Driver/library version mismatch"})])
    assert top(result)["cause"] == "driver_stack_mismatch"
    assert top(result)["score"] >= LOW_SCORE


def oom(allocated: str, free: str, reserved: str, total: str) -> Event:
    mib = {"505.96 MiB": 505.96, "12.50 MiB": 12.5, "530.00 MiB": 530.0, "11.17 GiB": 11437.9,
           "10.90 GiB": 11161.6, "10.95 GiB": 11212.8}
    return Event(kind="cuda_error", layer="gpu", line=3,
                 message=f"RuntimeError: CUDA out of memory. Tried to allocate 60.00 MiB (GPU 0; {total} total "
                         f"capacity; {allocated} already allocated; {free} free; {reserved} reserved in total "
                         f"by PyTorch)",
                 attrs={"oom": True, "total_capacity_mib": mib[total], "free_mib": mib[free],
                        "allocated_by_pytorch_mib": mib[allocated], "reserved_total_mib": mib[reserved]})


def test_oom_where_pytorch_holds_little_of_a_full_card_is_contention(tmp_path: Path) -> None:
    result = diagnose(tmp_path, [oom("505.96 MiB", "12.50 MiB", "530.00 MiB", "11.17 GiB")])
    assert top(result)["cause"] == "gpu_contention"


def test_oom_where_pytorch_holds_the_card_is_the_jobs_own_watermark(tmp_path: Path) -> None:
    result = diagnose(tmp_path, [oom("10.90 GiB", "12.50 MiB", "10.95 GiB", "11.17 GiB")])
    assert top(result)["cause"] == "gpu_oom"


def test_engine_that_found_the_card_taken_explains_its_empty_kv_cache(tmp_path: Path) -> None:
    rows = [Event(kind="engine_memory_profile", layer="gpu", line=10,
                  message="Memory profiling results: total_gpu_memory=79.15GiB initial_memory_usage=68.01GiB",
                  attrs={"total_gib": 79.15, "initial_gib": 68.01}),
            Event(kind="kv_cache_no_blocks", layer="gpu", line=14,
                  message="ValueError: No available memory for the cache blocks. Try increasing "
                          "`gpu_memory_utilization` when initializing the engine.")]
    hyp = top(diagnose(tmp_path, rows))
    assert hyp["cause"] == "gpu_contention"
    assert hyp["consequences"] == ["kv_cache_pressure"]


def test_contention_explains_the_empty_kv_cache_pasted_in_another_file(tmp_path: Path) -> None:
    """Two pasted files and no times: nothing contradicts the catalog's direction (contention leads to
    KV-cache exhaustion), so the exhaustion is a consequence, not a second root cause."""
    profile = [Event(kind="engine_memory_profile", layer="gpu", line=3, message="Memory profiling results: ...",
                     attrs={"total_gib": 79.15, "initial_gib": 68.01})]
    no_blocks = [Event(kind="kv_cache_no_blocks", layer="gpu", line=2,
                       message="ValueError: No available memory for the cache blocks.")]
    hyps = diagnose(tmp_path, no_blocks, profile)["hypotheses"]
    assert [(h["cause"], h["consequences"]) for h in hyps][0] == ("gpu_contention", ["kv_cache_pressure"])


def test_gpu_named_by_uuid_joins_the_gpu_named_by_bus_id_in_a_hostless_paste(tmp_path: Path) -> None:
    rows = [Event(kind="xid", layer="hardware", line=2, gpu="0000:ae:00.0", attrs={"xid": 79},
                  message="XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00"),
            Event(kind="gpu_lost", layer="hardware", line=5, attrs={"uuid": "GPU-ac896b35"},
                  message="failed to get device remapped rows: ERROR_GPU_IS_LOST")]
    hyps = diagnose(tmp_path, rows)["hypotheses"]
    assert [(h["cause"], h["gpu"]) for h in hyps] == [("gpu_fell_off_bus", "0000:ae:00.0")]


def aer_rows(source: str | None = None) -> list[Event]:
    attrs = {"severity": "uncorrected_fatal", "device": "0000:00:03.0", "type": "Transaction Layer"}
    if source:
        attrs["source"] = source
    return [
        Event(kind="pcie_aer_unrecovered", layer="hardware", line=1, attrs={"device": "0000:03:00.1",
                                                                            "driver": "snd_hda_intel"},
              message="snd_hda_intel 0000:03:00.1: AER: can't recover (no error_detected callback)"),
        Event(kind="pcie_aer", layer="hardware", line=4, attrs=attrs, severity="critical",
              message="pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer"),
        Event(kind="pcie_aer_unrecovered", layer="hardware", line=8,
              attrs={"device": "0000:03:00.0", "driver": "nvidia"},
              message="nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)"),
    ]


def test_fatal_aer_is_pinned_on_the_gpu_that_could_not_recover_not_the_root_port(tmp_path: Path) -> None:
    """The GPU's audio function (0000:03:00.1) is the same board: one hypothesis, on the GPU."""
    hyps = diagnose(tmp_path, aer_rows())["hypotheses"]
    assert [(h["cause"], h["gpu"]) for h in hyps] == [("pcie_link_degraded", "0000:03:00.0")]


def test_aer_names_its_source_endpoint(tmp_path: Path) -> None:
    rows = [r for r in aer_rows(source="0000:63:00.0") if r.kind == "pcie_aer"]
    hyp = top(diagnose(tmp_path, rows))
    assert (hyp["cause"], hyp["gpu"]) == ("pcie_link_degraded", "0000:63:00.0")


def test_untimed_lines_are_ordered_by_the_file_the_pcie_error_leads_to_the_mmu_fault(tmp_path: Path) -> None:
    rows = [Event(kind="pcie_aer_unrecovered", layer="hardware", line=5, attrs={"device": "0000:63:00.0",
                                                                                "driver": "nvidia"},
                  message="nvidia 0000:63:00.0: AER: can't recover (no error_detected callback)"),
            Event(kind="xid", layer="gpu", line=7, gpu="0000:63:00.0", attrs={"xid": 31},
                  message="NVRM: Xid (PCI:0000:63:00): 31, name=plasmashell, MMU Fault: ENGINE GR_HOST0")]
    result = diagnose(tmp_path, rows)
    hyp = top(result)
    assert (hyp["cause"], hyp["gpu"], hyp["consequences"]) == ("pcie_link_degraded", "0000:63:00.0",
                                                               ["app_gpu_fault"])
    assert result["first_anomaly"] is not None
    assert result["first_anomaly"]["text"].startswith("nvidia 0000:63:00.0: AER: can't recover")


def test_untimed_mmu_fault_before_the_pcie_error_is_not_its_consequence(tmp_path: Path) -> None:
    rows = [Event(kind="xid", layer="gpu", line=2, gpu="0000:63:00.0", attrs={"xid": 31},
                  message="NVRM: Xid (PCI:0000:63:00): 31, MMU Fault"),
            Event(kind="pcie_aer_unrecovered", layer="hardware", line=9, attrs={"device": "0000:63:00.0",
                                                                                "driver": "nvidia"},
                  message="nvidia 0000:63:00.0: AER: can't recover (no error_detected callback)")]
    hyps = diagnose(tmp_path, rows)["hypotheses"]
    assert all(h["consequences"] == [] for h in hyps)


T0 = datetime(2025, 5, 19, 19, 57)


def test_first_anomaly_and_window_sit_at_the_incident_not_at_boot(tmp_path: Path) -> None:
    """Boot lines two days before the failure neither open the window nor become the first anomaly."""
    rows = [Event(kind="driver_loaded", layer="gpu", ts=T0 - timedelta(days=2), line=1, message="NVRM: loading",
                  attrs={"version": "550.54.15"})]
    rows += [Event(kind="pcie_aer", layer="hardware", ts=T0 - timedelta(days=2, seconds=-i), line=2 + i,
                   host="node07", attrs={"severity": "corrected", "device": "0000:5d:00.0"},
                   message="pcieport 0000:5d:00.0: AER: Corrected error received") for i in range(3)]
    rows.append(Event(kind="xid", layer="hardware", ts=T0, line=50, host="node07", gpu="0000:19:00.0",
                      attrs={"xid": 79}, message="NVRM: Xid (PCI:0000:19:00): 79, GPU has fallen off the bus."))
    rows.append(Event(kind="rank_failed", layer="scheduling", ts=T0 + timedelta(seconds=30), line=60, host="node07",
                      message="rank 3 exited with signal 6"))
    result = diagnose(tmp_path, rows)
    assert top(result)["cause"] == "gpu_fell_off_bus"
    assert result["first_anomaly"]["ts"].startswith("2025-05-19T19:57")
    start = datetime.fromisoformat(result["window"]["start"].rstrip("Z"))
    assert T0 - timedelta(hours=2) <= start <= T0


def test_one_line_each_ranks_its_cause(tmp_path: Path) -> None:
    """Lines a program or a tool prints, each alone in a ticket."""
    cases = {
        "nvlink_error": Event(kind="cuda_error", layer="gpu", line=1,
                              message="RuntimeError: CUDA error: uncorrectable NVLink error detected during the "
                                      "execution"),
        "gpu_fell_off_bus": Event(kind="nvidia_smi_error", layer="gpu", line=1, gpu="0000:3b:00.0",
                                  message="nvidia-smi shows ERR! for fan, temp, power of GPU 2",
                                  attrs={"error": "ERR!", "pci": "0000:3b:00.0"}),
        "gpu_contention": Event(kind="cuda_error", layer="gpu", line=1,
                                message="RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"),
        "ecc_uncorrectable": Event(kind="cuda_error", layer="gpu", line=1, attrs={"ecc": True},
                                   message="RuntimeError: CUDA error: uncorrectable ECC error encountered"),
    }
    for n, (cause, row) in enumerate(cases.items()):
        folder = tmp_path / str(n)
        folder.mkdir()
        hyp = top(diagnose(folder, [row]))
        assert (hyp["cause"], hyp["score"] >= LOW_SCORE) == (cause, True), row.message


def test_without_a_winner_the_first_anomaly_is_near_the_symptoms_not_days_before(tmp_path: Path) -> None:
    rows = [Event(kind="node_state", layer="scheduling", ts=T0 - timedelta(days=2), line=1, host="node03",
                  attrs={"node": "node03", "state": "DRAIN", "reason": "maintenance"},
                  message="node node03 DRAIN (drain)"),
            Event(kind="job_failed", layer="scheduling", ts=T0, line=40, host="node07",
                  message="job 4242 FAILED")]
    result = diagnose(tmp_path, rows)
    assert all(h["score"] < LOW_SCORE for h in result["hypotheses"])
    assert result["first_anomaly"]["ts"].startswith("2025-05-19T19:57")


def test_untimed_cause_explains_the_timeouts_pasted_after_it(tmp_path: Path) -> None:
    """One machine's paste, no host, no time: the ECC error before the watchdog timeouts is the cause
    they wait on, and explaining them makes it stronger than the same line alone."""
    ecc = Event(kind="cuda_error", layer="gpu", line=3, attrs={"ecc": True},
                message="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    timeouts = [Event(kind="nccl_timeout", layer="network_storage", line=10 + r, rank=r,
                      attrs={"seq": 44, "op": "ALLREDUCE", "timeout_ms": 1800000},
                      message=f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=44)")
                for r in (1, 2, 3)]
    lone = tmp_path / "alone"
    lone.mkdir()
    alone = top(diagnose(lone, [ecc]))
    result = diagnose(tmp_path, [ecc, *timeouts])
    hyp = top(result)
    assert (hyp["cause"], hyp["symptoms"]) == ("ecc_uncorrectable", ["nccl_timeout"])
    assert hyp["score"] > alone["score"]


def test_untimed_cause_before_timed_timeouts_in_the_same_file_explains_them(tmp_path: Path) -> None:
    """The CUDA error line carries no time but the watchdog lines after it do (glog stamps): the
    file's order still says which came first."""
    ecc = Event(kind="cuda_error", layer="gpu", line=3, attrs={"ecc": True},
                message="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    timeouts = [Event(kind="nccl_timeout", layer="network_storage", line=10 + r, rank=r, ts=T0,
                      attrs={"seq": 44, "op": "ALLREDUCE", "timeout_ms": 1800000},
                      message=f"[Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=44)")
                for r in (1, 2)]
    hyp = top(diagnose(tmp_path, [ecc, *timeouts]))
    assert (hyp["cause"], hyp["symptoms"]) == ("ecc_uncorrectable", ["nccl_timeout"])
    assert hyp["explains"]["explanatory_power"] == 1.0


def test_untimed_pcie_error_before_a_stamped_mmu_fault_in_the_same_file_leads_to_it(tmp_path: Path) -> None:
    rows = [Event(kind="pcie_aer_unrecovered", layer="hardware", line=5, attrs={"device": "0000:63:00.0",
                                                                                "driver": "nvidia"},
                  message="nvidia 0000:63:00.0: AER: can't recover (no error_detected callback)"),
            Event(kind="xid", layer="gpu", line=7, gpu="0000:63:00.0", attrs={"xid": 31}, ts=T0,
                  message="NVRM: Xid (PCI:0000:63:00): 31, name=plasmashell, MMU Fault")]
    hyp = top(diagnose(tmp_path, rows))
    assert (hyp["cause"], hyp["consequences"]) == ("pcie_link_degraded", ["app_gpu_fault"])


def test_engine_refusing_to_start_on_a_card_someone_else_holds_is_contention(tmp_path: Path) -> None:
    line = ("ValueError: Free memory on device (0.22/30.3 GiB) on startup is less than desired GPU memory "
            "utilization (0.7, 21.21 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
            "processes.")
    rows = [Event(kind="engine_free_memory_short", layer="gpu", line=1, message=line,
                  attrs={"free_gib": 0.22, "total_gib": 30.3, "wanted_gib": 21.21})]
    assert top(diagnose(tmp_path, rows))["cause"] == "gpu_contention"


def test_fabric_manager_with_nothing_to_manage_is_not_a_fault(tmp_path: Path) -> None:
    line = ("nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed "
            "with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]")
    rows = [Event(kind="fabric_manager_error", layer="gpu", line=1, message=line, severity="warning")]
    assert diagnose(tmp_path, rows)["hypotheses"] == []


def test_a_process_that_sees_no_gpu_points_at_the_runtime(tmp_path: Path) -> None:
    rows = [Event(kind="cuda_error", layer="gpu", line=1, attrs={"code": 100, "name": "cudaErrorNoDevice"},
                  message="RuntimeError: cuda runtime error (100) : no CUDA-capable device is detected")]
    hyp = top(diagnose(tmp_path, rows))
    assert (hyp["cause"], hyp["score"] >= LOW_SCORE) == ("gpu_runtime_misconfigured", True)


def test_hostless_oom_line_joins_the_node_named_by_the_step_and_hosts_match_across_case(tmp_path: Path) -> None:
    """slurmstepd's cgroup line names no node; srun names it Orion-01-01 and the step record
    orion-01-01: one failure, on one node."""
    when = datetime(2021, 10, 27, 19, 35, 36)
    rows = [Event(kind="oom_kill", layer="scheduling", ts=when, line=1, attrs={"job": "3495064", "count": 1},
                  message="cgroup OOM kill in step 3495064.0 (1 event(s))"),
            Event(kind="step_killed", layer="scheduling", ts=when, line=2, host="Orion-01-01",
                  attrs={"job": "3495064", "state": "OUT_OF_MEMORY", "node": "Orion-01-01"},
                  message="task 4 on Orion-01-01: Out Of Memory"),
            Event(kind="step_killed", layer="scheduling", ts=when, line=4, host="orion-01-01",
                  attrs={"job": "3495064", "state": "CANCELLED", "node": "orion-01-01"},
                  message="step 3495064.0 CANCELLED")]
    hyps = diagnose(tmp_path, rows)["hypotheses"]
    assert [(h["cause"], h["host"]) for h in hyps] == [("host_oom_kill", "Orion-01-01")]
    assert hyps[0]["symptoms"] == ["job_failed"]


def test_a_context_switch_timeout_of_the_process_that_faulted_is_the_faults_not_a_hang(tmp_path: Path) -> None:
    rows = [Event(kind="xid", layer="gpu", line=4, gpu="0001:00:00.0", attrs={"xid": 31, "pid": 37803},
                  message="NVRM: Xid (PCI:0001:00:00): 31, pid=37803, name=[pytest-xdist r, channel 0x00000201, "
                          "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC0 GPCCLIENT_T1_0 faulted @ 0x70a2_c8000000."),
            Event(kind="xid", layer="gpu", line=7, gpu="0001:00:00.0", attrs={"xid": 109, "pid": 37803},
                  message="NVRM: Xid (PCI:0001:00:00): 109, pid=37803, ... CTX SWITCH TIMEOUT")]
    assert top(diagnose(tmp_path, rows))["cause"] == "app_gpu_fault"
    other = tmp_path / "other"
    other.mkdir()
    rows[1] = Event(kind="xid", layer="gpu", line=7, gpu="0001:00:00.0", attrs={"xid": 109, "pid": 4242},
                    message="NVRM: Xid (PCI:0001:00:00): 109, pid=4242, ... CTX SWITCH TIMEOUT")
    assert top(diagnose(other, rows))["cause"] == "gpu_hang"
    stamped = tmp_path / "stamped"
    stamped.mkdir()
    rows = [Event(kind="xid", layer="gpu", line=9, gpu="0001:00:00.0", ts=T0, attrs={"xid": 31, "pid": 37803},
                  message="NVRM: Xid (PCI:0001:00:00): 31, pid=37803, MMU Fault"),
            Event(kind="xid", layer="gpu", line=2, gpu="0001:00:00.0", ts=T0 + timedelta(seconds=5),
                  attrs={"xid": 109, "pid": 37803}, message="NVRM: Xid (PCI:0001:00:00): 109, pid=37803, CTX SWITCH")]
    assert top(diagnose(stamped, rows))["cause"] == "app_gpu_fault"


def test_summary_of_a_hostless_gpu_names_the_gpu_not_the_whole_job(tmp_path: Path) -> None:
    rows = [Event(kind="xid", layer="hardware", line=2, gpu="0000:b3:00.0", attrs={"xid": 79},
                  message="NVRM: Xid (PCI:0000:b3:00): 79, pid=0, GPU has fallen off the bus.")]
    summary = top(diagnose(tmp_path, rows))["summary"]
    assert summary.startswith("GPU fell off the bus on GPU 0000:b3:00.0:"), summary
