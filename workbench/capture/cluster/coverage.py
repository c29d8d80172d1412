"""Which nodes answered a cluster capture: one row per node, printed as a table, written as
``coverage.json`` beside the per-node bundles, and kept as a small bundle of its own. A node that
gave nothing is evidence too (the culprit of a hang is often the one that cannot answer), so that
bundle goes into the merged incident: its rows are the coverage the report and the cockpit list."""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench.store.bundle import Bundle, BundleError
from workbench.table import format_table, printable

STATUSES = ("answered", "timeout", "no answer", "failed")
"""answered: its bundle is there; timeout: cut off at the per-node limit; no answer: Slurm says the node
is down, its slurmd could not be reached, or (collect) it left neither bundle nor log; failed: it
answered but no bundle came of it (the reason says why)."""

NO_ANSWER_SIGNS = ("Communication connection failure", "Connection refused", "Zero Bytes were transmitted",
                   "Socket timed out", "Required node not available", "Node failure", "NODE_FAIL",
                   "Unable to contact slurmd", "Protocol authentication error")
"""What srun prints when the node's slurmd is not there to launch the capture."""

EPILOG_CUT_OFF = "gpuwb-epilog: cut off after"
"""The line the Slurm epilog script writes when its capture ran past its limit."""

COVERAGE_FILE = "coverage.json"
COVERAGE_BUNDLE = "cluster-coverage.duckdb"


@dataclass
class NodeResult:
    """One node's row of the coverage table."""

    node: str
    status: str
    reason: str = ""
    seconds: float = 0.0
    slurm_state: str = ""
    bundle: Path | None = None
    log: Path | None = None
    captured_on: str = ""
    started_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "reason": self.reason, "seconds": round(self.seconds, 1),
                "slurm_state": self.slurm_state, "bundle": str(self.bundle) if self.bundle else None,
                "log": str(self.log) if self.log and self.log.exists() else None, "captured_on": self.captured_on,
                "started_at": self.started_at.isoformat(timespec="seconds") if self.started_at else None}


def judge(node: str, *, bundle: Path, log: Path | None, exit_code: int | None = None, timed_out: bool = False,
          timeout_s: float = 0.0, seconds: float = 0.0, slurm_state: str = "",
          started_at: datetime | None = None) -> NodeResult:
    """The node's row from what is on disk after its capture: the bundle if one was written, else
    what srun (or the epilog) said in the node's log, else silence."""
    result = NodeResult(node, "failed", seconds=seconds, slurm_state=slurm_state, log=log, started_at=started_at)
    text = _read_tail(log) if log is not None else None
    if bundle.exists():
        host = bundle_host(bundle)
        if host is None:
            result.reason = f"{bundle.name} is not a readable bundle"
            return result
        result.status, result.bundle, result.captured_on = "answered", bundle, host
        if exit_code not in (0, None):
            result.reason = f"capture exited {exit_code}: {_last_word(text or '')}"
        return result
    if timed_out:
        result.status, result.reason = "timeout", f"cut off after {timeout_s:g} s"
        return result
    if text is None:
        result.status = "no answer"
        result.reason = "neither bundle nor log: the node never ran its capture"
        return result
    for line in text.splitlines():
        if line.startswith(EPILOG_CUT_OFF):
            result.status, result.reason = "timeout", printable(line.strip())
            return result
        if line.startswith("srun:") and any(sign in line for sign in NO_ANSWER_SIGNS):
            result.status, result.reason = "no answer", printable(line.strip())
            return result
    result.reason = (f"exit {exit_code}: " if exit_code is not None else "") + (_last_word(text) or "no output")
    return result


def down(node: str, slurm_state: str, reason: str) -> NodeResult:
    """A node Slurm already reports down or not responding: not asked, and its row says why."""
    why = f"Slurm reports it {slurm_state}" + (f" ({reason})" if reason else "")
    return NodeResult(node, "no answer", why, slurm_state=slurm_state)


def bundle_host(bundle: Path) -> str | None:
    """The host the bundle says it was captured on; None when it is not a bundle."""
    try:
        with Bundle.open(bundle) as b:
            meta = b.meta()
    except (BundleError, OSError, ValueError, RuntimeError):
        return None
    return meta.get("captured_on") or ""


def _read_tail(log: Path, limit: int = 64 << 10) -> str | None:
    try:
        with open(log, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None


def _last_word(text: str) -> str:
    """The line that explains a failure: srun's or gpuwb's last complaint, else the last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    told = [line for line in lines if line.startswith(("srun:", "gpuwb:", "gpuwb-epilog:", "slurmstepd:"))]
    return printable((told or lines or [""])[-1])[:300]


def summary(results: list[NodeResult]) -> str:
    """``4 nodes: 3 answered, 1 no answer``."""
    counts = Counter(r.status for r in results)
    parts = [f"{counts[s]} {s}" for s in STATUSES if counts[s]]
    return f"{len(results)} node{'s' if len(results) != 1 else ''}: {', '.join(parts) or 'none'}"


def coverage_table(results: list[NodeResult]) -> str:
    rows = [(r.node, r.status, f"{r.seconds:.1f}", r.slurm_state, r.captured_on,
             r.bundle.name if r.bundle else "", r.reason) for r in results]
    return format_table(["node", "status", "seconds", "slurm state", "captured on", "bundle", "reason"], rows,
                        max_width=120)


def coverage_document(results: list[NodeResult], about: dict[str, Any]) -> dict[str, Any]:
    """What ``coverage.json`` holds: how the capture was asked for, then one object per node."""
    return {**about, "summary": dict(Counter(r.status for r in results)),
            "nodes": [r.as_dict() for r in results]}


def write_coverage(folder: Path, results: list[NodeResult], about: dict[str, Any]) -> Path:
    path = folder / COVERAGE_FILE
    path.write_text(json.dumps(coverage_document(results, about), indent=2) + "\n", encoding="utf-8")
    return path


def record_coverage(path: Path, results: list[NodeResult], about: dict[str, Any], *, title: str) -> Path:
    """A sealed bundle holding the coverage: one capture_log row per node (collector ``cluster``,
    status ``ok`` for a node that answered), coverage.json, and the log of every node that did not
    answer, filed on that node."""
    now = datetime.now(timezone.utc)
    with Bundle.create(path, title=title, meta={"cluster_capture": json.dumps(about)}) as bundle:
        data = json.dumps(coverage_document(results, about), indent=2).encode()
        bundle.add_artifact(io.BytesIO(data), kind="cluster_coverage", source=COVERAGE_FILE, collector="cluster",
                            captured_at=now)
        for r in results:
            kept = 0
            if r.status != "answered" and r.log is not None and r.log.exists():
                with open(r.log, "rb") as f:
                    bundle.add_artifact(f, kind="cluster_node_log", source=str(r.log), collector="cluster",
                                        host=r.node, captured_at=now)
                kept = 1
            bundle.record_capture("cluster", host=r.node, status="ok" if r.status == "answered" else r.status,
                                  reason=r.reason, started_at=r.started_at or now, duration_s=round(r.seconds, 3),
                                  artifacts=kept, detail={k: v for k, v in r.as_dict().items()
                                                          if k in ("slurm_state", "bundle", "captured_on")})
        bundle.seal()
    return path
