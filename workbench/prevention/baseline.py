"""A node's accepted state, kept when it passed acceptance, and what a later bundle shows differently.

A node that passed acceptance at PCIe Gen5 x16 with every NVLink up and now runs at x8 is a finding,
but only if the accepted state was kept. :func:`save` reads that state out of an acceptance-time
bundle (per GPU: identity, PCIe link, NVLink links, ECC mode, power limit, clocks, VBIOS; per host:
driver, CUDA, NCCL, Fabric Manager and DCGM versions, ``dcgmi diag`` results) into a versioned JSON
document keyed by host and PCI bus id. :func:`compare` reads the same state out of any later bundle
and lists each difference as a typed :class:`Drift` with a severity and the cause it supports.

Only what both sides observed is compared: a capture without ``dcgmi diag`` says nothing about
DCGM, and a GPU whose readings were all idle says nothing about its PCIe generation (an idle GPU
drops its link to Gen1 to save power), only about its width.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from workbench import __version__
from workbench.errors import GpuwbError
from workbench.ingest.derivations.version_skew import host_versions
from workbench.store import gpu_identity
from workbench.store.bundle import Bundle
from workbench.times import iso

FORMAT = "gpuwb-baseline"
VERSION = 1
TRACKED_VERSIONS = ("driver", "cuda", "nccl", "fabricmanager", "dcgm")
"""Host software whose change after acceptance is drift (the GPU stack a collective depends on)."""
BUSBW_DROP = 0.10
"""A bus bandwidth this fraction below the accepted one is drift (nccl-tests varies by a few %)."""
BUSBW_DROP_ERROR = 0.25
POWER_TOLERANCE_W = 1.0
CLOCK_TOLERANCE_MHZ = 1.0
NVLINK_SPEED_TOLERANCE = 0.02
"""A link speed this fraction below the accepted one is slower (26.562 vs 26.5 GB/s is rounding)."""
BUSY_PSTATES = ("P0", "P1", "P2", "P3", "P4")
DIAG_ORDER = {"skip": 0, "pass": 1, "warn": 2, "fail": 3}
SUPPORTS = {"pcie_link_down": "pcie_link_degraded", "nvlink_down": "nvlink_error",
            "nvlink_topology_changed": "nvlink_error",
            "nvlink_speed_down": "nvlink_error", "version_changed": "driver_stack_mismatch",
            "vbios_changed": "driver_stack_mismatch"}
"""Drift kind -> the cause id (rules/causes/) it is evidence for."""
NO_HOST = ""
_PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class BaselineError(GpuwbError):
    """A baseline file that cannot be used: unreadable, not JSON, another format or a newer version."""


@dataclass(frozen=True)
class Drift:
    """One way a bundle differs from the accepted baseline."""

    kind: str
    severity: str
    host: str
    gpu: str | None
    what: str
    accepted: Any
    now: Any
    message: str
    supports: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Comparison:
    """The drift of one bundle against one baseline, and what could not be compared."""

    drift: list[Drift] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    accepted_at: str | None = None
    source: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"baseline": {"accepted_at": self.accepted_at, "source": self.source},
                "hosts": self.hosts, "drift": [d.to_json() for d in self.drift], "unchecked": self.unchecked}


# -- reading a node's state out of a bundle ------------------------------------------------------

def node_state(bundle: Bundle, host: str | None = None) -> dict[str, dict[str, Any]]:
    """{host: {"versions", "dcgm_diag", "gpus": {bus id: {...}}}} for every host (or ``host``) the
    bundle has GPU, version or DCGM evidence of."""
    hosts: dict[str, dict[str, Any]] = {}

    def entry(name: str | None) -> dict[str, Any]:
        return hosts.setdefault(name or NO_HOST, {"versions": {}, "dcgm_diag": {}, "nccl_busbw_gbps": {},
                                                  "gpu_topology": {}, "gpus": {}})

    for name, versions in host_versions(bundle.con).items():
        kept = {k: v for k, v in versions.items() if k in TRACKED_VERSIONS}
        if kept:
            entry(name)["versions"] = dict(sorted(kept.items()))
    for name, test, result in bundle.con.execute(
            "SELECT host, attrs->>'test', attrs->>'result' FROM event WHERE kind = 'dcgm_diag' "
            "AND attrs->>'test' IS NOT NULL ORDER BY id").fetchall():
        diag = entry(name)["dcgm_diag"]
        if DIAG_ORDER.get(result or "", -1) > DIAG_ORDER.get(diag.get(test, ""), -1):
            diag[test] = result
    for name, test, best, worst in bundle.con.execute(
            "SELECT host, coalesce(attrs->>'test', 'nccl-tests'), max(TRY_CAST(attrs->>'avg_busbw_gbps' AS DOUBLE)), "
            "min(TRY_CAST(attrs->>'avg_busbw_gbps' AS DOUBLE)) FROM event WHERE kind = 'nccl_test_result' "
            "GROUP BY ALL HAVING max(TRY_CAST(attrs->>'avg_busbw_gbps' AS DOUBLE)) IS NOT NULL").fetchall():
        entry(name)["nccl_busbw_gbps"][test] = {"best": best, "worst": worst}
    for name, value in bundle.con.execute(
            "SELECT h.host, h.value FROM host_inventory h LEFT JOIN artifact a ON a.sha256 = h.artifact "
            "WHERE h.key = 'gpu_topology' ORDER BY coalesce(a.id, 0)").fetchall():
        entry(name)["gpu_topology"] = _pairs(value)
    for name, gpus in _gpu_states(bundle).items():
        entry(name)["gpus"] = gpus
    if host is not None:
        return {host: hosts[host]} if host in hosts else {}
    return {name: hosts[name] for name in sorted(hosts)}


def _pairs(value: str) -> dict[str, str]:
    """``nvidia-smi topo -m``'s matrix (the ``gpu_topology`` host fact) as ``{"GPU0-GPU1": "NV18"}``, each pair once."""
    try:
        matrix = json.loads(value)
    except ValueError:
        return {}
    pairs: dict[str, str] = {}
    for gpu, peers in (matrix.items() if isinstance(matrix, dict) else ()):
        for peer, link in (peers.items() if isinstance(peers, dict) else ()):
            a, b = sorted((gpu, peer), key=lambda g: (len(g), g))
            pairs.setdefault(f"{a}-{b}", str(link))
    return dict(sorted(pairs.items(), key=lambda kv: [int(x) for x in re.findall(r"\d+", kv[0])]))


