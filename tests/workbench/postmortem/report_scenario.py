"""A fixed training incident for the postmortem tests: raw artifacts, rows pointing at their lines,
a fixed analysis in DESIGN.md's shape, a fixed cause catalog entry and a responder journal.

Rows are written directly (not parsed) so the golden files change only when the report does, not
when a parser or the engine improves; one evidence line is hostile on purpose."""

# ruff: noqa: E501  (raw log lines are kept whole, as the tools print them)

from __future__ import annotations

import io
from datetime import datetime

from collectors.base import Event, GpuInventory, Topology
from workbench.store import journal
from workbench.store.bundle import Bundle

HOSTILE = "[rank0]: user tag <script>alert(1)</script> | {{ 7*7 }} | `tick` *star* [x](http://evil.example/x.png)"
GENERATED_AT = datetime(2026, 3, 15, 8, 0, 0)

KERN = """2026-03-14T09:12:03+0000 node02 kernel: pcieport 0000:5c:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:5d:00.0
2026-03-14T09:12:03+0000 node02 kernel: nvidia 0000:5d:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)
2026-03-14T09:20:41+0000 node02 kernel: NVRM: Xid (PCI:0000:5d:00): 79, pid=0, GPU has fallen off the bus.
2026-03-14T09:20:41+0000 node02 kernel: NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus.
"""
TRAIN = f"""node01:4101:4101 [0] NCCL INFO ncclCommInitRank comm 0x55d0 rank 0 nranks 4 cudaDev 0 busId 18000 - Init COMPLETE
{HOSTILE}
[rank0]:[E314 09:30:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600020 milliseconds before timing out.
[rank1]:[E314 09:30:44.913881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=9801523, NumelOut=9801523, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.
"""
SACCT = """JobID|JobName|State|ExitCode|Start|End|NodeList
48213|llm-pretrain|FAILED|1:0|2026-03-14T06:00:00|2026-03-14T09:31:02|node[01-02]
"""
SLURMCTLD = """[2026-03-14T09:31:05.114] update_node: node node02 reason set to: GPU 0000:5d:00.0 fell off the bus
[2026-03-14T09:31:05.115] update_node: node node02 state set to DRAINING
"""
CKPT = """2026-03-14T09:00:00Z checkpoint step 42000 written to /ckpt/llm-pretrain/step_42000 (ok)
"""

ANALYSIS = {
    "workload": "training",
    "window": {"start": "2026-03-14T09:00:00Z", "end": "2026-03-14T09:40:00Z"},
    "first_anomaly": {"ts": "2026-03-14T09:12:03Z", "host": "node02", "layer": "hardware", "kind": "pcie_aer",
                      "text": "AER: Uncorrected (Non-Fatal) error received: 0000:5d:00.0"},
    "hypotheses": [
        {"rank": 1, "layer": "hardware", "cause": "gpu_fell_off_bus", "score": 0.93, "host": "node02",
         "gpu": "0000:5d:00.0", "ranks": [3], "first_seen": "2026-03-14T09:12:03Z",
         "summary": "PCIe errors then Xid 79 on node02 GPU 0000:5d:00.0; every rank then timed out in ALLREDUCE",
         "symptoms": ["nccl_timeout", "job_failed"],
         "evidence": [
             {"source": "kernel", "ts": "2026-03-14T09:20:41Z", "host": "node02", "text": "Xid 79",
              "artifact": "KERN", "line": 3},
             {"source": "kernel", "ts": "2026-03-14T09:12:03Z", "host": "node02", "text": "AER",
              "artifact": "KERN", "line": 1},
             {"source": "slurm", "ts": "2026-03-14T09:31:05Z", "host": "node02", "text": "drain",
              "artifact": "SLURMCTLD", "line": 2},
             {"source": "nccl", "ts": "2026-03-14T09:30:44Z", "host": "node01", "text": HOSTILE,
              "artifact": "TRAIN", "line": 2}],
         "symptom_evidence": [
             {"source": "nccl", "ts": "2026-03-14T09:30:44Z", "host": "node01", "text": "Watchdog timeout rank 0",
              "artifact": "TRAIN", "line": 3, "kind": "nccl_timeout", "count": 2},
             {"source": "nccl", "ts": "2026-03-14T09:30:44Z", "host": "node01", "text": "Watchdog timeout rank 1",
              "artifact": "TRAIN", "line": 4, "kind": "nccl_timeout", "count": 2},
             {"source": "slurm", "ts": "2026-03-14T09:31:02Z", "host": None, "text": "job 48213 FAILED",
              "artifact": "SACCT", "line": 2, "kind": "job_failed", "count": 1}]},
        {"rank": 2, "layer": "network_storage", "cause": "network_fabric_errors", "score": 0.21, "host": "node01",
         "gpu": None, "ranks": [], "first_seen": "2026-03-14T09:30:44Z",
         "summary": "ranks on node01 stopped hearing from their peers", "symptoms": ["nccl_timeout"], "evidence": []},
    ],
    "layers": {
        "business": {"verdict": "no_evidence", "findings": []},
        "scheduling": {"verdict": "suspect", "findings": [{"check": "job_failed", "title": "Job failed", "rows": 1},
                                                          {"check": "node_drained", "title": "Node drained",
                                                           "rows": 1}]},
        "gpu": {"verdict": "clear", "findings": [{"check": "app_xid", "title": "Application Xid", "rows": 0}]},
        "network_storage": {"verdict": "suspect", "findings": [{"check": "nccl_timeout", "title": "NCCL timeouts",
                                                                "rows": 2}]},
        "hardware": {"verdict": "fault", "findings": [{"check": "xid79", "title": "GPU fell off the bus", "rows": 1},
                                                      {"check": "aer", "title": "PCIe AER errors", "rows": 2}]},
    },
}

