"""One key per GPU, the PCI bus id, resolved once in the store so that every reader agrees.

Sources name a GPU differently: by bus id (the kernel, ``nvidia-smi -q``, NVML), by UUID (``nvidia-smi
nvlink -s``, the device plugin, NVML events without a bus id), as ``index:N`` (nvidia-smi's table or dcgmi
without a bus id), by serial. :func:`resolve` runs after every ingest and capture (first thing of
``run_derivations``) and rewrites the ``gpu`` of ``event``, ``gpu_sample`` and ``gpu_inventory`` rows
(and the ``gpu`` label of the GPU counters' series) that name a GPU by such an alias to the bus id the
bundle's own readings tie it to, per host: an inventory row or a sample that gives both. An alias tied to
two bus ids on one host (indexes renumbered between two captures) resolves to neither, and a GPU no
reading ties to a bus id keeps its key. :func:`aliases` gives readers a bus id's UUID, index and serial
from the same readings.

Limit: a row keeps no mark of having been resolved, so an alias that a later ingest makes ambiguous (a
capture after a GPU fell off the bus, its indexes shifted) stays on the bus id it was given before; a
bundle ingested in one go leaves it on its alias (``verify --deep`` would show those rows).

A ``series`` row has no GPU column: the GPU counters' label ``gpu`` (their sample's key) is resolved with
the samples; an exporter's own ``gpu``/``UUID`` labels (dcgm-exporter's index ``"0"``) match no alias and are
kept.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import duckdb

BUS_PATTERN = r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
"""A bus id as collectors.base.normalize_pci spells it: the canonical key."""
_BUS = re.compile(BUS_PATTERN)
_NO_VALUE = re.compile(r"^\[?(n/?a|not supported|unknown|none|null|0+)\]?$", re.IGNORECASE)
"""What nvidia-smi prints when a GPU has no serial or UUID to give: never an alias."""

# Per table, the expressions that may name a GPU, in the order a row is resolved by (the first that
# resolves wins: a UUID or serial is an identity, an index only a numbering), and which rows can hold one
# (a text test, so that most rows' JSON is never parsed). Constant SQL, never evidence.
_KEYS: dict[str, tuple[tuple[str, ...], str]] = {
    "gpu_inventory": (("uuid", "serial", "gpu", "'index:' || \"index\""), "true"),
    "gpu_sample": (("uuid", "gpu", "'index:' || (extra->>'index')"), "true"),
    "event": (("attrs->>'uuid'", "attrs->>'gpu_uuid'", "gpu", "attrs->>'gpu_key'"),
              "(event.gpu IS NOT NULL OR event.attrs LIKE '%uuid\"%' OR event.attrs LIKE '%\"gpu_key\"%')"),
}
_ORDER = {"gpu_inventory": 0, "gpu_sample": 1, "event": 2}


@dataclass
class GpuAliases:
    """What else a GPU is called on its host: the first real value the readings give of each."""

    host: str | None
    bus: str
    uuid: str | None = None
    index: int | None = None
    serial: str | None = None
    name: str | None = None


@dataclass
class _Reading:
    """One distinct (host, gpu, other names) a table holds."""

    table: str
    host: str | None
    gpu: str | None
    keys: list[str]
    uuid: str | None = None
    index: int | None = None
    serial: str | None = None
    name: str | None = None


def is_bus(gpu: str | None) -> bool:
    """Whether a stored GPU key is already a canonical bus id."""
    return bool(gpu) and _BUS.fullmatch(gpu) is not None


def _key(value: object) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text.lower() if text and not _NO_VALUE.match(text) else None


def _readings(con: duckdb.DuckDBPyConnection) -> list[_Reading]:
    out: list[_Reading] = []
    for host, gpu, index, uuid, serial, name in con.execute(
            'SELECT host, gpu, "index", uuid, serial, name FROM gpu_inventory ORDER BY rowid').fetchall():
        keys = [_key(uuid), _key(serial), _key(gpu), f"index:{index}" if index is not None else None]
        out.append(_Reading("gpu_inventory", host, gpu, [k for k in keys if k], uuid, index, serial, name))
    for host, gpu, uuid, index in con.execute(
            "SELECT DISTINCT host, gpu, uuid, CASE WHEN extra LIKE '%\"index\"%' THEN "
            "TRY_CAST(extra->>'index' AS INTEGER) END FROM gpu_sample ORDER BY ALL").fetchall():
        keys = [_key(uuid), _key(gpu), f"index:{index}" if index is not None else None]
        out.append(_Reading("gpu_sample", host, gpu, [k for k in keys if k], uuid, index))
    for host, gpu, named in con.execute(
            "SELECT DISTINCT host, gpu, json_extract_string(attrs, ['$.uuid', '$.gpu_uuid', '$.gpu_key']) FROM "
            f"event WHERE {_KEYS['event'][1]} ORDER BY ALL").fetchall():
        uuid, gpu_uuid, gpu_key = named
        keys = [_key(uuid), _key(gpu_uuid), _key(gpu), _key(gpu_key)]
        out.append(_Reading("event", host, gpu, [k for k in keys if k], uuid or gpu_uuid))
    return out


def _bind(readings: list[_Reading]) -> tuple[dict[tuple[str | None, str], str], list[str | None]]:
    """(host, alias) -> bus id for every alias the readings tie to exactly one bus id on its host, and each
    reading's bus id. A reading named by an alias is bound by the first of its keys that resolves and then
    lends its other names too, until no more bind: the fixed point, so resolving twice changes nothing."""
    bound: list[str | None] = [r.gpu if is_bus(r.gpu) else None for r in readings]
    while True:
        buses: dict[tuple[str | None, str], set[str]] = defaultdict(set)
        for reading, bus in zip(readings, bound):
            if bus:
                for key in reading.keys:
                    if not is_bus(key):
                        buses[(reading.host, key)].add(bus)
        table = {alias: next(iter(found)) for alias, found in buses.items() if len(found) == 1}
        more = False
        for i, reading in enumerate(readings):
            if bound[i] is None:
                bound[i] = next((table[(reading.host, k)] for k in reading.keys if (reading.host, k) in table), None)
                more = more or bound[i] is not None
        if not more:
            return table, bound


def resolve(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rewrite every ``gpu`` that names a GPU by an alias the bundle ties to one bus id, to that bus id.
    Returns rows changed per table (only tables with changes). Idempotent; the aliases go in as parameters
    to one temporary table, so no SQL is ever built from evidence text."""
    readings = _readings(con)
    table, bound = _bind(readings)
    tables = [name for name in _KEYS if any(r.table == name and bus and not is_bus(r.gpu)
                                             for r, bus in zip(readings, bound))]
    if not tables:
        return {}
    con.execute("CREATE OR REPLACE TEMP TABLE gpuwb_gpu_alias (host VARCHAR, alias VARCHAR, bus VARCHAR)")
    try:
        con.executemany("INSERT INTO gpuwb_gpu_alias VALUES (?, ?, ?)",
                        [[host, alias, bus] for (host, alias), bus in table.items()])
        changed: dict[str, int] = {}
        for name in tables:
            keys, holds = _KEYS[name]
            for expr in keys:
                n = con.execute(
                    f"UPDATE {name} SET gpu = a.bus FROM gpuwb_gpu_alias a "
                    f"WHERE {name}.host IS NOT DISTINCT FROM a.host AND lower(trim({expr})) = a.alias AND {holds} "
                    f"AND ({name}.gpu IS NULL OR NOT regexp_full_match({name}.gpu, ?))", [BUS_PATTERN]).fetchall()
                if n and n[0][0]:
                    changed[name] = changed.get(name, 0) + int(n[0][0])
        # the GPU counters' series (collectors/nvml/counters.py) carry their sample's key as label ``gpu``
        n = con.execute(
            "UPDATE series SET labels = json_merge_patch(labels, json_object('gpu', a.bus)) FROM gpuwb_gpu_alias a "
            "WHERE series.host IS NOT DISTINCT FROM a.host AND series.labels LIKE '%\"gpu\"%' "
            "AND lower(trim(series.labels->>'gpu')) = a.alias").fetchall()
        if n and n[0][0]:
            changed["series"] = int(n[0][0])
        return changed
    finally:
        con.execute("DROP TABLE IF EXISTS gpuwb_gpu_alias")


def aliases(con: duckdb.DuckDBPyConnection) -> dict[tuple[str | None, str], GpuAliases]:
    """(host, bus id) -> the GPU's other names, for readers that need a UUID, index or serial: the
    inventory's first real value of each, then the samples' and events' UUID. The same binding as
    :func:`resolve`, so it answers for a bundle not resolved yet too."""
    readings = _readings(con)
    _, bound = _bind(readings)
    out: dict[tuple[str | None, str], GpuAliases] = {}
    for reading, bus in sorted(zip(readings, bound), key=lambda rb: _ORDER[rb[0].table]):
        if bus is None:
            continue
        entry = out.setdefault((reading.host, bus), GpuAliases(reading.host, bus))
        for field in ("uuid", "serial", "name"):
            if getattr(entry, field) is None and _key(getattr(reading, field)):
                setattr(entry, field, str(getattr(reading, field)).strip())
        if entry.index is None and reading.index is not None:
            entry.index = reading.index
    return out
