"""`gpuwb record --print-unit`: a systemd unit that starts the recorder again with the options given."""

from __future__ import annotations

import shlex

from tests.conftest import run_cli


def test_print_unit_spells_out_the_options_and_restarts_the_recorder(tmp_path) -> None:
    code, text, err = run_cli("record", "--print-unit", "--out", tmp_path, "--kernel-log", "/var/log/kern.log",
                              "--watch", "/scratch/job*/rank*.log", "--window", "45m", "--max-disk", "1GB")
    assert code == 0, err
    sections = [line for line in text.splitlines() if line.startswith("[")]
    assert sections == ["[Unit]", "[Service]", "[Install]"]
    (exec_line,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_line.removeprefix("ExecStart="))
    assert argv[argv.index("record") + 1:argv.index("record") + 3] == ["--out", str(tmp_path)]
    assert argv[argv.index("--window") + 1] == "2700s" and argv[argv.index("--max-disk") + 1] == str(1 << 30)
    assert argv[argv.index("--watch") + 1] == "/scratch/job*/rank*.log"
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text


def test_print_unit_without_out_uses_the_state_directory() -> None:
    code, text, _ = run_cli("record", "--print-unit")
    assert code == 0 and "--out /var/lib/gpuwb/record" in text
