"""SIGTERM and SIGHUP take Ctrl-C's path: the command's own clean-up runs, the exit status names the signal."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.conftest import run_cli
from workbench.errors import Terminated


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_is_raised_where_the_command_is_and_ends_it_with_its_status(monkeypatch: pytest.MonkeyPatch,
                                                                           signum: int, status: int) -> None:
    seen: list[BaseException] = []

    def run(args: object) -> int:
        try:
            os.kill(os.getpid(), signum)
            time.sleep(5)  # the handler raises here, at once
        except KeyboardInterrupt as exc:  # what capture and ingest catch to seal what they have
            seen.append(exc)
            raise
        return 0

    import workbench.commands.verify as verify

    monkeypatch.setattr(verify, "run", run)
    before = signal.getsignal(signum)
    code, _, err = run_cli("verify", "x.duckdb")
    assert code == status
    assert err.strip() == f"gpuwb: terminated by {signal.Signals(signum).name}"
    assert len(seen) == 1 and isinstance(seen[0], Terminated)
    assert signal.getsignal(signum) is before  # put back for whoever called main
