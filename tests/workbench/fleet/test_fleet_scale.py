"""A fleet-sized incident: merging in batches changes nothing, and the analysis and the report name the
one bad node and count the rest instead of listing every host (tests/perf/fleet_nodes.py makes the nodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.perf.fleet_nodes import culprit_of, host_name, node_bundle, write_node
from workbench.analysis.engine import PER_CAUSE_LISTED
from workbench.ingest import merge
from workbench.store.bundle import Bundle
from workbench.store.schema import EVIDENCE_TABLES


def contents(path: Path) -> dict[str, list[tuple]]:
    """Artifacts with their provenance, aliases, chunks and parsed rows, without ids."""
    with Bundle.open(path) as bundle:
        con = bundle.con
        out = {"artifact": con.execute("SELECT sha256, collector, kind, host, source, captured_at, size, info "
                                       "FROM artifact ORDER BY sha256").fetchall(),
               "alias": con.execute("SELECT * FROM artifact_alias ORDER BY ALL").fetchall(),
               "chunk": con.execute("SELECT a.sha256, c.seq, md5(c.data) FROM artifact_chunk c "
                                    "JOIN artifact a ON a.id = c.artifact_id ORDER BY ALL").fetchall()}
        for table in EVIDENCE_TABLES:
            cols = [r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND column_name <> 'id' "
                "ORDER BY ordinal_position", [table]).fetchall()]
            out[table] = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY ALL").fetchall()
    return out


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    where = tmp_path_factory.mktemp("nodes")
    return [node_bundle(where, n, 11) for n in range(11)]


def test_merging_in_batches_gives_what_one_batch_gives(nodes: list[Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    whole = tmp_path / "whole.duckdb"
    merge.merge_bundles(whole, nodes)
    monkeypatch.setattr(merge, "BATCH", 4)
    batched, late = tmp_path / "batched.duckdb", tmp_path / "late.duckdb"
    merge.merge_bundles(batched, nodes)
    merge.merge_bundles(late, nodes[:5])
    added = merge.merge_into(late, nodes)
    assert len(added.inputs) == 6 and len(added.skipped) == 5
    reference = contents(whole)
    assert len(reference["alias"]) >= 20, "the nodes share date, dmesg and sacct bytes across batches"
    monkeypatch.setattr(merge, "BATCH_BYTES", 1)  # past the first bundle, any file ends the batch
    single = tmp_path / "single.duckdb"
    merge.merge_bundles(single, nodes)
    assert contents(batched) == reference
    assert contents(late) == reference
    assert contents(single) == reference
    for path in (whole, batched, late, single):
        with Bundle.open(path) as bundle:
            assert bundle.verify() == []
            assert len(json.loads(bundle.meta()["merged_from"])) == 11


def fleet(root: Path, count: int) -> Path:
    """One bundle holding ``count`` nodes' evidence (host folders ingested at once)."""
    for n in range(count):
        write_node(root / "evidence" / host_name(n), n, count)
    bundle = root / f"fleet{count}.duckdb"
    code, _, err = run_cli("ingest", "-q", bundle, root / "evidence")
    assert code == 0, err
    return bundle


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, str]]:
    out = {}
    for count in (24, 120):
        bundle = fleet(tmp_path_factory.mktemp(f"fleet{count}"), count)
        out[count] = {}
        for name, args in (("json", ("analyze", bundle, "--json")), ("text", ("analyze", bundle)),
                           ("md", ("report", bundle, "-f", "md"))):
            code, text, err = run_cli(*args)
            assert code == 0, err
            out[count][name] = text
    return out


@pytest.mark.parametrize("count", [24, 120])
def test_the_bad_node_is_named_among_many(outputs: dict[int, dict[str, str]], count: int) -> None:
    culprit = host_name(culprit_of(count))
    top = json.loads(outputs[count]["json"])["hypotheses"][0]
    assert (top["cause"], top["host"]) == ("gpu_fell_off_bus", culprit)
    assert f"gpu_fell_off_bus  {culprit}" in outputs[count]["text"]
    md = outputs[count]["md"]
    summary = md.split("## Summary", 1)[1].split("##", 1)[0]
    assert culprit in summary
    hosts_line = next(line for line in md.splitlines() if line.startswith("- **Hosts with errors:**"))
    assert culprit in hosts_line


def test_the_rest_are_counted_not_listed(outputs: dict[int, dict[str, str]]) -> None:
    small, big = outputs[24], outputs[120]
    hosts_line = next(line for line in big["md"].splitlines() if line.startswith("- **Hosts with errors:**"))
    assert hosts_line.startswith(f"- **Hosts with errors:** `{host_name(culprit_of(120))}`, ")
    assert hosts_line.endswith("and 108 more") and hosts_line.count("`") == 24
    assert "The other " in big["md"] and "per collector and kind" in big["md"]
    assert len(big["md"].splitlines()) <= len(small["md"].splitlines()) + 10, "five times the hosts, same report"
    assert max(map(len, big["md"].splitlines())) < 600
    assert len(big["text"].splitlines()) <= len(small["text"].splitlines()) + 2


def test_one_cause_on_every_host_is_listed_a_few_times_and_counted(outputs: dict[int, dict[str, str]]) -> None:
    for count, out in outputs.items():
        hyps = json.loads(out["json"])["hypotheses"]
        per_cause: dict[str, list[dict]] = {}
        for h in hyps:
            per_cause.setdefault(h["cause"], []).append(h)
        assert all(len(listed) <= PER_CAUSE_LISTED for listed in per_cause.values())
        noisy = max(per_cause.values(), key=len)
        assert [h.get("more_places", 0) for h in noisy[:-1]] == [0] * (len(noisy) - 1)
        assert len(noisy) + noisy[-1]["more_places"] == count, "every node's link line, listed or counted"
