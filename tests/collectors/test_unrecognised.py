"""Nothing unheard-of is silent: error-shaped lines no parser or catalog entry knows become
unrecognised_error events at the writing program's layer, repeats counted, known lines left alone."""

from __future__ import annotations

import io
import json

from collectors.framework import unrecognised
from tests.conftest import ingest_timeline, run_cli

LOG = b"""2024-05-12T10:11:12Z node1 myapp[123]: ERROR the flux capacitor broke at 42
2024-05-12T10:11:13Z node1 myapp[123]: ERROR the flux capacitor broke at 43
2024-05-12T10:11:14Z node1 myapp[123]: INFO all is well, no error: here
Traceback (most recent call last):
  File "x.py", line 1, in <module>
WeirdLibError: the widget is at 1.21 GW
RuntimeError: CUDA error: an illegal memory access was encountered
2024-05-12T10:11:15Z node1 kubelet[77]: E0512 10:11:15.123456 77 pod_workers.go:1298] "Error syncing pod" err="x"
process exited with code 3
"""


def scan(data: bytes, known=(), collector=None):
    return list(unrecognised.scan(io.BytesIO(data), known=known, collector=collector))


def test_error_shaped_lines_become_events_with_repeats_counted() -> None:
    events = scan(LOG)
    by_line = {e.line: e for e in events}
    assert set(by_line) == {1, 6, 7, 8, 9}, [(e.line, e.message) for e in events]
    assert by_line[1].attrs["count"] == 2 and by_line[1].attrs["program"] == "myapp"
    assert by_line[8].layer == "scheduling"  # kubelet, from collectors/catalog/programs.yaml
    assert by_line[6].layer == "business"


def test_lines_a_parser_or_the_catalog_wrote_are_left_alone() -> None:
    assert 7 not in {e.line for e in scan(LOG, known={7})}


def test_the_collector_places_a_line_that_names_no_program() -> None:
    assert {e.layer for e in scan(b"ERROR: something\n", collector="kernel")} == {"hardware"}
    assert {e.layer for e in scan(b"ERROR: something\n", collector="nccl")} == {"business"}


def test_a_flood_of_distinct_errors_is_capped_and_counted() -> None:
    data = b"".join(b"ERROR distinct message %s\n" % word.encode() for word in
                    (f"w{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}{chr(97 + i // 676)}" for i in range(1000)))
    events = scan(data)
    assert len(events) == unrecognised.MAX_TEMPLATES
    assert events[-1].attrs["dropped"] == 1000 - unrecognised.MAX_TEMPLATES


def test_ingest_keeps_them_and_the_engine_names_them_low(tmp_path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "app.log").write_bytes(LOG)
    events = ingest_timeline(tmp_path / "b.duckdb", tmp_path / "e")
    kinds = [e["kind"] for e in events]
    assert "cuda_error" in kinds and kinds.count("unrecognised_error") == 4
    code, out, err = run_cli("analyze", tmp_path / "b.duckdb", "--json")
    assert code == 0, err
    hyps = json.loads(out)["hypotheses"]
    assert hyps[0]["cause"] == "app_gpu_fault"
    low = [h for h in hyps if h["cause"].startswith("unrecognised_")]
    assert low and all(h["score"] < hyps[0]["score"] for h in low)


def test_only_unknown_errors_still_give_a_hypothesis(tmp_path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "app.log").write_bytes(b"2024-05-12T10:11:12Z node1 myapp[1]: FATAL reactor core breach\n")
    ingest_timeline(tmp_path / "b.duckdb", tmp_path / "e")
    code, out, _ = run_cli("analyze", tmp_path / "b.duckdb", "--json")
    assert [h["cause"] for h in json.loads(out)["hypotheses"]][:1] == ["unrecognised_business"]
