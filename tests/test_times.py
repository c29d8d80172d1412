"""workbench.times: the one place a time becomes text and back. Each output keeps its spelling (the
precision is a parameter), so folding the per-module copies changed no output."""

from datetime import datetime, timedelta, timezone

from workbench.times import iso, parse_iso

T = datetime(2026, 3, 14, 10, 20, 5, 123456)


def test_each_precision_is_the_spelling_its_output_had() -> None:
    assert iso(T) == "2026-03-14T10:20:05.123Z"                       # analysis JSON
    assert iso(T, "microseconds") == "2026-03-14T10:20:05.123456Z"    # timeline --json
    assert iso(T, "seconds") == "2026-03-14T10:20:05Z"                # fleet history, drill k8s lines
    assert iso(T, "auto") == "2026-03-14T10:20:05.123456Z"            # journal
    assert iso(T.replace(microsecond=0), "auto") == "2026-03-14T10:20:05Z"
    assert iso(T, "seconds", z=False) == "2026-03-14T10:20:05+00:00"  # capture meta
    assert iso(None) is None


def test_an_aware_time_is_written_in_utc_not_with_its_offset() -> None:
    plus2 = T.replace(tzinfo=timezone(timedelta(hours=2)))
    assert iso(plus2, "seconds") == "2026-03-14T08:20:05Z"


def test_parse_iso_gives_back_naive_utc() -> None:
    assert parse_iso(iso(T, "microseconds")) == T
    assert parse_iso("2026-03-14T12:20:05.123456+02:00") == T
    assert parse_iso("2026-03-14T10:20:05.123456") == T
    assert parse_iso("") is None and parse_iso(None) is None
