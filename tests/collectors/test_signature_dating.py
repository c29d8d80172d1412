"""An undated line the signature catalog recognises in an interleaved ``srun -l`` job log takes the time
of its own rank's nearest dated line, not another rank's and not none."""

from __future__ import annotations

import io
from datetime import datetime, timezone

from collectors.framework.signatures import NEIGHBOUR_LINES, catalog

SOCKET = "dgx{h}:36{r}0:36{r}0 [{r}] NCCL INFO NET/Socket : Using [0]bond0:10.0.0.{r}<0> [1]docker0:172.17.0.1<0>"


def _filler(n: int) -> list[str]:
    """Undated lines of other ranks, more than the neighbour window holds."""
    return [f"{k % 3}: dgx1:3600:3600 [0] NCCL INFO Channel {k:02d}/0 : 0[0] -> 1[1] via P2P/IPC" for k in range(n)]


def _interfaces(lines: list[str]) -> list:
    text = "\n".join(lines) + "\n"
    return [e for e in catalog().scan(io.BytesIO(text.encode())) if e.kind == "nccl_net_interfaces"]


def test_an_undated_line_takes_its_own_ranks_last_time_from_far_back():
    lines = [f"{r}: 2026-10-25 01:3{r}:08,000 - INFO - [rank{r}] torch.distributed initialized" for r in range(4)]
    lines += _filler(NEIGHBOUR_LINES * 2) + [f"5: {SOCKET.format(h=1, r=5)}", f"2: {SOCKET.format(h=1, r=2)}"]
    lines += _filler(NEIGHBOUR_LINES * 2) + ["5: 2026-10-25 01:59:00,000 - INFO - [rank5] step 1"]
    by_rank = {e.rank: e for e in _interfaces(lines)}
    assert by_rank[2].ts == datetime(2026, 10, 25, 1, 32, 8, tzinfo=timezone.utc)
    assert (by_rank[2].ts_origin, by_rank[2].ts_approx) == ("neighbour", True)
    # no earlier line of rank 5 is dated: its next dated line is taken
    assert by_rank[5].ts == datetime(2026, 10, 25, 1, 59, tzinfo=timezone.utc)


def test_a_rank_never_dated_stays_undated():
    lines = ["0: 2026-10-25 01:30:08,000 - INFO - [rank0] torch.distributed initialized"]
    lines += _filler(NEIGHBOUR_LINES * 2) + [f"7: {SOCKET.format(h=2, r=7)}"]
    (event,) = _interfaces(lines)
    assert event.ts is None


def test_a_signature_takes_its_time_from_a_named_group(tmp_path) -> None:
    """An undated pasted line whose message carries its own time (Slurm's CANCELLED AT ...) is dated by it."""
    import io

    from collectors.framework.signatures import Matcher, load_signatures

    (tmp_path / "probe.yaml").write_text(
        "family: probe\nprecedence: 1\nsignatures:\n"
        "  - id: probe_cancelled\n    kind: job_state\n    layer: scheduling\n    severity: error\n"
        "    anchors: ['CANCELLED AT']\n"
        "    regex: 'JOB (?P<job>\\d+) ON \\S+ CANCELLED AT (?P<at>\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d)'\n"
        "    samples:\n"
        "      - {line: 'slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2020-12-14T09:44:56 ***', source: https://x/1}\n"
        "      - {line: 'slurmstepd: error: *** JOB 8 ON n2 CANCELLED AT 2020-12-14T09:45:00 ***', source: https://x/2}\n",
        encoding="utf-8")
    matcher = Matcher(load_signatures(tmp_path))
    line = b"slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2020-12-14T09:44:56 DUE TO TIME LIMIT ***\n"
    (event,) = list(matcher.scan(io.BytesIO(line)))
    assert event.ts is not None and event.ts.isoformat().startswith("2020-12-14T09:44:56")
    assert (event.ts_origin, event.ts_approx, event.ts_raw) == ("message", False, "2020-12-14T09:44:56")
    assert "at" not in event.attrs
