"""The catalogs' parsed YAML kept beside them (collectors/catalog/parsed.py): used only while every
file is unchanged, and only once the documents passed their checks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from collectors.catalog import parsed
from collectors.framework.signatures import CATALOG, SignatureError, load_signatures


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    loads: list[Path] = []
    real = parsed._load

    def counted(path: Path):
        loads.append(path)
        return real(path)

    monkeypatch.setattr(parsed, "_load", counted)
    return loads


def test_an_unchanged_file_is_parsed_once_and_an_edited_one_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    loads = _counting(monkeypatch)
    doc = tmp_path / "a.yaml"
    doc.write_text("x: 1\n")
    assert parsed.parsed_yaml([doc], lambda docs: None) == [{"x": 1}]
    assert parsed.parsed_yaml([doc], lambda docs: None) == [{"x": 1}]
    assert len(loads) == 1
    doc.write_text("x: 22\n")
    os.utime(doc, ns=(doc.stat().st_atime_ns, doc.stat().st_mtime_ns + 1_000_000))
    assert parsed.parsed_yaml([doc], lambda docs: None) == [{"x": 22}]
    assert len(loads) == 2
    assert len(list((tmp_path / "__pycache__").glob("catalog-*.pickle"))) == 1  # the stale copy is gone


def test_documents_that_fail_their_check_are_never_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    loads = _counting(monkeypatch)
    doc = tmp_path / "a.yaml"
    doc.write_text("x: 1\n")

    def refuse(docs):
        raise ValueError("bad")

    for _ in range(2):
        with pytest.raises(ValueError, match="bad"):
            parsed.parsed_yaml([doc], refuse)
    assert len(loads) == 2
    assert not list(tmp_path.rglob("*.pickle")) and not list(tmp_path.rglob("*.tmp"))


def test_a_folder_it_may_not_write_only_costs_a_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An installed package owned by root, read by a user: the cache is not written, the run goes on."""
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(parsed.tempfile, "mkstemp", refused)
    doc = tmp_path / "a.yaml"
    doc.write_text("x: [1, 2]\n")
    assert parsed.parsed_yaml([doc], lambda docs: None) == [{"x": [1, 2]}]
    assert not list(tmp_path.rglob("*.pickle"))


def test_a_damaged_cache_file_is_parsed_around(tmp_path: Path):
    doc = tmp_path / "a.yaml"
    doc.write_text("x: 1\n")
    parsed.parsed_yaml([doc], lambda docs: None)
    (cache,) = (tmp_path / "__pycache__").glob("catalog-*.pickle")
    cache.write_bytes(b"\x80\x05not a pickle")
    assert parsed.parsed_yaml([doc], lambda docs: None) == [{"x": 1}]


def test_a_signature_catalog_from_the_kept_copy_matches_as_the_parsed_one(tmp_path: Path):
    """The second load (regexes compiled on first use) recognises each sample as the first did."""
    folder = tmp_path / "signatures"
    shutil.copytree(CATALOG, folder, ignore=shutil.ignore_patterns("__pycache__"))
    fresh = load_signatures(folder)
    assert list((folder / "__pycache__").glob("catalog-*.pickle"))
    kept = load_signatures(folder)
    assert [s.id for s in kept] == [s.id for s in fresh]
    assert "regex" not in vars(kept[0])  # not compiled until asked
    for a, b in zip(fresh, kept, strict=True):
        for sample in a.samples[:1]:
            assert (a.match(sample.line) is None) == (b.match(sample.line) is None), a.id


def test_a_bad_regex_is_refused_on_every_load(tmp_path: Path):
    folder = tmp_path / "signatures"
    folder.mkdir()
    (folder / "bad.yaml").write_text(
        "family: bad\nsignatures:\n- id: bad_one\n  kind: bad\n  layer: gpu\n  severity: error\n"
        "  regex: 'unclosed ('\n  anchors: [unclosed]\n  samples:\n"
        "  - {line: 'unclosed (', source: tests/x}\n  - {line: 'unclosed ((', source: tests/x}\n")
    for _ in range(2):
        with pytest.raises(SignatureError, match="does not compile"):
            load_signatures(folder)
