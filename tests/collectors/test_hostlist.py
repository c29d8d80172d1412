"""Slurm host-list syntax, read one way by the Slurm collector and the analysis alike."""

from __future__ import annotations

import pytest

from collectors.framework.hostlist import MAX_HOSTS, expand_hostlist, split_hostlist
from workbench.analysis.hypotheses import expand_hostlist as symptom_nodes


@pytest.mark.parametrize(("text", "hosts"), [
    ("node[01-04,07],gpu-[1-2]-a", ["node01", "node02", "node03", "node04", "node07", "gpu-1-a", "gpu-2-a"]),
    ("n[8-10]", ["n8", "n9", "n10"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("n[005]", ["n005"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("a[1-2]b,c", ["a1b", "a2b", "c"]),
    (" gpu[1, 3 - 4] , cpu5 ", ["gpu1", "gpu3", "gpu4", "cpu5"]),
    ("gpu-node-01", ["gpu-node-01"]),
    ("n[1,,2]", ["n1", "n2"]),
    ("n[5-3]", []),
    ("None assigned", []), ("(null)", []), ("", []), (None, []),
])
def test_expand_hostlist(text: str | None, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


def test_expand_hostlist_is_bounded() -> None:
    assert len(expand_hostlist("n[0-99999999999]")) == MAX_HOSTS
    assert len(expand_hostlist("a[0-99999],b[0-99999]")) == MAX_HOSTS


def test_split_keeps_bracket_groups_whole() -> None:
    assert split_hostlist("gpu[01-04,07],cpu1") == ["gpu[01-04,07]", "cpu1"]


@pytest.mark.parametrize("text", ["node[01-04,07],gpu-[1-2]-a", "rack[1-2]-n[08-10]", "n[1-3]x"])
def test_the_analysis_reads_host_lists_as_the_collector_does(text: str) -> None:
    assert symptom_nodes(text) == frozenset(expand_hostlist(text))


def test_the_analysis_also_reads_a_json_list_of_nodes() -> None:
    assert symptom_nodes('["node01", "node02"]') == {"node01", "node02"}
    assert symptom_nodes("[not json") == frozenset()
