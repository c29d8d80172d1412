"""Error counters that rose between two artifacts of the same host and port.

Collectors write NIC and InfiniBand counters as ``series`` rows whose labels carry
``class: error`` (``ib.symbol_error``, ``nic.rx_missed_errors``, ...). One capture only shows
totals since boot, often large and old; what matters in an incident is that they are still
rising. Two captures of one host, or a capture plus a file handed over later, are compared here
point by point in time order: a rise between points of different artifacts becomes a
``counter_rising`` event (layer network_storage) at the later point, with attrs device, port,
counters {name: delta}, seconds, family (``ib``/``nic``). Rises inside one artifact are the
collector's own business; a counter that went down was reset and is not a rise.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

import duckdb

from collectors.base import Event

NAME = "counter_deltas"


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
            family, _, counter = name.partition(".")
            group = (host, _labels_without(parsed, "class"), artifact, family)
            entry = rises.setdefault(group, {"ts": ts, "from": previous[1], "labels": parsed, "counters": {}})
            entry["counters"][counter] = value - previous[2]
            entry["ts"] = max(entry["ts"], ts)
        previous = (key, ts, value, artifact)
    for (host, _, _, family), entry in rises.items():
        labels = entry["labels"]
        device = labels.get("device")
        seconds = _seconds(entry["from"], entry["ts"])
        text = ", ".join(f"{n} +{v:g}" for n, v in sorted(entry["counters"].items()))
        where = f"{device} port {labels['port']}" if labels.get("port") else (device or "?")
        yield Event(kind="counter_rising", layer="network_storage", host=host, ts=entry["ts"], severity="warning",
                    message=f"{where}: {text} since the previous capture" + (f" ({seconds:.0f} s earlier)"
                                                                             if seconds is not None else ""),
                    attrs={"device": device, "port": labels.get("port"), "counters": entry["counters"],
                           "seconds": seconds, "family": family, "section": labels.get("section")})


def _labels_without(labels: dict, *drop: str) -> str:
    return json.dumps({k: v for k, v in sorted(labels.items()) if k not in drop})


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return (end - start).total_seconds()
