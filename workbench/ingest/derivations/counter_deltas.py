"""Error counters that rose between two artifacts: the one counter-growth derivation of every source.

Collectors write their error counters as ``series`` rows whose labels carry ``class: error``: InfiniBand
(``ib.symbol_error``, ...) and NIC (``nic.rx_missed_errors``, ...) counters, and a GPU's NVLink, PCIe
replay and ECC counters under dcgm-exporter's names (``DCGM_FI_DEV_*``, collectors/nvml/counters.py:
NVML, nvidia-smi, DCGM, the bug report). One capture only shows totals since boot (or since the GPU's
last reset), often large and old; what matters in an incident is that they are still rising. Two
captures of one host, or a capture plus a file handed over later, are compared here point by point in
time order; a counter that went down was reset and is not a rise. Rises inside one artifact are the
collector's own business (its samples are compared as it reads them).

A rise becomes the event its family's check reads, with that event's attrs:

- ``ib`` / ``nic``: ``counter_rising`` (layer network_storage) at the later point, attrs device, port,
  counters {name: delta}, seconds, family, section;
- ``gpu``: ``nvlink_error`` for a rise of an NVLink counter, ``ecc_uncorrectable`` for a rise of an
  uncorrectable (DBE) ECC count, with the attrs the GPU readers' HealthTracker gives them (total, links;
  volatile, aggregate; gpu_key for a GPU known by no PCI id); the deltas are in the message. Corrected
  (SBE) ECC and PCIe replay counts have no event of their own (the monitoring rules read their series).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import duckdb

from collectors.base import Event, normalize_pci

NAME = "counter_deltas"

GPU_PREFIX = "DCGM_FI_DEV_"
NVLINK = "DCGM_FI_DEV_NVLINK_"
ECC_DBE = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")


def derive(con: duckdb.DuckDBPyConnection) -> Iterator[Event]:
    rows = con.execute(
        "SELECT host, name, CAST(labels AS VARCHAR), ts, value, artifact FROM series "
        "WHERE json_extract_string(labels, '$.class') = 'error' AND ts IS NOT NULL "
        "ORDER BY host NULLS FIRST, name, CAST(labels AS VARCHAR), ts, artifact").fetchall()
    rises: dict[tuple, dict] = {}
    previous: tuple | None = None
    for host, name, labels, ts, value, artifact in rows:
        key = (host, name, labels)
        if previous is not None and previous[0] == key and previous[3] != artifact and ts > previous[1] \
                and value > previous[2]:
            parsed = json.loads(labels) if labels else {}
            family, counter = family_of(name)
            group = (host, _labels_without(parsed, "class"), artifact, family)
            entry = rises.setdefault(group, {"ts": ts, "from": previous[1], "labels": parsed, "counters": {},
                                             "values": {}})
            entry["counters"][counter] = value - previous[2]
            entry["values"][counter] = value
            entry["ts"] = max(entry["ts"], ts)
        previous = (key, ts, value, artifact)
    for (host, _, _, family), entry in rises.items():
        if family == "gpu":
            yield from _gpu_events(host, entry)
        else:
            yield _network_event(host, family, entry)


def family_of(name: str) -> tuple[str, str]:
    """(family, counter) of a counter series: ``ib.symbol_error`` -> (ib, symbol_error); a dcgm-exporter
    field -> (gpu, the field)."""
    if name.startswith(GPU_PREFIX):
        return "gpu", name
    family, _, counter = name.partition(".")
    return family, counter


def _network_event(host: str | None, family: str, entry: dict[str, Any]) -> Event:
    labels = entry["labels"]
    device = labels.get("device")
    seconds = _seconds(entry["from"], entry["ts"])
    text = ", ".join(f"{n} +{v:g}" for n, v in sorted(entry["counters"].items()))
    where = f"{device} port {labels['port']}" if labels.get("port") else (device or "?")
    return Event(kind="counter_rising", layer="network_storage", host=host, ts=entry["ts"], severity="warning",
                 message=f"{where}: {text} since the previous capture" + (f" ({seconds:.0f} s earlier)"
                                                                          if seconds is not None else ""),
                 attrs={"device": device, "port": labels.get("port"), "counters": entry["counters"],
                        "seconds": seconds, "family": family, "section": labels.get("section")})


def _gpu_events(host: str | None, entry: dict[str, Any]) -> Iterator[Event]:
    """nvlink_error / ecc_uncorrectable for one GPU's counters that rose since the previous artifact."""
    key = entry["labels"].get("gpu") or "unknown"
    pci = normalize_pci(key)
    gpu = pci if pci and pci == key else None
    where = f"GPU {key}" if key != "unknown" else "GPU"
    seconds = _seconds(entry["from"], entry["ts"])
    since = " since the previous capture" + (f" ({seconds:.0f} s earlier)" if seconds is not None else "")
    counters, values = entry["counters"], entry["values"]
    extra = {} if gpu or key == "unknown" else {"gpu_key": key}
    nvlink = {n: v for n, v in counters.items() if n.startswith(NVLINK)}
    if nvlink:
        text = ", ".join(f"{_short(n)} +{v:g}" for n, v in sorted(nvlink.items()))
        yield Event(kind="nvlink_error", layer="hardware", host=host, ts=entry["ts"], severity="warning", gpu=gpu,
                    message=f"{where} NVLink error counters rose: {text}{since}",
                    attrs={"total": _count(sum(v for n, v in values.items() if n.startswith(NVLINK))), "links": {},
                           **extra})
    if any(n in counters for n in ECC_DBE):
        vol, agg = values.get(ECC_DBE[0]), values.get(ECC_DBE[1])
        yield Event(kind="ecc_uncorrectable", layer="gpu", host=host, ts=entry["ts"], severity="error", gpu=gpu,
                    message=f"{where} uncorrectable ECC errors rose: volatile {_count(vol)}, aggregate "
                            f"{_count(agg)}{since}",
                    attrs={"volatile": _count(vol), "aggregate": _count(agg), **extra})


def _short(name: str) -> str:
    """``DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL`` -> ``crc_flit``."""
    return name.removeprefix(NVLINK).removesuffix("_ERROR_COUNT_TOTAL").lower()


def _count(value: float | None) -> int | None:
    return int(value) if value is not None else None


def _labels_without(labels: dict, *drop: str) -> str:
    return json.dumps({k: v for k, v in sorted(labels.items()) if k not in drop})


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()