def _gpu_states(bundle: Bundle) -> dict[str, dict[str, dict[str, Any]]]:
    """Per host, per PCI bus id: inventory facts merged across sources, and the link readings."""
    inventory = bundle.con.execute(
        'SELECT host, gpu, "index", uuid, name, serial, vbios, power_limit_w, pcie_max_gen, pcie_max_width, '
        "extra->>'ecc_mode', extra->'applications_clocks_mhz' FROM gpu_inventory WHERE gpu IS NOT NULL "
        "ORDER BY (extra->>'source') = 'nvml' DESC, artifact").fetchall()
    busy = ", ".join(repr(p) for p in BUSY_PSTATES)
    readings = bundle.con.execute(  # each sample's JSON parsed once (json_extract_string with a list of paths)
        "SELECT host, gpu, any_value(uuid), max(pcie_width), min(pcie_width), max(pcie_gen), "
        "max(pcie_gen) FILTER (WHERE loaded), min(pcie_gen) FILTER (WHERE loaded), max(links), max(active), "
        "min(active), max(list_max(speeds)), min(list_min(speeds)) FROM ("
        " SELECT host, gpu, uuid, pcie_width, pcie_gen, TRY_CAST(x[1] AS INTEGER) AS links, "
        " TRY_CAST(x[2] AS INTEGER) AS active, TRY_CAST(json_extract(extra, '$.nvlink_speeds_gbps') AS DOUBLE[]) "
        f" AS speeds, util_gpu > 0 AND coalesce(x[3], 'false') <> 'true' AND (x[4] IS NULL OR x[4] IN ({busy})) "
        " AS loaded FROM (SELECT *, json_extract_string(extra, ['$.nvlink_links', '$.nvlink_active', "
        " '$.gpu_idle', '$.pstate']) AS x FROM gpu_sample WHERE gpu IS NOT NULL)) GROUP BY host, gpu").fetchall()
    aliases: dict[tuple[str, str], str] = {}  # a bundle ingested before keys were resolved in the store
    for (alias_host, bus), names in gpu_identity.aliases(bundle.con).items():
        if names.uuid:
            aliases[(alias_host or NO_HOST, names.uuid)] = bus
        if names.index is not None:
            aliases.setdefault((alias_host or NO_HOST, f"index:{names.index}"), bus)
    out: dict[str, dict[str, dict[str, Any]]] = {}

    def gpu_entry(host: str | None, key: str) -> dict[str, Any] | None:
        host = host or NO_HOST
        bus = key if _PCI.match(key) else aliases.get((host, key))
        return out.setdefault(host, {}).setdefault(bus, {}) if bus else None

    for host, gpu, index, uuid, name, serial, vbios, power, max_gen, max_width, ecc, clocks in inventory:
        state = gpu_entry(host, gpu)
        if state is None:
            continue
        for k, v in (("index", index), ("uuid", uuid), ("name", name), ("serial", serial), ("vbios", vbios),
                     ("power_limit_w", power), ("pcie_max_gen", max_gen), ("pcie_max_width", max_width),
                     ("ecc_mode", ecc), ("applications_clocks_mhz", json.loads(clocks) if clocks else None)):
            if v not in (None, "", {}) and state.get(k) is None:
                state[k] = v
    for (host, gpu, uuid, width_best, width_worst, gen_best, gen_loaded_best, gen_loaded_worst, links,
         active_best, active_worst, speed_best, speed_worst) in readings:
        state = gpu_entry(host, gpu)
        if state is None:
            continue
        if uuid and state.get("uuid") is None:
            state["uuid"] = uuid
        link = state.setdefault("readings", {})
        for k, v in (("pcie_width_best", width_best), ("pcie_width_worst", width_worst),
                     ("pcie_gen_best", gen_best), ("pcie_gen_loaded_best", gen_loaded_best),
                     ("pcie_gen_loaded_worst", gen_loaded_worst), ("nvlink_links", links),
                     ("nvlink_active_best", active_best), ("nvlink_active_worst", active_worst),
                     ("nvlink_speed_best_gbps", speed_best), ("nvlink_speed_worst_gbps", speed_worst)):
            if v is not None:
                link[k] = _merge(link.get(k), v, worst=k.endswith("worst") or k.endswith("worst_gbps"))
    return {host: {bus: gpus[bus] for bus in sorted(gpus)} for host, gpus in out.items()}


