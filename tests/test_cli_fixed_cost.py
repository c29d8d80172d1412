"""The fixed cost of a run: ``gpuwb CMD`` builds the parser of CMD alone, and an ingest imports no Arrow
or numpy it does not use (every run pays its imports before reading a byte; 512 small rank logs pay
them once, a responder re-running a command pays them each time). Probes run in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, run_cli
from workbench import cli
from workbench.query.series import signals
from workbench.store.bundle import Bundle


def _loaded_by(argv: list[str], watched: tuple[str, ...]) -> tuple[int, list[str]]:
    """Exit status of ``gpuwb ARGV`` run in a new interpreter, and which of ``watched`` it imported."""
    probe = ("import contextlib, io, json, sys\n"
             "from workbench.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
             f"    code = main({argv!r})\n"
             f"print(json.dumps([code, sorted(set(sys.modules) & set({list(watched)!r}))]))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    code, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return code, loaded


OTHER_COMMANDS = tuple(f"workbench.commands.{name}" for name in cli.COMMAND_ORDER if name != "ingest")


def test_an_ingest_of_a_small_log_loads_no_other_command_nor_arrow_or_numpy(tmp_path: Path):
    log = tmp_path / "notes.txt"
    log.write_text("nothing any collector knows\n")
    code, loaded = _loaded_by(["ingest", "-q", str(tmp_path / "b.duckdb"), str(log)],
                              ("pyarrow", "pyarrow.compute", "numpy", "pandas", "workbench.commands.ingest",
                               *OTHER_COMMANDS))
    assert code == 0
    assert loaded == ["workbench.commands.ingest"]


def test_the_parser_of_one_command_is_the_same_as_in_the_whole_parser():
    whole = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in cli.COMMAND_ORDER:
        alone = cli.build_parser(only=name)._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert list(alone) == [name]
        assert alone[name].format_help() == whole[name].format_help()


def test_words_that_name_no_command_get_the_whole_parser(capsys):
    code, out, err = run_cli("ingestt", "x")
    assert code == 2 and "invalid choice" in err and "timeline" in err
    code, out, err = run_cli("--help")
    assert code == 0 and all(name in out for name in cli.COMMAND_ORDER)


def test_signals_of_a_bundle_without_series_rows_are_none(tmp_path: Path):
    with Bundle.create(tmp_path / "b.duckdb") as bundle:
        assert signals(bundle.con) == []


def test_importing_every_collector_compiles_only_the_patterns_it_uses():
    """Sniffing imports every collector; their module-level patterns compile on first use
    (collectors/framework/lazy_re.py), not at import: 635 compiles were most of a small ingest's cost, 223
    remain (patterns in tables, sniffers' own); the bound leaves room for new collectors, not a relapse."""
    probe = ("import json, re\n"
             "count = [0]\n"
             "compile = re.compile\n"
             "def counted(*args, **kwargs):\n"
             "    count[0] += 1\n"
             "    return compile(*args, **kwargs)\n"
             "re.compile = counted\n"
             "from collectors.framework import registry\n"
             "assert len(registry.all_collectors()) > 10\n"
             "print(json.dumps(count[0]))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) < 400


def test_an_ingest_of_an_nccl_warn_loads_the_signature_catalog_once(tmp_path: Path):
    """NCCL's own matchers (collectors/nccl/warn.py) are cut from the process's catalog, not a second load."""
    log = tmp_path / "rank0.log"
    log.write_text("gpu-node-07:41000:41000 [0] NCCL INFO cudaDriverVersion 12040\n"
                   "gpu-node-07:41000:41077 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from "
                   "peer 10.42.0.11<51522> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n")
    probe = ("import contextlib, io, json\n"
             "from collectors.framework import signatures\n"
             "count = [0]\n"
             "load = signatures.load_signatures\n"
             "def counted(*args):\n"
             "    count[0] += 1\n"
             "    return load(*args)\n"
             "signatures.load_signatures = counted\n"
             "from workbench.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    code = main(['ingest', '-q', {str(tmp_path / 'b.duckdb')!r}, {str(log)!r}])\n"
             "print(json.dumps([code, count[0]]))\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, 1]
