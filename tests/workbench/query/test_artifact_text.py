"""The Evidence screen's reader: any window of lines of a chunked artifact, numbered as the event
table numbers them, including lines that straddle chunk borders and a last line without newline."""

from __future__ import annotations

import hashlib
import io

import pytest

from workbench.query.artifact_text import ArtifactText
from workbench.store import chunks
from workbench.store.bundle import Bundle
from workbench.store.shared_bundle import SharedBundle


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    monkeypatch.setattr(chunks, "CHUNK_BYTES", 37)  # many chunks, lines across their borders
    text = "".join(f"line {i} " + "x" * (i % 41) + "\n" for i in range(1, 300)) + "last line, no newline"
    path = tmp_path / "b.duckdb"
    with Bundle.create(path) as bundle:
        bundle.add_artifact(io.BytesIO(text.encode()), kind="text", source="x.log", host="node01")
    return SharedBundle(path, "tester"), hashlib.sha256(text.encode()).hexdigest(), text.split("\n")


@pytest.mark.parametrize("start", [1, 2, 17, 150, 298, 299, 300])
def test_any_window_matches_the_text(chunked, start):
    store, sha, lines = chunked
    reader = ArtifactText(store, sha)
    assert reader.chunks > 50
    got = reader.lines(start, 7)
    assert got == [(n + 1, lines[n]) for n in range(start - 1, min(start + 6, len(lines)))]


def test_past_the_end_is_empty_and_search_goes_both_ways(chunked):
    store, sha, lines = chunked
    reader = ArtifactText(store, sha)
    assert reader.lines(len(lines) + 1, 5) == []
    assert reader.find("LINE 250 ", after=1) == 250
    assert reader.find("line 3 ", after=250, backwards=True) == 3
    assert reader.find("no newline", after=1) == len(lines)
    assert reader.find("nowhere", after=1) is None
    assert reader.meta.host == "node01" and reader.meta.sha256 == sha