def _merge(old: Any, new: Any, *, worst: bool) -> Any:
    """Two sources' readings of one GPU (NVML and nvidia-smi): the worse of two worsts, the better of two bests."""
    if old is None:
        return new
    return min(old, new) if worst else max(old, new)


def accepted_gpu(state: dict[str, Any]) -> dict[str, Any]:
    """A GPU's accepted facts from its state: inventory as read, links at their best."""
    link = state.get("readings", {})
    loaded_gen = link.get("pcie_gen_loaded_best")
    out = {k: state[k] for k in ("index", "uuid", "serial", "name", "vbios", "ecc_mode", "power_limit_w",
                                 "applications_clocks_mhz", "pcie_max_gen", "pcie_max_width") if k in state}
    out.update({"pcie_gen": loaded_gen if loaded_gen is not None else link.get("pcie_gen_best"),
                "pcie_gen_under_load": loaded_gen is not None, "pcie_width": link.get("pcie_width_best"),
                "nvlink_links": link.get("nvlink_links"), "nvlink_active": link.get("nvlink_active_best"),
                "nvlink_speed_gbps": link.get("nvlink_speed_best_gbps")})
    return {k: v for k, v in out.items() if v is not None}


# -- the baseline document -----------------------------------------------------------------------

def build(bundle: Bundle, *, host: str | None = None, source: str = "") -> dict[str, Any]:
    """The baseline document of a bundle's hosts (or one host): what :func:`save` writes."""
    states = node_state(bundle, host)
    if not states:
        raise BaselineError(f"no GPU, version or DCGM evidence for host {host} in {source or 'the bundle'}"
                            if host is not None else f"no GPU, version or DCGM evidence in {source or 'the bundle'}")
    meta = bundle.meta()
    seal = bundle.last_seal()
    return {
        "format": FORMAT, "version": VERSION, "tool": f"gpuwb {__version__}",
        "saved_at": iso(datetime.now(timezone.utc), "seconds"),
        "accepted_at": meta.get("capture_started") or meta.get("created_at"),
        "source": {"bundle": source, "incident_id": meta.get("incident_id"),
                   "root_digest": seal["root_digest"] if seal else None},
        "hosts": {name: {"versions": s["versions"], "dcgm_diag": dict(sorted(s["dcgm_diag"].items())),
                         "nccl_busbw_gbps": {t: v["best"] for t, v in sorted(s["nccl_busbw_gbps"].items())},
                         "gpu_topology": s["gpu_topology"],
                         "gpus": {bus: accepted_gpu(g) for bus, g in s["gpus"].items()}}
                  for name, s in states.items()},
    }


