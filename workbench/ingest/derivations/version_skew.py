"""Software versions that differ between the hosts of one job or incident.

A collective over eight nodes where one runs a different driver, CUDA, NCCL or PyTorch is the
classic "works everywhere but there" incident after a partial rollout. Each host's versions come
from ``versions.*`` host facts (host facts collector, package logs, ``pip freeze``) and from the
GPU inventory (driver, CUDA per GPU). When one host has several values for a key, the most direct
source wins: GPU inventory (what the driver reports), then the host facts collector (what is
loaded and importable), then package logs (what is installed), the newest artifact last.

Hosts are grouped by job where the topology table knows jobs, else the whole bundle is one group.
A host whose version differs from the group's majority gets a ``version_skew`` event (layer gpu):
attrs what, version, majority_version (null on a tie, when every host is flagged), hosts (the
hosts sharing this host's version), versions {host: version}, job, basis. On a tie, the hosts that
changed the component (a ``change`` event for it in the bundle) are the skewed ones when the
changed and unchanged hosts each agree among themselves (basis ``recent change``, a partial
rollout); otherwise every host is flagged (basis ``tie``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import duckdb

from collectors.base import Event
from collectors.changes.events import version_key

NAME = "version_skew"

CORE = {"driver", "cuda", "nccl", "cudnn", "torch", "fabricmanager", "vllm", "tensorrt_llm", "sglang", "jax",
        "deepspeed", "nvidia-nccl-cu12", "nvidia-nccl-cu11"}
"""Keys whose skew breaks collectives or kernels outright (warning); other keys are info."""
MAX_HOSTS_LISTED = 64


def host_versions(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, str]]:
    """{host: {what: version}} with the source preference of the module docstring."""
    best: dict[tuple[str, str], tuple[int, int, str]] = {}
    rows = con.execute(
        "SELECT h.host, substr(h.key, 10), h.value, coalesce(a.collector, ''), coalesce(a.id, 0) "
        "FROM host_inventory h LEFT JOIN artifact a ON a.sha256 = h.artifact "
        "WHERE h.key LIKE 'versions.%' AND h.host IS NOT NULL AND h.host <> '' "
        "AND h.value IS NOT NULL AND h.value <> ''").fetchall()
    for host, what, value, collector, aid in rows:
        rank = 1 if collector == "host" else 2
        _keep(best, (host, what), (rank, -aid, value))
    gpu_rows = con.execute(
        "SELECT host, 'driver', driver, count(*) FROM gpu_inventory WHERE host IS NOT NULL AND driver IS NOT NULL "
        "AND driver <> '' GROUP BY ALL UNION ALL "
        "SELECT host, 'cuda', cuda, count(*) FROM gpu_inventory WHERE host IS NOT NULL AND cuda IS NOT NULL "
        "AND cuda <> '' GROUP BY ALL").fetchall()
    for host, what, value, count in gpu_rows:
        _keep(best, (host, what), (0, -count, value))
    result: dict[str, dict[str, str]] = {}
    for (host, what), (_, _, value) in best.items():
        result.setdefault(host, {})[what] = value
    return result


def _keep(best: dict, key: tuple[str, str], candidate: tuple[int, int, str]) -> None:
    if key not in best or candidate[:2] < best[key][:2]:
        best[key] = candidate


def job_groups(con: duckdb.DuckDBPyConnection, hosts: set[str]) -> list[tuple[str | None, set[str]]]:
    """Host groups to compare: one per job the topology names, else all hosts together."""
    rows = con.execute("SELECT DISTINCT job, host FROM topology WHERE job IS NOT NULL AND host IS NOT NULL").fetchall()
    jobs: dict[str, set[str]] = {}
    for job, host in rows:
        if host in hosts:
            jobs.setdefault(str(job), set()).add(host)
    groups: list[tuple[str | None, set[str]]] = [(job, members) for job, members in sorted(jobs.items())
                                                 if len(members) > 1]
    rest = hosts - set().union(*jobs.values()) if jobs else hosts
    if len(rest) > 1:
        groups.append((None, rest))
    return groups


def derive(con: duckdb.DuckDBPyConnection) -> Iterator[Event]:
    versions = host_versions(con)
    changed = changed_hosts(con)
    flagged: set[tuple[str, str]] = set()
    for job, members in job_groups(con, set(versions)):
        keys = sorted({what for host in members for what in versions[host]})
        for what in keys:
            values = {host: versions[host][what] for host in sorted(members) if what in versions[host]}
            if len(values) < 2 or len(set(values.values())) < 2:
                continue
            counts = Counter(values.values()).most_common()
            majority = counts[0][0] if counts[0][1] > counts[1][1] else None
            basis = "majority"
            if majority is None and (settled := _unchanged_version(values, changed.get(what, set()))):
                majority, basis = settled, "recent change"
            listed = dict(list(values.items())[:MAX_HOSTS_LISTED])
            for host, version in values.items():
                if version == majority or (host, what) in flagged:
                    continue
                flagged.add((host, what))
                same = sorted(h for h, v in values.items() if v == version)
                if majority and basis == "majority":
                    against = f"the majority's {majority}"
                elif majority:
                    against = f"{majority} on the hosts that did not change it"
                else:
                    against = "other hosts (" + ", ".join(sorted({v for v in values.values() if v != version})) + ")"
                yield Event(kind="version_skew", layer="gpu", host=host, job=job,
                            severity="warning" if what in CORE else "info",
                            message=f"{host}: {what} {version} differs from {against} across {len(values)} hosts"
                                    + (f" of job {job}" if job else ""),
                            attrs={"what": what, "version": version, "majority_version": majority,
                                   "hosts": same[:MAX_HOSTS_LISTED], "versions": listed, "job": job,
                                   "basis": basis if majority else "tie"})


def changed_hosts(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """{what: hosts} with a package change event for that component (``driver``, ``nccl``, ...)."""
    found: dict[str, set[str]] = {}
    rows = con.execute("SELECT DISTINCT host, attrs->>'what', coalesce(attrs->>'version', attrs->>'from_version') "
                       "FROM event WHERE kind = 'change' AND host IS NOT NULL").fetchall()
    for host, what, version in rows:
        key = version_key(what or "", version or "0")
        found.setdefault(key[0] if key else (what or ""), set()).add(host)
    return found


def _unchanged_version(values: dict[str, str], changed: set[str]) -> str | None:
    """On a tie, the version of the hosts that did not change the component, when the changed and
    unchanged hosts each agree among themselves: a partial rollout, not a split fleet."""
    stayed = {v for h, v in values.items() if h not in changed}
    moved = {v for h, v in values.items() if h in changed}
    if len(stayed) == 1 and len(moved) == 1 and stayed != moved:
        return stayed.pop()
    return None
