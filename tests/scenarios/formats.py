"""Line formats of the tools whose output the scenarios hold, and the scenario registry.

Every shape names where it was copied from: a file of the real-log corpus (tests/corpus, each file's
public source in its INDEX.tsv) or a public URL where the tool printed it. The words inside a line are
the scenario's; the shape around them (stamps, prefixes, field order, separators) is the tool's.
The shapes the drill writes too come from workbench.prevention.drill.lines (one writer for both); the ones
only the scenarios use are here. tests/scenarios/test_formats.py checks each function's output
against the real line it cites.
"""

# ruff: noqa: E501  (log lines are kept whole, as the tools print them)

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from workbench.prevention.drill import lines as drill_lines
from workbench.prevention.drill.lines import (  # noqa: F401  (the scenarios import these shapes from here)
    deepspeed_log,
    elastic,
    glog,
    histogram,
    k8s_list,
    pylog,
    sacct,
    slurm_time,
    titan_step,
    watchdog,
)
from workbench.prevention.drill.lines import dmesg as raw  # noqa: F401
from workbench.prevention.drill.lines import dmesg_ctime as ctime  # noqa: F401

HERE = Path(__file__).resolve().parent
SCENARIOS: dict[str, Callable[[Path], None]] = {}


def scenario(func: Callable[[Path], None]) -> Callable[[Path], None]:
    SCENARIOS[func.__name__] = func
    return func


def write(folder: Path, rel: str, text: str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def expected(folder: Path, **fields: object) -> None:
    lines = ["# What the analysis must find (see tests/scenarios/test_scenarios.py)."]
    for key, value in fields.items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    write(folder, "expected.yaml", "\n".join(lines) + "\n")


# -- line formats ------------------------------------------------------------------------------
def journal(when: datetime, host: str, text: str, ident: str = "kernel") -> str:
    """journalctl -o short-iso (tests/corpus/kernel/gpud_nvidia_peermem_invalid_context_journalctl_iso.log)."""
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S')}+0000 {host} {ident}: {text}"


def nccl_init(host: str, pid: int, rank: int, nranks: int, dev: int, bus: str, comm: str, version: str = "2.21.5+cuda12.4",
              ip: str = "10.10.0.1") -> list[str]:
    """NCCL INFO init lines of one rank with the topology lines (workbench.prevention.drill.lines.nccl_init)."""
    return drill_lines.nccl_init(host, pid, rank, nranks, dev, bus, comm, ip, version, topology=True)


def rendezvous(when: datetime, pid: int, group_rank: int, nodes: int, per_node: int, master: str) -> list[str]:
    """The agent's rendezvous result, one ``key=value`` a line (the block as
    https://github.com/meta-pytorch/torchx/pull/492 shows it, under the torch 2.4 logger)."""
    world = nodes * per_node
    ranks = [group_rank * per_node + i for i in range(per_node)]
    table = [("restart_count", 0), ("master_addr", master), ("master_port", 29500), ("group_rank", group_rank),
             ("group_world_size", nodes), ("local_ranks", list(range(per_node))), ("role_ranks", ranks),
             ("global_ranks", ranks), ("role_world_sizes", [world] * per_node),
             ("global_world_sizes", [world] * per_node)]
    return ([elastic(when, "I", pid, "agent/server/api.py:525", "[default] Rendezvous complete for workers. Result:")]
            + [f"  {key}={value}" for key, value in table] + [""]
            + [elastic(when + timedelta(milliseconds=2), "I", pid, "agent/server/api.py:533",
                       "[default] Starting worker group")])


def srun_labelled(per_task: dict[int, list[str]]) -> str:
    """One ``srun -l`` output file (workbench.prevention.drill.lines.srun_labelled)."""
    return "\n".join(drill_lines.srun_labelled(per_task)) + "\n"


def env_dump(values: dict[str, object]) -> list[str]:
    """``printenv`` lines a launch wrapper prints before the trainer starts (SLURM_PROCID, SLURM_LOCALID,
    SLURMD_NODENAME and CUDA_VISIBLE_DEVICES as srun(1) OUTPUT ENVIRONMENT VARIABLES defines them)."""
    return [f"{key}={value}" for key, value in values.items()]


def etc_hosts(entries: list[tuple[str, str]]) -> str:
    """A cluster's /etc/hosts (hosts(5): address, canonical name, aliases)."""
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", ""]
    return "\n".join(lines + [f"{ip}\t{names}" for ip, names in entries]) + "\n"


def steps(start: datetime, first_step: int, count: int, every_s: float, loss: float, rank: int,
          step_time: float | None = None) -> list[str]:
    """torchtitan's step line under torchrun's prefix: ``[rank0]:[titan] 2025-03-12 11:10:21,511 - root - INFO -
    step: 22  loss:  6.2250  memory:  1.41GiB(1.79%)  tps: 193,831  tflops: 18.36  mfu: 1.86%``
    (https://github.com/pytorch/torchtitan/pull/950)."""
    tps = int(524288 / (step_time if step_time is not None else every_s))
    return [titan_step(rank, start + timedelta(seconds=i * every_s), first_step + i * 50, loss - i * 0.002, tps)
            for i in range(count)]


def deepspeed_steps(rank: int, start: datetime, onset: datetime, end: datetime, slow_rank: int, normal_s: float,
                    slow_s: float, every: int = 1000, batch: int = 64) -> list[str]:
    """A DeepSpeed rank's step lines (workbench.prevention.drill.lines.deepspeed_steps), ``slow_rank`` slow from ``onset``."""
    return drill_lines.deepspeed_steps(rank, start, end, normal_s, every, slow_rank=slow_rank, slow_from=onset,
                                 slow_s=slow_s, batch=batch)


def uptime_s(boot: datetime) -> str:
    """``uptime -s``: ``yyyy-mm-dd HH:MM:SS`` (https://man7.org/linux/man-pages/man1/uptime.1.html)."""
    return boot.strftime("%Y-%m-%d %H:%M:%S") + "\n"


def k8s_event(name: str, when: datetime, reason: str, message: str, kind: str, obj: str, namespace: str,
              node: str | None, typ: str = "Warning", count: int = 1, component: str = "kubelet",
              field_path: str | None = None) -> dict:
    """One core/v1 Event (workbench.prevention.drill.lines.k8s_event) with the involved object's uid and a
    resourceVersion, both made from the object and the count."""
    uid = f"6c1f{zlib.crc32(obj.encode()) % 10**8:08d}-0c1e-4a53-9a1d-5d2b6e8f1a{count:02d}"
    return drill_lines.k8s_event(name, when, reason, message, kind, obj, namespace, node, typ, count, component,
                           object_uid=uid, field_path=field_path, resource_version=str(48211000 + count))


def prom(families: list[tuple[str, str, str, list[tuple[str, float]]]]) -> str:
    """Prometheus text exposition with ints bare (workbench.prevention.drill.lines.prom)."""
    return drill_lines.prom(families, as_float=False)


def stamp(when: datetime) -> str:
    """A capture's time in a file name (``20250301T144000Z``), not a log line."""
    return when.strftime("%Y%m%dT%H%M%SZ")