def save(bundle: Bundle, path: str | Path, *, host: str | None = None, source: str = "") -> dict[str, Any]:
    """Write the baseline of ``bundle`` to ``path`` and return it."""
    doc = build(bundle, host=host, source=source)
    try:
        Path(path).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    except OSError as exc:
        raise BaselineError(f"cannot write baseline {path}: {exc.strerror or exc}") from None
    return doc


def load(path: str | Path) -> dict[str, Any]:
    """A baseline document, checked enough that :func:`compare` cannot trip on it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise BaselineError(f"{path} is not a gpuwb baseline (not UTF-8 text)") from None
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not JSON ({str(exc)[:60]})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BaselineError(f"{path} is not a gpuwb baseline (save one with gpuwb baseline save)")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise BaselineError(f"baseline {path} has no valid version")
    if version > VERSION:
        raise BaselineError(f"baseline {path} is version {version}; this gpuwb reads up to {VERSION}: upgrade gpuwb")
    hosts = doc.get("hosts")
    if not isinstance(hosts, dict) or not all(_well_formed(h) for h in hosts.values()):
        raise BaselineError(f"baseline {path} is malformed: 'hosts' must map each host to its gpus, versions, "
                            "dcgm_diag, nccl_busbw_gbps and gpu_topology objects, with numbers and text as "
                            "docs/baseline.md says")
    return doc


NUMERIC_GPU_FACTS = ("index", "power_limit_w", "pcie_max_gen", "pcie_max_width", "pcie_gen", "pcie_width",
                     "nvlink_links", "nvlink_active", "nvlink_speed_gbps")
TEXT_GPU_FACTS = ("uuid", "serial", "name", "vbios", "ecc_mode")


def _well_formed(host: Any) -> bool:
    """Each part of a host entry has the type :func:`compare` reads, so a hand-edited file fails here in one line."""
    parts = ("gpus", "versions", "dcgm_diag", "nccl_busbw_gbps", "gpu_topology")
    if not isinstance(host, dict) or not all(isinstance(host.get(k, {}), dict) for k in parts):
        return False
    text = [v for k in ("versions", "dcgm_diag", "gpu_topology") for v in host.get(k, {}).values()]
    busbw = host.get("nccl_busbw_gbps", {}).values()
    if not all(isinstance(v, str) for v in text) or not all(_number(v) for v in busbw):
        return False
    for gpu in host.get("gpus", {}).values():
        if not isinstance(gpu, dict):
            return False
        if not all(_number(gpu[k]) for k in NUMERIC_GPU_FACTS if k in gpu):
            return False
        if not all(isinstance(gpu[k], str) for k in TEXT_GPU_FACTS if k in gpu):
            return False
        clocks = gpu.get("applications_clocks_mhz", {})
        if not isinstance(clocks, dict) or not all(_number(v) for v in clocks.values()):
            return False
    return True


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# -- comparing -----------------------------------------------------------------------------------

def compare(bundle: Bundle, doc: dict[str, Any], *, host: str | None = None) -> Comparison:
    """Every drift of ``bundle`` from the baseline ``doc`` (from :func:`load`), worst first."""
    now = node_state(bundle)
    result = Comparison(accepted_at=doc.get("accepted_at"), source=doc.get("source") or {})
    for name, accepted in sorted(doc["hosts"].items()):
        if host is not None and name != host:
            continue
        if name not in now:
            result.unchecked.append(f"{_host(name)}: not in this bundle")
            continue
        result.hosts.append(name)
        _compare_host(name, accepted, now[name], result)
    order = {"error": 0, "warning": 1, "info": 2}
    result.drift.sort(key=lambda d: (order.get(d.severity, 3), d.host, d.gpu or "", d.kind, d.what))
    return result


def _host(name: str) -> str:
    return name or "(no host)"


def _compare_host(name: str, accepted: dict[str, Any], now: dict[str, Any], out: Comparison) -> None:
    def drift(kind: str, severity: str, gpu: str | None, what: str, was: Any, is_: Any, message: str) -> None:
        out.drift.append(Drift(kind, severity, name, gpu, what, was, is_, message, SUPPORTS.get(kind)))

    for what, was in sorted((accepted.get("versions") or {}).items()):
        is_ = now["versions"].get(what)
        if is_ is None:
            out.unchecked.append(f"{_host(name)}: {what} version not seen")
        elif str(is_) != str(was):
            drift("version_changed", "warning", None, what, was, is_,
                  f"{_host(name)} runs {what} {is_}; accepted at {was}")
    for test, was in sorted((accepted.get("dcgm_diag") or {}).items()):
        is_ = now["dcgm_diag"].get(test)
        if is_ is None:
            continue
        if DIAG_ORDER.get(is_, 0) > DIAG_ORDER.get(str(was), 0) and is_ in ("warn", "fail"):
            drift("dcgm_diag_failing", "error" if is_ == "fail" else "warning", None, test, was, is_,
                  f"dcgmi diag {test} now {'fails' if is_ == 'fail' else 'warns'} on {_host(name)}; accepted: {was}")
    if (accepted.get("dcgm_diag") or {}) and not now["dcgm_diag"]:
        out.unchecked.append(f"{_host(name)}: no dcgmi diag run in this bundle")
    for test, was in sorted((accepted.get("nccl_busbw_gbps") or {}).items()):
        is_ = (now["nccl_busbw_gbps"].get(test) or {}).get("worst")
        if is_ is None:
            out.unchecked.append(f"{_host(name)}: no {test} run in this bundle")
        elif isinstance(was, (int, float)) and was > 0 and is_ < was * (1 - BUSBW_DROP):
            drop = (was - is_) / was
            drift("busbw_dropped", "error" if drop > BUSBW_DROP_ERROR else "warning", None, test, was, is_,
                  f"{_host(name)} {test} bus bandwidth {is_:g} GB/s; accepted at {was:g} GB/s (-{drop:.0%})")
    topology = accepted.get("gpu_topology") or {}
    if topology and not now["gpu_topology"]:
        out.unchecked.append(f"{_host(name)}: no nvidia-smi topo -m in this bundle")
    for pair, was in (topology.items() if now["gpu_topology"] else ()):
        is_ = now["gpu_topology"].get(pair)
        if is_ is not None and is_ != was:
            lost_nvlink = str(was).startswith("NV") and (not is_.startswith("NV") or _bonded(is_) < _bonded(was))
            drift("nvlink_topology_changed", "error" if lost_nvlink else "warning", None, pair, was, is_,
                  f"{_host(name)} {pair.replace('-', ' to ')} is {is_}; accepted at {was}")
    gpus_now = now["gpus"]
    gpus_was = accepted.get("gpus") or {}
    if gpus_was and not gpus_now:
        out.unchecked.append(f"{_host(name)}: no GPU readings in this bundle")
        return
    for bus, was in sorted(gpus_was.items()):
        state = gpus_now.get(bus)
        if state is None:
            label = " ".join(str(x) for x in (was.get("name"), _identity(was)) if x)
            drift("gpu_missing", "error", bus, "gpu", _identity(was), None,
                  f"{bus} not seen; accepted with {label}")
            continue
        _compare_gpu(bus, was, state, drift)
    for bus in sorted(set(gpus_now) - set(gpus_was)):
        state = gpus_now[bus]
        label = " ".join(str(x) for x in (state.get("name"), _identity(state)) if x)
        drift("gpu_added", "warning", bus, "gpu", None, _identity(state),
              f"{bus} ({label or 'unknown GPU'}) is not in the accepted baseline")


def _bonded(link: str) -> int:
    """The number of NVLinks of ``NV18``; 0 for a PCIe path."""
    m = re.fullmatch(r"NV(\d+)", link)
    return int(m.group(1)) if m else 0


def _identity(gpu: dict[str, Any]) -> str | None:
    if gpu.get("serial"):
        return f"serial {gpu['serial']}"
    if gpu.get("uuid"):
        return f"UUID {gpu['uuid']}"
    return None


def _compare_gpu(bus: str, was: dict[str, Any], state: dict[str, Any], drift: Any) -> None:
    for key in ("serial", "uuid"):
        if was.get(key) and state.get(key) and was[key] != state[key]:
            drift("gpu_swapped", "warning", bus, key, was[key], state[key],
                  f"{bus} holds another GPU ({key} {state[key]}); accepted with {key} {was[key]}")
            break
    link = state.get("readings", {})
    # an accepted generation read at idle is power saving, not the link's: only the width is compared then
    gen_was = was.get("pcie_gen") if was.get("pcie_gen_under_load", True) else None
    width_was = was.get("pcie_width")
    gen_now, width_now = link.get("pcie_gen_loaded_worst"), link.get("pcie_width_worst")
    gen_down = gen_was is not None and gen_now is not None and gen_now < gen_was
    width_down = width_was is not None and width_now is not None and width_now < width_was
    if gen_down or width_down:
        shown_gen = f"Gen{gen_now} " if gen_now is not None else ""
        idle = "" if gen_now is not None else " (idle: generation not comparable)"
        drift("pcie_link_down", "error", bus, "pcie", _link(gen_was, width_was), _link(gen_now, width_now),
              f"{bus} runs PCIe {shown_gen}x{width_now or width_was}{idle}; accepted at {_link(gen_was, width_was)}")
    active_was, active_now = was.get("nvlink_active"), link.get("nvlink_active_worst")
    if active_was is not None and active_now is not None and active_now < active_was:
        drift("nvlink_down", "error", bus, "nvlink", active_was, active_now,
              f"{bus} has {active_now} of {link.get('nvlink_links') or was.get('nvlink_links') or '?'} NVLink links "
              f"up; accepted with {active_was}")
    speed_was, speed_now = was.get("nvlink_speed_gbps"), link.get("nvlink_speed_worst_gbps")
    if speed_was and speed_now is not None and speed_now < speed_was * (1 - NVLINK_SPEED_TOLERANCE):
        drift("nvlink_speed_down", "warning", bus, "nvlink_speed", speed_was, speed_now,
              f"{bus} NVLink runs at {speed_now:g} GB/s per link; accepted at {speed_was:g} GB/s")
    for key, label in (("vbios", "VBIOS"), ("ecc_mode", "ECC mode")):
        if was.get(key) and state.get(key) and str(was[key]) != str(state[key]):
            drift("vbios_changed" if key == "vbios" else "ecc_mode_changed", "warning", bus, key, was[key],
                  state[key], f"{bus} runs {label} {state[key]}; accepted at {was[key]}")
    power_was, power_now = was.get("power_limit_w"), state.get("power_limit_w")
    if power_was is not None and power_now is not None and abs(power_now - power_was) > POWER_TOLERANCE_W:
        drift("power_limit_changed", "warning", bus, "power_limit_w", power_was, power_now,
              f"{bus} runs at a {power_now:g} W power limit; accepted at {power_was:g} W")
    clocks_was, clocks_now = was.get("applications_clocks_mhz") or {}, state.get("applications_clocks_mhz") or {}
    for domain in sorted(set(clocks_was) & set(clocks_now)):
        a, b = clocks_was[domain], clocks_now[domain]
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and abs(a - b) > CLOCK_TOLERANCE_MHZ:
            drift("clocks_changed", "warning", bus, f"applications_clocks.{domain}", a, b,
                  f"{bus} runs a {domain} application clock of {b:g} MHz; accepted at {a:g} MHz")


def _link(gen: int | None, width: int | None) -> str:
    return " ".join(p for p in (f"Gen{gen}" if gen is not None else "", f"x{width}" if width is not None else "") if p)


# -- drift as analysis evidence ------------------------------------------------------------------

def analysis_drift(bundle: Bundle, doc: dict[str, Any], analysis: dict[str, Any]) -> dict[str, Any]:
    """The ``baseline_drift`` object of ``analyze --json``: the comparison, each drift naming the rank of
    the hypothesis it supports (same cause, same host, same GPU when both name one), else null."""
    result = compare(bundle, doc).to_json()
    for drift in result["drift"]:
        drift["hypothesis"] = next((h["rank"] for h in analysis.get("hypotheses") or [] if _supports(drift, h)), None)
    return result


def _supports(drift: dict[str, Any], hypothesis: dict[str, Any]) -> bool:
    if not drift["supports"] or hypothesis.get("cause") != drift["supports"]:
        return False
    if (hypothesis.get("host") or NO_HOST) != drift["host"]:
        return False
    return not hypothesis.get("gpu") or not drift["gpu"] or hypothesis["gpu"] == drift["gpu"]


def drift_lines(section: dict[str, Any]) -> list[str]:
    """``analyze``'s text for its ``baseline_drift`` object."""
    source = section.get("baseline") or {}
    out = [f"Drift from the accepted baseline (accepted {source.get('accepted_at') or '?'}, "
           f"bundle {(source.get('source') or {}).get('bundle') or '?'}):"]
    for d in section.get("drift") or []:
        link = f"  (supports #{d['hypothesis']} {d['supports']})" if d.get("hypothesis") else ""
        out.append(f"  {d['severity']:<7} {_host(d['host'])}: {d['message']}{link}")
    if not section.get("drift"):
        out.append("  none: " + ("every compared fact is as accepted" if section.get("hosts")
                                 else "no host of the baseline is in this bundle"))
    out.extend(f"  unchecked {line}" for line in section.get("unchecked") or [])
    return out


def by_gpu(result: Comparison) -> dict[tuple[str | None, str | None], list[Drift]]:
    """The drift of each (host, bus id), host-wide drift under (host, None): what the cockpit marks per row."""
    out: dict[tuple[str | None, str | None], list[Drift]] = {}
    for d in result.drift:
        out.setdefault((d.host or None, d.gpu), []).append(d)
    return out