CAUSES = {
    "gpu_fell_off_bus": {
        "layer": "hardware", "title": "GPU fell off the bus",
        "description": "The GPU stopped answering on PCIe (Xid 79); | <b>often</b> after AER errors.",
        "symptoms": ["nccl_timeout", "job_failed"],
        "remediation": ["Drain the node and reseat or replace the GPU.", "Requeue the job from the last checkpoint."],
        "action_items": {"monitoring": ["Alert on uncorrected PCIe AER errors per GPU."],
                         "isolation": ["Auto-drain a node on Xid 79."],
                         "drills": ["Practise a GPU-off-the-bus drain and requeue."]},
    },
    "network_fabric_errors": {"layer": "network_storage", "title": "Network fabric errors"},
}

T = datetime(2026, 3, 14)


def _at(hour: int, minute: int, second: int = 0) -> datetime:
    return T.replace(hour=hour, minute=minute, second=second)


def build_bundle(path) -> dict:
    """Write the scenario bundle at ``path``; returns the analysis with real artifact hashes."""
    with Bundle.create(path, title="Training job 48213 lost a GPU", incident_id="inc-2026-0314",
                       meta={"created_at": "2026-03-14T10:00:00"}) as bundle:
        sha = {}
        for name, text, kind, collector, host in (
                ("KERN", KERN, "kern_log", "kernel", "node02"), ("TRAIN", TRAIN, "nccl_log", "nccl", "node01"),
                ("SACCT", SACCT, "sacct", "slurm", None), ("SLURMCTLD", SLURMCTLD, "slurmctld_log", "slurm", None),
                ("CKPT", CKPT, "checkpoint_listing", "storage", "node01")):
            sha[name] = bundle.add_artifact(io.BytesIO(text.encode()), kind=kind, source=f"evidence/{name.lower()}.log",
                                            collector=collector, host=host, captured_at=_at(10, 0))[0]
        rows = {
            "KERN": [Event("pcie_aer", "AER: Uncorrected (Non-Fatal) error received: 0000:5d:00.0", _at(9, 12, 3),
                           host="node02", layer="hardware", severity="error", gpu="0000:5d:00.0", line=1,
                           attrs={"severity": "uncorrected_nonfatal", "device": "0000:5d:00.0"}),
                     Event("pcie_aer", "PCIe Bus Error: severity=Uncorrected (Non-Fatal)", _at(9, 12, 3),
                           host="node02", layer="hardware", severity="error", gpu="0000:5d:00.0", line=2),
                     Event("xid", "Xid 79: GPU has fallen off the bus", _at(9, 20, 41), host="node02",
                           layer="hardware", severity="critical", gpu="0000:5d:00.0", line=3, attrs={"xid": 79}),
                     Event("gpu_fell_off_bus", "GPU 0000:5d:00.0 has fallen off the bus", _at(9, 20, 41),
                           host="node02", layer="hardware", severity="critical", gpu="0000:5d:00.0", line=4)],
            "TRAIN": [Event("app_log", HOSTILE, _at(9, 25), host="node01", layer="gpu", severity="warning", rank=0,
                            line=2, ts_approx=True, ts_origin="neighbour"),
                      Event("nccl_timeout", "Watchdog caught collective operation timeout SeqNum=808 ALLREDUCE",
                            _at(9, 30, 44), host="node01", layer="network_storage", severity="error", rank=0, line=3,
                            attrs={"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "elapsed_ms": 600020}),
                      Event("nccl_timeout", "Watchdog caught collective operation timeout SeqNum=808 ALLREDUCE",
                            _at(9, 30, 44), host="node01", layer="network_storage", severity="error", rank=1, line=4,
                            attrs={"seq": 808, "op": "ALLREDUCE", "timeout_ms": 600000, "elapsed_ms": 600031})],
            "SACCT": [Event("job_state", "job 48213 llm-pretrain FAILED exit 1:0", _at(9, 31, 2), layer="scheduling",
                            severity="error", job="48213", line=2,
                            attrs={"job": "48213", "state": "FAILED", "start": "2026-03-14T06:00:00",
                                   "name": "llm-pretrain"})],
            "SLURMCTLD": [Event("node_state", "node node02 reason set to: GPU 0000:5d:00.0 fell off the bus",
                                _at(9, 31, 5), host="node02", layer="scheduling", severity="warning", line=1,
                                attrs={"node": "node02", "state": "DRAIN", "reason": "GPU 0000:5d:00.0 fell off the bus"}),
                          Event("node_state", "node node02 state set to DRAINING", _at(9, 31, 5), host="node02",
                                layer="scheduling", severity="warning", line=2,
                                attrs={"node": "node02", "state": "DRAINING", "reason": ""})],
            "CKPT": [Event("checkpoint_last_good", "checkpoint step 42000 written", _at(9, 0), host="node01",
                           layer="network_storage", severity="info", line=1)],
        }
        for name, events in rows.items():
            writer = bundle.writer(sha[name])
            for ev in events:
                ev.source = {"KERN": "kernel", "TRAIN": "nccl", "CKPT": "storage"}.get(name, "slurm")
                writer.add(ev)
            if name == "TRAIN":
                for rank, (host, gpu) in enumerate((("node01", "0000:18:00.0"), ("node01", "0000:2a:00.0"),
                                                    ("node02", "0000:18:00.0"), ("node02", "0000:5d:00.0"))):
                    writer.add(Topology(rank=rank, host=host, nranks=4, gpu=gpu, job="48213", line=1))
            if name == "KERN":
                writer.add(GpuInventory(gpu="0000:5d:00.0", host="node02", index=3, name="NVIDIA H100 80GB HBM3"))
            writer.flush()
        bundle.record_capture("nvml", host="node02", status="timeout", reason="NVML call hung after 10 s",
                              started_at=_at(10, 0), duration_s=10.0)
        bundle.record_capture("kernel", host="node02", status="ok", started_at=_at(10, 0), duration_s=0.2, artifacts=1)
        bundle.seal()
        bundle.con.execute("UPDATE seal SET sealed_at = ?", [_at(10, 1)])
        _journal(bundle)
    return _resolve(ANALYSIS, sha)


def _journal(bundle: Bundle) -> None:
    journal.add_note(bundle, "alice", "Paged by the NCCL timeout alert; job 48213 stuck", ts=_at(9, 33), at=_at(9, 34))
    journal.set_time(bundle, "alice", "detection", _at(9, 33), at=_at(9, 34))
    journal.set_time(bundle, "bob", "mitigation", _at(9, 45), at=_at(9, 46))
    journal.set_time(bundle, "bob", "recovery", _at(10, 20), at=_at(10, 21))
    journal.set_verdict(bundle, "bob", "hardware", "fault", "Xid 79 after AER", at=_at(9, 50))
    journal.set_verdict(bundle, "carol", "network_storage", "suspect", at=_at(9, 51))
    journal.set_verdict(bundle, "bob", "network_storage", "clear", "IB counters clean; timeouts are a symptom",
                        at=_at(9, 55))
    journal.set_field(bundle, "alice", "severity", "SEV2", at=_at(9, 40))
    journal.set_field(bundle, "alice", "status", "resolved", at=_at(10, 30))
    journal.add_retro(bundle, "alice", "well", "Evidence captured before the node was rebooted", at=_at(11, 0))
    journal.add_retro(bundle, "bob", "wrong", "Ten minutes lost blaming the IB fabric <b>again</b>", at=_at(11, 0))
    journal.add_retro(bundle, "carol", "lucky", "A checkpoint had been written 12 minutes before", at=_at(11, 0))
    journal.add_retro(bundle, "carol", "factor", "No alert on PCIe AER errors", at=_at(11, 0))
    item = journal.add_action_item(bundle, "bob", "Auto-drain a node on Xid 79.", owner="fleet-team", priority="P0",
                                   at=_at(11, 5))
    journal.update_action_item(bundle, "alice", item, status="in_progress", at=_at(11, 10))
    journal.add_action_item(bundle, "alice", "Replace GPU 0000:5d:00.0 on node02 | RMA", owner="dc-ops",
                            priority="P1", due="2026-03-20", at=_at(11, 6))


def _resolve(analysis: dict, sha: dict[str, str]) -> dict:
    """The analysis with the placeholder artifact names replaced by the real sha256 values."""
    out = {**analysis, "hypotheses": []}
    for hyp in analysis["hypotheses"]:
        out["hypotheses"].append({**hyp, **{key: [{**e, "artifact": sha[e["artifact"]]} for e in hyp.get(key, [])]
                                            for key in ("evidence", "symptom_evidence")}})
    return out
