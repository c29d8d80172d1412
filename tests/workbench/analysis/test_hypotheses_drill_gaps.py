"""Gaps the drill loop found in the analyzer, each pinned on evidence in its native format, ingested
as a responder would hand it over: a socket connect to a container bridge is a misrouted
interface, not a fabric fault; an admin's drain reason is a root cause of its own; an
``nvidia-smi -q`` process list with two workloads on one GPU is contention on that GPU; and the
layer verdicts follow the layer of a clear first hypothesis."""

from __future__ import annotations

import io
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from collectors.base import Event
from workbench.analysis.engine import TOP_FAULT, analyze
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle


def analyse_files(tmp_path: Path, files: dict[str, str], captured: datetime | None = None) -> dict:
    """Write ``files`` (path under raw/ -> text), dated ``captured`` when given (what a snapshot
    without a clock of its own is dated by), ingest raw/ and analyse the bundle."""
    raw = tmp_path / "raw"
    for name, text in files.items():
        path = raw / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if captured is not None:
            os.utime(path, (captured.timestamp(), captured.timestamp()))
    with Bundle.create(tmp_path / "bundle.duckdb", title="drill gap") as bundle:
        ingest_paths(bundle, [str(raw)])
    with Bundle.open(tmp_path / "bundle.duckdb") as bundle:
        return analyze(bundle)


def _perfquery(symbol_errors: int) -> str:
    counters = [("PortSelect", "1"), ("CounterSelect", "0x0000"), ("SymbolErrorCounter", str(symbol_errors)),
                ("LinkErrorRecoveryCounter", "0"), ("LinkDownedCounter", "0"), ("PortRcvErrors", "0"),
                ("PortXmitDiscards", "0"), ("PortXmitData", "3739013981"), ("PortRcvData", "1386146433")]
    return "# Port counters: Lid 191 port 1 (CapMask: 0x5300)\n" + "".join(
        f"{name}:{'.' * (33 - len(name))}{value}\n" for name, value in counters)


