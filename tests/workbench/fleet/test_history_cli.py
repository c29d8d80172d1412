"""`gpuwb history add|show`, `analyze --history` and `report --history` as a responder runs them,
on the three ingested incidents of test_history.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.test_docs import documented_keys
from tests.workbench.fleet.test_history import ECC_SERIAL, build_incidents


@pytest.fixture(scope="module")
def filed(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Path]:
    """The three bundles, all added to one history folder."""
    root = tmp_path_factory.mktemp("history-cli")
    bundles = build_incidents(root)
    history = root / "history"
    code, out, err = run_cli("history", "add", *bundles.values(), "--history", history)
    assert code == 0, err
    assert [line.split(":")[0] for line in out.splitlines()] == ["added", "added", "added"]
    return bundles, history


def test_history_show_names_the_shared_serial_with_both_dates(filed: tuple[dict[str, Path], Path]) -> None:
    _, history = filed
    code, out, err = run_cli("history", "show", "--history", history)
    assert code == 0, err
    head, *incidents = out.splitlines()[1:]
    assert head.startswith(f"GPU serial {ECC_SERIAL} ") and head.endswith(": 2 incident(s)")
    assert [line.split()[:3] for line in incidents] == [["2025-03-10", "node04", "0000:9b:00.0"],
                                                        ["2025-06-02", "node14", "0000:9b:00.0"]]
    assert "2025-03-01" not in out  # node07's GPU prints that serial too, but its UUID is another


def test_history_show_json_is_the_documented_contract(filed: tuple[dict[str, Path], Path]) -> None:
    _, history = filed
    code, out, _ = run_cli("history", "show", "--history", history, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["incidents"] == 3 and doc["min_incidents"] == 2
    (offender,) = doc["offenders"]
    assert (offender["what"], offender["serial"], offender["count"]) == ("gpu", ECC_SERIAL, 2)
    assert [i["date"] for i in offender["incidents"]] == ["2025-03-10", "2025-06-02"]
    keys = documented_keys("history")
    assert set(doc) - keys == set()
    assert set(offender) - keys == set()
    assert set(offender["incidents"][0]) - keys == set()


def test_since_host_and_gpu_narrow_the_list(filed: tuple[dict[str, Path], Path]) -> None:
    _, history = filed
    code, out, _ = run_cli("history", "show", "--history", history, "--since", "2025-05-01T00:00:00Z")
    assert code == 0 and out.startswith("No GPU or host is a culprit in 2 or more incidents since 2025-05-01")
    code, out, _ = run_cli("history", "show", "--history", history, "--since", "90d", "--json")
    assert code == 0 and json.loads(out)["offenders"] == []  # every incident is older than 90 days
    code, out, _ = run_cli("history", "show", "--history", history, "--host", "node07", "--json")
    assert {(o["what"], o["count"]) for o in json.loads(out)["offenders"]} == {("gpu", 1), ("host", 1)}
    code, out, _ = run_cli("history", "show", "--history", history, "--gpu", "0000:2A:00.0")
    assert "2025-03-01  node07 0000:2a:00.0" in out and "2025-03-10" not in out


def test_adding_the_same_bundles_again_counts_them_once(filed: tuple[dict[str, Path], Path]) -> None:
    bundles, history = filed
    code, out, _ = run_cli("history", "add", bundles["second"], bundles["first"], "--history", history)
    assert code == 0 and [line.split(":")[0] for line in out.splitlines()] == ["already in history"] * 2
    assert json.loads(run_cli("history", "show", "--history", history, "--json")[1])["incidents"] == 3


def test_analyze_of_the_second_incident_says_seen_before(filed: tuple[dict[str, Path], Path]) -> None:
    bundles, history = filed
    code, out, err = run_cli("analyze", bundles["second"], "--history", history)
    assert code == 0, err
    assert (f"GPU serial {ECC_SERIAL} (node14 0000:9b:00.0) seen before: 1 incident "
            "(2025-03-10 ecc_uncorrectable with Xid 45 63 94 on node04)") in out.splitlines()
    code, out, _ = run_cli("analyze", bundles["first"], "--history", history)
    assert code == 0 and "seen before" not in out
    assert "History: no earlier incident names these culprits." in out


def test_analyze_json_carries_seen_before_and_reads_the_environment(filed: tuple[dict[str, Path], Path],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    bundles, history = filed
    assert "seen_before" not in json.loads(run_cli("analyze", bundles["second"], "--json")[1])
    monkeypatch.setenv("GPUWB_HISTORY", str(history))
    code, out, _ = run_cli("analyze", bundles["second"], "--json")
    entries = json.loads(out)["seen_before"]
    assert code == 0
    assert [(e["what"], e["count"]) for e in entries] == [("gpu", 1), ("host", 0)]
    assert entries[0]["incidents"][0]["date"] == "2025-03-10"


def test_report_adds_its_seen_before_section_only_with_a_history(filed: tuple[dict[str, Path], Path],
                                                                 tmp_path: Path) -> None:
    bundles, history = filed
    code, plain, _ = run_cli("report", bundles["second"], "--no-verify", "--generated-at", "2026-01-01T00:00:00Z")
    assert code == 0 and "Seen before" not in plain
    code, md, _ = run_cli("report", bundles["second"], "--no-verify", "--history", history,
                          "--generated-at", "2026-01-01T00:00:00Z")
    section = md.split("## Seen before", 1)[1].split("\n## ", 1)[0]
    assert code == 0 and f"GPU serial {ECC_SERIAL}" in section and "2025-03-10 ecc_uncorrectable" in section
    start = md.index("## Seen before")
    assert md[:start] + md[md.index("\n## ", start) + 1:] == plain  # the rest of the report is unchanged
    html = tmp_path / "r.html"
    assert run_cli("report", bundles["second"], "--no-verify", "--history", history, "-o", html)[0] == 0
    assert 'id="seen-before"' in html.read_text(encoding="utf-8")
    code, out, _ = run_cli("report", bundles["second"], "--no-verify", "--history", history, "-f", "json")
    assert code == 0 and json.loads(out)["history"][0]["count"] == 1


@pytest.mark.parametrize("argv", [
    ("history", "show", "--history", "{missing}"),
    ("history", "show", "--history", "{file}"),
    ("history", "add", "{bundle}", "--history", "{missing}/deeper"),
    ("analyze", "{bundle}", "--history", "{missing}"),
    ("report", "{bundle}", "--history", "{file}"),
    ("history", "show"),
    ("history", "add", "--history", "{missing}"),
])
def test_a_bad_history_folder_is_one_line_and_status_2(filed: tuple[dict[str, Path], Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...]) -> None:
    monkeypatch.delenv("GPUWB_HISTORY", raising=False)
    bundles, _ = filed
    (tmp_path / "file").write_text("not a folder\n", encoding="utf-8")
    names = {"missing": tmp_path / "missing", "file": tmp_path / "file", "bundle": bundles["first"]}
    code, out, err = run_cli(*(a.format(**names) for a in argv))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("gpuwb: error: ") and "Traceback" not in err


def test_a_file_that_is_no_bundle_is_named_and_the_others_are_still_added(filed: tuple[dict[str, Path], Path],
                                                                          tmp_path: Path) -> None:
    bundles, _ = filed
    junk = tmp_path / "junk.duckdb"
    junk.write_text("no bundle\n", encoding="utf-8")
    code, out, err = run_cli("history", "add", junk, bundles["other"], "--history", tmp_path / "h")
    assert code == 2 and out.startswith("added: ") and str(junk) in err and len(err.splitlines()) == 1


def test_options_may_come_before_or_after_the_action_and_its_bundles(filed: tuple[dict[str, Path], Path],
                                                                      tmp_path: Path) -> None:
    bundles, _ = filed
    for n, argv in enumerate((("history", "add", "--history", "{h}", "{b}"),  # a new user's first try
                              ("history", "--history", "{h}", "add", "{b}"),
                              ("history", "add", "{b}", "--history", "{h}"))):
        history = tmp_path / f"h{n}"
        code, out, err = run_cli(*(a.format(h=history, b=bundles["first"]) for a in argv))
        assert code == 0 and out.startswith("added: "), (argv, err)
        code, out, err = run_cli("history", "show", "--json", "--history", history, "--min", "1")
        assert code == 0 and json.loads(out)["incidents"] == 1, err


def test_history_add_json_says_what_was_filed_and_what_failed(filed: tuple[dict[str, Path], Path],
                                                              tmp_path: Path) -> None:
    bundles, _ = filed
    junk = tmp_path / "junk.duckdb"
    junk.write_text("no bundle\n", encoding="utf-8")
    history = tmp_path / "h"
    code, out, _ = run_cli("history", "add", "--json", "--history", history, bundles["first"], junk)
    doc = json.loads(out)
    assert code == 2 and doc["history"] == str(history)
    (entry,) = doc["filed"]
    assert entry["bundle"] == str(bundles["first"]) and entry["status"] == "added" and entry["causes"]
    assert doc["failed"][0]["bundle"] == str(junk) and doc["failed"][0]["error"]
    keys = documented_keys("history")
    assert set(doc) - keys == set() and set(entry) - keys == set() and set(doc["failed"][0]) - keys == set()


def test_a_missing_history_from_the_environment_says_where_it_came_from(filed: tuple[dict[str, Path], Path],
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bundles, _ = filed
    monkeypatch.setenv("GPUWB_HISTORY", str(tmp_path / "gone"))
    for argv in (("history", "show"), ("analyze", bundles["first"]), ("report", bundles["first"], "--no-verify")):
        code, out, err = run_cli(*argv)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (argv, err)
        assert f"no incident history at {tmp_path / 'gone'} (from $GPUWB_HISTORY)" in err
        assert "unset GPUWB_HISTORY" in err
    monkeypatch.delenv("GPUWB_HISTORY")
    code, _, err = run_cli("history", "show")
    assert code == 2 and "give --history DIR or set GPUWB_HISTORY" in err
