"""verify reads small artifacts many per query and big ones chunk by chunk; either way every altered
artifact is named, in the bundle's order."""

from __future__ import annotations

import io
import os
from pathlib import Path

import duckdb
import pytest

from workbench.store import verify
from workbench.store.bundle import Bundle
from workbench.store.chunks import CHUNK_BYTES


def made(path: Path) -> list[str]:
    """Small, big (two chunks), small, small; sealed. Returns their sha256 in order."""
    with Bundle.create(path) as b:
        shas = [b.add_artifact(io.BytesIO(data), kind="unknown", source=name)[0] for name, data in (
            ("a.log", b"first line\n" * 100), ("big.bin", os.urandom(CHUNK_BYTES + 1000)),
            ("c.log", b"third\n" * 50), ("d.log", b"fourth\n" * 70))]
        b.seal()
    return shas


def alter(path: Path, sha: str, seq: int) -> None:
    con = duckdb.connect(str(path))
    try:
        con.execute("UPDATE artifact_chunk SET data = data || 'x'::BLOB, codec = NULL, raw_size = raw_size + 1 "
                    "WHERE seq = ? AND artifact_id = (SELECT id FROM artifact WHERE sha256 = ?)", [seq, sha])
    finally:
        con.close()


@pytest.mark.parametrize("group_bytes", [verify.VERIFY_GROUP_BYTES, 1])
def test_every_altered_artifact_is_named_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  group_bytes: int) -> None:
    monkeypatch.setattr(verify, "VERIFY_GROUP_BYTES", group_bytes)
    path = tmp_path / "b.duckdb"
    a, big, c, d = made(path)
    with Bundle.open(path) as b:
        assert b.verify() == []
    alter(path, a, 0)
    alter(path, big, 1)
    alter(path, d, 0)
    with Bundle.open(path) as b:
        problems = b.verify()
    named = [p.split(": ")[1].split(" ")[0] for p in problems]
    assert named == [a, big, d]
    assert all(p.startswith("artifact altered:") for p in problems)
