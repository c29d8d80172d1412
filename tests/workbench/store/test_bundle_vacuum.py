"""A checkpoint leaves the chunks earlier ingest commits wrote where they are.

DuckDB's checkpoint vacuum would merge the partial row groups of many small commits (a folder of rank
logs commits every ~64 MiB) by reading their BLOBs back into memory, a rewrite that grows with the bundle:
workbench/store/connection.py VACUUM_TASKS turns it off for every writable bundle."""

from __future__ import annotations

import io
import random

from workbench.store.bundle import Bundle


def _row_groups(bundle: Bundle) -> int:
    return bundle.con.execute("SELECT count(DISTINCT row_group_id) FROM pragma_storage_info('artifact_chunk')"
                              ).fetchall()[0][0]


def test_each_commit_keeps_its_row_group_through_later_checkpoints(tmp_path):
    rng = random.Random(3)
    path = tmp_path / "b.duckdb"
    commits = 4
    written = {}
    with Bundle.create(path) as bundle:
        for commit in range(commits):
            bundle.begin_batch()
            for i in range(3):
                data = " ".join(f"{rng.random():.6f}" for _ in range(20_000)).encode()
                sha, _, _ = bundle.add_artifact(io.BytesIO(data), kind="nccl_log", source=f"rank{commit}-{i}.log")
                written[sha] = data
            bundle.commit_batch()
            bundle.con.execute("CHECKPOINT")
        assert _row_groups(bundle) == commits
    with Bundle.open(path, write=True) as bundle:
        assert _row_groups(bundle) == commits
        assert {sha: b"".join(bundle.artifact_bytes(sha)) for sha in written} == written
