"""Host facts and the clocks they give: boot time from uptime/date/btime files."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from collectors.host import parse_date_output
from workbench.ingest.session import ingest_paths
from workbench.store.bundle import Bundle


def _boot(bundle_path, files: dict[str, str]) -> dict[str, str]:
    root = bundle_path.parent / "evidence"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with Bundle.create(bundle_path) as bundle:
        ingest_paths(bundle, [str(root)])
        return dict(bundle.con.execute(
            "SELECT host, value FROM host_inventory WHERE key = 'boot_time'").fetchall())


def test_proc_stat_btime(bundle_path):
    stat = "cpu  100 0 50 1000 0 0 0 0 0 0\ncpu0 100 0 50 1000 0 0 0 0 0 0\nbtime 1764403200\nprocesses 1234\n"
    assert _boot(bundle_path, {"gpu01/proc_stat.txt": stat}) == {"gpu01": "2025-11-29T08:00:00+00:00"}


def test_uptime_since(bundle_path):
    assert _boot(bundle_path, {"gpu02/uptime-s.txt": "2026-11-20 06:31:07\n"}) == {
        "gpu02": "2026-11-20T06:31:07+00:00"}


def test_proc_uptime_with_date_gives_boot_time(bundle_path):
    root = bundle_path.parent / "evidence"
    (root / "gpu03").mkdir(parents=True)
    (root / "gpu03" / "uptime").write_text("3600.50 7000.00\n")
    (root / "gpu03" / "date.txt").write_text("Sun Nov 29 10:00:00 UTC 2026\n")
    with Bundle.create(bundle_path) as bundle:
        session_results = ingest_paths(bundle, [str(root)])
        assert {r.kind for r in session_results} == {"proc_uptime", "date"}
        facts = dict(bundle.con.execute("SELECT key, value FROM host_inventory WHERE host = 'gpu03'").fetchall())
    assert facts["uptime_s"] == "3600.50" and facts["date"] == "2026-11-29T10:00:00+00:00"


@pytest.mark.parametrize("text,expected", [
    ("Sun Nov 29 10:00:00 UTC 2026", datetime(2026, 11, 29, 10, tzinfo=timezone.utc)),
    ("Sun Nov 29 10:00:00 +0200 2026", datetime(2026, 11, 29, 8, tzinfo=timezone.utc)),
    ("2026-11-29T10:00:00+01:00", datetime(2026, 11, 29, 9, tzinfo=timezone.utc)),
    ("not a date", None),
])
def test_date_output(text, expected):
    assert parse_date_output(text) == expected
