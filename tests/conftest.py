"""Shared fixtures: the real-log corpus, and the user's path (gpuwb ingest, then timeline --json)."""

from __future__ import annotations

import csv
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from workbench.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("GPUWB_CORPUS", ROOT / "tests" / "corpus"))


def corpus_index() -> dict[str, dict[str, str]]:
    """INDEX.tsv rows by path, with their labels parsed into a dict."""
    rows: dict[str, dict[str, str]] = {}
    with open(CORPUS / "INDEX.tsv", newline="") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            labels = {}
            for part in (row.get("labels") or "").split(";"):
                if "=" in part:
                    key, value = part.split("=", 1)
                    labels[key.strip()] = value.strip()
            row["parsed_labels"] = labels
            rows[row["path"]] = row
    return rows


def corpus_files(category: str) -> list[Path]:
    return sorted((CORPUS / category).iterdir())


def run_cli(*args: str) -> tuple[int, str, str]:
    """Run gpuwb in-process; returns (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def ingest_timeline(bundle: Path, *paths: Path | str, extra: tuple[str, ...] = ()) -> list[dict]:
    """The user's path: ``gpuwb ingest BUNDLE PATH...`` then ``gpuwb timeline BUNDLE --json``."""
    code, out, err = run_cli("ingest", bundle, *paths, *extra)
    assert code == 0, err or out
    code, out, err = run_cli("timeline", bundle, "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.fixture
def corpus() -> Path:
    return CORPUS


@pytest.fixture
def index() -> dict[str, dict[str, str]]:
    return corpus_index()


@pytest.fixture
def bundle_path(tmp_path: Path) -> Path:
    return tmp_path / "incident.duckdb"
