"""The bundle's tables, versioned; each migration brings a bundle one version forward.

Evidence tables (artifact, artifact_chunk, event, gpu_sample, gpu_inventory, topology, series,
host_inventory, capture_log) are written at capture/ingest and never updated afterwards.
Responder work goes to ``journal``, append-only, with author and time.
Each ``seal`` row records how its digest was computed (``digest_version``), so a bundle sealed by an
older gpuwb is verified the way it was sealed.
"""

from __future__ import annotations

import duckdb

SCHEMA_VERSION = 3

_V1 = """
CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE artifact (
    id INTEGER PRIMARY KEY,
    sha256 VARCHAR UNIQUE NOT NULL,
    collector VARCHAR,
    kind VARCHAR NOT NULL,
    host VARCHAR,
    source VARCHAR NOT NULL,
    captured_at TIMESTAMP,
    size BIGINT NOT NULL,
    lines BIGINT,
    events BIGINT,
    rows BIGINT,
    skipped BIGINT,
    skip_reasons JSON,
    info JSON
);
CREATE TABLE artifact_alias (
    sha256 VARCHAR NOT NULL,
    collector VARCHAR,
    kind VARCHAR,
    host VARCHAR,
    source VARCHAR NOT NULL,
    captured_at TIMESTAMP,
    info JSON
);
CREATE TABLE artifact_chunk (
    artifact_id INTEGER NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL,
    codec VARCHAR,        -- NULL: the bytes as they are; 'zstd': compressed, raw_size bytes once expanded
    raw_size INTEGER NOT NULL
);
CREATE TABLE event (
    id BIGINT,
    ts TIMESTAMP,
    ts_origin VARCHAR,
    ts_approx BOOLEAN,
    ts_raw VARCHAR,
    host VARCHAR,
    source VARCHAR,
    layer VARCHAR,
    kind VARCHAR,
    severity VARCHAR,
    gpu VARCHAR,
    rank INTEGER,
    job VARCHAR,
    message VARCHAR,
    attrs JSON,
    artifact VARCHAR,
    line BIGINT
);
CREATE TABLE gpu_sample (
    ts TIMESTAMP, host VARCHAR, gpu VARCHAR, uuid VARCHAR,
    util_gpu DOUBLE, util_mem DOUBLE, mem_used_mib DOUBLE, mem_total_mib DOUBLE,
    temp_c DOUBLE, power_w DOUBLE, power_limit_w DOUBLE, sm_clock_mhz DOUBLE, mem_clock_mhz DOUBLE,
    throttle_reasons VARCHAR[],
    ecc_volatile_corrected BIGINT, ecc_volatile_uncorrected BIGINT,
    ecc_aggregate_corrected BIGINT, ecc_aggregate_uncorrected BIGINT,
    retired_pages_sbe BIGINT, retired_pages_dbe BIGINT, retired_pending BOOLEAN,
    remap_pending BOOLEAN, remap_failure BOOLEAN,
    pcie_gen INTEGER, pcie_width INTEGER, pcie_replay BIGINT, nvlink_errors BIGINT,
    extra JSON, artifact VARCHAR, line BIGINT
);
CREATE TABLE gpu_inventory (
    host VARCHAR, gpu VARCHAR, "index" INTEGER, uuid VARCHAR, name VARCHAR, serial VARCHAR,
    vbios VARCHAR, driver VARCHAR, cuda VARCHAR, persistence VARCHAR, mig_mode VARCHAR,
    power_limit_w DOUBLE, pcie_max_gen INTEGER, pcie_max_width INTEGER, memory_total_mib DOUBLE,
    extra JSON, artifact VARCHAR
);
CREATE TABLE topology (
    host VARCHAR, rank INTEGER, nranks INTEGER, comm_id VARCHAR, pid BIGINT, cuda_dev INTEGER,
    gpu VARCHAR, nccl_version VARCHAR, job VARCHAR, extra JSON, artifact VARCHAR, line BIGINT
);
CREATE TABLE series (ts TIMESTAMP, host VARCHAR, name VARCHAR, labels JSON, value DOUBLE, artifact VARCHAR);
CREATE TABLE host_inventory (host VARCHAR, key VARCHAR, value VARCHAR, artifact VARCHAR);
CREATE TABLE capture_log (
    collector VARCHAR, host VARCHAR, status VARCHAR, reason VARCHAR,
    started_at TIMESTAMP, duration_s DOUBLE, artifacts INTEGER, detail JSON
);
CREATE TABLE seal (seq INTEGER, sealed_at TIMESTAMP, root_digest VARCHAR, artifacts INTEGER, complete BOOLEAN);
CREATE TABLE journal (
    id BIGINT, at_ts TIMESTAMP, author VARCHAR, kind VARCHAR, target VARCHAR, body JSON
);
"""

_V2 = """
ALTER TABLE seal ADD COLUMN digest_version INTEGER;
ALTER TABLE seal ADD COLUMN items JSON;
UPDATE seal SET digest_version = 1;
"""
"""Version 2: the seal covers every provenance field and keeps a digest per artifact (``items``) so that
verify can name what changed; seals written before stay version 1."""

_V3 = """
ALTER TABLE seal ADD COLUMN previous VARCHAR;
ALTER TABLE seal ADD COLUMN note JSON;
"""
"""Version 3: seals form a chain. Each seal's digest covers the previous seal's (``previous`` keeps a copy, so
that a seal removed or rewritten shows), its items are fine enough that an append-only bundle keeps every
item of one seal unchanged in the next, and ``note`` says why a seal was made when not at the end of a run
(the artifacts of an ingest that did not finish, sealed by the next one). Seals written before keep their
version and verify the way they were made."""

MIGRATIONS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3}
"""Version -> DDL that brings a bundle from version-1 to version."""

EVIDENCE_TABLES = ("event", "gpu_sample", "gpu_inventory", "topology", "series", "host_inventory")
TABLES = ("meta", "artifact", "artifact_alias", "artifact_chunk", *EVIDENCE_TABLES, "capture_log", "seal", "journal")
"""Every table of a current bundle; one missing means the file is damaged (or not a bundle)."""


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    """The bundle's schema version; 0 when it has no meta table or no version. ValueError when the version
    is not a number."""
    has_meta = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'").fetchall()[0][0]
    if not has_meta:
        return 0
    rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    return int(rows[0][0]) if rows else 0


def missing_tables(con: duckdb.DuckDBPyConnection, version: int) -> list[str]:
    """The tables a bundle of schema ``version`` must have but this one lacks (one query)."""
    present = {name for (name,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
        "AND table_schema = 'main'").fetchall()}
    return [t for t in TABLES if t not in present] if version >= 1 else []


def migrate(con: duckdb.DuckDBPyConnection) -> int:
    """Apply every migration newer than the bundle's version; returns the version reached."""
    version = current_version(con)
    if version > SCHEMA_VERSION:
        raise ValueError(f"bundle schema version {version} is newer than this gpuwb ({SCHEMA_VERSION})")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        con.execute("BEGIN")
        con.execute(MIGRATIONS[target])
        con.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(target)])
        con.execute("COMMIT")
    return SCHEMA_VERSION
