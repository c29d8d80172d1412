"""A new bundle is a copy of an empty one (workbench/store/template.py): the same tables as one made
from the migrations, a new empty bundle when the schema changes, and the same errors when it cannot be
written."""

from __future__ import annotations

import errno
from pathlib import Path

import duckdb
import pytest

from workbench.store import schema, template
from workbench.store.bundle import Bundle
from workbench.store.errors import BundleError, BundleWriteError


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template._empty_bundle.cache_clear()
    yield tmp_path / "cache"
    template._empty_bundle.cache_clear()


def _tables(path: Path) -> list[tuple]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute("SELECT table_name, column_name, data_type FROM information_schema.columns "
                           "ORDER BY ALL").fetchall()


def test_a_copied_bundle_has_the_tables_the_migrations_make(tmp_path: Path, own_cache: Path):
    made = tmp_path / "made.duckdb"
    with duckdb.connect(str(made)) as con:
        schema.migrate(con)
    with Bundle.create(tmp_path / "copied.duckdb", title="t") as bundle:
        assert bundle.meta()["title"] == "t"
    assert list(own_cache.glob("gpuwb/empty-bundle-*.duckdb"))
    assert _tables(tmp_path / "copied.duckdb") == _tables(made)
    with Bundle.create(tmp_path / "second.duckdb", title="u") as bundle:  # from the kept copy
        assert bundle.meta()["title"] == "u"
    assert len(list(own_cache.glob("gpuwb/*"))) == 1  # nothing left beside it


def test_a_changed_schema_makes_a_new_empty_bundle(tmp_path: Path, own_cache: Path, monkeypatch: pytest.MonkeyPatch):
    Bundle.create(tmp_path / "a.duckdb").close()
    extra = schema.SCHEMA_VERSION + 1
    monkeypatch.setattr(schema, "MIGRATIONS", {**schema.MIGRATIONS, extra: "CREATE TABLE added (x INTEGER);"})
    monkeypatch.setattr(schema, "SCHEMA_VERSION", extra)
    Bundle.create(tmp_path / "b.duckdb").close()
    assert len(list(own_cache.glob("gpuwb/empty-bundle-*.duckdb"))) == 2
    assert ("added", "x", "INTEGER") in _tables(tmp_path / "b.duckdb")


def test_without_a_cache_to_write_bundles_are_made_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    with Bundle.create(tmp_path / "a.duckdb", title="t") as bundle:
        assert bundle.meta()["title"] == "t"


def test_a_full_disk_while_copying_leaves_no_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    Bundle.create(tmp_path / "warm.duckdb").close()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(template.shutil, "copyfileobj", full)
    with pytest.raises(BundleWriteError, match="No space left on device"):
        Bundle.create(tmp_path / "b.duckdb")
    assert not (tmp_path / "b.duckdb").exists()


def test_an_existing_file_is_never_overwritten(tmp_path: Path):
    (tmp_path / "b.duckdb").write_bytes(b"keep")
    with pytest.raises(BundleError, match="already exists"):
        Bundle.create(tmp_path / "b.duckdb")
    assert (tmp_path / "b.duckdb").read_bytes() == b"keep"