def _rank_log(host: str, rank: int, address: str, bridge: str) -> str:
    pid = 4540 + rank * 7
    return "\n".join([
        f"2026-01-14 14:40:09,000 - INFO - [rank{rank}] torch.distributed initialized: world_size=8 backend=nccl",
        f"{host}:{pid}:{pid} [{rank % 4}] NCCL INFO Bootstrap : Using ibp12s0:{address}<0>",
        f"{host}:{pid}:{pid} [{rank % 4}] NCCL INFO NCCL version 2.21.5+cuda12.4",
        f"{host}:{pid}:{pid} [{rank % 4}] NCCL INFO NET/Socket : Using [0]bond0:{address}<0> "
        f"[1]br-53805828:{bridge}<0>",
        f"{host}:{pid}:{pid + 131} [{rank % 4}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        f"{bridge}<{33000 + rank}> failed : Software caused connection abort",
        f"{host}:{pid}:{pid + 131} [{rank % 4}] NCCL INFO misc/socket.cc:565 -> 2",
        f"[rank{rank}]: torch.distributed.DistBackendError: NCCL error in: "
        "../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "2026-01-14 14:40:10,000 - ERROR - training aborted", ""])


def test_socket_connects_to_a_bridge_address_are_a_misconfigured_interface_not_fabric_errors(
        tmp_path: Path) -> None:
    """Every rank dialled the address NCCL listed on a container bridge; a few old symbol errors on
    one host's port must not turn that into a fabric fault there."""
    files = {"node22/perfquery.txt": _perfquery(9)}
    for rank in range(8):
        host, address = ("node22", "10.11.136.11") if rank < 4 else ("node23", "10.11.136.12")
        files[f"{host}/rank{rank}.log"] = _rank_log(host, rank, address, "172.19.0.1")
    result = analyse_files(tmp_path, files)
    first = result["hypotheses"][0]
    assert first["cause"] == "network_misconfigured", [(h["cause"], h["score"]) for h in result["hypotheses"]]
    fabric = [h for h in result["hypotheses"] if h["cause"] == "network_fabric_errors"]
    assert all("socketStartConnect" not in e["text"] for h in fabric for e in h["evidence"])
    assert all(h["score"] < first["score"] / 2 for h in fabric)


def _smi_gpu(bus: str, processes: list[tuple[int, str, int]]) -> str:
    block = [f"GPU {bus}", "    Product Name                          : NVIDIA H100 80GB HBM3",
             "    FB Memory Usage", "        Total                             : 81559 MiB",
             f"        Used                              : {sum(p[2] for p in processes)} MiB",
             "    Compute Mode                          : Default", "    Processes"]
    for pid, name, used in processes:
        block += ["        GPU instance ID                   : N/A",
                  "        Compute instance ID               : N/A",
                  f"        Process ID                        : {pid}",
                  "            Type                          : C",
                  f"            Name                          : {name}",
                  f"            Used GPU Memory               : {used} MiB"]
    return "\n".join(block) + "\n\n"


def _smi_q(gpus: dict[str, list[tuple[int, str, int]]]) -> str:
    head = "\n".join(["", "==============NVSMI LOG==============", "",
                      "Timestamp                                 : Thu Apr 16 09:35:13 2026",
                      "Driver Version                            : 550.90.07",
                      "CUDA Version                              : 12.4", "",
                      f"Attached GPUs                             : {len(gpus)}", ""])
    return head + "".join(_smi_gpu(bus, procs) for bus, procs in gpus.items())


def _vllm_refusals(device: int) -> str:
    return "".join(
        f"INFO 04-16 09:{minute}:03 api_server.py:585] vLLM API server version 0.6.3\n"
        f"ERROR 04-16 09:{minute}:03 engine.py:158] ValueError: Free memory on device cuda:{device} (29.40/79.10 "
        "GiB) on startup is less than desired GPU memory utilization (0.9, 71.19 GiB). Decrease GPU memory "
        "utilization or reduce GPU memory used by other processes.\n" for minute in (30, 31, 32))


SHARED_NODE = {
    "0000:18:00.0": [(3882, "/usr/bin/python3", 71888), (3990, "python", 420)],
    "0000:BA:00.0": [(8261, "/usr/bin/python3", 31384), (34118, "python", 47104)],
}
"""One serving GPU shared with a stray job's process; another GPU with its worker and a small stray
CUDA context (a few hundred MiB: not a workload)."""


def test_a_process_list_with_two_workloads_on_one_gpu_is_a_contention_event_on_that_gpu(tmp_path: Path) -> None:
    analyse_files(tmp_path, {"gpu21/nvidia-smi-q.txt": _smi_q(SHARED_NODE)})
    with Bundle.open(tmp_path / "bundle.duckdb") as bundle:
        rows = bundle.con.execute("SELECT host, gpu, layer, attrs->>'count', message FROM event "
                                  "WHERE kind = 'gpu_contention'").fetchall()
    assert [r[:4] for r in rows] == [("gpu21", "0000:ba:00.0", "scheduling", "2")]
    assert "34118" in rows[0][4] and "8261" in rows[0][4]


def test_contention_evidence_names_the_gpu_and_makes_scheduling_the_faulty_layer(tmp_path: Path) -> None:
    """The engine's refusal names ``cuda:3`` only; the process list names the GPU. The cause is a
    scheduling one though a GPU-layer check saw it too: the layers say so."""
    result = analyse_files(tmp_path, {"gpu21/nvidia-smi-q.txt": _smi_q(SHARED_NODE),
                                      "gpu21/logs/vllm-mixtral-lxf49.log": _vllm_refusals(3)})
    first = result["hypotheses"][0]
    assert (first["cause"], first["host"], first["gpu"]) == ("gpu_contention", "gpu21", "0000:ba:00.0")
    verdicts = {layer: v["verdict"] for layer, v in result["layers"].items()}
    assert verdicts["scheduling"] == "fault"
    assert [layer for layer, v in verdicts.items() if v == "fault"] == ["scheduling"]
    assert {c["id"]: c["verdict"] for c in result["checks"]}["gpu_shared"] == "fault"


def test_a_winner_found_only_by_another_layers_check_makes_its_own_layer_the_fault(tmp_path: Path) -> None:
    """Only the serving engine's refusals (the GPU layer's CUDA-OOM check) point at contention."""
    result = analyse_files(tmp_path, {"gpu21/logs/vllm-mixtral-lxf49.log": _vllm_refusals(3)})
    first = result["hypotheses"][0]
    assert first["cause"] == "gpu_contention"
    verdicts = {layer: v["verdict"] for layer, v in result["layers"].items()}
    assert verdicts["scheduling"] == "fault", (first["score"], verdicts)
    assert verdicts["gpu"] == "suspect"


DRAIN_CAPTURED = datetime(2026, 11, 22, 15, 1, 58, tzinfo=timezone.utc)
"""When the responder took the evidence of the drained node: 27 minutes after the drain."""


def _drained_node(reason: str) -> dict[str, str]:
    """A job on hgx[49-51] that Slurm ends NODE_FAIL when hgx49 is set down with ``reason``; hgx49's
    IB port shows five symbol errors in a perfquery taken after the incident (DRAIN_CAPTURED)."""
    return {
        "slurm/slurmctld.log": "\n".join([
            "[2026-11-22T12:09:07.000] sched: Allocate JobId=85593 NodeList=hgx[49-51] #CPUs=96 Partition=gpu",
            f"[2026-11-22T14:34:46.609] update_node: node hgx49 reason set to: {reason}",
            "[2026-11-22T14:34:46.609] update_node: node hgx49 state set to DOWN",
            "[2026-11-22T14:34:46.649] Killing JobId=85593 on failed node hgx49",
            "[2026-11-22T14:45:07.748] _job_complete: JobId=85593 done", ""]),
        "slurm/sacct.txt": "\n".join([
            "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|NodeList",
            "85593|vit-huge|gpu|ml-research|96|NODE_FAIL|0:0|2026-11-22T12:09:07|2026-11-22T14:45:07|hgx[49-51]",
            "85593.0|torchrun||ml-research|96|CANCELLED|0:15|2026-11-22T12:09:07|2026-11-22T14:45:07|hgx[49-51]", ""]),
        "hgx49/perfquery.txt": _perfquery(5),
    }


def test_an_admins_drain_reason_outranks_a_few_old_symbol_errors_on_the_drained_host(tmp_path: Path) -> None:
    result = analyse_files(tmp_path, _drained_node("maintenance: BMC firmware update (ticket OPS-7640)"),
                           DRAIN_CAPTURED)
    first = result["hypotheses"][0]
    assert (first["cause"], first["host"]) == ("node_drained", "hgx49"), \
        [(h["cause"], h["score"]) for h in result["hypotheses"]]
    fabric = [h for h in result["hypotheses"] if h["cause"] == "network_fabric_errors"]
    assert all(not h["consequences"] for h in fabric)  # background symbol errors lead to nothing
    verdicts = {layer: v["verdict"] for layer, v in result["layers"].items()}
    assert verdicts["scheduling"] == "fault"
    assert verdicts["network_storage"] != "fault"


def test_a_health_checks_drain_reason_weighs_less_than_an_admins(tmp_path: Path) -> None:
    """A health check's reason (NHC saw a GPU missing) is an echo of a fault one layer down: weaker
    evidence of a root cause than planned work an admin wrote down."""
    scores = {}
    for name, reason in (("admin", "upgrading the BIOS, ticket OPS-1"),
                         ("health", "NHC: GPU 0000:5d:00.0 missing (nvidia-smi: Unknown Error)")):
        result = analyse_files(tmp_path / name, _drained_node(reason), DRAIN_CAPTURED)
        scores[name] = next(h["explains"]["strength"] for h in result["hypotheses"] if h["cause"] == "node_drained")
    assert scores["admin"] > scores["health"]


OOM_AT = datetime(2026, 1, 18, 10, 6, 56)


def _serving_fleet(tmp_path: Path, extra: tuple[Event, ...] = ()) -> dict:
    """One vLLM replica on hgx11 runs its GPU out of memory and restarts; the two surviving pods,
    seen only in their metrics (which node they run on is unknown), queue its load."""
    rows = [Event(kind="cuda_error", ts=OOM_AT, ts_origin="iso", host="hgx11", layer="gpu", severity="error",
                  source="vllm", line=1, attrs={"oom": True, "total_capacity_mib": 81008.64, "free_mib": 388.5,
                                                "process_in_use_mib": 80056.32},
                  message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB. GPU 1 has a "
                          "total capacity of 79.11 GiB of which 388.50 MiB is free.")]
    for n, pod in enumerate(("vllm-meta-2gxb6", "vllm-meta-wxxh6"), start=2):
        for kind in ("latency_spike", "queue_backlog"):
            rows.append(Event(kind=kind, ts=OOM_AT + timedelta(seconds=16), ts_origin="derived", host=pod,
                              layer="business", severity="warning", line=n, source="series",
                              message=f"{kind} on {pod}"))
    path = tmp_path / "fleet.duckdb"
    bundle = Bundle.create(path, title="one replica's GPU out of memory")
    sha, _, _ = bundle.add_artifact(io.BytesIO(b"serving fleet"), kind="synthetic", source="fleet.txt",
                                    collector="vllm")
    writer = bundle.writer(sha)
    for row in [*rows, *extra]:
        writer.add(row)
    writer.flush()
    bundle.seal()
    bundle.close()
    with Bundle.open(path) as opened:
        return analyze(opened, workload="inference")


def test_one_replicas_gpu_fault_that_explains_every_symptom_is_a_gpu_layer_fault(tmp_path: Path) -> None:
    """The replica's OOM scores under TOP_FAULT (the survivors' pods cannot be placed) but it is the
    root cause of all the fleet shows: the GPU layer is at fault there."""
    result = _serving_fleet(tmp_path)
    first = result["hypotheses"][0]
    assert (first["cause"], first["host"]) == ("gpu_oom", "hgx11")
    assert first["score"] < TOP_FAULT
    assert first["explains"]["symptom_groups"] == first["explains"]["of"] == 4
    verdicts = {layer: v["verdict"] for layer, v in result["layers"].items()}
    assert [layer for layer, v in verdicts.items() if v == "fault"] == ["gpu"]


def test_a_weak_root_cause_that_leaves_a_symptom_unexplained_keeps_its_layer_suspect(tmp_path: Path) -> None:
    failed = Event(kind="job_failed", ts=OOM_AT + timedelta(minutes=1), ts_origin="iso", host="cpu07",
                   layer="scheduling", severity="error", line=9, source="slurm", message="batch job on cpu07 failed")
    result = _serving_fleet(tmp_path, (failed,))
    first = result["hypotheses"][0]
    assert first["cause"] == "gpu_oom" and first["score"] < TOP_FAULT
    assert first["explains"]["symptom_groups"] < first["explains"]["of"]
    assert result["layers"]["gpu"]["verdict"] == "suspect"
